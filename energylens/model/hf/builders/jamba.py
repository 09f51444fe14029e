"""AI21 Jamba (Jamba-v0.1, Jamba-1.5-Mini/Large): per layer a Mamba-1 or attention mixer,
then a dense gated MLP or a MoE block, both picked by a period and an offset.

Layer ``i`` attends when ``i % attn_layer_period == attn_layer_offset`` and is a Mamba-1
mixer otherwise; its FFN is MoE when ``i % expert_layer_period == expert_layer_offset``
(and ``num_experts`` > 1), else a gated MLP; experts and MLPs are both
``intermediate_size`` wide (transformers ``configuration_jamba.py``: ``layers_block_type``,
``layers_num_experts``; ``modeling_jamba.py``: ``JambaMLP`` for one expert). Attention has no
positional encoding (``JambaAttention`` applies no rotary embedding). Missing fields take
``JambaConfig``'s defaults (transformers 5.24.0): periods 8 and 2, offsets 4 and 1, 16
experts of which 2 per token, d_state 16, d_conv 4, expand 2, dt_rank ``"auto"`` =
ceil(hidden / 16), a convolution bias and no projection biases.
"""

from __future__ import annotations

import math
from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import HybridConfig, ModelConfig, MoEConfig
from energylens.model.hf.common import (
    STATE_DTYPE_NAMES,
    decoder_fields,
    decoder_json,
    finish,
    ssm_state_dtype,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


def _dt_rank(cfg: HFConfig, *, hidden: int) -> int:
    """``mamba_dt_rank``: an integer, or ``"auto"`` (the default) = ceil(hidden / 16)."""
    if cfg.raw("mamba_dt_rank") in (None, "auto"):
        return math.ceil(hidden / 16)
    return cfg.integer("mamba_dt_rank")


def _checked_period(cfg: HFConfig, *, what: str, period: int, offset: int) -> tuple[int, int]:
    """(period, offset) of ``<what>_layer_period`` / ``_offset``, the offset below the period."""
    if offset >= period:
        raise cfg.error(f"{cfg.field(f'{what}_layer_offset')} = {offset} must be below "
                        f"{cfg.field(f'{what}_layer_period')} = {period}")
    return period, offset


@hf_builder("jamba")
def build_jamba(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """jamba: each layer a Mamba-1 ('M') or attention ('*') block, then a MoE ('E') or
    gated-MLP ('-') block; RMSNorm, no RoPE."""
    f = decoder_fields(cfg, name)
    hidden, n = f["hidden_size"], f["num_layers"]
    attn = _checked_period(cfg, what="attn",
                           period=cfg.integer("attn_layer_period", default=8),
                           offset=cfg.integer("attn_layer_offset", default=4, minimum=0))
    expert = _checked_period(cfg, what="expert",
                             period=cfg.integer("expert_layer_period", default=2),
                             offset=cfg.integer("expert_layer_offset", default=1, minimum=0))
    experts = cfg.integer("num_experts", "num_local_experts", default=16)
    pattern = "".join(
        ("*" if i % attn[0] == attn[1] else "M")
        + ("E" if experts > 1 and i % expert[0] == expert[1] else "-") for i in range(n))
    f["position_encoding"] = "none"  # JambaAttention: no rotary embedding
    f["num_layers"] = 2 * n  # a mixer block and an FFN block per layer
    f["hybrid"] = HybridConfig(
        layer_pattern=pattern,
        ssm_heads=cfg.integer("mamba_expand", default=2) * hidden,  # channels, each a head
        ssm_head_dim=1,
        ssm_state_size=cfg.integer("mamba_d_state", default=16),
        ssm_groups=1,  # B and C shared by every channel
        conv_kernel=cfg.integer("mamba_d_conv", default=4),
        ssm_state_dtype=ssm_state_dtype(cfg),
        mixer="mamba1",
        dt_rank=_dt_rank(cfg, hidden=hidden),
    )
    if "E" in pattern:
        f["moe"] = MoEConfig(
            num_experts=experts, top_k=cfg.integer("num_experts_per_tok", default=2),
            expert_ffn=f["ffn_size"], num_shared_experts=0, shared_expert_ffn=0,
            num_moe_layers=pattern.count("E"),
            dense_layer_ffn=f["ffn_size"] if "-" in pattern else 0)
    mixers = pattern.count("M")
    f["notes"] += (f"; {mixers} Mamba-1 mixers (family mamba1) and {n - mixers} attention "
                   f"layers of {n}, each followed by its FFN block")
    if cfg.flag("mamba_proj_bias", False):
        f["notes"] += "; in_proj/out_proj biases (mamba_proj_bias) not counted nor priced"
    if not cfg.flag("mamba_conv_bias", True):
        f["notes"] += "; counted with a convolution bias the config says it lacks"
    return finish(f)


def _period_of(layers: list[bool], *, what: str, name: str) -> tuple[int, int]:
    """The smallest (period, offset) whose layers ``i % period == offset`` are those
    marked in ``layers``; ModelConfigError where no period gives them."""
    n = len(layers)
    marked = [i for i, on in enumerate(layers) if on]
    if not marked:
        return n + 1, n  # no layer index reaches the offset
    offset = marked[0]
    period = marked[1] - offset if len(marked) > 1 else max(offset + 1, n - offset)
    if offset < period and marked == list(range(offset, n, period)):
        return period, offset
    raise ModelConfigError(f"{name}: its {what} layers {marked} are not every n-th layer "
                           f"from an offset below n: not a jamba config")


@hf_writer("jamba")
def write_jamba(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the layer periods and offsets, the experts and the Mamba-1 sizes."""
    hybrid, moe = model.hybrid, model.moe
    if hybrid is None or hybrid.mixer != "mamba1" or len(hybrid.layer_pattern) % 2 \
            or hybrid.ssm_heads % model.hidden_size:
        raise ModelConfigError(f"{model.name}: {model_type} needs a hybrid of Mamba-1 mixers "
                               f"(expand x hidden channels), each layer a mixer then an FFN")
    if moe is not None and (moe.expert_ffn != model.ffn_size or moe.num_shared_experts):
        raise ModelConfigError(f"{model.name}: {model_type} experts are intermediate_size wide "
                               f"and none shared")
    mixers, ffns = hybrid.layer_pattern[::2], hybrid.layer_pattern[1::2]
    if set(mixers) - set("M*") or set(ffns) - set("-E"):
        raise ModelConfigError(f"{model.name}: {model_type} layers are a mixer (M, *) then "
                               f"an FFN (-, E): got {hybrid.layer_pattern!r}")
    attn = _period_of([m == "*" for m in mixers], what="attention", name=model.name)
    expert = _period_of([f == "E" for f in ffns], what="MoE", name=model.name)
    fields = decoder_json(model, model_type=model_type)
    fields.update(
        num_hidden_layers=len(mixers), attn_layer_period=attn[0], attn_layer_offset=attn[1],
        expert_layer_period=expert[0], expert_layer_offset=expert[1],
        num_experts=moe.num_experts if moe is not None else 1,
        num_experts_per_tok=moe.top_k if moe is not None else 1,
        mamba_d_state=hybrid.ssm_state_size, mamba_d_conv=hybrid.conv_kernel,
        mamba_expand=hybrid.ssm_heads // model.hidden_size, mamba_dt_rank=hybrid.dt_rank,
        mamba_conv_bias=True, mamba_proj_bias=False)
    if hybrid.ssm_state_dtype != "bf16":
        fields["mamba_ssm_cache_dtype"] = STATE_DTYPE_NAMES[hybrid.ssm_state_dtype]
    return fields
