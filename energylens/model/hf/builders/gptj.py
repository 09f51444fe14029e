"""GPT-J: a parallel block (attention and MLP read one LayerNorm), a plain 4h GELU MLP,
rotary positions on the first ``rotary_dim`` dims of each head, untied embeddings."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("gptj")
def build_gptj(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """gptj: ``n_embd``, ``n_layer``, ``n_head``, ``n_inner`` (null: 4 x n_embd)."""
    hidden = cfg.integer("n_embd", "hidden_size")
    heads = cfg.integer("n_head", "num_attention_heads")
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=heads,
        num_layers=cfg.num_layers("n_layer", "num_hidden_layers"),
        ffn_size=cfg.integer("n_inner", default=4 * hidden),
        tie=cfg.flag("tie_word_embeddings", False), qkv_bias=False, hidden_key="n_embd",
        heads_key="n_head", notes="parallel block; the rope op counts the whole head though "
                                  "rotary_dim may cover part of it")
    fields["parallel_block"] = True
    return finish(fields)


@hf_writer("gptj")
def write_gptj(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """GPT-J's own field names."""
    return {"model_type": model_type, "_name_or_path": model.hf_id, "n_embd": model.hidden_size,
            "n_layer": model.num_layers, "n_head": model.num_heads, "n_inner": model.ffn_size,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
