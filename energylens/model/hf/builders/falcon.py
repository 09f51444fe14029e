"""Falcon (7B/40B/180B): grouped KV heads in the "new decoder architecture", a plain 4h
GELU MLP, LayerNorm, tied embeddings. The new architecture's parallel attention/MLP, each
reading a LayerNorm of its own (``ln_attn``, ``ln_mlp``), is priced as two sequential
blocks (same FLOPs and bytes); the first architecture's (Falcon-7B: ``parallel_attn``,
``multi_query``) reads the one ``input_layernorm`` for both, a parallel block
(``modeling_falcon.py`` FalconDecoderLayer, recalled)."""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("falcon")
def build_falcon(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """falcon: ``num_kv_heads`` with ``new_decoder_architecture``, one KV head with
    ``multi_query``, else one per head; ``ffn_hidden_size`` (default 4 x hidden). Outside
    the new architecture ``parallel_attn`` (FalconConfig's default true) makes a one-norm
    parallel block; without it attention and MLP are sequential."""
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    new_architecture = cfg.flag("new_decoder_architecture", False)
    if new_architecture:
        kv_heads = cfg.integer("num_kv_heads", default=heads)
    else:
        kv_heads = 1 if cfg.flag("multi_query", True) else heads
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('num_attention_heads')} = {heads} is not a multiple of "
                        f"{cfg.field('num_kv_heads')} = {kv_heads}")
    parallel = not new_architecture and cfg.flag("parallel_attn", True)
    if new_architecture:
        notes = "parallel attention/MLP (two LayerNorms) priced as sequential"
    elif parallel:
        notes = "parallel attention/MLP reading one LayerNorm (a parallel block)"
    else:
        notes = "sequential attention and MLP"
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=kv_heads,
        num_layers=cfg.num_layers("num_hidden_layers"),
        ffn_size=cfg.integer("ffn_hidden_size", default=4 * hidden),
        tie=cfg.flag("tie_word_embeddings", True), qkv_bias=cfg.flag("bias", False),
        hidden_key="hidden_size", heads_key="num_attention_heads", notes=notes)
    fields["parallel_block"] = parallel
    return finish(fields)


@hf_writer("falcon")
def write_falcon(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Falcon's field names: a parallel block in the first architecture (one KV head or
    one per head), anything else in the new one."""
    if model.parallel_block:
        if model.num_kv_heads not in (1, model.num_heads):
            raise ModelConfigError(
                f"{model.name}: Falcon's one-norm parallel block has one KV head or one per "
                f"head, not {model.num_kv_heads} of {model.num_heads}")
        layout: dict[str, Any] = {"new_decoder_architecture": False,
                                  "multi_query": model.num_kv_heads == 1}
    else:
        layout = {"new_decoder_architecture": True, "num_kv_heads": model.num_kv_heads}
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_heads, **layout, "parallel_attn": True,
            "ffn_hidden_size": model.ffn_size, "bias": model.qkv_bias,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "layer_norm_epsilon": 1e-5}
