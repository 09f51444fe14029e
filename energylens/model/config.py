"""Architecture description of a transformer decoder, as read from a HF-style config.

:func:`check_model_config` is the one consistency check every loader (the zoo's
``models.yaml``, a local ``config.json``) runs on what it built.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args

from energylens.errors import ModelConfigError

AttentionKind = Literal["MHA", "GQA", "MLA"]
NormType = Literal["rmsnorm", "layernorm"]
#: How token positions enter: rotary embeddings on Q and K (a ``rope`` op), ALiBi (a bias
#: added to the scores inside the attention kernel: no op of its own) or a learned
#: absolute table added to the token embeddings (a lookup: no op per layer).
PositionEncoding = Literal["rope", "alibi", "learned", "none"]
#: RMSNorm of the queries and keys before the rotary embedding: over each head's width
#: (Qwen3, Gemma 3: one vector kernel), or over all heads at once (MiniMax-M2), whose
#: statistics a tensor-parallel rank must all-reduce, since it holds only its own heads.
QKNorm = Literal["head", "all_heads"]


@dataclass(frozen=True, kw_only=True)
class MoEConfig:
    """Mixture-of-experts FFN. ``num_moe_layers`` of the layers are MoE, the rest dense."""

    num_experts: int
    top_k: int
    expert_ffn: int  # moe_intermediate_size
    num_shared_experts: int
    shared_expert_ffn: int  # 0 when there are none
    num_moe_layers: int
    dense_layer_ffn: int  # FFN width of the non-MoE layers (0 if all layers are MoE)


@dataclass(frozen=True, kw_only=True)
class MLAConfig:
    """DeepSeek multi-head latent attention dimensions."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # DeepSeek Sparse Attention's indexer (GLM-5, DeepSeek-V3.2); 0: none
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0


#: Blocks of a hybrid ``layer_pattern``, one character each (Nemotron-H's
#: ``hybrid_override_pattern``): each block has its own pre-norm and residual.
BLOCK_KINDS = {"M": "recurrent mixer", "*": "self-attention", "-": "dense MLP", "E": "MoE"}

#: Recurrent token mixers a hybrid's ``M`` blocks may be, each a family part of that name
#: (``energylens/data/families/<name>.yaml``). Each keeps a state of heads x head width x
#: state width per sequence; ``ssm_groups`` are Mamba-2's B/C groups or Gated DeltaNet's
#: key heads, ``ssm_state_size`` the state width (Gated DeltaNet: the key head width).
#: Mamba-1 (Jamba) is the case of one group of heads one channel wide: ``ssm_heads`` is
#: its inner width (expand x hidden), each channel with its own dt and a row of A, B and C
#: shared by every channel, and ``dt_rank`` its low-rank dt projection.
MIXERS = {"mamba2": "Mamba-2", "gated_deltanet": "Gated DeltaNet", "mamba1": "Mamba-1"}


#: Checkpoint dtypes below 16 bits (``held_16bit`` keys).
LOW_BIT_DTYPES = ("fp8", "int8", "int4", "mxfp4", "nvfp4")


