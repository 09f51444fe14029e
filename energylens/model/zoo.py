"""Model zoo: the named architectures of ``energylens/data/models.yaml`` and their lookup.

Lookup is case-insensitive and accepts a zoo short name (``llama-3.1-70b``), an alias
(``llama-3.3-70b-instruct``, ``deepseek-r1``), or a Hugging Face repo id
(``meta-llama/Meta-Llama-3.1-70B-Instruct``): the org prefix, a ``Meta-`` prefix and the
release tokens of :data:`RELEASE_TOKENS` (``-Instruct``, ``-Chat``, ``-it``, ``-hf``,
``-Instruct-2507`` ...) are dropped wherever they stand after the first word, and a
trailing ``-v0.1``. The precision tokens of :data:`PRECISION_TOKENS` (``-FP8``,
``-FP8-Dynamic``, ``-AWQ``, ``-GPTQ``, ...) are dropped too and select the weight dtype
they name; a release of NVIDIA's ``nvidia/`` org with a precision token is a TensorRT
Model Optimizer checkpoint and declares an FP8 KV cache (:data:`MODELOPT_KV_DTYPE`). A
name ending in ``.json`` is a path to a local Hugging Face config, read by
:func:`energylens.model.hf.load_hf_config` (no network).

Besides the shapes, an entry carries its provenance (:class:`ModelInfo`): the HF
``model_type`` of the checkpoint, how its facts were verified (``real_config``,
``real_config_variant`` or ``secondary``, as in the project's ``model_configs*.yaml``),
its sources, where those sources disagree, and its aliases with what each rests on.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from energylens.errors import ModelConfigError, UnknownModelError
from energylens.model.config import (
    HybridConfig,
    MLAConfig,
    ModelConfig,
    MoEConfig,
    check_model_config,
    show_value,
)
from energylens.model.gguf import load_gguf
from energylens.model.hf import load_hf_config
from energylens.model.hf.cache import cached_config
from energylens.yamlfile import safe_load

__all__ = ["ACTIVE_COUNT_EXCLUSIONS", "CONTEXT_SOURCE_PREFIX", "MODELOPT_PRECISION_TOKENS",
           "PRECISION_TOKENS", "RELEASE_TOKENS",
           "VERIFICATION_LEVELS", "Alias", "ModelInfo", "Resolution", "Zoo", "get_model",
           "list_models", "model_aliases", "model_info", "parse_models_yaml", "resolve",
           "resolve_model_name"]

#: How an entry's facts were checked, best first (the first word of ``verification``):
#: a verbatim config.json of the checkpoint was read; a verbatim config of a sibling with
#: the same architecture; framework presets, training scripts or tables only.
VERIFICATION_LEVELS = ("real_config", "real_config_variant", "secondary")

#: Release words that name another packaging of the same architecture (chat and
#: instruction tunes, HF conversions, dated re-releases), as dash-separated token runs.
RELEASE_TOKENS: tuple[tuple[str, ...], ...] = (
    ("instruct", "2507"), ("thinking", "2507"), ("instruct",), ("thinking",), ("chat",),
    ("it",), ("hf",), ("base",),
)

#: Precision words of quantised releases and the weight dtype each selects: FP8 releases
#: (static or dynamic activation scales) store 8-bit float weights; AWQ and GPTQ releases
#: 4-bit integer weights with 16-bit activations (weight-only), GPTQ-Int8 ones 8-bit
#: (Qwen's ``-GPTQ-Int8``); NVFP4 releases 4-bit floats with a scale per 16 elements.
PRECISION_TOKENS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("fp8", "dynamic"), "fp8"), (("fp8",), "fp8"), (("awq", "int4"), "int4"), (("awq",), "int4"),
    (("gptq", "int4"), "int4"), (("gptq", "int8"), "int8"), (("gptq",), "int4"),
    (("w4a16",), "int4"), (("nvfp4",), "nvfp4"),
)
#: Precision words of NVIDIA's own (``nvidia/``) releases besides those: their ``-FP4``
#: checkpoints (``nvidia/DeepSeek-R1-FP4``, ``nvidia/Llama-3.3-70B-Instruct-FP4``) are
#: Model Optimizer NVFP4 (another org's ``-FP4`` could be MXFP4: not read).
MODELOPT_PRECISION_TOKENS: tuple[tuple[tuple[str, ...], str], ...] = ((("fp4",), "nvfp4"),)

#: The KV-cache precision NVIDIA's quantised releases (``nvidia/<model>-FP8``, ``-NVFP4``,
#: produced by TensorRT Model Optimizer) declare: every Model Optimizer
#: ``hf_quant_config.json`` that AIConfigurator ships (7 of 7: the nvidia/ releases
#: Llama-3.1-70B-FP8 and DeepSeek-V3.1, GLM-5, MiniMax-M2.5, Qwen3-235B-A22B, Qwen3.5-397B
#: NVFP4, and Qwen3-32B-FP8-Static-PerTensor; ../shared/data/aiconfigurator/model_configs/)
#: says ``kv_cache_quant_algo: FP8``. The engine decides whether it follows
#: (``RuntimeProfile.auto_kv``).
MODELOPT_ORG = "nvidia"
MODELOPT_KV_DTYPE = "fp8"

# A trailing version that the base checkpoints carry and zoo names leave out (Mixtral).
_TRAILING_VERSION = "v0.1"

# Keys of a models.yaml entry that are provenance/lookup data, not ModelConfig fields.
_META_KEYS = frozenset({"aliases", "verification", "source", "disagreements", "model_type",
                        "params_text_published", "params_active_excludes",
                        "params_total_disagreement", "params_active_disagreement"})
#: Matrices a published active count may leave out (a lookup, or the output projection).
ACTIVE_COUNT_EXCLUSIONS = ("input_embedding", "output_embedding")
_ALIAS_KEYS = frozenset({"name", "hf_id", "note", "max_context_tokens"})
#: How a models.yaml ``source`` line naming where the entry's ``max_context_tokens`` was
#: read starts (every entry that sets one has such a line).
CONTEXT_SOURCE_PREFIX = "max_context_tokens:"


# --------------------------------------------------------------------------- zoo data


@dataclasses.dataclass(frozen=True, kw_only=True)
class Alias:
    """Another checkpoint (or spelling) with the shapes of a zoo entry."""

    name: str
    hf_id: str | None  # its Hugging Face repo id, when it is a checkpoint of its own
    note: str  # what the equivalence rests on ("config read ..." or a model card statement)
    #: The context (``max_position_embeddings``) of the alias's own checkpoint, where a
    #: config of it was read (the note says which); None: unknown. A checkpoint's context
    #: may differ from the entry's (Llama-4-Scout-Instruct's 10M against the base's 256K).
    max_context_tokens: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What models.yaml says about an entry besides its shapes."""

    model_type: str  # Hugging Face config.json model_type of the checkpoint
    verification: str  # as written, e.g. "real_config (older HF revision) + secondary"
    level: str  # its first word, one of VERIFICATION_LEVELS
    sources: tuple[str, ...]
    disagreements: tuple[str, ...]  # where the sources differ, and what was recorded
    aliases: tuple[Alias, ...]
    #: Published count of the text decoder alone, for checkpoints whose card count
    #: includes a vision encoder the zoo does not model (None otherwise).
    params_text_published: float | None = None
    #: What the published active count leaves out (ACTIVE_COUNT_EXCLUSIONS), when the
    #: publisher says so.
    params_active_excludes: tuple[str, ...] = ()
    #: Why the total or active count from the shapes and the published one disagree
    #: beyond 2 %, when they do and no source explains it (None when they agree).
    params_total_disagreement: str | None = None
    params_active_disagreement: str | None = None


