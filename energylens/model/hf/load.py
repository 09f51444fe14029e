"""Read a local Hugging Face ``config.json`` into a ModelConfig (no network)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, check_model_config, show_value
from energylens.model.hf.common import declared_qk_norm
from energylens.model.hf.exclusions import declared_held_16bit
from energylens.model.hf.generic import build_generic
from energylens.model.hf.quantization import (
    declared_kv_dtype,
    declared_weight_dtype,
    quantization_section,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import registered_builders

#: Top-level fields a nested ``text_config`` inherits when it does not set them.
_INHERITED = ("tie_word_embeddings", "_name_or_path")


class ModelApproximationWarning(UserWarning):
    """A config.json was read with approximations (one line naming them)."""


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face ``config.json`` into a ModelConfig (no network).

    A vision-language checkpoint's ``text_config`` is the model read (the text decoder).
    Its ``model_type`` picks the builder registered for it
    (:func:`energylens.model.hf.supported_model_types`); a type without one is read as a
    generic decoder from the standard fields, with a :class:`ModelApproximationWarning`
    naming what was approximated. The weight dtype follows ``quantization_config`` (or
    an ``hf_quant_config.json`` beside the file), and so do the KV-cache precision it
    declares and the weights its exclude list keeps in 16 bits
    (:mod:`energylens.model.hf.exclusions`). Its ``max_position_embeddings`` (the text
    decoder's, else a family's own field) is the model's context, unknown when absent.
    The model is named after the folder holding ``config.json`` (or the file, without
    ``_config``). Anything wrong with the
    file (unreadable, not UTF-8, not a JSON object, no model_type, missing or malformed
    fields, sizes that do not fit together) raises :class:`ModelConfigError` naming it.
    """
    path = Path(path)
    name = path.parent.name if path.stem == "config" and path.parent.name else \
        path.stem.removesuffix("_config")
    return model_from_hf_fields(_read_json_object(path), path=path, name=name,
                                quant_file=_quant_file(path))


def model_from_hf_fields(data: dict[str, Any], *, path: Path, name: str,
                         quant_file: HFConfig | None = None) -> ModelConfig:
    """A ModelConfig named ``name`` from the fields of a config.json (``data``) read from
    ``path`` (named in errors), as :func:`load_hf_config` reads them; ``quant_file``: the
    ``quantization`` section of an ``hf_quant_config.json`` beside it."""
    top, cfg, model_type = _decoder(data, path)
    builder = registered_builders().get(model_type)
    notes: list[str] = []
    if builder is not None:
        model = builder(cfg, name=name, model_type=model_type)
    else:
        model, notes = build_generic(cfg, name=name, model_type=model_type)
    context = cfg.integer("max_position_embeddings") if cfg.has("max_position_embeddings") \
        else model.max_context_tokens  # a builder's own field (DBRX's max_seq_len)
    model = dataclasses.replace(model, qk_norm=declared_qk_norm(cfg, model_type=model_type),
                                max_context_tokens=context)
    sections = (top.section("quantization_config"), cfg.section("quantization_config"),
                quant_file)
    dtype, warning = declared_weight_dtype(*sections)
    if warning:
        notes.append(warning)
    if dtype is not None:
        model = dataclasses.replace(model, weight_dtype=dtype)
    hf_layers = cfg.raw("num_hidden_layers")
    held, held_notes = declared_held_16bit(
        model=model, section=quantization_section(*sections), dtype=dtype,
        hf_layers=hf_layers if isinstance(hf_layers, int) else model.num_layers)
    notes += held_notes
    model = dataclasses.replace(model, kv_dtype=declared_kv_dtype(*sections), held_16bit=held)
    if notes:
        model = dataclasses.replace(model, notes=f"{model.notes}; approximated: {'; '.join(notes)}")
    check_model_config(model, where=str(path))
    if notes:
        warnings.warn(f"{path}: approximated: {'; '.join(notes)}", ModelApproximationWarning,
                      stacklevel=2)
    return model


def read_model_type(path: str | Path) -> str:
    """The ``model_type`` a local ``config.json`` is read under (its text decoder's)."""
    return _decoder(_read_json_object(Path(path)), Path(path))[2]


def _decoder(data: dict[str, Any], path: Path) -> tuple[HFConfig, HFConfig, str]:
    """The file's fields, its text decoder's (a vision-language checkpoint's
    ``text_config``, with the top-level fields it inherits) and the decoder's model_type."""
    top = HFConfig(data, path=path)
    if not isinstance(top.raw("model_type"), str):
        found = "no model_type" if top.raw("model_type") is None else \
            f"model_type {show_value(top.raw('model_type'))} is not a string"
        raise top.error(found)
    text = top.section("text_config")
    cfg = top
    if text is not None:  # a vision-language checkpoint: its text decoder is the model
        inherited = {k: top.raw(k) for k in _INHERITED if top.has(k) and not text.has(k)}
        cfg = HFConfig({**inherited, **text.data}, path=path, prefix=text.prefix)
    model_type = cfg.raw("model_type") if isinstance(cfg.raw("model_type"), str) \
        else top.raw("model_type")
    return top, cfg, model_type


def _quant_file(path: Path) -> HFConfig | None:
    """The ``quantization`` object of the ``hf_quant_config.json`` beside ``config.json``
    (``<name>_hf_quant_config.json`` beside ``<name>_config.json``), if there is one."""
    if not path.name.endswith("config.json"):
        return None
    sibling = path.with_name(path.name.removesuffix("config.json") + "hf_quant_config.json")
    if sibling == path or not sibling.is_file():
        return None
    return HFConfig(_read_json_object(sibling), path=sibling).section("quantization")


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
