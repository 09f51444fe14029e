"""StarCoder2 (BigCode, 3B/7B/15B): GQA with biases, a plain GELU MLP (``c_fc`` /
``c_proj``), LayerNorm, rotary positions, a sliding window on every layer.

Layers (``transformers`` ``modeling_starcoder2.py`` and ``Starcoder2Config``, recalled):
q/k/v/o projections and the MLP's ``c_fc`` / ``c_proj`` all with a bias where
``use_bias`` says (default true), ``nn.LayerNorm`` (weight and bias) before attention and
MLP, the ``sliding_window`` of the config (4096 in the released checkpoints) in every
layer's attention, embeddings tied unless ``tie_word_embeddings`` says otherwise (the
config class's default is true). Approximations: the biases of o, ``c_fc`` and
``c_proj`` are not counted (only the q/k/v ones are, as for every family).
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("starcoder2")
def build_starcoder2(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """starcoder2: the Llama size names with ``use_bias`` for the biases; the window (when
    not null) applies to all layers."""
    del model_type
    f = decoder_fields(cfg, name)
    f.update(gated_mlp=False, norm_type="layernorm", qkv_bias=cfg.flag("use_bias", True),
             tie_word_embeddings=cfg.flag("tie_word_embeddings", True))
    if cfg.has("sliding_window"):
        f["sliding_window"], f["num_sliding_layers"] = cfg.integer("sliding_window"), \
            f["num_layers"]
    f["notes"] += "; biases of o, c_fc and c_proj not counted"
    return finish(f)


@hf_writer("starcoder2")
def write_starcoder2(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama size names, ``use_bias``, ``norm_epsilon``, the window."""
    fields = decoder_json(model, model_type=model_type)
    fields["use_bias"] = fields.pop("attention_bias")
    fields.pop("layer_norm_eps", None)
    fields.pop("rms_norm_eps", None)
    fields.update(norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh",
                  sliding_window=model.sliding_window)
    return fields
