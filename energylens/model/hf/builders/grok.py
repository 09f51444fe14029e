"""Grok-1 (xAI, 314B): Llama-style GQA attention, then on every layer a MoE block of
gated experts (Mixtral's form) with no shared expert; RMSNorm, RoPE, tied embeddings.

xAI released JAX weights (``xai-org/grok-1``: its ``model.py``, recalled); the PyTorch
conversions' ``config.json`` (``Grok1ModelForCausalLM``, model_type ``grok-1``, remote
code ``configuration_grok1.py``, recalled) names the sizes as Llama does, with
``num_experts`` and ``num_experts_per_tok`` (SGLang's reader: ``num_local_experts``) and
ties the output to the embedding (``tie_word_embeddings`` default true). Approximated: the
RMSNorms after attention and after the MoE block (four norms a layer) are priced as the
two pre-norms; the attention logit cap (``max_attn_value`` 30), the embedding, attention
and output multipliers change no shape and are not costed; softmax top-2 routing is priced
as plain top-2.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("grok-1")
def build_grok1(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The Llama fields; every layer MoE of ``num_experts`` experts of
    ``intermediate_size``, ``num_experts_per_tok`` per token."""
    del model_type
    f = decoder_fields(cfg, name)
    f["tie_word_embeddings"] = cfg.flag("tie_word_embeddings", True)
    f["moe"] = MoEConfig(
        num_experts=cfg.integer("num_experts", "num_local_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_ffn=f["ffn_size"], num_shared_experts=0, shared_expert_ffn=0,
        num_moe_layers=f["num_layers"], dense_layer_ffn=0)
    f["notes"] += ("; post-attention and post-MoE RMSNorms priced as the pre-norms; logit "
                   "cap and multipliers not costed; softmax top-k routing as plain top-k")
    return finish(f)


@hf_writer("grok-1")
def write_grok1(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields and the experts (their width is intermediate_size)."""
    moe = model.moe
    if moe is None or moe.num_moe_layers != model.num_layers or moe.num_shared_experts:
        raise ModelConfigError(f"{model.name}: a {model_type} config.json has routed "
                               f"experts on every layer and no shared expert")
    fields = decoder_json(model, model_type=model_type)
    fields.update(num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                  max_attn_value=30.0)
    return fields
