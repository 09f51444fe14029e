"""Qwen2 / Qwen2.5, Qwen3 dense and Qwen3-MoE."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("qwen2", "qwen3", "qwen3_moe")
def build_qwen(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """qwen2 (always a qkv bias), qwen3, qwen3_moe (sparse every ``decoder_sparse_step``
    layers except ``mlp_only_layers``). With ``use_sliding_window`` the layers from
    ``max_window_layers`` on use the window."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    if model_type == "qwen2":
        f["qkv_bias"] = True
    if cfg.flag("use_sliding_window", False) and cfg.has("sliding_window"):
        f["sliding_window"] = cfg.integer("sliding_window")
        f["num_sliding_layers"] = n - min(n, cfg.integer("max_window_layers", default=n,
                                                         minimum=0))
    if model_type == "qwen3_moe":
        step = cfg.integer("decoder_sparse_step", default=1)
        dense_only = set(cfg.list_of("mlp_only_layers", int) or [])
        experts = cfg.integer("num_experts")
        moe_layers = sum(1 for i in range(n) if i not in dense_only and (i + 1) % step == 0)
        expert_ffn = cfg.integer("moe_intermediate_size")
        dense_ffn = f["ffn_size"] if moe_layers < n else 0
        f["moe"] = MoEConfig(
            num_experts=experts,
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=expert_ffn,
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=moe_layers,
            dense_layer_ffn=dense_ffn,
        )
        f["ffn_size"] = dense_ffn or expert_ffn
    return finish(f)


@hf_writer("qwen2", "qwen3", "qwen3_moe")
def write_qwen(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window from layer ``max_window_layers`` on, the experts (the
    first layers dense, listed in ``mlp_only_layers``)."""
    fields = decoder_json(model, model_type=model_type)
    fields["use_sliding_window"] = model.sliding_window is not None
    fields["sliding_window"] = model.sliding_window
    fields["max_window_layers"] = model.num_layers - model.num_sliding_layers
    if model.moe is not None:
        fields["num_experts"] = model.moe.num_experts
        fields["num_experts_per_tok"] = model.moe.top_k
        fields["moe_intermediate_size"] = model.moe.expert_ffn
        fields["decoder_sparse_step"] = 1
        fields["mlp_only_layers"] = list(range(model.num_layers - model.moe.num_moe_layers))
    return fields
