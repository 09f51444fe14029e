"""Mistral, Mixtral and Phi-3/4: a sliding window on every layer when one is set; Mixtral
is MoE."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("mistral", "mixtral", "phi3")
def build_mistral(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """mistral / mixtral / phi3 (fused qkv and gate_up projections, the same shapes):
    ``sliding_window`` (when not null) applies to all layers."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    if cfg.has("sliding_window"):
        f["sliding_window"], f["num_sliding_layers"] = cfg.integer("sliding_window"), n
    if model_type == "mixtral":
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("num_local_experts"),
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=f["ffn_size"],
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=n,
            dense_layer_ffn=0,
        )
    return finish(f)


@hf_writer("mistral", "mixtral", "phi3")
def write_mistral(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window, Mixtral's experts (their width is intermediate_size)."""
    fields = decoder_json(model, model_type=model_type)
    fields["sliding_window"] = model.sliding_window
    if model.moe is not None:
        fields["num_local_experts"] = model.moe.num_experts
        fields["num_experts_per_tok"] = model.moe.top_k
    return fields
