"""Qwen3-Next and Qwen3.5 MoE: per layer a Gated DeltaNet (linear attention) or gated
full-attention mixer, then a MoE block of routed experts and one shared expert. Read by
the generic decoder (which models the linear-attention layers as Gated DeltaNet mixers);
this module makes the family a supported one and writes it back.

What the family's code fixes (transformers ``modeling_qwen3_next.py`` and
``modeling_qwen3_5_moe.py``, recalled): q_proj is twice the query width, its second half a
sigmoid gate on the attention output (``KNOWN_TYPES`` attention_output_gate); q_norm and
k_norm over each head's width (``HEAD_QK_NORM_TYPES``); the mixer's q/k/v, z, b and a
projections, one causal convolution over q, k and v, a gated RMSNorm. Qwen3-Next's config
places the full-attention layers by ``full_attention_interval`` (every fourth layer) where
Qwen3.5's lists ``layer_types``; the writer writes ``layer_types``, which both read.
Approximated: rotary on a quarter of each head (``partial_rotary_factor``) is costed on the
whole head; the zero-centred RMSNorm weights (1 + w) cost as plain ones; the MTP layer is
not modelled; routing is priced as plain top-k.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import STATE_DTYPE_NAMES, decoder_json
from energylens.model.hf.generic import build_generic
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

QWEN3_5_TYPES = ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text")


@hf_builder(*QWEN3_5_TYPES)
def build_qwen3_5(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The generic decoder's reading; what it approximates goes into the notes."""
    model, notes = build_generic(cfg, name=name, model_type=model_type)
    kept = [note for note in notes if "has no builder" not in note]
    return dataclasses.replace(model, notes="; ".join(
        [f"loaded from a local HF config.json ({name})", *kept]))


@hf_writer(*QWEN3_5_TYPES)
def write_qwen3_5(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Layers of (mixer, MoE) block pairs as ``layer_types``, the linear-attention sizes
    and the experts."""
    hybrid, moe = model.hybrid, model.moe
    if hybrid is None or moe is None:
        raise ModelConfigError(f"{model.name}: {model_type} needs a hybrid MoE model")
    mixers = hybrid.layer_pattern[::2]
    fields = decoder_json(model, model_type=model_type)
    fields.update(
        num_hidden_layers=len(mixers),
        layer_types=["linear_attention" if m == "M" else "full_attention" for m in mixers],
        linear_num_value_heads=hybrid.ssm_heads, linear_value_head_dim=hybrid.ssm_head_dim,
        linear_num_key_heads=hybrid.ssm_groups, linear_key_head_dim=hybrid.ssm_state_size,
        linear_conv_kernel_dim=hybrid.conv_kernel,
        mamba_ssm_dtype=STATE_DTYPE_NAMES[hybrid.ssm_state_dtype],
        attn_output_gate=model.attention_output_gate,
        num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
        moe_intermediate_size=moe.expert_ffn,
        shared_expert_intermediate_size=moe.shared_expert_ffn)
    del fields["intermediate_size"]
    return fields