@dataclasses.dataclass(frozen=True)
class Zoo:
    """Parsed models.yaml: configs and provenance by short name, and the lookup index."""

    models: dict[str, ModelConfig]
    info: dict[str, ModelInfo]
    index: dict[str, str]  # lower-case key (name, alias, HF id, normalised forms) -> short name


def parse_models_yaml(text: str, *, source: str = "models.yaml") -> Zoo:
    """Parse a models.yaml document; any problem raises :class:`ModelConfigError`
    naming ``source``, the entry and the key."""
    try:
        raw = safe_load(text)
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise ModelConfigError(f"{source}: not valid YAML ({reason})") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{source}: expected a mapping of zoo names to entries")
    models: dict[str, ModelConfig] = {}
    info: dict[str, ModelInfo] = {}
    index: dict[str, str] = {}
    for name, entry in raw.items():
        where = f"{source} entry {show_value(name)}"
        if not isinstance(name, str) or not name.strip():
            raise ModelConfigError(f"{where}: a zoo name must be a non-empty string")
        if not isinstance(entry, dict):
            raise ModelConfigError(f"{where}: expected a mapping of fields")
        models[name] = _entry_to_config(name, entry, where)
        info[name] = _entry_info(entry, where)
        if models[name].max_context_tokens is not None and not any(
                s.startswith(CONTEXT_SOURCE_PREFIX) for s in info[name].sources):
            raise ModelConfigError(f"{where}: max_context_tokens needs a source line starting "
                                   f"{CONTEXT_SOURCE_PREFIX!r} saying where it was read")
        keys = [name, models[name].hf_id]
        for alias in info[name].aliases:
            keys += [alias.name, *([alias.hf_id] if alias.hf_id else [])]
        for key in keys:
            for variant in (key.lower(), _normalise(key)[0]):
                if index.setdefault(variant, name) != name:
                    raise ModelConfigError(
                        f"{source}: {key!r} names both {index[variant]} and {name}")
    return Zoo(models=models, info=info, index=index)


