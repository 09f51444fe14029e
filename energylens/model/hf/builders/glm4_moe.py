"""GLM-4.5 / GLM-4.5-Air: GQA with a qkv bias and partial RoPE, DeepSeek-style routed and
shared experts after the first dense layers."""

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


@hf_builder("glm4_moe")
def build_glm4_moe(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """glm4_moe: Llama fields (partial RoPE changes no shape), ``n_routed_experts`` with
    ``n_shared_experts`` after ``first_k_dense_replace`` dense layers; MTP layers left out."""
    f = decoder_fields(cfg, name)
    routed_moe(cfg, f)
    f["notes"] += "; sigmoid routing as plain top-k; MTP layers left out"
    return finish(f)


@hf_writer("glm4_moe")
def write_glm4_moe(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields and the experts."""
    fields = decoder_json(model, model_type=model_type)
    fields.update(routed_moe_json(model))
    return fields
