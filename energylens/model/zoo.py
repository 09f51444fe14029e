"""Model zoo: named architectures from ``energylens/data/models.yaml`` and HF config.json files.

Lookup is case-insensitive and accepts a zoo short name (``llama-3.1-70b``), an alias
(``llama2-70b``), or a Hugging Face repo id (``meta-llama/Meta-Llama-3.1-70B-Instruct``):
the org prefix, a ``Meta-`` prefix and packaging suffixes (``-Instruct``, ``-hf``, ``-it``,
``-FP8``, ...) are stripped. A ``-FP8`` suffix selects ``weight_dtype="fp8"``. A path to an
existing ``.json`` file is read as a local Hugging Face config (no network).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from energylens.errors import UnknownModelError
from energylens.model.config import MLAConfig, ModelConfig, MoEConfig

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

_HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "gpt_oss",
    "bloom",
    "deepseek_v3",
    "llama4",
    "llama4_text",
)




# --------------------------------------------------------------------------- zoo data


@functools.cache
def _raw() -> dict[str, dict[str, Any]]:
    """The packaged models.yaml, parsed once."""
    text = resources.files("energylens").joinpath("data/models.yaml").read_text("utf-8")
    return yaml.safe_load(text)


@functools.cache
def _zoo() -> dict[str, ModelConfig]:
    """All zoo entries by short name."""
    return {name: _entry_to_config(name, entry) for name, entry in _raw().items()}


@functools.cache
def _index() -> dict[str, str]:
    """Lower-case lookup key (short name, alias, HF id, normalised forms) -> short name."""
    index: dict[str, str] = {}
    for name, entry in _raw().items():
        for key in (name, entry["hf_id"], *entry.get("aliases", [])):
            for variant in (key.lower(), _normalise(key)[0]):
                if index.setdefault(variant, name) != name:
                    raise ValueError(f"models.yaml: {key!r} names both {index[variant]} and {name}")
    return index


def _entry_to_config(name: str, entry: dict[str, Any]) -> ModelConfig:
    """Build a ModelConfig from one YAML entry; unknown keys are an error (catches typos)."""
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    data = {k: v for k, v in entry.items() if k not in _META_KEYS}
    unknown = set(data) - fields
    if unknown:
        raise ValueError(f"models.yaml entry {name!r}: unknown keys {sorted(unknown)}")
    if data.get("moe") is not None:
        data["moe"] = MoEConfig(**data["moe"])
    if data.get("mla") is not None:
        data["mla"] = MLAConfig(**data["mla"])
    for key in ("params_total_published", "params_active_published"):
        if data.get(key) is not None:
            data[key] = float(data[key])
    return ModelConfig(name=name, **data)


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
    index = _index()
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
    model = _zoo()[short]
    return dataclasses.replace(model, weight_dtype="fp8") if fp8 else model


def get_model(name: str) -> ModelConfig:
    """The ModelConfig for a zoo name / HF id, or for a local HF ``config.json`` path."""
    if name.lower().endswith(".json") and Path(name).is_file():
        return load_hf_config(name)
    return _get_named(name)


def list_models() -> list[ModelConfig]:
    """Every zoo model, in the order of models.yaml."""
    return list(_zoo().values())


# --------------------------------------------------------------------------- HF config.json


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face ``config.json`` into a ModelConfig (no network).

    Supports model_type llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, gpt_oss, bloom,
    deepseek_v3 and llama4 (its ``text_config``; a bare llama4_text config works too). A
    missing required field raises a ValueError naming the file and the field.
    """
    path = Path(path)
    cfg: dict[str, Any] = json.loads(path.read_text("utf-8"))
    model_type = cfg.get("model_type")
    if model_type not in _HF_MODEL_TYPES:
        raise ValueError(
            f"{path}: unsupported model_type {model_type!r} (supported: {_HF_MODEL_TYPES})"
        )
    prefix = ""
    if model_type == "llama4":
        cfg, prefix = cfg.get("text_config", cfg), "text_config."

    def req(*keys: str) -> Any:
        for key in keys:
            if cfg.get(key) is not None:
                return cfg[key]
        raise ValueError(f"{path}: missing required field {prefix + keys[0]!r}")

    def opt(key: str, default: Any) -> Any:
        value = cfg.get(key)
        return default if value is None else value

    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return _HF_BUILDERS[model_type](cfg, req, opt, name, model_type)


