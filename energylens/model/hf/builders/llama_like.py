"""Aquila and InternLM (1): the Llama layout under their own ``model_type``; InternLM
declares its attention biases with ``bias``."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("aquila", "internlm")
def build_llama_like(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """SwiGLU, RMSNorm, RoPE; InternLM's ``bias`` puts biases on q, k, v and o (the q, k,
    v ones are the ``qkv_bias`` the zoo counts)."""
    fields = decoder_fields(cfg, name)
    if model_type == "internlm":
        fields["qkv_bias"] = cfg.flag("bias", True)
    return finish(fields)


@hf_writer("aquila", "internlm")
def write_llama_like(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields (InternLM: ``bias`` for the attention biases)."""
    fields = decoder_json(model, model_type=model_type)
    if model_type == "internlm":
        fields["bias"] = fields.pop("attention_bias")
    return fields
