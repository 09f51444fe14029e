"""OPT: pre-LayerNorm, MHA with biases, a plain ReLU MLP of ``ffn_dim``, learned absolute
positions, tied embeddings."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("opt")
def build_opt(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """opt: ``ffn_dim`` is the MLP width; ``enable_bias`` (default true) the linear biases.
    A ``word_embed_proj_dim`` other than ``hidden_size`` (OPT-350M) is refused."""
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if cfg.integer("word_embed_proj_dim", default=hidden) != hidden:
        raise cfg.error(f"{cfg.field('word_embed_proj_dim')} differs from hidden_size: the "
                        f"embedding projections are not modelled")
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=heads,
        num_layers=cfg.num_layers("num_hidden_layers"), ffn_size=cfg.integer("ffn_dim"),
        tie=cfg.flag("tie_word_embeddings", True), qkv_bias=cfg.flag("enable_bias", True),
        hidden_key="hidden_size", heads_key="num_attention_heads",
        notes="learned positions (the table is not counted); ReLU MLP costed as the plain "
              "GELU one")
    fields["position_encoding"] = "learned"
    return finish(fields)


@hf_writer("opt")
def write_opt(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """OPT's own field names."""
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "word_embed_proj_dim": model.hidden_size,
            "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_heads,
            "ffn_dim": model.ffn_size, "vocab_size": model.vocab_size,
            "tie_word_embeddings": model.tie_word_embeddings, "enable_bias": model.qkv_bias,
            "activation_function": "relu", "do_layer_norm_before": True}
