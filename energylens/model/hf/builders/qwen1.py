"""Qwen (the first generation, remote code ``QWenLMHeadModel``): MHA with a qkv bias and
an ``intermediate_size`` that counts both gated projections."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("qwen")
def build_qwen1(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """qwen: the FFN width per projection is ``intermediate_size / 2``; head width
    ``kv_channels``; every head has its own K and V."""
    f = decoder_fields(cfg, name, derive_head_dim=False)
    f["head_dim"] = cfg.integer("kv_channels", default=f["hidden_size"] // f["num_heads"])
    f["num_kv_heads"] = f["num_heads"]
    f["ffn_size"] = cfg.integer("intermediate_size", minimum=2) // 2
    f["qkv_bias"] = True
    return finish(f)


@hf_writer("qwen")
def write_qwen1(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Qwen-1's field names: ``kv_channels``, both gated projections in intermediate_size."""
    fields = decoder_json(model, model_type=model_type)
    for key in ("head_dim", "num_key_value_heads", "attention_bias"):
        del fields[key]
    fields["kv_channels"] = model.head_dim
    fields["intermediate_size"] = 2 * model.ffn_size
    fields["no_bias"] = True  # no bias except the qkv projection's
    return fields
