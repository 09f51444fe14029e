"""The Llama layout under other ``model_type`` names: Aquila, InternLM (1), InternLM2 /
InternLM2.5, InternLM3, IBM Granite (3.x dense), ByteDance Seed-OSS and ServiceNow's
Apriel (5B). SwiGLU, RMSNorm, RoPE, full
attention, the Llama size fields; what differs is where the attention biases are declared
and what they default to, and Granite's scalar multipliers.

InternLM2 (its checkpoints' remote ``modeling_internlm2.py`` and ``InternLM2Config``,
recalled): a fused ``wqkv`` and ``wo`` with a bias where ``bias`` says (the config class's
default true; the released checkpoints say false), ``w1``/``w3``/``w2`` without biases,
``attention_norm`` and ``ffn_norm`` RMSNorms, an untied ``output``: the shapes of Llama's
separate projections. Granite (``modeling_granite.py``, recalled): Llama's layers with
``embedding_multiplier``, ``residual_multiplier``, ``attention_multiplier`` (the softmax
scale in place of 1/sqrt(head_dim)) and ``logits_scaling``, scalar multiplications that
change no shape and are not costed. Seed-OSS (``modeling_seed_oss.py``, recalled): Llama's
layers with q/k/v biases under ``attention_bias`` (``SeedOssConfig``'s default true) and
the output projection's under ``attention_out_bias`` (not counted, as o biases are not for
any family). InternLM3 (its checkpoints' remote ``modeling_internlm3.py`` and
``InternLM3Config``, recalled): Llama's separate projections and field names (with
``head_dim``), the q/k/v biases under ``qkv_bias`` and those of o and the MLP under
``bias`` (both false in the released checkpoint; the latter not counted). Apriel
(``modeling_apriel.py``, remote code, recalled): Llama's layers and field names, with a
``head_dim`` of its own (its query width below the hidden size) and ``attention_bias``.
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: Each type's field for its q/k/v biases and that field's default (its config class's);
#: the others read Llama's ``attention_bias`` (default false).
_BIAS = {"internlm": ("bias", True), "internlm2": ("bias", True),
         "internlm3": ("qkv_bias", False), "seed_oss": ("attention_bias", True)}
#: What each type's note adds.
_NOTES = {"granite": "embedding, residual, attention and logits multipliers not costed (no "
                     "shape changes)",
          "seed_oss": "the output projection's bias (attention_out_bias) not counted"}
_TYPES = ("aquila", "internlm", "internlm2", "internlm3", "granite", "seed_oss", "apriel")


@hf_builder(*_TYPES)
def build_llama_like(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """SwiGLU, RMSNorm, RoPE; the q/k/v biases (the ``qkv_bias`` the zoo counts) from the
    type's own field (InternLM's and InternLM2's ``bias`` also puts one on o)."""
    fields = decoder_fields(cfg, name)
    if model_type in _BIAS:
        key, default = _BIAS[model_type]
        fields["qkv_bias"] = cfg.flag(key, default)
    if model_type in _NOTES:
        fields["notes"] += f"; {_NOTES[model_type]}"
    return finish(fields)


@hf_writer(*_TYPES)
def write_llama_like(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields (InternLM and InternLM2: ``bias`` for the attention biases;
    InternLM3: ``qkv_bias``, and ``bias`` false; Seed-OSS: no bias on the output
    projection)."""
    fields = decoder_json(model, model_type=model_type)
    key = _BIAS.get(model_type, ("attention_bias", False))[0]
    fields[key] = fields.pop("attention_bias")
    if model_type == "seed_oss":
        fields["attention_out_bias"] = False
    if model_type == "internlm3":
        fields["bias"] = False
    return fields
