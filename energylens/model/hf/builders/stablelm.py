"""StableLM (Stability AI: StableLM-3B-4E1T, StableLM 2 1.6B and 12B): SwiGLU, LayerNorm,
rotary positions on part of each head, untied embeddings; StableLM 2 12B adds a parallel
block and a per-head norm of queries and keys.

Layers (``transformers`` ``modeling_stablelm.py`` and ``StableLmConfig``, recalled):
``gate_proj``/``up_proj``/``down_proj`` without biases, ``nn.LayerNorm`` (weight and bias),
q/k/v biases where ``use_qkv_bias`` says (default false), and
``partial_rotary_factor`` (0.25) of each head rotated. With ``use_parallel_residual``
(default false) the layer has no ``post_attention_layernorm``: attention and MLP read the
one ``input_layernorm`` output and add to one residual (``parallel_block``). With
``qk_layernorm`` each head's queries and keys pass a LayerNorm of their own over
head_dim (StableLmLayerNormPerHead): read by the loader as ``qk_norm: head``
(:data:`energylens.model.hf.common.QK_LAYERNORM_TYPES`), a LayerNorm priced as the
RMSNorm over each head. Approximation: the rope op counts the whole head though
``partial_rotary_factor`` rotates part of it.
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("stablelm")
def build_stablelm(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """stablelm: the Llama size names; ``use_qkv_bias``, ``use_parallel_residual``."""
    del model_type
    f = decoder_fields(cfg, name)
    parallel = cfg.flag("use_parallel_residual", False)
    f.update(norm_type="layernorm", qkv_bias=cfg.flag("use_qkv_bias", False),
             parallel_block=parallel)
    f["notes"] += ("; the rope op counts the whole head though partial_rotary_factor rotates "
                   "part of it" + ("; parallel block" if parallel else ""))
    return finish(f)


@hf_writer("stablelm")
def write_stablelm(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama size names with StableLM's flags (the query/key norm's ``qk_layernorm`` is
    written by :func:`energylens.model.hf.common.qk_norm_json`)."""
    fields = decoder_json(model, model_type=model_type)
    fields["use_qkv_bias"] = fields.pop("attention_bias")
    fields.update(use_parallel_residual=model.parallel_block, partial_rotary_factor=0.25)
    return fields
