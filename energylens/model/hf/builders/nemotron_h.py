"""NVIDIA Nemotron-H (Nemotron-Nano-9B/12B-v2 ...): hybrid Mamba-2 / attention / MLP
blocks in the order of ``hybrid_override_pattern``; MoE blocks ('E') where the config
has routed experts."""

from __future__ import annotations

from typing import Any

from energylens.model.config import HybridConfig, ModelConfig, MoEConfig
from energylens.model.hf.common import (
    STATE_DTYPE_NAMES,
    decoder_fields,
    decoder_json,
    finish,
    ssm_state_dtype,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("nemotron_h")
def build_nemotron_h(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """nemotron_h: the pattern gives the blocks (M Mamba-2, * attention, - MLP, E MoE);
    squared-ReLU MLPs (non-gated), no positional encoding in attention (no RoPE op)."""
    pattern = cfg.text("hybrid_override_pattern")
    if not pattern:
        raise cfg.error(f"missing required field {cfg.field('hybrid_override_pattern')!r}")
    f = decoder_fields(cfg, name)
    f["gated_mlp"] = False
    f["position_encoding"] = "none"  # NoPE: Nemotron-H's attention has no positional encoding
    f["hybrid"] = HybridConfig(
        layer_pattern=pattern,
        ssm_heads=cfg.integer("mamba_num_heads"),
        ssm_head_dim=cfg.integer("mamba_head_dim"),
        ssm_state_size=cfg.integer("ssm_state_size"),
        ssm_groups=cfg.integer("n_groups", default=1),
        conv_kernel=cfg.integer("conv_kernel", default=4),
        ssm_state_dtype=ssm_state_dtype(cfg),
    )
    if "E" in pattern:
        expert_ffn = cfg.integer("moe_intermediate_size")
        shared = cfg.integer("n_shared_experts", default=0, minimum=0)
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("n_routed_experts"),
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=expert_ffn,
            num_shared_experts=shared,
            shared_expert_ffn=cfg.integer("moe_shared_expert_intermediate_size",
                                          default=expert_ffn) if shared else 0,
            num_moe_layers=pattern.count("E"),
            dense_layer_ffn=f["ffn_size"] if "-" in pattern else 0,
        )
    f["notes"] += "; squared-ReLU MLP priced as the GELU MLP"
    return finish(f)


@hf_writer("nemotron_h")
def write_nemotron_h(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the pattern and the Mamba-2 sizes (and the experts of 'E' blocks)."""
    fields = decoder_json(model, model_type=model_type)
    fields["mlp_hidden_act"] = "relu2"
    hybrid = model.hybrid
    if hybrid is not None:
        fields.update(hybrid_override_pattern=hybrid.layer_pattern,
                      mamba_num_heads=hybrid.ssm_heads, mamba_head_dim=hybrid.ssm_head_dim,
                      ssm_state_size=hybrid.ssm_state_size, n_groups=hybrid.ssm_groups,
                      conv_kernel=hybrid.conv_kernel,
                      mamba_ssm_cache_dtype=STATE_DTYPE_NAMES[
                          hybrid.ssm_state_dtype])
    if model.moe is not None:
        fields.update(n_routed_experts=model.moe.num_experts,
                      num_experts_per_tok=model.moe.top_k,
                      moe_intermediate_size=model.moe.expert_ffn,
                      n_shared_experts=model.moe.num_shared_experts,
                      moe_shared_expert_intermediate_size=model.moe.shared_expert_ffn)
    return fields