def _strings(value: Any, where: str, key: str) -> tuple[str, ...]:
    """A list of non-empty strings (a single string is a list of one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ModelConfigError(f"{where}: {key} must be a list of non-empty strings")
    return tuple(value)


def _entry_info(entry: dict[str, Any], where: str) -> ModelInfo:
    """Provenance of one entry: model_type, verification level, sources, aliases."""
    verification = entry.get("verification")
    if not isinstance(verification, str) or not verification.strip():
        raise ModelConfigError(f"{where}: verification must say how the facts were checked")
    level = verification.split(maxsplit=1)[0].strip('"')
    if level not in VERIFICATION_LEVELS:
        raise ModelConfigError(f"{where}: verification must start with one of "
                               f"{', '.join(VERIFICATION_LEVELS)}, got {show_value(level)}")
    model_type = entry.get("model_type")
    if not isinstance(model_type, str) or not model_type.strip():
        raise ModelConfigError(f"{where}: model_type must name the HF config.json model_type")
    return ModelInfo(
        model_type=model_type,
        verification=verification,
        level=level,
        sources=_strings(entry.get("source"), where, "source"),
        disagreements=_strings(entry.get("disagreements", []), where, "disagreements"),
        aliases=_aliases(entry.get("aliases", []), where),
        params_text_published=_optional_count(entry.get("params_text_published"), where,
                                              "params_text_published"),
        params_active_excludes=_exclusions(entry.get("params_active_excludes", []), where),
        params_total_disagreement=_optional_text(entry.get("params_total_disagreement"),
                                                 where, "params_total_disagreement"),
        params_active_disagreement=_optional_text(entry.get("params_active_disagreement"),
                                                  where, "params_active_disagreement"),
    )


def _optional_text(value: Any, where: str, key: str) -> str | None:
    """A non-empty string or None."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ModelConfigError(f"{where}: {key} must be a non-empty string or null")
    return value


