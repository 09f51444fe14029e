"""Fields that most HF decoder configs spell the same way (the Llama naming)."""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig, QKNorm
from energylens.model.hf.reader import HFConfig

#: What a plain decoder's fields leave unset: no window, experts or latent attention, no
#: published counts (a builder overrides what its family has).
PLAIN_DECODER_DEFAULTS: dict[str, Any] = {
    "sliding_window": None, "num_sliding_layers": 0, "moe": None, "mla": None,
    "params_total_published": None, "params_active_published": None}


def decoder_fields(cfg: HFConfig, name: str, *, derive_head_dim: bool = True) -> dict[str, Any]:
    """ModelConfig fields of a Llama-style config: a dense, full-attention GQA decoder.

    Builders start from these and change what their family does differently.
    ``head_dim`` defaults to ``hidden_size / num_attention_heads``, which must then
    divide; a builder that sets the head width itself passes ``derive_head_dim=False``.
    """
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('num_attention_heads')} = {heads} is not a multiple of "
                        f"{cfg.field('num_key_value_heads')} = {kv_heads}")
    if not derive_head_dim:
        head_dim = 0  # set by the builder
    elif cfg.has("head_dim"):
        head_dim = cfg.integer("head_dim")
    else:
        head_dim = head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key="hidden_size",
                                 heads_key="num_attention_heads")
    return {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": cfg.num_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "ffn_size": cfg.integer("intermediate_size"),
        "gated_mlp": True,
        "vocab_size": cfg.integer("vocab_size"),
        "tie_word_embeddings": cfg.flag("tie_word_embeddings", False),
        "qkv_bias": cfg.flag("attention_bias", False),
        "norm_type": "rmsnorm",
        "attention": "GQA",
        **PLAIN_DECODER_DEFAULTS,
        "notes": f"loaded from a local HF config.json ({name})",
    }


def head_dim_from(cfg: HFConfig, *, hidden: int, heads: int, hidden_key: str,
                  heads_key: str) -> int:
    """``hidden / heads``, which must divide (no ``head_dim`` field to say otherwise)."""
    if hidden % heads:
        raise cfg.error(f"{cfg.field(hidden_key)} = {hidden} is not divisible by "
                        f"{cfg.field(heads_key)} = {heads} (and no head_dim is given)")
    return hidden // heads


def plain_decoder_fields(cfg: HFConfig, name: str, *, hidden: int, heads: int, kv_heads: int,
                         num_layers: int, ffn_size: int, tie: bool, qkv_bias: bool,
                         hidden_key: str, heads_key: str, notes: str) -> dict[str, Any]:
    """Fields of a pre-LayerNorm decoder with a plain (non-gated) MLP and no sliding window,
    MoE or MLA (GPT-J, OPT, BLOOM, Falcon), read under each family's own field names."""
    return {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key=hidden_key,
                                  heads_key=heads_key),
        "ffn_size": ffn_size,
        "gated_mlp": False,
        "vocab_size": cfg.integer("vocab_size"),
        "tie_word_embeddings": tie,
        "qkv_bias": qkv_bias,
        "norm_type": "layernorm",
        "attention": "GQA",  # MHA or GQA, set by finish()
        **PLAIN_DECODER_DEFAULTS,
        "notes": f"loaded from a local HF config.json ({name}); {notes}",
    }


#: Families whose attention always normalises each head's query and key (an RMSNorm over
#: head_dim before the rotary embedding; their config.json has no flag for it): Qwen3
#: dense and MoE (``q_norm`` / ``k_norm`` of Qwen3Attention), Qwen3-Next, Qwen3.5, Gemma 3.
HEAD_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe",
                                "qwen3_5_moe_text", "gemma3", "gemma3_text"})
#: Families whose attention always normalises the queries and keys over all heads at once
#: (OlmoeAttention's q_norm over hidden_size; Olmo2Attention's over heads x head_dim).
ALL_HEADS_QK_NORM_TYPES = frozenset({"olmoe", "olmo2"})
#: Families whose config says with ``qk_layernorm`` whether a LayerNorm over each head's
#: width normalises the queries and keys (StableLM's StableLmLayerNormPerHead, Persimmon's
#: q_layernorm / k_layernorm; recalled): priced as the ``head`` norm.
QK_LAYERNORM_TYPES = frozenset({"stablelm", "persimmon"})


def declared_qk_norm(cfg: HFConfig, *, model_type: str) -> QKNorm | None:
    """The query/key norm of a checkpoint: its family's (:data:`HEAD_QK_NORM_TYPES`,
    :data:`ALL_HEADS_QK_NORM_TYPES`), ``qk_layernorm`` (:data:`QK_LAYERNORM_TYPES`) over
    each head, or ``use_qk_norm`` (Llama 4, Cohere, GLM-4.5, MiniMax-M2) over each head,
    or over all heads at once where ``qk_norm_type`` is ``per_layer`` (MiniMax-M2)."""
    if model_type in HEAD_QK_NORM_TYPES:
        return "head"
    if model_type in ALL_HEADS_QK_NORM_TYPES:
        return "all_heads"
    if model_type in QK_LAYERNORM_TYPES:
        return "head" if cfg.flag("qk_layernorm", False) else None
    if not cfg.flag("use_qk_norm", False):
        return None
    return "all_heads" if cfg.text("qk_norm_type") == "per_layer" else "head"


