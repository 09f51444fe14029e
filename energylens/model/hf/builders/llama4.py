"""Llama 4 (Scout, Maverick): interleaved MoE and dense layers, chunked attention."""

from __future__ import annotations

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder


@hf_builder("llama4", "llama4_text")
def build_llama4(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """llama4 (its ``text_config``) or a bare llama4_text config: chunked attention on the
    RoPE layers modelled as a sliding window; one shared expert per MoE layer."""
    if model_type == "llama4":
        cfg = cfg.section("text_config") or cfg
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    rope_layers = cfg.list_of("no_rope_layers", int) or []
    if len(rope_layers) == n:
        num_rope = sum(1 for flag in rope_layers if flag)
    else:
        interval = cfg.integer("no_rope_layer_interval", default=4)
        num_rope = sum(1 for i in range(n) if (i + 1) % interval != 0)
    if cfg.has("attention_chunk_size"):
        f["sliding_window"] = cfg.integer("attention_chunk_size")
        f["num_sliding_layers"] = num_rope
    step = cfg.integer("interleave_moe_layer_step", default=1)
    listed = cfg.list_of("moe_layers", int) or range(step - 1, n, step)
    moe_layers = sorted({i for i in listed if 0 <= i < n})
    expert_ffn = f["ffn_size"]
    dense_ffn = cfg.integer("intermediate_size_mlp") if len(moe_layers) < n else 0
    f["moe"] = MoEConfig(
        num_experts=cfg.integer("num_local_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_ffn=expert_ffn,
        num_shared_experts=1,
        shared_expert_ffn=expert_ffn,
        num_moe_layers=len(moe_layers),
        dense_layer_ffn=dense_ffn,
    )
    f["ffn_size"] = dense_ffn or expert_ffn
    f["notes"] += "; chunked attention modelled as a sliding window on the RoPE layers"
    return finish(f)
