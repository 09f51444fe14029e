"""Phi-1/1.5/2: a parallel block (attention and MLP read one LayerNorm), a plain GELU MLP,
biases on every linear, partial rotary positions, untied embeddings."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("phi")
def build_phi(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """phi: the Llama field names, a LayerNorm parallel block with a plain MLP."""
    fields = decoder_fields(cfg, name)
    fields.update(gated_mlp=False, norm_type="layernorm", qkv_bias=True, parallel_block=True,
                  notes=f"{fields['notes']}; parallel block; the rope op counts the whole "
                        f"head though partial_rotary_factor may rotate part of it")
    return finish(fields)


@hf_writer("phi")
def write_phi(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama field names with Phi's activation."""
    fields = decoder_json(model, model_type=model_type)
    del fields["attention_bias"]
    fields["hidden_act"] = "gelu_new"
    return fields
