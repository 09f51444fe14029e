"""Llama 3.2 Vision (``mllama``; its text decoder ``mllama_text_model``): Llama-3.1's
layers with cross-attention layers interleaved, which read the image's keys and values.
Read by the generic decoder (``cross_attention_layers``, :data:`KNOWN_TYPES` for the MLP
form and the untied embeddings); this module makes the family a supported one and writes
it back.

What the family's code fixes (``transformers`` ``modeling_mllama.py``, recalled): the
text model's ``cross_attention_layers`` are MllamaCrossAttentionDecoderLayer, whose q/k/v/o
projections have the self-attention layers' shapes (K and V projected from the vision
encoder's output once per request, hence no KV cache per token), with an RMSNorm of the
queries and keys over each head and tanh gates on attention and MLP (a few weights, not
counted); ``embed_tokens`` holds ``vocab_size`` + 8 rows (the image tokens; 8 rows not
counted). Approximated: a cross-attention layer's attention is priced over the text
context, not the image's tokens; the vision encoder and its projector are not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_json
from energylens.model.hf.generic import build_generic
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

MLLAMA_TYPES = ("mllama", "mllama_text_model")


@hf_builder(*MLLAMA_TYPES)
def build_mllama(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The generic decoder's reading of the text model; what it approximates (the
    cross-attention layers) goes into the notes."""
    model, notes = build_generic(cfg, name=name, model_type="mllama_text_model")
    kept = [note for note in notes if "has no builder" not in note]
    return dataclasses.replace(model, notes="; ".join(
        [f"loaded from a local HF config.json ({name})", *kept,
         "vision encoder not modelled"]))


def cross_attention_layer_indices(num_layers: int, count: int) -> list[int]:
    """``count`` layer indices spread over ``num_layers`` as Llama 3.2 Vision places them
    (11B: 8 of 40, every fifth from layer 3)."""
    if count == 0:
        return []
    step = num_layers // count
    return [i * step + max(step - 2, 0) for i in range(count)]


@hf_writer(*MLLAMA_TYPES)
def write_mllama(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields as a ``text_config`` with its ``cross_attention_layers``."""
    if model.moe is not None or model.mla is not None or model.hybrid is not None:
        raise ModelConfigError(f"{model.name}: a {model_type} config.json has dense "
                               f"Llama layers")
    text = decoder_json(model, model_type="mllama_text_model")
    text["cross_attention_layers"] = cross_attention_layer_indices(
        model.num_layers, model.cross_attention_layers)
    if model_type == "mllama_text_model":
        return text
    return {"model_type": "mllama", "_name_or_path": model.hf_id,
            "text_config": {k: v for k, v in text.items() if k != "_name_or_path"},
            "vision_config": {"model_type": "mllama_vision_model"}}
