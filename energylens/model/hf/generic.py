"""A decoder whose ``model_type`` has no builder, read from the standard HF fields.

Dense or MoE from the fields present (expert counts, expert and shared-expert widths,
which layers are dense), MLA when the latent ranks are given, sliding layers from
``layer_types`` or the interval fields, per-layer lists averaged. The field names are
those Hugging Face configs share across families (several spellings where families
differ); what a family's code fixes and its config may leave unsaid (the MLP's form, the
norm, the config class's defaults) comes from :data:`KNOWN_TYPES` where the type is
listed. Every guess is returned as a note; the loader warns with them in one line.
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import MAX_SIZE, HybridConfig, MLAConfig, ModelConfig, MoEConfig
from energylens.model.hf.common import (
    PLAIN_DECODER_DEFAULTS,
    STATE_DTYPE_KEYS,
    finish,
    head_dim_from,
    ssm_state_dtype,
)
from energylens.model.hf.known_types import KNOWN_TYPES
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import supported_model_types

HIDDEN = ("hidden_size", "n_embd", "d_model")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
HEADS = ("num_attention_heads", "n_head", "num_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num",
            "num_key_value_heads_per_layer")
FFN = ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_experts_per_token")
EXPERT_FFN = ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size")
SHARED_COUNT = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
SHARED_FFN = ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
              "shared_intermediate_size")
ACTIVATION = ("hidden_act", "hidden_activation", "activation_function")
VOCAB = ("vocab_size", "padded_vocab_size")

_FULL = frozenset({"full_attention", "attention", "global", "global_attention"})
_SLIDING = frozenset({"sliding_attention", "local", "local_attention", "chunked_attention"})
_PLAIN_ACTIVATIONS = frozenset({"relu", "relu2", "squared_relu", "gelu", "gelu_new",
                                "gelu_fast", "quick_gelu", "gelu_pytorch_tanh"})
_GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu", "geglu"})
#: Fields of recurrent (state-space) layers this reader cannot build, which it refuses
#: rather than price as attention: Mamba-1 outside Jamba (MambaConfig's ``time_step_rank``;
#: Jamba's ``mamba_*`` and ``attn_layer_period`` under another model_type: ``jamba`` has
#: its builder), other Mamba hybrids (Zamba2's ``layers_block_type``, Bamba's
#: ``attn_layer_indices``, ``ssm_*``) and Griffin's RG-LRU (RecurrentGemma's
#: ``block_types``, ``lru_width``). The SSM state dtype keys are not among them: Gated
#: DeltaNet configs (Qwen3.5) carry one.
_RECURRENT_FIELDS = frozenset({"block_types", "layers_block_type", "lru_width",
                               "attn_layer_period", "attn_layer_indices", "time_step_rank"})
_RECURRENT_PREFIXES = ("mamba_", "ssm_")


class _Reader:
    """Fields of one config, collecting the notes of what had to be approximated."""

    def __init__(self, cfg: HFConfig, *, model_type: str) -> None:
        self.cfg = cfg
        self.facts = KNOWN_TYPES.get(model_type)
        self.notes: list[str] = []

    def first(self, keys: tuple[str, ...]) -> str | None:
        return next((k for k in keys if self.cfg.has(k)), None)

    def size(self, keys: tuple[str, ...], *, minimum: int = 1, default: int | None = None) -> int:
        """The first present of ``keys``; a per-layer list is averaged (and noted)."""
        key = self.first(keys)
        if key is not None and isinstance(self.cfg.raw(key), list):
            values = self.cfg.list_of(key, int) or []
            if not values or any(isinstance(v, bool) or v < minimum for v in values) \
                    or max(values) > MAX_SIZE:
                raise self.cfg.error(f"field {self.cfg.field(key)!r} must be a list of "
                                     f"integers >= {minimum}")
            mean = round(sum(values) / len(values))
            if len(set(values)) > 1:
                self.notes.append(f"per-layer {key} averaged to {mean}")
            return max(mean, minimum)
        return self.cfg.integer(*keys, minimum=minimum, default=default)


def build_generic(cfg: HFConfig, *, name: str, model_type: str) -> tuple[ModelConfig, list[str]]:
    """A ModelConfig from the standard fields, and the notes on what was approximated.

    Raises ``ModelConfigError`` (one line naming the file) when the standard decoder
    fields are missing: hidden size, layers, heads, vocabulary and an FFN or expert width;
    or when the config has recurrent layers other than Gated DeltaNet (Mamba-1 outside a
    ``jamba`` config, RG-LRU).
    """
    r = _Reader(cfg, model_type=model_type)
    recurrent = [k for k in cfg.data if cfg.has(k) and k not in STATE_DTYPE_KEYS
                 and (k in _RECURRENT_FIELDS or k.startswith(_RECURRENT_PREFIXES))]
    if recurrent:
        shown = ", ".join(recurrent[:3]) + (", ..." if len(recurrent) > 3 else "")
        raise cfg.error(f"model_type {model_type!r} has recurrent layers ({shown}) of a kind "
                        f"not modelled (only Mamba-2 blocks of nemotron_h, Mamba-1 layers of "
                        f"jamba and Gated DeltaNet linear_* layers are): refused rather than "
                        f"priced as attention")
    missing = [keys[0] for keys in (HIDDEN, LAYERS, HEADS, VOCAB)
               if r.first(keys) is None]
    if r.first(FFN) is None and r.first(EXPERT_FFN) is None and _ffn_multiple(r) is None:
        missing.append("intermediate_size")
    if missing:
        raise cfg.error(f"model_type {model_type!r} has no builder (supported: "
                        f"{', '.join(supported_model_types())}) and lacks the standard "
                        f"decoder fields {missing}")
    r.notes.append(f"model_type {model_type!r} has no builder: read as a generic decoder")
    hidden = r.size(HIDDEN)
    n = cfg.num_layers(*LAYERS)
    heads = r.size(HEADS)
    f: dict[str, Any] = {
        "name": name, "hf_id": cfg.text("_name_or_path") or "", "num_layers": n,
        "hidden_size": hidden, "num_heads": heads,
        "vocab_size": cfg.integer(*VOCAB),
        "tie_word_embeddings": _tied(r), "qkv_bias": _qkv_bias(r),
        "norm_type": _norm(r), "gated_mlp": _gated(r), "attention": "GQA",
        "position_encoding": r.facts.position if r.facts else "rope",
        **PLAIN_DECODER_DEFAULTS,
        "notes": f"loaded from a local HF config.json ({name}) as a generic decoder",
    }
    if cfg.has("kv_lora_rank"):
        f["mla"] = MLAConfig(q_lora_rank=cfg.integer("q_lora_rank", default=0, minimum=0),
                             kv_lora_rank=cfg.integer("kv_lora_rank"),
                             qk_nope_head_dim=cfg.integer("qk_nope_head_dim"),
                             qk_rope_head_dim=cfg.integer("qk_rope_head_dim"),
                             v_head_dim=cfg.integer("v_head_dim"))
        f["attention"], f["num_kv_heads"] = "MLA", heads
        f["head_dim"] = f["mla"].qk_nope_head_dim + f["mla"].qk_rope_head_dim
    else:
        f["num_kv_heads"] = _kv_heads(r, heads)
        f["head_dim"] = cfg.integer("head_dim", "kv_channels") \
            if r.first(("head_dim", "kv_channels")) else \
            head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key=r.first(HIDDEN) or "",
                          heads_key=r.first(HEADS) or "")
    kinds = _layer_kinds(r, n)
    _attention_layers(r, f, n, kinds)
    moe_flags = _experts(r, f, n)
    if kinds and "linear" in kinds:
        _linear_attention(r, f, kinds, moe_flags)
    f["attention_output_gate"] = r.cfg.flag(
        "attn_output_gate", bool(r.facts and r.facts.attention_output_gate))
    f["cross_attention_layers"] = _cross_attention_layers(r, n)
    _extras(r)
    return finish(f), r.notes


def _tied(r: _Reader) -> bool:
    """The config's tie_word_embeddings, else its config class's default (known types)."""
    if r.cfg.has("tie_word_embeddings") or r.facts:
        return r.cfg.flag("tie_word_embeddings", r.facts.tie if r.facts else False)
    r.notes.append("tie_word_embeddings not given: untied assumed")
    return False


def _qkv_bias(r: _Reader) -> bool:
    key = next((k for k in ("attention_bias", "qkv_bias", "add_qkv_bias", "bias", "use_bias")
                if r.cfg.has(k)), None)
    return r.cfg.flag(key, False) if key else bool(r.facts and r.facts.qkv_bias)


def _ffn_multiple(r: _Reader) -> int | None:
    """The FFN width a known type takes where its config gives none (GPT-2's n_inner null:
    4 x n_embd)."""
    if r.facts is None or r.facts.ffn_multiple is None or r.first(HIDDEN) is None:
        return None
    return r.facts.ffn_multiple * r.size(HIDDEN)


def _norm(r: _Reader) -> str:
    if r.facts and r.facts.norm:
        return r.facts.norm
    if r.cfg.has("rmsnorm"):  # ChatGLM: RMSNorm or LayerNorm by a flag
        return "rmsnorm" if r.cfg.flag("rmsnorm", True) else "layernorm"
    if r.cfg.has("rms_norm_eps"):
        return "rmsnorm"
    if r.first(("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon")):
        return "layernorm"
    r.notes.append("norm type not given: RMSNorm assumed")
    return "rmsnorm"


def _gated(r: _Reader) -> bool:
    """The known type's MLP; else guessed from the activation, and noted."""
    if r.facts:
        return r.facts.gated_mlp
    key = r.first(ACTIVATION)
    act = (r.cfg.text(key) or "").lower() if key else ""
    if act in _PLAIN_ACTIVATIONS:
        r.notes.append(f"{key} {act}: a plain (non-gated) MLP guessed")
        return False
    if act in _GATED_ACTIVATIONS:
        r.notes.append(f"{key} {act}: a gated MLP guessed")
    else:
        r.notes.append(f"activation {act or 'not given'}: a gated MLP assumed")
    return True


