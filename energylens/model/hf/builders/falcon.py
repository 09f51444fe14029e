"""Falcon (7B/40B/180B): grouped KV heads in the "new decoder architecture", a plain 4h
GELU MLP, LayerNorm, tied embeddings; the parallel attention/MLP block is priced as two
sequential blocks (same FLOPs and bytes)."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("falcon")
def build_falcon(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """falcon: ``num_kv_heads`` with ``new_decoder_architecture``, one KV head with
    ``multi_query``, else one per head; ``ffn_hidden_size`` (default 4 x hidden)."""
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if cfg.flag("new_decoder_architecture", False):
        kv_heads = cfg.integer("num_kv_heads", default=heads)
    else:
        kv_heads = 1 if cfg.flag("multi_query", True) else heads
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('num_attention_heads')} = {heads} is not a multiple of "
                        f"{cfg.field('num_kv_heads')} = {kv_heads}")
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=kv_heads,
        num_layers=cfg.num_layers("num_hidden_layers"),
        ffn_size=cfg.integer("ffn_hidden_size", default=4 * hidden),
        tie=cfg.flag("tie_word_embeddings", True), qkv_bias=cfg.flag("bias", False),
        hidden_key="hidden_size", heads_key="num_attention_heads",
        notes="parallel attention/MLP priced as sequential")
    return finish(fields)


@hf_writer("falcon")
def write_falcon(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Falcon's field names, in the new decoder architecture."""
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_heads, "num_kv_heads": model.num_kv_heads,
            "new_decoder_architecture": True, "parallel_attn": True,
            "ffn_hidden_size": model.ffn_size, "bias": model.qkv_bias,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "layer_norm_epsilon": 1e-5}
