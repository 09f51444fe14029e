"""Llama 2 / 3 / 3.1 / 3.2 (and CodeLlama): the plain GQA decoder of :func:`decoder_fields`."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("llama")
def build_llama(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """llama: SwiGLU, RMSNorm, RoPE, full attention in every layer."""
    return finish(decoder_fields(cfg, name))


@hf_writer("llama")
def write_llama(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields."""
    return decoder_json(model, model_type=model_type)
