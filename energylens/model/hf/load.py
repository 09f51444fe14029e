"""Read a local Hugging Face ``config.json`` into a ModelConfig (no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, check_model_config, show_value
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import registered_builders, supported_model_types


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face ``config.json`` into a ModelConfig (no network).

    The file's ``model_type`` picks the builder registered for it
    (:func:`energylens.model.hf.supported_model_types` lists them). The model is named
    after the folder holding ``config.json``. Anything wrong with the file (unreadable,
    not UTF-8, not a JSON object, an unsupported type, a missing or malformed field,
    sizes that do not fit together) raises :class:`ModelConfigError` naming the file.
    """
    path = Path(path)
    cfg = HFConfig(_read_json_object(path), path=path)
    model_type = cfg.raw("model_type")
    builders = registered_builders()
    if not isinstance(model_type, str) or model_type not in builders:
        found = "no model_type" if model_type is None else \
            f"unsupported model_type {show_value(model_type)}"
        raise cfg.error(f"{found} (supported: {', '.join(supported_model_types())})")
    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    model = builders[model_type](cfg, name=name, model_type=model_type)
    check_model_config(model, where=str(path))
    return model


def _read_json_object(path: Path) -> dict[str, Any]:
    """The top-level JSON object of ``path``; ModelConfigError for anything else."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise ModelConfigError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(parsed, dict):
        raise ModelConfigError(
            f"{path}: expected a JSON object of config fields, got {type(parsed).__name__}")
    return parsed
