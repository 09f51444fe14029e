"""A repo id's ``config.json`` in the local Hugging Face hub cache (no network).

A model ``vllm serve`` or ``transformers`` has downloaded leaves
``models--ORG--NAME/snapshots/REVISION/config.json`` in the hub cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
``~/.cache/huggingface/hub``: huggingface_hub's documented order). A repo id the zoo does
not know is read from there when it is present, as a ``config.json`` path would be.
"""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache_dir() -> Path | None:
    """The hub cache folder the environment names, or None without a home folder."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "huggingface" / "hub"
    try:
        return Path.home() / ".cache" / "huggingface" / "hub"
    except RuntimeError:  # no home folder can be found
        return None


def cached_config(repo_id: str) -> Path | None:
    """``config.json`` of ``repo_id`` (``ORG/NAME``) in the hub cache: the revision
    ``refs/main`` names, else the snapshot written last; None where the cache has none."""
    parts = repo_id.strip().split("/")
    root = hub_cache_dir()
    if len(parts) != 2 or not all(parts) or root is None:
        return None
    repo = root / f"models--{parts[0]}--{parts[1]}"
    main = repo / "refs" / "main"
    if main.is_file():
        pinned = repo / "snapshots" / main.read_text(encoding="utf-8").strip() / "config.json"
        if pinned.is_file():
            return pinned
    snapshots = sorted((s / "config.json" for s in (repo / "snapshots").glob("*")
                        if (s / "config.json").is_file()),
                       key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None
