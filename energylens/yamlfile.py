"""Reading YAML: libyaml's C parser where PyYAML was built with it, else the pure-Python one,
and a JSON copy of each document read from text, kept in the user's cache.

Both parsers feed PyYAML's safe constructor and resolver, so the documents come out the
same. That constructor runs in Python: the shipped calibration (1 MB of constants with
their provenance) takes about 0.4 s to construct even from the C parser, most of a fresh
process's first prediction, where ``json`` reads the same document in under 10 ms. So a
document read from text is also written as JSON under ``ENERGYLENS_CACHE_DIR`` (default
``$XDG_CACHE_HOME/energylens`` or ``~/.cache/energylens``; empty: no cache), named by the
SHA-256 of the text: the same text reads the copy, any edit misses it. A document JSON
would not give back exactly (keys that are not strings, NaN, dates) is not copied, and a
cache that cannot be read or written is passed over. The cache keeps the
``CACHE_MAX_FILES`` copies written last (a recalibration leaves its old copy behind).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

import yaml

_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a mapping that gives a key twice (YAML says keys are
    unique; PyYAML keeps the last, so a study's second ``objectives:`` would silently
    replace its first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<``: merged, not a key
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor says so itself
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


_LOADER = _Loader
#: Texts shorter than this are parsed each time (their copy would save nothing).
CACHE_MIN_CHARS = 2048
CACHE_ENV = "ENERGYLENS_CACHE_DIR"
CACHE_MAX_FILES = 256


def cache_dir() -> Path | None:
    """Where the JSON copies live (None: caching is off)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home folder to be found: no cache
            return None
    return Path(base) / "energylens"


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """``yaml.safe_load`` through the fastest safe loader available; a text (not a stream)
    of ``CACHE_MIN_CHARS`` or more comes from its JSON copy when there is one."""
    if not isinstance(stream, str | bytes) or len(stream) < CACHE_MIN_CHARS:
        return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader
    folder = cache_dir()
    text = stream.encode("utf-8") if isinstance(stream, str) else stream
    copy = None if folder is None else folder / f"{hashlib.sha256(text).hexdigest()}.json"
    if copy is not None:
        try:
            return json.loads(copy.read_bytes())
        except (OSError, ValueError):
            pass
    document = yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader
    if copy is not None:
        _write_copy(copy, document)
    return document


def _write_copy(copy: Path, document: Any) -> None:
    """Write ``document`` as JSON to ``copy`` (atomically) if JSON gives it back exactly."""
    try:
        encoded = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError):  # a date, a set, NaN: not JSON
        return
    if json.loads(encoded) != document:  # keys that are not strings come back as strings
        return
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=copy.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            fh.write(encoded)
        os.replace(temporary, copy)  # atomic: a reader sees the whole copy or none
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        return
    _prune(copy.parent)


def _prune(folder: Path) -> None:
    """Delete all but the ``CACHE_MAX_FILES`` newest copies in ``folder``."""
    try:
        copies = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime)
        for old in copies[:-CACHE_MAX_FILES]:
            old.unlink(missing_ok=True)
    except OSError:  # another process pruned the same file first
        return
