"""How an MoE layer's collectives are laid out and priced: the expert shards' partial sums
reduced once after the combine, and each collective on the links its GPUs span."""

from __future__ import annotations

from energylens.cost.step import _compiled
from energylens.cost.work import tensor_bytes
from energylens.deployment import Deployment
from energylens.predict import checked_context

HIDDEN = 7168  # DeepSeek-V3


def _layout(deployment: Deployment):  # type: ignore[no-untyped-def]
    _, ctx = checked_context(model="deepseek-v3", gpu="H200", deployment=deployment)
    group = next(g for g in ctx.graph.groups if g.is_moe)
    compiled = _compiled(group, ctx.degrees, ctx.fusion, ctx.activation_dtype)
    return ctx, ctx.runtime.collective_layout(compiled.collectives, layer=group.layer,
                                              degrees=dict(ctx.degrees))


def test_attention_dp_expert_shards_reduce_one_ranks_output() -> None:
    ctx, collectives = _layout(Deployment(ep=8, moe_tp=2, num_gpus=16, attention_dp=16,
                                          runtime="sglang"))
    reduces = [c for c in collectives if c.kind == "all_reduce"]
    assert [(c.dim, c.tensor.name, c.after_op) for c in reduces] == [("etp", "D", "combine")]
    assert collectives[-1] is reduces[0]  # after the combine's all-to-all
    # a decode batch of 1,024 over 16 attention ranks: one rank's 64 tokens x d in bf16
    # (top-k x the tokens' expert rows before: 15.3 MB)
    message = tensor_bytes(tensor=reduces[0].tensor,
                           sizes={**reduces[0].sizes, "b": 64.0, "m": 1.0},
                           weight_dtype=ctx.weight_dtype, window=None)
    assert message == 64 * HIDDEN * 2
