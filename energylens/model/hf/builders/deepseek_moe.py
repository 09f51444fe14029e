"""DeepSeekMoE (``deepseek``, remote code: the deepseek-moe-16b checkpoints'
``modeling_deepseek.py`` and ``DeepseekConfig``, recalled): Llama's attention and field
names (MHA or GQA, ``attention_bias`` default false, RMSNorm, RoPE, untied), then
DeepSeek's fine-grained experts, as DeepSeek-V2's without MLA: ``n_routed_experts``
gated experts of ``moe_intermediate_size``, ``num_experts_per_tok`` per token, and
``n_shared_experts`` always-on ones of the same width; the first
``first_k_dense_replace`` layers dense (``intermediate_size``), then every
``moe_layer_freq``-th layer MoE (:func:`routed_moe`). Softmax top-k routing is priced as
plain top-k."""

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


@hf_builder("deepseek")
def build_deepseek_moe(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The Llama fields, then the routed and shared experts after the dense layers."""
    f = decoder_fields(cfg, name)
    routed_moe(cfg, f)
    f["notes"] += "; softmax top-k routing priced as plain top-k"
    return finish(f)


@hf_writer("deepseek")
def write_deepseek_moe(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields and the experts (the dense layers first)."""
    fields = decoder_json(model, model_type=model_type)
    fields.update(routed_moe_json(model))
    return fields