def _optional_count(value: Any, where: str, key: str) -> float | None:
    """A parameter count (a positive number) or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ModelConfigError(f"{where}: {key} must be a positive number or null, "
                               f"got {show_value(value)}")
    return float(value)


def _exclusions(value: Any, where: str) -> tuple[str, ...]:
    names = _strings(value, where, "params_active_excludes") if value else ()
    unknown = sorted(set(names) - set(ACTIVE_COUNT_EXCLUSIONS))
    if unknown:
        raise ModelConfigError(f"{where}: params_active_excludes may name "
                               f"{', '.join(ACTIVE_COUNT_EXCLUSIONS)}, got {unknown}")
    return names


def _aliases(value: Any, where: str) -> tuple[Alias, ...]:
    """``aliases``: short names, or ``{name, hf_id, note}`` mappings for other checkpoints."""
    if not isinstance(value, list):
        raise ModelConfigError(f"{where}: aliases must be a list of names")
    aliases = []
    for item in value:
        if isinstance(item, str) and item.strip():
            aliases.append(Alias(name=item, hf_id=None, note=""))
            continue
        if not isinstance(item, dict) or set(item) - _ALIAS_KEYS:
            raise ModelConfigError(f"{where}: aliases must be a list of names or "
                                   f"{{name, hf_id, note}} mappings, got {show_value(item)}")
        name, hf_id, note = item.get("name"), item.get("hf_id"), item.get("note")
        if not (isinstance(name, str) and name.strip() and isinstance(note, str) and note.strip()
                and (hf_id is None or isinstance(hf_id, str) and hf_id.strip())):
            raise ModelConfigError(f"{where}: alias {show_value(item)} needs a name and a "
                                   f"note (and a string hf_id if any)")
        context = item.get("max_context_tokens")
        if context is not None and (
                isinstance(context, bool) or not isinstance(context, int) or context < 1
                or hf_id is None or "max_position_embeddings" not in note):
            raise ModelConfigError(f"{where}: alias {name!r}: max_context_tokens must be an "
                                   f"integer >= 1, of an alias with an hf_id whose note says "
                                   f"where its max_position_embeddings was read")
        aliases.append(Alias(name=name, hf_id=hf_id, note=note, max_context_tokens=context))
    return tuple(aliases)


def _section(cls: type[Any], value: Any, where: str, key: str) -> Any:
    """A nested ``moe`` / ``mla`` / ``hybrid`` mapping as ``cls`` (exactly its fields)."""
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
    if data.get("hybrid") is not None:
        data["hybrid"] = _section(HybridConfig, data["hybrid"], where, "hybrid")
    for per_layer in ("kv_heads_per_layer", "ffn_per_layer"):  # checked with the rest below
        if isinstance(data.get(per_layer), list):
            data[per_layer] = tuple(data[per_layer])
    held = data.get("held_16bit")
    if held is not None:  # {dtype: [weights]} -> ((dtype, (weights...)), ...)
        if not isinstance(held, dict) or not all(isinstance(v, list) for v in held.values()):
            raise ModelConfigError(f"{where}: held_16bit must map a dtype to a list of "
                                   f"weight names, got {show_value(held)}")
        data["held_16bit"] = tuple((str(k), tuple(v)) for k, v in held.items())
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


def _drop_runs(tokens: list[str], runs: tuple[tuple[str, ...], ...]) -> tuple[list[str], int]:
    """``tokens`` without the first match of any of ``runs`` after the first token, and
    the index of the run that matched (-1 if none)."""
    for i, run in enumerate(runs):
        for start in range(1, len(tokens) - len(run) + 1):
            if tuple(tokens[start:start + len(run)]) == run:
                return tokens[:start] + tokens[start + len(run):], i
    return tokens, -1


def _normalise(name: str) -> tuple[str, str | None]:
    """Lower-case key without org prefix, ``Meta-`` prefix, release and precision tokens,
    and the weight dtype the precision tokens select (None if there are none)."""
    text = name.strip().lower().replace("_", "-")
    key = text.rsplit("/", 1)[-1].removeprefix("meta-")
    tokens = key.split("-")
    dtype = None
    precisions = PRECISION_TOKENS + (MODELOPT_PRECISION_TOKENS
                                     if text.startswith(f"{MODELOPT_ORG}/") else ())
    runs = tuple(run for run, _ in precisions)
    while True:
        tokens, found = _drop_runs(tokens, runs)
        if found < 0:
            break
        dtype = dtype or precisions[found][1]
    while True:
        tokens, found = _drop_runs(tokens, RELEASE_TOKENS)
        if found < 0:
            break
    if len(tokens) > 1 and tokens[-1] == _TRAILING_VERSION:
        tokens = tokens[:-1]
    return "-".join(tokens), dtype


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resolution:
    """What a requested name resolved to."""

    requested: str
    name: str  # zoo short name
    weight_dtype: str | None  # selected by a precision token of the name, else None
    kv_dtype: str | None = None  # the KV cache the checkpoint declares (ModelOpt releases)

    def describe(self) -> str:
        """One line for the user: ``'X-FP8' is zoo model x with fp8 weights (from -FP8)'``."""
        text = f"{self.requested!r} is zoo model {self.name}"
        if self.weight_dtype is not None:
            text += f" with {self.weight_dtype} weights (set by the precision in the name)"
        if self.kv_dtype is not None:
            text += f", declaring a {self.kv_dtype} KV cache (an NVIDIA Model Optimizer release)"
        return text


