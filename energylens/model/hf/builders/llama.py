"""Llama 2 / 3 / 3.1 (and CodeLlama): the plain GQA decoder of :func:`decoder_fields`."""

from __future__ import annotations

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder


@hf_builder("llama")
def build_llama(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """llama: SwiGLU, RMSNorm, RoPE, full attention in every layer."""
    return finish(decoder_fields(cfg, name))
