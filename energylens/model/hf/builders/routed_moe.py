"""Llama-style attention followed by DeepSeek-style routed and shared experts after the
first dense layers (:func:`routed_moe`): GLM-4.5 / GLM-4.5-Air (``glm4_moe``: a qkv bias
and partial RoPE, which change no shape; MTP layers left out) and DeepSeekMoE
(``deepseek``, remote code: the deepseek-moe-16b checkpoints' ``modeling_deepseek.py``
and ``DeepseekConfig``, recalled: Llama's field names, ``attention_bias`` default false,
then DeepSeek-V2's experts without MLA, every ``moe_layer_freq``-th layer)."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import (
    decoder_fields,
    decoder_json,
    finish,
    routed_moe,
    routed_moe_json,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: What each type's routing is priced as (and what it leaves out).
ROUTING_NOTES = {"glm4_moe": "; sigmoid routing as plain top-k; MTP layers left out",
                 "deepseek": "; softmax top-k routing priced as plain top-k"}


@hf_builder(*ROUTING_NOTES)
def build_routed_moe(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The Llama fields, then ``n_routed_experts`` with ``n_shared_experts`` after
    ``first_k_dense_replace`` dense layers."""
    f = decoder_fields(cfg, name)
    routed_moe(cfg, f)
    f["notes"] += ROUTING_NOTES[model_type]
    return finish(f)


@hf_writer(*ROUTING_NOTES)
def write_routed_moe(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields and the experts (the dense layers first)."""
    fields = decoder_json(model, model_type=model_type)
    fields.update(routed_moe_json(model))
    return fields
