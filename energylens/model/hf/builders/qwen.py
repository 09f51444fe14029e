"""Qwen2 / Qwen2.5, Qwen1.5-MoE and Qwen2-MoE, Qwen3 dense and Qwen3-MoE.

Qwen2-MoE (``modeling_qwen2_moe.py`` and ``Qwen2MoeConfig``, recalled): Qwen2's attention
with q/k/v biases (``qkv_bias``, default true), ``num_experts`` gated experts of
``moe_intermediate_size`` routed top-``num_experts_per_tok`` and one always-on shared
expert of ``shared_expert_intermediate_size``, scaled by a sigmoid of a 1-wide
``shared_expert_gate`` (its hidden-size weights not counted); dense layers where
``mlp_only_layers`` or ``decoder_sparse_step`` say, as Qwen3-MoE's."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
_MOE_TYPES = ("qwen2_moe", "qwen3_moe")


@hf_builder(*_TYPES)
def build_qwen(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """qwen2 (always a qkv bias), qwen3, qwen2_moe and qwen3_moe (sparse every
    ``decoder_sparse_step`` layers except ``mlp_only_layers``; qwen2_moe's q/k/v biases by
    ``qkv_bias`` and its shared expert). With ``use_sliding_window`` the layers from
    ``max_window_layers`` on use the window."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    if model_type == "qwen2":
        f["qkv_bias"] = True
    elif model_type == "qwen2_moe":
        f["qkv_bias"] = cfg.flag("qkv_bias", True)
    if cfg.flag("use_sliding_window", False) and cfg.has("sliding_window"):
        f["sliding_window"] = cfg.integer("sliding_window")
        f["num_sliding_layers"] = n - min(n, cfg.integer("max_window_layers", default=n,
                                                         minimum=0))
    if model_type in _MOE_TYPES:
        step = cfg.integer("decoder_sparse_step", default=1)
        dense_only = set(cfg.list_of("mlp_only_layers", int) or [])
        experts = cfg.integer("num_experts")
        moe_layers = sum(1 for i in range(n) if i not in dense_only and (i + 1) % step == 0)
        expert_ffn = cfg.integer("moe_intermediate_size")
        dense_ffn = f["ffn_size"] if moe_layers < n else 0
        shared_ffn = (cfg.integer("shared_expert_intermediate_size", default=0, minimum=0)
                      if model_type == "qwen2_moe" else 0)
        f["moe"] = MoEConfig(
            num_experts=experts,
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=expert_ffn,
            num_shared_experts=1 if shared_ffn else 0,
            shared_expert_ffn=shared_ffn,
            num_moe_layers=moe_layers,
            dense_layer_ffn=dense_ffn,
        )
        f["ffn_size"] = dense_ffn or expert_ffn
        if shared_ffn:
            f["notes"] += "; the shared expert's sigmoid gate not counted"
    return finish(f)


@hf_writer(*_TYPES)
def write_qwen(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window from layer ``max_window_layers`` on, the experts (the
    first layers dense, listed in ``mlp_only_layers``); qwen2_moe's ``qkv_bias`` and
    shared expert."""
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
    if model_type == "qwen2_moe":
        fields["qkv_bias"] = fields.pop("attention_bias")
        moe = model.moe
        fields["shared_expert_intermediate_size"] = (
            moe.num_shared_experts * moe.shared_expert_ffn if moe is not None else 0)
    return fields
