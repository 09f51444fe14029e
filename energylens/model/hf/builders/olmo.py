"""AllenAI OLMo 2 (dense) and OLMoE (MoE): SwiGLU, RMSNorm, RoPE, untied embeddings, no
biases, and an RMSNorm of the queries and of the keys over all heads at once.

Layers (``transformers`` ``modeling_olmo2.py`` / ``modeling_olmoe.py`` and their config
classes, recalled): ``q_norm`` is an RMSNorm over heads x head_dim and ``k_norm`` over KV
heads x head_dim, applied to the projections before the rotary embedding; the loader reads
it as ``qk_norm: all_heads`` for both types (:data:`energylens.model.hf.common.
ALL_HEADS_QK_NORM_TYPES`; their config.json has no flag for it), whose statistics a
tensor-parallel rank all-reduces. OLMo 2 normalises each block's output rather than its
input (``post_attention_layernorm`` and ``post_feedforward_layernorm`` inside the residual,
no pre-norm): priced as the usual two pre-norms per layer, the same work on the same
tensors. OLMoE keeps Llama's pre-norms and puts ``num_experts`` gated experts of
``intermediate_size`` in every layer, ``num_experts_per_tok`` per token (softmax routing;
``norm_topk_prob`` changes no cost), no shared expert; ``clip_qkv`` (a clamp) costs nothing
counted.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("olmo2", "olmoe")
def build_olmo(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """olmo2: the Llama fields, post-norms priced as pre-norms. olmoe: the Llama fields
    and ``num_experts`` experts of width ``intermediate_size`` in every layer."""
    f = decoder_fields(cfg, name)
    if model_type == "olmo2":
        f["notes"] += "; post-norms (on each block's output) priced as pre-norms"
    else:
        f["moe"] = MoEConfig(num_experts=cfg.integer("num_experts"),
                             top_k=cfg.integer("num_experts_per_tok"),
                             expert_ffn=f["ffn_size"], num_shared_experts=0,
                             shared_expert_ffn=0, num_moe_layers=f["num_layers"],
                             dense_layer_ffn=0)
    return finish(f)


@hf_writer("olmo2", "olmoe")
def write_olmo(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields; OLMoE's experts (every layer MoE, no shared expert: anything else
    is refused)."""
    fields = decoder_json(model, model_type=model_type)
    moe = model.moe
    if (model_type == "olmoe") != (moe is not None):
        raise ModelConfigError(f"{model.name}: an {model_type} config.json describes "
                               f"{'MoE' if model_type == 'olmoe' else 'dense'} layers only")
    if moe is not None:
        if moe.num_moe_layers != model.num_layers or moe.num_shared_experts:
            raise ModelConfigError(f"{model.name}: an olmoe config.json describes MoE layers "
                                   f"of routed experts only")
        fields.update(num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                      intermediate_size=moe.expert_ffn)
    return fields