def _kv_heads(r: _Reader, heads: int) -> int:
    """KV heads: one where ``multi_query`` is set (GPT-BigCode), all where ChatGLM's
    ``multi_query_attention`` is off, else the KV-head field; a per-layer list is averaged
    to the nearest count that divides the heads."""
    if r.cfg.flag("multi_query", bool(r.facts and r.facts.multi_query)):
        return 1
    key = r.first(KV_HEADS)
    if key is None or not r.cfg.flag("multi_query_attention", True):
        return heads
    if not isinstance(r.cfg.raw(key), list):
        kv_heads = r.cfg.integer(key)
        if heads % kv_heads:
            raise r.cfg.error(f"{r.cfg.field(r.first(HEADS) or HEADS[0])} = {heads} is not a "
                              f"multiple of {r.cfg.field(key)} = {kv_heads}")
        return kv_heads
    values = r.cfg.list_of(key, int) or []
    if not values or any(isinstance(v, bool) or v < 1 for v in values):
        raise r.cfg.error(f"field {r.cfg.field(key)!r} must be a list of integers >= 1")
    mean = sum(values) / len(values)
    chosen = min((d for d in range(1, heads + 1) if heads % d == 0), key=lambda d: abs(d - mean))
    if len(set(values)) > 1 or chosen != values[0]:
        r.notes.append(f"per-layer {key} averaged to {chosen}")
    return chosen


