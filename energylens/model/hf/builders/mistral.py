"""Mistral, Mixtral, Phi-3/4 and MiniMax-M2: a sliding window on every layer when one is
set; Mixtral and MiniMax-M2 are MoE (every layer, experts of width intermediate_size)."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("mistral", "mixtral", "phi3", "minimax_m2")
def build_mistral(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """mistral / mixtral / phi3 (fused qkv and gate_up projections, the same shapes):
    ``sliding_window`` (when not null) applies to all layers. minimax_m2: Mixtral's
    experts (no shared one); its partial rotary and MTP modules are named in the notes
    (its QK norm over all heads is read by the loader: ``qk_norm``)."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    if cfg.has("sliding_window"):
        f["sliding_window"], f["num_sliding_layers"] = cfg.integer("sliding_window"), n
    if model_type in ("mixtral", "minimax_m2"):
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("num_local_experts"),
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=f["ffn_size"],
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=n,
            dense_layer_ffn=0,
        )
    if model_type == "minimax_m2":
        f["notes"] += ("; rotary on rotary_dim of each head costed on the "
                       "whole head; sigmoid routing as plain top-k; MTP modules left out")
    return finish(f)


@hf_writer("mistral", "mixtral", "phi3", "minimax_m2")
def write_mistral(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window, Mixtral's experts (their width is intermediate_size)."""
    fields = decoder_json(model, model_type=model_type)
    fields["sliding_window"] = model.sliding_window
    if model.moe is not None:
        fields["num_local_experts"] = model.moe.num_experts
        fields["num_experts_per_tok"] = model.moe.top_k
    return fields
