"""Families added with recalled configs (gpt_bigcode, mpt, grok-1, internlm3, apriel,
mllama: the text_config tests/test_hf_review_models.py transcribes): a
config.json as recalled for each zoo entry's checkpoint (transcriptions, not verbatim
files; the entries' ``source`` lines say so) reads back to the zoo entry's shapes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from energylens.errors import ModelConfigError
from energylens.model import ModelConfig, get_model, load_hf_config

#: The recalled config.json of each entry's checkpoint (see its models.yaml sources).
RECALLED: dict[str, dict[str, Any]] = {
    "starcoder": {"model_type": "gpt_bigcode", "n_embd": 6144, "n_head": 48, "n_layer": 40,
                  "n_inner": 24576, "vocab_size": 49152, "n_positions": 8192,
                  "multi_query": True, "activation_function": "gelu_pytorch_tanh",
                  "layer_norm_epsilon": 1e-5},
    "mpt-7b": {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
               "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50432,
               "no_bias": True, "norm_type": "low_precision_layernorm",
               "learned_pos_emb": True,
               "attn_config": {"alibi": True, "alibi_bias_max": 8,
                               "attn_type": "multihead_attention", "qk_ln": False}},
    "mpt-30b": {"model_type": "mpt", "d_model": 7168, "n_heads": 64, "n_layers": 48,
                "expansion_ratio": 4, "max_seq_len": 8192, "vocab_size": 50432,
                "no_bias": True, "attn_config": {"alibi": True,
                                                 "attn_type": "multihead_attention"}},
    "grok-1": {"model_type": "grok-1", "hidden_size": 6144, "intermediate_size": 32768,
               "num_hidden_layers": 64, "num_attention_heads": 48, "num_key_value_heads": 8,
               "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 131072,
               "max_attn_value": 30.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
    "internlm3-8b": {"model_type": "internlm3", "hidden_size": 4096,
                     "intermediate_size": 10240, "num_hidden_layers": 48,
                     "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                     "qkv_bias": False, "bias": False, "vocab_size": 128512,
                     "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    "llama-3.2-11b-vision": {"model_type": "mllama", "text_config": {
        "model_type": "mllama_text_model", "hidden_size": 4096, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
        "vision_config": {"hidden_size": 1280}},
    "apriel-5b": {"model_type": "apriel", "hidden_size": 4096, "head_dim": 128,
                  "intermediate_size": 8192, "num_hidden_layers": 28,
                  "num_attention_heads": 24, "num_key_value_heads": 8,
                  "vocab_size": 131072, "rms_norm_eps": 1e-5,
                  "tie_word_embeddings": False},
}


def _load(tmp_path: Path, config: dict[str, Any]) -> ModelConfig:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_hf_config(path)


def _shapes(model: ModelConfig) -> dict[str, Any]:
    skip = {"name", "hf_id", "notes", "params_total_published", "params_active_published",
            "max_context_tokens"}
    return {k: v for k, v in dataclasses.asdict(model).items() if k not in skip}


@pytest.mark.parametrize("name", sorted(RECALLED))
def test_recalled_config_reads_as_the_zoo_entry(tmp_path: Path, name: str) -> None:
    assert _shapes(_load(tmp_path, RECALLED[name])) == _shapes(get_model(name))


def test_mpt_attention_types(tmp_path: Path) -> None:
    """MPT's attn_config sets the KV heads (multi-query: one; grouped: kv_n_heads) and
    ALiBi or learned positions."""
    base = RECALLED["mpt-7b"]
    mqa = _load(tmp_path, {**base, "attn_config": {"attn_type": "multiquery_attention"}})
    assert (mqa.num_kv_heads, mqa.position_encoding) == (1, "alibi")
    gqa = _load(tmp_path, {**base, "attn_config": {"attn_type": "grouped_query_attention",
                                                   "kv_n_heads": 8, "alibi": False}})
    assert (gqa.num_kv_heads, gqa.attention, gqa.position_encoding) == (8, "GQA", "learned")
    biased = _load(tmp_path, {**base, "no_bias": False})
    assert biased.qkv_bias
    with pytest.raises(ModelConfigError, match="attn_type"):
        _load(tmp_path, {**base, "attn_config": {"attn_type": "cross_attention"}})