def _layer_kinds(r: _Reader, n: int) -> list[str] | None:
    """'full', 'sliding' or 'linear' per layer, from layer_types or the interval fields."""
    cfg = r.cfg
    if cfg.has("layer_types"):
        kinds = []
        for item in cfg.list_of("layer_types", str) or []:
            if item in _FULL:
                kinds.append("full")
            elif item in _SLIDING:
                kinds.append("sliding")
            else:
                kinds.append("linear")
        if len(kinds) != n:
            raise cfg.error(f"field {cfg.field('layer_types')!r} has {len(kinds)} entries for "
                            f"{n} layers")
        return kinds
    if cfg.has("attn_type_list"):  # 1 = softmax attention, 0 = linear attention
        flags = cfg.list_of("attn_type_list", int) or []
        if len(flags) != n:
            raise cfg.error(f"field {cfg.field('attn_type_list')!r} has {len(flags)} entries "
                            f"for {n} layers")
        return ["full" if flag else "linear" for flag in flags]
    if cfg.has("full_attention_interval"):
        every = cfg.integer("full_attention_interval")
        return ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
    if cfg.has("sliding_window_pattern") and cfg.has("sliding_window"):
        every = cfg.integer("sliding_window_pattern")
        return ["full" if (i + 1) % every == 0 else "sliding" for i in range(n)]
    return None