#: Element size of each SSM state dtype an engine offers.
SSM_STATE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True, kw_only=True)
class HybridConfig:
    """A model of single-purpose blocks, some with a recurrent token mixer instead of
    attention: Mamba-2 (SSD; NVIDIA Nemotron-H), Gated DeltaNet (Qwen3-Next, Qwen3.5) or
    Mamba-1 (AI21 Jamba)."""

    layer_pattern: str  # one BLOCK_KINDS character per block, in order
    ssm_heads: int  # mamba_num_heads
    ssm_head_dim: int  # mamba_head_dim
    ssm_state_size: int  # ssm_state_size (d_state)
    ssm_groups: int  # n_groups: B and C are shared by the heads of a group
    conv_kernel: int  # width of the causal depthwise convolution
    #: dtype the engine keeps the SSM state in (vLLM ``--mamba-ssm-cache-dtype``; the
    #: convolution state stays in the activation dtype)
    ssm_state_dtype: str = "bf16"
    mixer: str = "mamba2"  # a MIXERS name
    #: Width of Mamba-1's low-rank dt projection (Jamba's ``mamba_dt_rank``); 0 for the
    #: other mixers, whose dt comes straight from the input projection.
    dt_rank: int = 0

    def __post_init__(self) -> None:
        if self.ssm_state_dtype not in SSM_STATE_BYTES:
            raise ModelConfigError(f"ssm_state_dtype {self.ssm_state_dtype!r}: expected one of "
                             f"{', '.join(SSM_STATE_BYTES)}")
        if self.mixer not in MIXERS:
            raise ModelConfigError(f"mixer {self.mixer!r}: expected one of {', '.join(MIXERS)}")

    @property
    def ssm_state_bytes(self) -> int:
        """Bytes of one SSM state element."""
        return SSM_STATE_BYTES[self.ssm_state_dtype]

    def count(self, kind: str) -> int:
        """Blocks of ``kind`` (a BLOCK_KINDS character)."""
        return self.layer_pattern.count(kind)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """One model architecture. Sizes are per layer unless named otherwise."""

    name: str  # zoo short name, e.g. "llama-3.1-70b"
    hf_id: str
    family: Literal["dense", "moe"]
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int  # dense FFN width per projection (effective width, e.g. Qwen-1 uses HF/2)
    gated_mlp: bool
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    norm_type: NormType
    attention: AttentionKind
    sliding_window: int | None  # tokens; None = full attention everywhere
    num_sliding_layers: int  # layers that use the sliding/chunked window (0 if none)
    moe: MoEConfig | None
    mla: MLAConfig | None
    params_total_published: float | None  # parameters, from model card (not recomputed)
    params_active_published: float | None
    weight_dtype: str = "bf16"  # "fp8" for -FP8 checkpoints
    #: KV-cache precision the checkpoint declares (ModelOpt ``kv_cache_quant_algo``,
    #: compressed-tensors ``kv_cache_scheme``); None: none declared (16-bit).
    kv_dtype: str | None = None
    notes: str = ""  # approximations made when mapping the architecture
    hybrid: HybridConfig | None = None  # blocks of a hybrid Mamba/attention model
    position_encoding: PositionEncoding = "rope"
    #: Attention and MLP read the same pre-norm and add to one residual (GPT-J, Phi-2):
    #: one norm per layer instead of two.
    parallel_block: bool = False
    #: KV heads of each layer where they vary (DeciLM's variable GQA; 0: a layer without
    #: attention, as NVIDIA's NAS-derived Nemotron models skip it); num_kv_heads is then
    #: their largest value. None: every layer has num_kv_heads.
    kv_heads_per_layer: tuple[int, ...] | None = None
    #: FFN width of each layer where it varies (NAS-derived Nemotron models; 0: a layer
    #: without FFN); ffn_size is then the largest. None: every layer has ffn_size.
    ffn_per_layer: tuple[int, ...] | None = None
    #: Layers whose attention reads the image's keys and values (Llama 3.2 Vision's
    #: ``cross_attention_layers``), computed once per request from the vision encoder: they
    #: add nothing to the KV cache per token. Dense GQA models only.
    cross_attention_layers: int = 0
    qk_norm: QKNorm | None = None  # None: queries and keys reach the rotary op unnormalised
    #: A sigmoid gate on the attention output, from a second query-sized projection of the
    #: layer input (Qwen3-Next, Qwen3.5: ``attn_output_gate``).
    attention_output_gate: bool = False
    #: Weights (family tensor names, e.g. ``WQA``) that the model's published checkpoint of
    #: a low-bit dtype keeps in 16 bits, per dtype: its quantisation config's exclude list
    #: (NVIDIA's NVFP4 releases of the large MoE models keep attention 16-bit).
    held_16bit: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Bytes per weight of each weight (family tensor names; ``EMB``: the embedding table)
    #: as the model's GGUF file stores it, from its tensors' types (energylens/model/gguf):
    #: what the weight dtype ``gguf`` prices. Empty for a model not read from a GGUF file.
    gguf_storage: tuple[tuple[str, float], ...] = ()
    #: Longest sequence (prompt + generated tokens) the checkpoint serves: its config.json
    #: ``max_position_embeddings`` (the length an engine such as vLLM takes as the model's
    #: context by default). None: unknown, and no request is checked against it.
    max_context_tokens: int | None = None

    def layer_kv_heads(self) -> tuple[int, ...]:
        """KV heads of each layer, in order (0: the layer has no attention)."""
        return self.kv_heads_per_layer or (self.num_kv_heads,) * self.num_layers

    def layer_ffn_sizes(self) -> tuple[int, ...]:
        """FFN width of each layer, in order (0: the layer has no FFN)."""
        return self.ffn_per_layer or (self.ffn_size,) * self.num_layers