def resolve(name: str) -> Resolution:
    """The zoo entry and weight dtype a name selects; raises :class:`UnknownModelError`
    with the three nearest zoo names."""
    index = _zoo().index
    key, dtype = _normalise(name)
    short = index.get(name.strip().lower()) or index.get(key)
    if short is None:
        candidates = sorted(set(index))
        close = difflib.get_close_matches(key, candidates, n=len(candidates), cutoff=0.0)
        suggestions = list(dict.fromkeys(index[c] for c in close))[:3]
        raise UnknownModelError(name, suggestions)
    org = name.strip().lower().split("/", 1)[0] if "/" in name else ""
    kv = MODELOPT_KV_DTYPE if org == MODELOPT_ORG and dtype is not None else None
    return Resolution(requested=name, name=short, weight_dtype=dtype, kv_dtype=kv)


def zoo_resolution(name: str) -> Resolution | None:
    """The zoo entry and weight dtype a name selects, or None where the model is read from
    a file instead: a local ``config.json``, checkpoint folder or ``.gguf`` file, or a repo
    id the zoo does not know (its ``config.json`` in the Hugging Face hub cache,
    :func:`get_model`)."""
    if is_local_config(name):
        return None
    try:
        return resolve(name)
    except UnknownModelError:
        return None


def resolve_model_name(name: str) -> str:
    """Zoo short name for a short name, alias or HF repo id (case-insensitive)."""
    return resolve(name).name


@functools.cache
def _get_named(name: str) -> ModelConfig:
    found = resolve(name)
    model = _zoo().models[found.name]
    checkpoint = _checkpoint(name, found.name)
    if checkpoint != model.hf_id:
        model = dataclasses.replace(model, hf_id=checkpoint,
                                    max_context_tokens=_checkpoint_context(checkpoint, found.name))
    if found.weight_dtype is None:
        return model
    return dataclasses.replace(model, weight_dtype=found.weight_dtype,
                               kv_dtype=found.kv_dtype or model.kv_dtype)


def _checkpoint(requested: str, short: str) -> str:
    """The checkpoint a name asks for (what a launch command serves): a repo id as given,
    an alias's own checkpoint (``deepseek-r1``: ``deepseek-ai/DeepSeek-R1``, priced as the
    DeepSeek-V3 entry), else the entry's."""
    text = requested.strip()
    if "/" in text:
        return text
    for alias in _zoo().info[short].aliases:
        if alias.hf_id and alias.name.lower() == text.lower():
            return alias.hf_id
    return _zoo().models[short].hf_id


