"""BLOOM: MHA with biases, LayerNorm, a plain 4h GELU FFN, ALiBi, tied embeddings."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, head_dim_from
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("bloom")
def build_bloom(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """bloom: its own field names (``n_layer``, ``n_head``, ``n_embed``, ``n_inner``)."""
    hidden = cfg.integer("hidden_size", "n_embed")
    heads = cfg.integer("n_head", "num_attention_heads")
    fields = {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": cfg.num_layers("n_layer", "num_hidden_layers"),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key="hidden_size",
                                  heads_key="n_head"),
        "ffn_size": cfg.integer("n_inner", default=4 * hidden),
        "gated_mlp": False,
        "vocab_size": cfg.integer("vocab_size"),
        "tie_word_embeddings": cfg.flag("tie_word_embeddings", True),
        "qkv_bias": True,
        "norm_type": "layernorm",
        "attention": "MHA",
        "sliding_window": None,
        "num_sliding_layers": 0,
        "moe": None,
        "mla": None,
        "params_total_published": None,
        "params_active_published": None,
        "notes": f"loaded from a local HF config.json ({name}); ALiBi",
        "position_encoding": "alibi",
    }
    return finish(fields)


@hf_writer("bloom")
def write_bloom(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """BLOOM's own field names."""
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "n_layer": model.num_layers,
            "n_head": model.num_heads, "n_inner": model.ffn_size,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "layer_norm_epsilon": 1e-5}