def show_value(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Largest size any integer field may take: far above any real model, and small enough
#: that products of sizes stay finite floats in the cost model.
MAX_SIZE = 2**40
#: Most layers a model may have (builders walk the layers one by one).
MAX_LAYERS = 100_000

# Integer fields that may be zero (everything else integer must be >= 1).
_MAY_BE_ZERO = frozenset(
    {"num_sliding_layers", "num_shared_experts", "shared_expert_ffn", "dense_layer_ffn",
     "q_lora_rank", "index_heads", "index_head_dim", "index_topk", "cross_attention_layers",
     "dt_rank"}
)
_BOOL_FIELDS = frozenset({"gated_mlp", "tie_word_embeddings", "qkv_bias", "parallel_block",
                          "attention_output_gate"})


def _check_fields(obj: ModelConfig | MoEConfig | MLAConfig | HybridConfig, where: str,
                  prefix: str) -> None:
    """Types and signs of the plain fields of ``obj`` (ints >= 1 or >= 0, bools, enums)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        name = prefix + f.name
        if f.name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise ModelConfigError(f"{where}: {name} must be true or false, got {show_value(value)}")
        elif f.type in ("int", int):
            low = 0 if f.name in _MAY_BE_ZERO else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ModelConfigError(
                    f"{where}: {name} must be an integer >= {low}, got {show_value(value)}")
            if f.name == "num_layers" and value > MAX_LAYERS:
                raise ModelConfigError(f"{where}: {name} = {value} is more than any model has "
                                       f"(limit {MAX_LAYERS})")
            if value > MAX_SIZE:
                raise ModelConfigError(f"{where}: {name} = {show_value(value)} is larger than "
                                       f"any model (limit 2**40)")
        elif f.type in ("str", str) and not isinstance(value, str):
            raise ModelConfigError(f"{where}: {name} must be a string, got {show_value(value)}")


def check_model_config(model: ModelConfig, *, where: str) -> None:
    """Raise :class:`ModelConfigError` (prefixed by ``where``) unless ``model`` describes a
    decoder the families can build: positive sizes, heads that split into KV groups, MoE and
    MLA sections that agree with ``family`` and ``attention``, windows within the layers."""
    m = model
    for dtype, weights in m.held_16bit:
        if dtype not in LOW_BIT_DTYPES or not weights \
                or not all(isinstance(w, str) and w.startswith("W") for w in weights):
            raise ModelConfigError(f"{where}: held_16bit needs a low-bit dtype "
                                   f"({', '.join(LOW_BIT_DTYPES)}) -> weight names (W...), "
                                   f"got {show_value((dtype, weights))}")
    _check_fields(m, where, "")
    if m.norm_type not in get_args(NormType):
        raise ModelConfigError(f"{where}: norm_type must be one of {get_args(NormType)}, "
                               f"got {show_value(m.norm_type)}")
    if m.attention not in get_args(AttentionKind):
        raise ModelConfigError(f"{where}: attention must be one of {get_args(AttentionKind)}, "
                               f"got {show_value(m.attention)}")
    if m.num_heads % m.num_kv_heads:
        raise ModelConfigError(f"{where}: num_heads = {m.num_heads} is not a multiple of "
                               f"num_kv_heads = {m.num_kv_heads}")
    if m.position_encoding not in get_args(PositionEncoding):
        raise ModelConfigError(f"{where}: position_encoding must be one of "
                               f"{get_args(PositionEncoding)}, got {show_value(m.position_encoding)}")
    if m.qk_norm is not None and m.qk_norm not in get_args(QKNorm):
        raise ModelConfigError(f"{where}: qk_norm must be one of {get_args(QKNorm)} or null, "
                               f"got {show_value(m.qk_norm)}")
    if m.kv_heads_per_layer is not None:
        _check_kv_heads_per_layer(m, where=where)
    if m.ffn_per_layer is not None:
        _check_ffn_per_layer(m, where=where)
    if m.cross_attention_layers > m.num_layers:
        raise ModelConfigError(f"{where}: cross_attention_layers = {m.cross_attention_layers} "
                               f"exceeds num_layers = {m.num_layers}")
    if m.cross_attention_layers and (m.mla is not None or m.hybrid is not None
                                     or m.moe is not None or m.kv_heads_per_layer is not None
                                     or m.ffn_per_layer is not None):
        raise ModelConfigError(f"{where}: cross_attention_layers are modelled for dense GQA "
                               f"transformers only")
    if m.sliding_window is not None and (
        isinstance(m.sliding_window, bool) or not isinstance(m.sliding_window, int)
        or not 1 <= m.sliding_window <= MAX_SIZE
    ):
        raise ModelConfigError(f"{where}: sliding_window must be null or an integer >= 1, "
                               f"got {show_value(m.sliding_window)}")
    context = m.max_context_tokens
    if context is not None and (isinstance(context, bool) or not isinstance(context, int)
                                or not 1 <= context <= MAX_SIZE):
        raise ModelConfigError(f"{where}: max_context_tokens must be null or an integer >= 1, "
                               f"got {show_value(context)}")
    if m.num_sliding_layers > m.num_layers:
        raise ModelConfigError(f"{where}: num_sliding_layers = {m.num_sliding_layers} exceeds "
                               f"num_layers = {m.num_layers}")
    if m.family not in ("dense", "moe"):
        raise ModelConfigError(f"{where}: family must be 'dense' or 'moe', got {show_value(m.family)}")
    if (m.family == "moe") != (m.moe is not None):
        raise ModelConfigError(f"{where}: family {m.family!r} but moe is "
                               f"{'given' if m.moe is not None else 'missing'}")
    if (m.attention == "MLA") != (m.mla is not None):
        raise ModelConfigError(f"{where}: attention {m.attention!r} but mla is "
                               f"{'given' if m.mla is not None else 'missing'}")
    if m.mla is not None:
        _check_fields(m.mla, where, "mla.")
        indexer = (m.mla.index_heads, m.mla.index_head_dim, m.mla.index_topk)
        if any(indexer) and not all(indexer):
            raise ModelConfigError(f"{where}: mla.index_heads, index_head_dim and index_topk "
                                   f"are all given (a sparse-attention indexer) or all 0")
        if any(indexer) and not m.mla.q_lora_rank:
            raise ModelConfigError(f"{where}: the sparse-attention indexer reads the query "
                                   f"latent: mla.q_lora_rank must be > 0")
    if m.moe is not None:
        _check_moe(m.moe, num_layers=m.num_layers, where=where, hybrid=m.hybrid is not None)
    if m.hybrid is not None:
        _check_hybrid(m, m.hybrid, where=where)


def _check_kv_heads_per_layer(m: ModelConfig, *, where: str) -> None:
    """One KV head count per layer, each dividing the query heads (or 0: no attention), the
    largest num_kv_heads."""
    per_layer = m.kv_heads_per_layer
    if not isinstance(per_layer, tuple) or len(per_layer) != m.num_layers or not all(
            isinstance(g, int) and not isinstance(g, bool)
            and (g == 0 or (g >= 1 and m.num_heads % g == 0)) for g in per_layer):
        raise ModelConfigError(f"{where}: kv_heads_per_layer must list {m.num_layers} KV head "
                               f"counts that divide num_heads = {m.num_heads} (0: a layer "
                               f"without attention), got {show_value(per_layer)}")
    if max(per_layer) != m.num_kv_heads:
        raise ModelConfigError(f"{where}: num_kv_heads = {m.num_kv_heads} must be the largest "
                               f"of kv_heads_per_layer ({max(per_layer)})")
    _dense_gqa_only(m, where=where, field="kv_heads_per_layer")


def _check_ffn_per_layer(m: ModelConfig, *, where: str) -> None:
    """One FFN width per layer (0: no FFN), the largest ffn_size."""
    per_layer = m.ffn_per_layer
    if not isinstance(per_layer, tuple) or len(per_layer) != m.num_layers or not all(
            isinstance(f, int) and not isinstance(f, bool) and 0 <= f <= MAX_SIZE
            for f in per_layer):
        raise ModelConfigError(f"{where}: ffn_per_layer must list {m.num_layers} FFN widths "
                               f"(0: a layer without FFN), got {show_value(per_layer)}")
    if max(per_layer) != m.ffn_size:
        raise ModelConfigError(f"{where}: ffn_size = {m.ffn_size} must be the largest of "
                               f"ffn_per_layer ({max(per_layer)})")
    _dense_gqa_only(m, where=where, field="ffn_per_layer")


def _dense_gqa_only(m: ModelConfig, *, where: str, field: str) -> None:
    if m.mla is not None or m.hybrid is not None or m.moe is not None:
        raise ModelConfigError(f"{where}: {field} is modelled for dense GQA transformers only")


def _check_hybrid(m: ModelConfig, h: HybridConfig, *, where: str) -> None:
    """The pattern's blocks agree with the layers, the MoE section and the attention."""
    _check_fields(h, where, "hybrid.")
    if not isinstance(h.layer_pattern, str) or not h.layer_pattern \
            or set(h.layer_pattern) - set(BLOCK_KINDS):
        raise ModelConfigError(f"{where}: hybrid.layer_pattern must be a string of "
                               f"{''.join(BLOCK_KINDS)}, got {show_value(h.layer_pattern)}")
    if len(h.layer_pattern) != m.num_layers:
        raise ModelConfigError(f"{where}: hybrid.layer_pattern has {len(h.layer_pattern)} "
                               f"blocks but num_layers = {m.num_layers}")
    if m.moe is not None and h.count("E") != m.moe.num_moe_layers:
        raise ModelConfigError(f"{where}: hybrid.layer_pattern has {h.count('E')} MoE blocks "
                               f"but moe.num_moe_layers = {m.moe.num_moe_layers}")
    if (m.moe is None) != (h.count("E") == 0):
        raise ModelConfigError(f"{where}: MoE blocks 'E' need a moe section and the reverse")
    if h.ssm_heads % h.ssm_groups:
        raise ModelConfigError(f"{where}: hybrid.ssm_heads = {h.ssm_heads} is not a multiple "
                               f"of hybrid.ssm_groups = {h.ssm_groups}")
    if (h.mixer == "mamba1") != (h.dt_rank > 0):
        raise ModelConfigError(f"{where}: hybrid.dt_rank = {h.dt_rank}: a mamba1 mixer needs "
                               f"its dt projection width (> 0), the other mixers none (0)")
    if h.mixer == "mamba1" and (h.ssm_head_dim, h.ssm_groups) != (1, 1):
        raise ModelConfigError(f"{where}: a mamba1 mixer has one channel per head and one "
                               f"B/C group: hybrid.ssm_head_dim and ssm_groups must be 1, got "
                               f"{h.ssm_head_dim} and {h.ssm_groups}")
    if m.sliding_window is not None:
        raise ModelConfigError(f"{where}: a hybrid model with a sliding window is not modelled")


def _check_moe(moe: MoEConfig, *, num_layers: int, where: str, hybrid: bool) -> None:
    """Experts within bounds; dense layers with a width (a hybrid's FFN-less blocks have
    none: its dense '-' blocks use ffn_size)."""
    _check_fields(moe, where, "moe.")
    if moe.top_k > moe.num_experts:
        raise ModelConfigError(f"{where}: moe.top_k = {moe.top_k} exceeds moe.num_experts = "
                               f"{moe.num_experts}")
    if moe.num_moe_layers > num_layers:
        raise ModelConfigError(f"{where}: moe.num_moe_layers = {moe.num_moe_layers} exceeds "
                               f"num_layers = {num_layers}")
    if moe.num_moe_layers < num_layers and moe.dense_layer_ffn < 1 and not hybrid:
        raise ModelConfigError(f"{where}: {num_layers - moe.num_moe_layers} dense layers but "
                               f"moe.dense_layer_ffn = {moe.dense_layer_ffn}")
    if moe.num_shared_experts and moe.shared_expert_ffn < 1:
        raise ModelConfigError(f"{where}: {moe.num_shared_experts} shared experts but "
                               f"moe.shared_expert_ffn = {moe.shared_expert_ffn}")