def _attention_layers(r: _Reader, f: dict[str, Any], n: int, kinds: list[str] | None) -> None:
    sliding = kinds.count("sliding") if kinds else 0
    window_on = r.cfg.flag("use_sliding_window", True)
    if r.cfg.has("sliding_window") and window_on:
        window = r.cfg.integer("sliding_window")
        if kinds is None:
            sliding = n
            r.notes.append("sliding_window without layer_types: a window on every layer")
        if sliding:
            f["sliding_window"], f["num_sliding_layers"] = window, sliding
    elif sliding:
        raise r.cfg.error(f"{sliding} sliding-attention layers but no "
                          f"{r.cfg.field('sliding_window')!r}")


def _moe_flags(r: _Reader, n: int) -> list[bool]:
    """Which layers are MoE: all, less the dense ones the config names."""
    cfg = r.cfg
    if cfg.has("moe_layers"):
        listed = set(cfg.list_of("moe_layers", int) or [])
        return [i in listed for i in range(n)]
    first_dense = cfg.integer("first_k_dense_replace", default=0, minimum=0)
    dense_only = set(cfg.list_of("mlp_only_layers", int) or [])
    step = cfg.integer("decoder_sparse_step", "moe_layer_frequency", default=1)
    freq: Any = cfg.raw("moe_layer_freq")
    flags = []
    for i in range(n):
        moe = i >= first_dense and i not in dense_only and (i + 1) % step == 0
        if isinstance(freq, list):
            moe = moe and i < len(freq) and bool(freq[i])
        elif freq is not None:
            moe = moe and i % cfg.integer("moe_layer_freq") == 0
        flags.append(moe)
    return flags


def _experts(r: _Reader, f: dict[str, Any], n: int) -> list[bool]:
    """Sets the FFN fields; returns which layers are MoE."""
    key = r.first(EXPERTS)
    dense_ffn = r.size(FFN) if r.first(FFN) else _ffn_multiple(r) or 0
    experts = r.size(EXPERTS, minimum=0) if key else 0
    if experts <= 1:
        if not dense_ffn:
            raise r.cfg.error(f"missing required field {r.cfg.field('intermediate_size')!r}")
        f["ffn_size"] = dense_ffn
        return [False] * n
    expert_ffn = r.size(EXPERT_FFN) if r.first(EXPERT_FFN) else dense_ffn
    shared_count = r.size(SHARED_COUNT, minimum=0) if r.first(SHARED_COUNT) else None
    shared_ffn = r.size(SHARED_FFN, minimum=0) if r.first(SHARED_FFN) else None
    if shared_count is None:
        shared_count = 1 if shared_ffn else 0
    if shared_count and not shared_ffn:
        shared_ffn = expert_ffn
    if r.cfg.flag("use_residual", False):
        if shared_count:
            raise r.cfg.error(f"{r.cfg.field('use_residual')} (a residual MLP) and shared "
                              f"experts together are not modelled")
        # Arctic's layout (its own type has a builder, builders/arctic.py): beside the
        # experts of each MoE layer a dense SwiGLU MLP of hidden width (vLLM ArcticMLP,
        # is_residual_mlp: ffn_dim = hidden_size), on the same input
        shared_count, shared_ffn = 1, r.size(HIDDEN)
        r.notes.append(f"residual MLP (use_residual) of width {shared_ffn} beside the "
                       f"experts priced as a shared expert (its own norm left out)")
    flags = _moe_flags(r, n)
    moe_layers = sum(flags)
    if moe_layers and moe_layers < n and not dense_ffn:
        raise r.cfg.error(f"{n - moe_layers} dense layers but no "
                          f"{r.cfg.field('intermediate_size')!r}")
    f["moe"] = MoEConfig(
        num_experts=experts, top_k=r.size(TOP_K), expert_ffn=expert_ffn,
        num_shared_experts=shared_count, shared_expert_ffn=shared_ffn or 0,
        num_moe_layers=moe_layers, dense_layer_ffn=dense_ffn if moe_layers < n else 0)
    f["ffn_size"] = dense_ffn if moe_layers < n else expert_ffn
    return flags