_Req = Callable[..., Any]
_Opt = Callable[[str, Any], Any]


def _hf_common(cfg: dict[str, Any], req: _Req, opt: _Opt, name: str) -> dict[str, Any]:
    """Fields shared by the llama-like model types."""
    hidden = int(req("hidden_size"))
    heads = int(req("num_attention_heads"))
    return {
        "name": name,
        "hf_id": str(cfg.get("_name_or_path") or ""),
        "num_layers": int(req("num_hidden_layers")),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": int(opt("num_key_value_heads", heads)),
        "head_dim": int(opt("head_dim", hidden // heads)),
        "ffn_size": int(req("intermediate_size")),
        "gated_mlp": True,
        "vocab_size": int(req("vocab_size")),
        "tie_word_embeddings": bool(opt("tie_word_embeddings", False)),
        "qkv_bias": bool(opt("attention_bias", False)),
        "norm_type": "rmsnorm",
        "attention": "GQA",
        "sliding_window": None,
        "num_sliding_layers": 0,
        "moe": None,
        "mla": None,
        "params_total_published": None,
        "params_active_published": None,
        "notes": f"loaded from a local HF config.json ({name})",
    }


def _finish(fields: dict[str, Any]) -> ModelConfig:
    """Set attention kind and family, then build the ModelConfig."""
    if fields["attention"] != "MLA":
        fields["attention"] = "MHA" if fields["num_kv_heads"] == fields["num_heads"] else "GQA"
    fields["family"] = "moe" if fields["moe"] is not None else "dense"
    return ModelConfig(**fields)


def _sliding_from_layer_types(cfg: dict[str, Any], default_count: int) -> int:
    """Count ``sliding_attention`` entries of ``layer_types`` if present, else the default."""
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        return sum(t == "sliding_attention" for t in layer_types)
    return default_count


def _build_llama_like(
    cfg: dict[str, Any], req: _Req, opt: _Opt, name: str, model_type: str
) -> ModelConfig:
    """llama, mistral, qwen2, qwen3, qwen3_moe and mixtral."""
    f = _hf_common(cfg, req, opt, name)
    n = f["num_layers"]
    if model_type == "qwen2":
        f["qkv_bias"] = True
    window = cfg.get("sliding_window")
    if model_type in ("mistral", "mixtral") and window is not None:
        f["sliding_window"], f["num_sliding_layers"] = int(window), n
    if model_type.startswith("qwen") and opt("use_sliding_window", False) and window is not None:
        f["sliding_window"] = int(window)
        f["num_sliding_layers"] = n - min(n, int(opt("max_window_layers", n)))
    if model_type == "mixtral":
        f["moe"] = MoEConfig(
            num_experts=int(req("num_local_experts")),
            top_k=int(req("num_experts_per_tok")),
            expert_ffn=f["ffn_size"],
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=n,
            dense_layer_ffn=0,
        )
    elif model_type == "qwen3_moe":
        step = int(opt("decoder_sparse_step", 1))
        dense_only = set(opt("mlp_only_layers", []))
        experts = int(req("num_experts"))
        moe_layers = sum(
            1 for i in range(n) if i not in dense_only and experts > 0 and (i + 1) % step == 0
        )
        expert_ffn = int(req("moe_intermediate_size"))
        dense_ffn = f["ffn_size"] if moe_layers < n else 0
        f["moe"] = MoEConfig(
            num_experts=experts,
            top_k=int(req("num_experts_per_tok")),
            expert_ffn=expert_ffn,
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=moe_layers,
            dense_layer_ffn=dense_ffn,
        )
        f["ffn_size"] = dense_ffn or expert_ffn
    return _finish(f)


def _build_gpt_oss(
    cfg: dict[str, Any], req: _Req, opt: _Opt, name: str, model_type: str
) -> ModelConfig:
    """gpt_oss: alternating sliding/full attention, all layers MoE; sinks ignored."""
    f = _hf_common(cfg, req, opt, name)
    n = f["num_layers"]
    f["qkv_bias"] = bool(opt("attention_bias", True))
    f["sliding_window"] = int(opt("sliding_window", 128))
    f["num_sliding_layers"] = _sliding_from_layer_types(cfg, (n + 1) // 2)
    f["moe"] = MoEConfig(
        num_experts=int(req("num_local_experts")),
        top_k=int(req("num_experts_per_tok", "experts_per_token")),
        expert_ffn=f["ffn_size"],
        num_shared_experts=0,
        shared_expert_ffn=0,
        num_moe_layers=n,
        dense_layer_ffn=0,
    )
    f["notes"] += "; attention sinks ignored"
    return _finish(f)


def _build_llama4(
    cfg: dict[str, Any], req: _Req, opt: _Opt, name: str, model_type: str
) -> ModelConfig:
    """llama4 text_config: chunked attention on RoPE layers as a sliding window; MoE + dense."""
    f = _hf_common(cfg, req, opt, name)
    n = f["num_layers"]
    rope_layers = cfg.get("no_rope_layers") or []
    if len(rope_layers) == n:
        num_rope = sum(1 for flag in rope_layers if flag)
    else:
        interval = int(opt("no_rope_layer_interval", 4))
        num_rope = sum(1 for i in range(n) if (i + 1) % interval != 0)
    chunk = cfg.get("attention_chunk_size")
    if chunk is not None:
        f["sliding_window"], f["num_sliding_layers"] = int(chunk), num_rope
    step = int(opt("interleave_moe_layer_step", 1))
    moe_layers = [i for i in cfg.get("moe_layers") or range(step - 1, n, step) if i < n]
    expert_ffn = f["ffn_size"]
    dense_ffn = int(req("intermediate_size_mlp")) if len(moe_layers) < n else 0
    f["moe"] = MoEConfig(
        num_experts=int(req("num_local_experts")),
        top_k=int(req("num_experts_per_tok")),
        expert_ffn=expert_ffn,
        num_shared_experts=1,
        shared_expert_ffn=expert_ffn,
        num_moe_layers=len(moe_layers),
        dense_layer_ffn=dense_ffn,
    )
    f["ffn_size"] = dense_ffn or expert_ffn
    f["notes"] += "; chunked attention modelled as a sliding window on the RoPE layers"
    return _finish(f)


def _build_deepseek_v3(
    cfg: dict[str, Any], req: _Req, opt: _Opt, name: str, model_type: str
) -> ModelConfig:
    """deepseek_v3: MLA attention, first_k_dense_replace dense layers, then MoE layers."""
    f = _hf_common(cfg, req, opt, name)
    n = f["num_layers"]
    nope, rope = int(req("qk_nope_head_dim")), int(req("qk_rope_head_dim"))
    f["mla"] = MLAConfig(
        q_lora_rank=int(opt("q_lora_rank", 0)),
        kv_lora_rank=int(req("kv_lora_rank")),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=int(req("v_head_dim")),
    )
    f["attention"], f["head_dim"], f["num_kv_heads"] = "MLA", nope + rope, f["num_heads"]
    first_dense = int(opt("first_k_dense_replace", 0))
    freq = int(opt("moe_layer_freq", 1))
    moe_layers = sum(1 for i in range(n) if i >= first_dense and i % freq == 0)
    expert_ffn = int(req("moe_intermediate_size"))
    shared = int(opt("n_shared_experts", 0))
    f["moe"] = MoEConfig(
        num_experts=int(req("n_routed_experts")),
        top_k=int(req("num_experts_per_tok")),
        expert_ffn=expert_ffn,
        num_shared_experts=shared,
        shared_expert_ffn=expert_ffn if shared else 0,
        num_moe_layers=moe_layers,
        dense_layer_ffn=f["ffn_size"] if moe_layers < n else 0,
    )
    if moe_layers == n:
        f["ffn_size"] = expert_ffn
    if (cfg.get("quantization_config") or {}).get("quant_method") == "fp8":
        f["weight_dtype"] = "fp8"
    return _finish(f)


def _build_bloom(
    cfg: dict[str, Any], req: _Req, opt: _Opt, name: str, model_type: str
) -> ModelConfig:
    """bloom: MHA with biases, LayerNorm, non-gated 4h GELU FFN, ALiBi, tied embeddings."""
    hidden = int(req("hidden_size", "n_embed"))
    heads = int(req("n_head", "num_attention_heads"))
    fields = {
        "name": name,
        "hf_id": str(cfg.get("_name_or_path") or ""),
        "num_layers": int(req("n_layer", "num_hidden_layers")),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_size": int(opt("n_inner", 4 * hidden)),
        "gated_mlp": False,
        "vocab_size": int(req("vocab_size")),
        "tie_word_embeddings": bool(opt("tie_word_embeddings", True)),
        "qkv_bias": True,
        "norm_type": "layernorm",
        "attention": "MHA",
        "sliding_window": None,
        "num_sliding_layers": 0,
        "moe": None,
        "mla": None,
        "params_total_published": None,
        "params_active_published": None,
        "notes": f"loaded from a local HF config.json ({name}); ALiBi",
    }
    return _finish(fields)


_HF_BUILDERS: dict[str, Callable[..., ModelConfig]] = {
    "llama": _build_llama_like,
    "mistral": _build_llama_like,
    "qwen2": _build_llama_like,
    "qwen3": _build_llama_like,
    "qwen3_moe": _build_llama_like,
    "mixtral": _build_llama_like,
    "gpt_oss": _build_gpt_oss,
    "bloom": _build_bloom,
    "deepseek_v3": _build_deepseek_v3,
    "llama4": _build_llama4,
    "llama4_text": _build_llama4,
}


# --------------------------------------------------------------------------- parameter count


def _attention_params(m: ModelConfig) -> int:
    """Attention weights of one layer (projections, qkv bias, MLA latent norms)."""
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk
        else:
            q = h * m.num_heads * qk
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + m.num_heads * a.v_head_dim * h
    q_width = m.num_heads * m.head_dim
    kv_width = m.num_kv_heads * m.head_dim
    params = h * (q_width + 2 * kv_width) + q_width * h
    if m.qkv_bias:
        params += q_width + 2 * kv_width
    return params


def parameter_count(model: ModelConfig) -> tuple[float, float]:
    """(total, active per token) parameters implied by the shapes.

    Counts embeddings, lm_head (unless tied), attention projections, FFN / experts /
    shared experts / routers and the two norms per layer plus the final norm. Small
    extras (QK-norm, biases other than qkv, MTP heads, vision encoders) are left out.
    Active counts both the embedding and lm_head plus the top-k routed experts.
    """
    m = model
    h = m.hidden_size
    mult = 3 if m.gated_mlp else 2
    norm = h * (2 if m.norm_type == "layernorm" else 1)
    embed = m.vocab_size * h * (1 if m.tie_word_embeddings else 2)
    per_layer = _attention_params(m) + 2 * norm
    total = embed + norm + m.num_layers * per_layer
    active = total
    if m.moe is None:
        ffn = m.num_layers * mult * h * m.ffn_size
        return float(total + ffn), float(active + ffn)
    e = m.moe
    dense_layers = m.num_layers - e.num_moe_layers
    dense = dense_layers * mult * h * e.dense_layer_ffn
    expert = mult * h * e.expert_ffn
    shared = e.num_shared_experts * mult * h * e.shared_expert_ffn
    router = h * e.num_experts
    total += dense + e.num_moe_layers * (e.num_experts * expert + shared + router)
    active += dense + e.num_moe_layers * (e.top_k * expert + shared + router)
    return float(total), float(active)
