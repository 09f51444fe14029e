"""Snowflake Arctic (remote-code ``arctic``: snowflake-arctic-base and -instruct): a dense
transformer with a residual MoE, its experts beside a dense MLP in each MoE layer.

What the family's code fixes (the checkpoints' ``modeling_arctic.py`` and vLLM's
``arctic.py``, recalled, not read here): Llama's attention (GQA, no biases) and RMSNorms;
a layer is MoE where ``(layer + 1) % moe_layer_frequency == 0``, its
``num_local_experts`` SwiGLU experts ``intermediate_size`` wide, ``num_experts_per_tok``
per token; the other layers have a dense SwiGLU of ``intermediate_size``. With
``use_residual`` each MoE layer also has a residual SwiGLU MLP of ``hidden_size`` width
(``ArcticMLP(is_residual_mlp=True)``) with its own RMSNorm; with ``parallel_attn_mlp_res``
the experts read the layer's input (beside attention) and the residual MLP the attention's
output, their sums added to the residual.

Approximated: the residual MLP is priced as one shared expert of ``hidden_size`` width
reading the experts' input (the same GEMMs and bytes; its own norm, ``hidden_size``
weights a layer, left out, and the experts' overlap with attention not modelled).
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


def _moe_layers(n: int, frequency: int) -> int:
    """Layers ``i`` of ``n`` with ``(i + 1) % frequency == 0``."""
    return n // frequency


@hf_builder("arctic")
def build_arctic(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """arctic: Llama's fields and Mixtral's expert fields, the MoE layers every
    ``moe_layer_frequency``-th, the residual MLP as a shared expert."""
    del model_type
    f = decoder_fields(cfg, name)
    n, hidden, width = f["num_layers"], f["hidden_size"], f["ffn_size"]
    frequency = cfg.integer("moe_layer_frequency")
    moe_layers = _moe_layers(n, frequency)
    residual = cfg.flag("use_residual", False)
    if moe_layers:
        f["moe"] = MoEConfig(
            num_experts=cfg.integer("num_local_experts"),
            top_k=cfg.integer("num_experts_per_tok"), expert_ffn=width,
            num_shared_experts=1 if residual else 0, shared_expert_ffn=hidden if residual else 0,
            num_moe_layers=moe_layers, dense_layer_ffn=width if moe_layers < n else 0)
    if residual and moe_layers:
        f["notes"] += (f"; the residual MLP (use_residual) of width {hidden} beside the "
                       f"experts priced as a shared expert (its own norm left out)")
    return finish(f)


@hf_writer("arctic")
def write_arctic(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama's fields, the experts, the MoE frequency and ``use_residual``."""
    moe, n = model.moe, model.num_layers
    frequency = next((k for k in range(1, n + 1)
                      if moe is not None and _moe_layers(n, k) == moe.num_moe_layers), None)
    if (moe is None or frequency is None or moe.expert_ffn != model.ffn_size
            or moe.dense_layer_ffn not in (0, model.ffn_size)
            or (moe.num_shared_experts, moe.shared_expert_ffn) not in ((0, 0),
                                                                      (1, model.hidden_size))
            or model.mla is not None or model.hybrid is not None or model.qkv_bias
            or model.sliding_window is not None):
        raise ModelConfigError(f"{model.name}: an {model_type} config.json describes "
                               f"intermediate_size-wide experts every k-th layer, dense MLPs "
                               f"of the same width between them and at most a residual MLP "
                               f"of the hidden width")
    fields = decoder_json(model, model_type=model_type)
    del fields["attention_bias"]
    fields.update(num_local_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                  moe_layer_frequency=frequency, use_residual=bool(moe.num_shared_experts),
                  parallel_attn_mlp_res=bool(moe.num_shared_experts))
    return fields