#: Fields of a linear-attention (Gated DeltaNet) mixer: value heads and width, key heads
#: and width, convolution width.
LINEAR = ("linear_num_value_heads", "linear_value_head_dim", "linear_num_key_heads",
          "linear_key_head_dim")


def _linear_attention(r: _Reader, f: dict[str, Any], kinds: list[str],
                      moe_flags: list[bool]) -> None:
    """Layers of linear (recurrent) attention: Gated DeltaNet mixers (value heads x value
    width x key width of state, keys shared by the heads of a key group), each layer a
    mixer block then its FFN block; without the linear_* sizes, full attention."""
    linear = kinds.count("linear")
    if f["sliding_window"] is not None or any(r.first((k,)) is None for k in LINEAR):
        r.notes.append(f"{linear} linear-attention (recurrent) layers of {len(kinds)} modelled "
                       f"as full attention")
        return
    heads, groups = r.cfg.integer("linear_num_value_heads"), r.cfg.integer("linear_num_key_heads")
    if heads % groups:
        raise r.cfg.error(f"{r.cfg.field('linear_num_value_heads')} = {heads} is not a "
                          f"multiple of {r.cfg.field('linear_num_key_heads')} = {groups}")
    f["hybrid"] = HybridConfig(
        layer_pattern="".join(("M" if kind == "linear" else "*") + ("E" if moe else "-")
                              for kind, moe in zip(kinds, moe_flags, strict=True)),
        ssm_heads=heads, ssm_head_dim=r.cfg.integer("linear_value_head_dim"),
        ssm_state_size=r.cfg.integer("linear_key_head_dim"), ssm_groups=groups,
        conv_kernel=r.cfg.integer("linear_conv_kernel_dim", default=4),
        ssm_state_dtype=ssm_state_dtype(r.cfg), mixer="gated_deltanet")
    f["num_layers"] = 2 * len(kinds)  # a mixer block and an FFN block per layer
    r.notes.append(f"{linear} linear-attention (Gated DeltaNet) layers of {len(kinds)}")


def _cross_attention_layers(r: _Reader, n: int) -> int:
    """How many layers ``cross_attention_layers`` lists (Llama 3.2 Vision), noted."""
    listed = set(r.cfg.list_of("cross_attention_layers", int) or [])
    if any(not 0 <= i < n for i in listed):
        raise r.cfg.error(f"field {r.cfg.field('cross_attention_layers')!r} names layers "
                          f"outside 0..{n - 1}")
    if listed:
        r.notes.append(f"{len(listed)} cross-attention layers hold no KV cache per token (the "
                       f"image's keys and values, once per request, left out), their "
                       f"attention priced over the text context")
    return len(listed)


def _extras(r: _Reader) -> None:
    """Cost-relevant parts the families do not model, named in the notes."""
    cfg = r.cfg
    if cfg.has("index_topk"):
        r.notes.append("sparse-attention indexer (top-k key selection) left out: full "
                       "attention over the context")
    mtp = sum(cfg.integer(k, default=0, minimum=0) for k in
              ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"))
    if mtp:
        r.notes.append(f"{mtp} multi-token-prediction layers left out")