def _checkpoint_context(checkpoint: str, short: str) -> int | None:
    """The context of ``checkpoint`` (a checkpoint that resolved to the entry ``short``):
    the entry's for the entry's own checkpoint, an alias's where it records one, else None
    (unknown: an instruction tune, a re-release or a quantised copy may serve a longer or
    shorter context than the entry's checkpoint, e.g. Qwen3-4B-Instruct-2507's 262,144
    against Qwen3-4B's 40,960)."""
    entry = _zoo().models[short]
    if _same_repo(checkpoint, entry.hf_id):
        return entry.max_context_tokens
    for alias in _zoo().info[short].aliases:
        if alias.hf_id and _same_repo(checkpoint, alias.hf_id):
            return alias.max_context_tokens
    return None


def _same_repo(a: str, b: str) -> bool:
    """Whether two repo ids name one repository: case aside, and a ``Meta-`` prefix of the
    name aside (Meta renamed ``Meta-Llama-3.1-8B`` to ``Llama-3.1-8B``; the old id redirects)."""
    def key(repo: str) -> tuple[str, str]:
        org, _, name = repo.strip().lower().rpartition("/")
        return org, name.removeprefix("meta-")
    return key(a) == key(b)


def is_local_config(name: str) -> bool:
    """Whether ``name`` is a local checkpoint rather than a zoo name or HF id: a path ending
    in ``.json`` or ``.gguf`` or an existing folder (a checkpoint's, holding its
    ``config.json``)."""
    return name.lower().endswith((".json", ".gguf")) or Path(name).is_dir()


def get_model(name: str) -> ModelConfig:
    """The ModelConfig for a zoo name / alias / HF id, or for a local ``config.json`` path
    (any name ending in ``.json``) or checkpoint folder holding one, or for a GGUF file
    (``.gguf``: :func:`energylens.model.gguf.load_gguf`), or for a repo id the
    zoo does not know whose ``config.json`` the local Hugging Face cache holds
    (:mod:`energylens.model.hf.cache`); a missing or unreadable file is a
    ModelConfigError."""
    if not name.strip():
        raise ModelConfigError("the model name is empty (a zoo name, a Hugging Face repo id or "
                               "a config.json path is expected)")
    if name.lower().endswith(".gguf"):
        return load_gguf(name)
    if is_local_config(name):
        return load_hf_config(local_config_path(name))
    try:
        return _get_named(name)
    except UnknownModelError:
        cached = cached_config(name)  # a repo the zoo does not know, downloaded before
        if cached is None:
            raise
    model = load_hf_config(cached)
    return dataclasses.replace(model, name=name.strip().rsplit("/", 1)[-1].lower(),
                               hf_id=name.strip())


def local_config_path(name: str) -> Path:
    """The ``config.json`` a local name stands for (:func:`is_local_config`): the path
    itself, or the one in the checkpoint folder (a ModelConfigError where it has none)."""
    if name.lower().endswith(".json"):
        return Path(name)
    config = Path(name) / "config.json"
    if not config.is_file():
        raise ModelConfigError(f"{name}: a folder without a config.json (a checkpoint "
                               "folder or a config.json path is expected)")
    return config


def list_models() -> list[ModelConfig]:
    """Every zoo model, in the order of models.yaml."""
    return list(_zoo().models.values())


def model_info(name: str) -> ModelInfo:
    """Provenance of the zoo model ``name`` (any accepted spelling)."""
    return _zoo().info[resolve_model_name(name)]


def model_aliases(name: str) -> tuple[str, ...]:
    """The alias names models.yaml gives the zoo model ``name`` (any accepted spelling)."""
    return tuple(alias.name for alias in model_info(name).aliases)
