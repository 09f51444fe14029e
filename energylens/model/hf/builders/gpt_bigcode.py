"""GPT-BigCode (StarCoder, SantaCoder, WizardCoder-15B): multi-query attention (one K/V
head shared by every query head) with biases, a plain GELU MLP (``c_fc`` / ``c_proj``),
LayerNorm, learned absolute positions, tied embeddings. Read by the generic decoder, whose
:data:`~energylens.model.hf.known_types.KNOWN_TYPES` entry holds what the family's code
fixes; this module makes the family a supported one and writes it back.

Layers (``transformers`` ``modeling_gpt_bigcode.py`` and ``GPTBigCodeConfig``, recalled):
``c_attn`` projects to the queries and one key and one value head where ``multi_query``
(default true; otherwise all heads), with a bias; ``c_proj``, ``c_fc`` and the MLP's
``c_proj`` with biases; ``n_inner`` null means 4 x ``n_embd``; a ``wpe`` table of
``n_positions`` rows beside ``wte``, and ``lm_head`` tied to ``wte``. Approximated: the
position table and the biases of the output projection and the MLP are not counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.generic import build_generic
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("gpt_bigcode")
def build_gpt_bigcode(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """The generic decoder's reading (``n_embd``, ``n_layer``, ``n_head``, ``n_inner``,
    ``multi_query``); what it approximates goes into the notes."""
    model, notes = build_generic(cfg, name=name, model_type=model_type)
    kept = [note for note in notes if "has no builder" not in note]
    return dataclasses.replace(model, notes="; ".join(
        [f"loaded from a local HF config.json ({name})", *kept,
         "learned position table and the biases of c_proj and the MLP not counted"]))


@hf_writer("gpt_bigcode")
def write_gpt_bigcode(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """GPT-2's field names and ``multi_query`` (one KV head, or one per query head)."""
    if model.num_kv_heads not in (1, model.num_heads) or model.gated_mlp \
            or model.norm_type != "layernorm" or model.moe is not None:
        raise ModelConfigError(f"{model.name}: a {model_type} config.json has one KV head or "
                               f"one per query head, a plain MLP and LayerNorm")
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "n_embd": model.hidden_size, "n_layer": model.num_layers,
            "n_head": model.num_heads, "n_inner": model.ffn_size,
            "multi_query": model.num_kv_heads == 1 and model.num_heads > 1,
            "vocab_size": model.vocab_size, "n_positions": model.max_context_tokens or 8192,
            "tie_word_embeddings": model.tie_word_embeddings,
            "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-5}
