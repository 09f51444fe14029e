"""Architecture description of a transformer decoder, as read from a HF-style config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AttentionKind = Literal["MHA", "GQA", "MLA"]


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
    norm_type: Literal["rmsnorm", "layernorm"]
    attention: AttentionKind
    sliding_window: int | None  # tokens; None = full attention everywhere
    num_sliding_layers: int  # layers that use the sliding/chunked window (0 if none)
    moe: MoEConfig | None
    mla: MLAConfig | None
    params_total_published: float | None  # parameters, from model card (not recomputed)
    params_active_published: float | None
    weight_dtype: str = "bf16"  # "fp8" for -FP8 checkpoints
    notes: str = ""  # approximations made when mapping the architecture