def qk_norm_json(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The config.json fields :func:`declared_qk_norm` reads ``model.qk_norm`` back from
    (none for the families whose code fixes it)."""
    if model_type in HEAD_QK_NORM_TYPES | ALL_HEADS_QK_NORM_TYPES or model.qk_norm is None:
        return {}
    if model_type in QK_LAYERNORM_TYPES:
        if model.qk_norm != "head":
            raise ModelConfigError(f"{model.name}: a {model_type} config.json declares a "
                                   f"query/key norm over each head only (qk_layernorm)")
        return {"qk_layernorm": True}
    return {"use_qk_norm": True,
            "qk_norm_type": "per_layer" if model.qk_norm == "all_heads" else "per_head"}


def finish(fields: dict[str, Any]) -> ModelConfig:
    """Set the attention kind (MHA/GQA unless MLA) and the family, then build."""
    if fields["attention"] != "MLA":
        fields["attention"] = "MHA" if fields["num_kv_heads"] == fields["num_heads"] else "GQA"
    fields["family"] = "moe" if fields["moe"] is not None else "dense"
    return ModelConfig(**fields)


def sliding_from_layer_types(cfg: HFConfig, default_count: int) -> int:
    """Count ``sliding_attention`` entries of ``layer_types`` if present, else the default."""
    layer_types = cfg.list_of("layer_types", str)
    if layer_types is None:
        return default_count
    return sum(t == "sliding_attention" for t in layer_types)


def decoder_json(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama-named ``config.json`` fields of ``model`` (what :func:`decoder_fields`
    reads); writers add what their family spells differently."""
    return {
        "model_type": model_type,
        "_name_or_path": model.hf_id,
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "intermediate_size": model.ffn_size,
        "vocab_size": model.vocab_size,
        "tie_word_embeddings": model.tie_word_embeddings,
        "attention_bias": model.qkv_bias,
        "hidden_act": "silu" if model.gated_mlp else "gelu",
        ("rms_norm_eps" if model.norm_type == "rmsnorm" else "layer_norm_eps"): 1e-5,
    }


def layer_types(model: ModelConfig) -> list[str]:
    """``layer_types`` with ``num_sliding_layers`` sliding layers spread over the model."""
    n, k = model.num_layers, model.num_sliding_layers
    sliding = {round(i * n / k) for i in range(k)} if k else set()
    return ["sliding_attention" if i in sliding else "full_attention" for i in range(n)]


def routed_moe(cfg: HFConfig, fields: dict[str, Any]) -> None:
    """DeepSeek-style experts (``n_routed_experts``, ``n_shared_experts`` of
    ``moe_intermediate_size`` each): the first ``first_k_dense_replace`` layers dense, then
    every ``moe_layer_freq``-th layer MoE. Sets ``fields["moe"]`` and the dense width."""
    n = fields["num_layers"]
    first_dense = cfg.integer("first_k_dense_replace", default=0, minimum=0)
    freq = cfg.integer("moe_layer_freq", default=1)
    moe_layers = sum(1 for i in range(n) if i >= first_dense and i % freq == 0)
    expert_ffn = cfg.integer("moe_intermediate_size")
    shared = cfg.integer("n_shared_experts", default=0, minimum=0)
    fields["moe"] = MoEConfig(
        num_experts=cfg.integer("n_routed_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_ffn=expert_ffn,
        num_shared_experts=shared,
        shared_expert_ffn=expert_ffn if shared else 0,
        num_moe_layers=moe_layers,
        dense_layer_ffn=fields["ffn_size"] if moe_layers < n else 0,
    )
    if moe_layers == n:
        fields["ffn_size"] = expert_ffn


def routed_moe_json(model: ModelConfig) -> dict[str, Any]:
    """The fields :func:`routed_moe` reads (dense layers first, then every layer MoE)."""
    moe = model.moe
    if moe is None:
        return {}
    return {
        "n_routed_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.expert_ffn,
        "n_shared_experts": moe.num_shared_experts,
        "first_k_dense_replace": model.num_layers - moe.num_moe_layers,
        "moe_layer_freq": 1,
        "intermediate_size": moe.dense_layer_ffn or moe.expert_ffn,
    }


#: SSM-state dtypes a config asks engines for (torch dtype names) -> the zoo's dtype names.
STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: Its inverse, for writers: the zoo's dtype name -> the torch dtype name configs use.
STATE_DTYPE_NAMES = {zoo: torch for torch, zoo in STATE_DTYPES.items()}
#: Where configs say it: NVIDIA's Nemotron-H (``mamba_ssm_cache_dtype``), Qwen3.5's Gated
#: DeltaNet layers (``mamba_ssm_dtype``).
STATE_DTYPE_KEYS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")


def ssm_state_dtype(cfg: HFConfig) -> str:
    """The recurrent-state dtype a config asks engines for, else bf16."""
    key = next((k for k in STATE_DTYPE_KEYS if cfg.has(k)), None)
    name = None if key is None else cfg.text(key)
    if name is None or name == "auto":
        return "bf16"
    if name not in STATE_DTYPES:
        raise cfg.error(f"{cfg.field(str(key))} = {name!r}: expected one of "
                        f"{', '.join(STATE_DTYPES)} or auto")
    return STATE_DTYPES[name]
