"""Llama 4 (Scout, Maverick): interleaved MoE and dense layers, chunked attention."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("llama4", "llama4_text")
def build_llama4(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """llama4_text (the text_config of a llama4 checkpoint, which the loader hands over):
    chunked attention on the RoPE layers modelled as a sliding window; one shared expert
    per MoE layer."""
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


@hf_writer("llama4", "llama4_text")
def write_llama4(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """A llama4 checkpoint (a llama4_text text_config) or a bare llama4_text config."""
    text = decoder_json(model, model_type="llama4_text")
    moe = model.moe
    if moe is not None:
        text["intermediate_size"] = moe.expert_ffn
        text["intermediate_size_mlp"] = moe.dense_layer_ffn or moe.expert_ffn
        text["num_local_experts"] = moe.num_experts
        text["num_experts_per_tok"] = moe.top_k
        text["moe_layers"] = list(range(model.num_layers - moe.num_moe_layers,
                                        model.num_layers))
    if model.sliding_window is not None:
        text["attention_chunk_size"] = model.sliding_window
        text["no_rope_layers"] = [1 if i < model.num_sliding_layers else 0
                                  for i in range(model.num_layers)]
    if model_type == "llama4_text":
        return text
    return {"model_type": model_type, "tie_word_embeddings": model.tie_word_embeddings,
            "text_config": text}
