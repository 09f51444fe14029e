"""Model zoo: the named architectures of ``energylens/data/models.yaml`` and their lookup.

Lookup is case-insensitive and accepts a zoo short name (``llama-3.1-70b``), an alias
(``llama2-70b``), or a Hugging Face repo id (``meta-llama/Meta-Llama-3.1-70B-Instruct``):
the org prefix, a ``Meta-`` prefix and packaging suffixes (``-Instruct``, ``-hf``, ``-it``,
``-FP8``, ...) are stripped. A ``-FP8`` suffix selects ``weight_dtype="fp8"``. A name
ending in ``.json`` is a path to a local Hugging Face config, read by
:func:`energylens.model.hf.load_hf_config` (no network).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from importlib import resources
from typing import Any

import yaml

from energylens.errors import ModelConfigError, UnknownModelError
from energylens.model.config import (
    MLAConfig,
    ModelConfig,
    MoEConfig,
    check_model_config,
    show_value,
)
from energylens.model.hf import load_hf_config

__all__ = ["Zoo", "get_model", "list_models", "model_aliases", "parse_models_yaml",
           "resolve_model_name"]

# Keys of a models.yaml entry that are provenance/lookup data, not ModelConfig fields.
_META_KEYS = frozenset({"aliases", "verification", "source"})

# Packaging suffixes stripped (repeatedly) from a requested name, lower-case.
_SUFFIXES = (
    "-instruct-2507",
    "-thinking-2507",
    "-instruct",
    "-thinking",
    "-hf",
    "-it",
    "-chat",
    "-base",
    "-fp8",
    "-v0.1",
)


# --------------------------------------------------------------------------- zoo data


@dataclasses.dataclass(frozen=True)
class Zoo:
    """Parsed models.yaml: configs by short name, and the lookup index."""

    models: dict[str, ModelConfig]
    aliases: dict[str, tuple[str, ...]]  # short name -> its aliases, as written
    index: dict[str, str]  # lower-case key (name, alias, HF id, normalised forms) -> short name


def parse_models_yaml(text: str, *, source: str = "models.yaml") -> Zoo:
    """Parse a models.yaml document; any problem raises :class:`ModelConfigError`
    naming ``source``, the entry and the key."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise ModelConfigError(f"{source}: not valid YAML ({reason})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{source}: expected a mapping of zoo names to entries")
    models: dict[str, ModelConfig] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    index: dict[str, str] = {}
    for name, entry in raw.items():
        where = f"{source} entry {show_value(name)}"
        if not isinstance(name, str) or not name.strip():
            raise ModelConfigError(f"{where}: a zoo name must be a non-empty string")
        if not isinstance(entry, dict):
            raise ModelConfigError(f"{where}: expected a mapping of fields")
        models[name] = _entry_to_config(name, entry, where)
        names = entry.get("aliases", [])
        if not isinstance(names, list) or not all(isinstance(a, str) and a for a in names):
            raise ModelConfigError(f"{where}: aliases must be a list of names")
        aliases[name] = tuple(names)
        for key in (name, models[name].hf_id, *names):
            for variant in (key.lower(), _normalise(key)[0]):
                if index.setdefault(variant, name) != name:
                    raise ModelConfigError(
                        f"{source}: {key!r} names both {index[variant]} and {name}")
    return Zoo(models=models, aliases=aliases, index=index)


def _section(cls: type[Any], value: Any, where: str, key: str) -> Any:
    """A nested ``moe`` / ``mla`` mapping as ``cls`` (exactly its fields)."""
    if not isinstance(value, dict):
        raise ModelConfigError(f"{where}: {key} must be a mapping or null")
    _check_keys(cls, value, where=where, prefix=f"{key}.")
    return cls(**value)


def _check_keys(cls: type[Any], data: dict[str, Any], *, where: str, prefix: str,
                given: frozenset[str] = frozenset()) -> None:
    """Unknown keys (typos) and missing required fields of dataclass ``cls``."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in set(data) - known)
    if unknown:
        raise ModelConfigError(f"{where}: unknown keys {[prefix + k for k in unknown]}")
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - set(data) - given)
    if missing:
        raise ModelConfigError(f"{where}: missing keys {[prefix + k for k in missing]}")


def _entry_to_config(name: str, entry: dict[str, Any], where: str) -> ModelConfig:
    """Build and check a ModelConfig from one YAML entry; unknown keys are an error."""
    data = {k: v for k, v in entry.items() if k not in _META_KEYS}
    _check_keys(ModelConfig, data, where=where, prefix="", given=frozenset({"name"}))
    if data.get("moe") is not None:
        data["moe"] = _section(MoEConfig, data["moe"], where, "moe")
    if data.get("mla") is not None:
        data["mla"] = _section(MLAConfig, data["mla"], where, "mla")
    for key in ("params_total_published", "params_active_published"):
        value = data.get(key)
        if value is not None:
            try:
                if isinstance(value, bool):
                    raise TypeError
                data[key] = float(value)
            except (TypeError, ValueError):
                raise ModelConfigError(
                    f"{where}: {key} must be a number or null, got {show_value(value)}") from None
    model = ModelConfig(name=name, **data)
    check_model_config(model, where=where)
    return model


@functools.cache
def _zoo() -> Zoo:
    """The packaged models.yaml, parsed and checked once."""
    text = resources.files("energylens").joinpath("data/models.yaml").read_text("utf-8")
    return parse_models_yaml(text, source="energylens/data/models.yaml")


# --------------------------------------------------------------------------- lookup


def _normalise(name: str) -> tuple[str, bool]:
    """Lower-case, drop org prefix, ``Meta-`` prefix and packaging suffixes; report ``-fp8``."""
    key = name.strip().lower().replace("_", "-").rsplit("/", 1)[-1]
    key = key.removeprefix("meta-")
    fp8 = False
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                fp8 = fp8 or suffix == "-fp8"
                key = key[: -len(suffix)]
                changed = True
    return key, fp8


def _lookup(name: str) -> tuple[str, bool]:
    """Short name and FP8 flag for ``name``; raises UnknownModelError."""
    index = _zoo().index
    key, fp8 = _normalise(name)
    short = index.get(name.strip().lower()) or index.get(key)
    if short is None:
        candidates = sorted(set(index))
        close = difflib.get_close_matches(key, candidates, n=len(candidates), cutoff=0.0)
        suggestions = list(dict.fromkeys(index[c] for c in close))[:3]
        raise UnknownModelError(name, suggestions)
    return short, fp8


def resolve_model_name(name: str) -> str:
    """Zoo short name for a short name, alias or HF repo id (case-insensitive)."""
    return _lookup(name)[0]


@functools.cache
def _get_named(name: str) -> ModelConfig:
    short, fp8 = _lookup(name)
    model = _zoo().models[short]
    return dataclasses.replace(model, weight_dtype="fp8") if fp8 else model


def get_model(name: str) -> ModelConfig:
    """The ModelConfig for a zoo name / alias / HF id, or for a local ``config.json`` path
    (any name ending in ``.json``; a missing or unreadable file is a ModelConfigError)."""
    if name.lower().endswith(".json"):
        return load_hf_config(name)
    return _get_named(name)


def list_models() -> list[ModelConfig]:
    """Every zoo model, in the order of models.yaml."""
    return list(_zoo().models.values())


def model_aliases(name: str) -> tuple[str, ...]:
    """The aliases models.yaml gives the zoo model ``name`` (any accepted spelling)."""
    return _zoo().aliases[resolve_model_name(name)]
