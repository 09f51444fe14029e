"""OpenAI gpt-oss: alternating sliding / full attention, every layer MoE."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import (
    decoder_fields,
    decoder_json,
    finish,
    layer_types,
    sliding_from_layer_types,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("gpt_oss")
def build_gpt_oss(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """gpt_oss: qkv bias, 128-token window on the ``sliding_attention`` layers (every
    other layer when ``layer_types`` is absent), all layers MoE; attention sinks ignored."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    f["qkv_bias"] = cfg.flag("attention_bias", True)
    f["sliding_window"] = cfg.integer("sliding_window", default=128)
    f["num_sliding_layers"] = sliding_from_layer_types(cfg, (n + 1) // 2)
    f["moe"] = MoEConfig(
        num_experts=cfg.integer("num_local_experts"),
        top_k=cfg.integer("num_experts_per_tok", "experts_per_token"),
        expert_ffn=f["ffn_size"],
        num_shared_experts=0,
        shared_expert_ffn=0,
        num_moe_layers=n,
        dense_layer_ffn=0,
    )
    f["notes"] += "; attention sinks ignored"
    return finish(f)


@hf_writer("gpt_oss")
def write_gpt_oss(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window and layer_types, the experts."""
    fields = decoder_json(model, model_type=model_type)
    fields["sliding_window"] = model.sliding_window
    fields["layer_types"] = layer_types(model)
    if model.moe is not None:
        fields["num_local_experts"] = model.moe.num_experts
        fields["num_experts_per_tok"] = model.moe.top_k
    return fields
