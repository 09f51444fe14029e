"""Baidu ERNIE 4.5 MoE text models (``ernie4_5_moe``: ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B,
their -PT and -Base-PT releases): the Llama layout with routed and shared experts after the
first dense layers.

What the family's code fixes (transformers ``modeling_ernie4_5_moe.py`` and
``Ernie4_5_MoeConfig``, recalled, not read here): GQA attention with q/k/v/o biases where
``use_bias`` (default false); RMSNorm; SwiGLU MLPs. Layer ``i`` is MoE where
``moe_layer_start_index <= i <= moe_layer_end_index`` (-1: the last layer) and
``(i + 1) % moe_layer_interval == 0``, else a dense MLP of ``intermediate_size``; a MoE
layer has ``moe_num_experts`` experts of ``moe_intermediate_size``, ``moe_k`` per token,
and, where ``moe_num_shared_experts`` > 0, one shared MLP of ``moe_num_shared_experts`` x
``moe_intermediate_size`` (the shared experts fused into one MLP, so read as one shared
expert of that width). Defaults where a field is absent are the config class's, recalled:
start index 1, end index -1, interval 1, 2 shared experts, embeddings tied.

Approximated: the router's score-correction bias (``moe_use_aux_free``) is priced as plain
top-k routing; multi-token-prediction layers, where a checkpoint has them, are not modelled.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


def _moe_flags(cfg: HFConfig, n: int) -> list[bool]:
    """Which of the ``n`` layers are MoE (start and end index inclusive, every interval)."""
    start = cfg.integer("moe_layer_start_index", default=1, minimum=0)
    end = cfg.raw("moe_layer_end_index")
    last = n - 1 if end in (None, -1) else cfg.integer("moe_layer_end_index", minimum=0)
    interval = cfg.integer("moe_layer_interval", default=1)
    return [start <= i <= last and (i + 1) % interval == 0 for i in range(n)]


@hf_builder("ernie4_5_moe")
def build_ernie4_5_moe(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """ernie4_5_moe: Llama's fields, ``use_bias``, the ``moe_*`` expert fields."""
    del model_type
    f = decoder_fields(cfg, name)
    f["tie_word_embeddings"] = cfg.flag("tie_word_embeddings", True)
    f["qkv_bias"] = cfg.flag("use_bias", False)
    n, dense = f["num_layers"], f["ffn_size"]
    flags = _moe_flags(cfg, n)
    moe_layers = sum(flags)
    if moe_layers:
        expert = cfg.integer("moe_intermediate_size")
        shared = cfg.integer("moe_num_shared_experts", default=2, minimum=0)
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("moe_num_experts"), top_k=cfg.integer("moe_k"),
            expert_ffn=expert, num_shared_experts=1 if shared else 0,
            shared_expert_ffn=shared * expert, num_moe_layers=moe_layers,
            dense_layer_ffn=dense if moe_layers < n else 0)
        if moe_layers == n:
            f["ffn_size"] = expert
        f["notes"] += (f"; layers {flags.index(True)}-{n - 1 - flags[::-1].index(True)} MoE"
                       + (f", their {shared} shared experts one MLP of {shared * expert}"
                          if shared else ""))
    if f["qkv_bias"]:
        f["notes"] += "; the output projection's bias (use_bias) not counted"
    return finish(f)


@hf_writer("ernie4_5_moe")
def write_ernie4_5_moe(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama's fields, ``use_bias`` and the experts; the dense layers first."""
    moe = model.moe
    if (moe is None or moe.num_shared_experts > 1
            or (moe.num_shared_experts and moe.shared_expert_ffn % moe.expert_ffn)
            or model.mla is not None or model.hybrid is not None
            or model.sliding_window is not None):
        raise ModelConfigError(f"{model.name}: an {model_type} config.json describes "
                               f"dense layers then MoE layers, the shared experts one MLP of "
                               f"a multiple of the expert width")
    fields = decoder_json(model, model_type=model_type)
    fields["use_bias"] = fields.pop("attention_bias")
    fields.update(
        intermediate_size=moe.dense_layer_ffn or moe.expert_ffn,
        moe_num_experts=moe.num_experts, moe_k=moe.top_k,
        moe_intermediate_size=moe.expert_ffn,
        moe_num_shared_experts=moe.shared_expert_ffn // moe.expert_ffn
        if moe.num_shared_experts else 0,
        moe_layer_start_index=model.num_layers - moe.num_moe_layers,
        moe_layer_end_index=-1, moe_layer_interval=1)
    return fields
