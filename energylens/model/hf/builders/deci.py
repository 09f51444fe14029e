"""DeciLM: a Llama layout whose layers have different KV head counts (variable GQA,
``num_key_value_heads_per_layer``)."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("deci")
def build_deci(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """Per-layer KV heads; ``num_kv_heads`` is their largest value."""
    fields = decoder_fields(cfg, name)
    per_layer = cfg.list_of("num_key_value_heads_per_layer", int)
    if per_layer is not None:
        if len(per_layer) != fields["num_layers"] or min(per_layer) < 1:
            raise cfg.error(f"{cfg.field('num_key_value_heads_per_layer')} must list "
                            f"{fields['num_layers']} positive KV head counts")
        fields["kv_heads_per_layer"] = tuple(per_layer)
        fields["num_kv_heads"] = max(per_layer)
    return finish(fields)


@hf_writer("deci")
def write_deci(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields plus the per-layer KV heads."""
    fields = decoder_json(model, model_type=model_type)
    fields["num_key_value_heads_per_layer"] = list(model.layer_kv_heads())
    return fields
