"""BLOOM: MHA with biases, LayerNorm, a plain 4h GELU FFN, ALiBi, tied embeddings."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("bloom")
def build_bloom(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """bloom: its own field names (``n_layer``, ``n_head``, ``n_embed``, ``n_inner``)."""
    hidden = cfg.integer("hidden_size", "n_embed")
    heads = cfg.integer("n_head", "num_attention_heads")
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=heads,
        num_layers=cfg.num_layers("n_layer", "num_hidden_layers"),
        ffn_size=cfg.integer("n_inner", default=4 * hidden),
        tie=cfg.flag("tie_word_embeddings", True), qkv_bias=True, hidden_key="hidden_size",
        heads_key="n_head", notes="ALiBi")
    fields["position_encoding"] = "alibi"
    return finish(fields)


@hf_writer("bloom")
def write_bloom(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """BLOOM's own field names."""
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "n_layer": model.num_layers,
            "n_head": model.num_heads, "n_inner": model.ffn_size,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "layer_norm_epsilon": 1e-5}
