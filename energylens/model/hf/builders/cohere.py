"""Cohere Command-R: SwiGLU, LayerNorm (no bias), tied embeddings; the parallel
attention/MLP block is priced as two sequential blocks."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("cohere")
def build_cohere(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """cohere: Llama field names, LayerNorm, embeddings tied unless the file says not."""
    f = decoder_fields(cfg, name)
    f["norm_type"] = "layernorm"
    f["tie_word_embeddings"] = cfg.flag("tie_word_embeddings", True)
    f["notes"] += "; parallel attention/MLP priced as sequential; logit_scale left out"
    return finish(f)


@hf_writer("cohere")
def write_cohere(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields with ``layer_norm_eps``."""
    return decoder_json(model, model_type=model_type)
