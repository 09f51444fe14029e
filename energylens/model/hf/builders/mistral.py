"""Mistral, Mixtral, Phi-3/4, Phi-3.5-MoE and MiniMax-M2: a sliding window on every layer
when one is set; Mixtral, Phi-3.5-MoE and MiniMax-M2 are MoE (every layer, experts of
width intermediate_size).

Phi-3.5-MoE (``transformers`` ``modeling_phimoe.py`` and ``PhimoeConfig``, recalled):
Mixtral's layers and field names (``num_local_experts`` gated experts ``w1``/``w3``/``w2``,
``num_experts_per_tok`` per token, no shared expert) with ``nn.LayerNorm`` (weight and
bias; its eps is still called ``rms_norm_eps``) before attention and MLP and at the end,
q/k/v/o biases where ``attention_bias`` says (default false; the released checkpoint says
true) and a bias on ``lm_head`` (``lm_head_bias``, not counted). Its SparseMixer routing
(top-2 chosen by masked softmax, with jitter in training) is priced as plain top-k.
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

_TYPES = ("mistral", "mixtral", "phi3", "phimoe", "minimax_m2")
_MOE_TYPES = ("mixtral", "phimoe", "minimax_m2")


@hf_builder(*_TYPES)
def build_mistral(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """mistral / mixtral / phi3 (fused qkv and gate_up projections, the same shapes):
    ``sliding_window`` (when not null) applies to all layers. phimoe: Mixtral's experts
    under LayerNorms. minimax_m2: Mixtral's experts (no shared one); its partial rotary and
    MTP modules are named in the notes (its QK norm over all heads is read by the loader:
    ``qk_norm``)."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    if cfg.has("sliding_window"):
        f["sliding_window"], f["num_sliding_layers"] = cfg.integer("sliding_window"), n
    if model_type in _MOE_TYPES:
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("num_local_experts"),
            top_k=cfg.integer("num_experts_per_tok"),
            expert_ffn=f["ffn_size"],
            num_shared_experts=0,
            shared_expert_ffn=0,
            num_moe_layers=n,
            dense_layer_ffn=0,
        )
    if model_type == "phimoe":
        f["norm_type"] = "layernorm"
        f["notes"] += ("; SparseMixer routing priced as plain top-k; the biases of o and "
                       "lm_head not counted")
    if model_type == "minimax_m2":
        f["notes"] += ("; rotary on rotary_dim of each head costed on the "
                       "whole head; sigmoid routing as plain top-k; MTP modules left out")
    return finish(f)


@hf_writer(*_TYPES)
def write_mistral(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the window, Mixtral's experts (their width is intermediate_size);
    Phi-3.5-MoE's LayerNorm eps under ``rms_norm_eps``."""
    fields = decoder_json(model, model_type=model_type)
    fields["sliding_window"] = model.sliding_window
    if model.moe is not None:
        fields["num_local_experts"] = model.moe.num_experts
        fields["num_experts_per_tok"] = model.moe.top_k
    if model_type == "phimoe" and "layer_norm_eps" in fields:
        fields["rms_norm_eps"] = fields.pop("layer_norm_eps")
    return fields
