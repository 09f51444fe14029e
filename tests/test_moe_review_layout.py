"""How an MoE layer's collectives are laid out and priced: the expert shards' partial sums
reduced once after the combine, and each collective on the links its GPUs span."""

from __future__ import annotations

import pytest

import energylens.cost.step as step
from energylens.cost.comm import group_per_node, scale_out_cost
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


def _links(deployment: Deployment, monkeypatch) -> dict[tuple[str, str, str], str]:  # type: ignore[no-untyped-def]
    """(kind, dim, tensor) -> the link each MoE collective of one decode step is priced on."""


    seen: dict[tuple[str, str, str], str] = {}
    priced = step._collective_cost

    def record(**kwargs):  # type: ignore[no-untyped-def]
        c = kwargs["collective"]
        seen[(c.kind, c.dim, c.tensor.name)] = kwargs["kind"]
        return priced(**kwargs)

    monkeypatch.setattr(step, "_collective_cost", record)
    _, ctx = checked_context(model="deepseek-v3", gpu="H200", deployment=deployment)
    step.step_cost(ctx=ctx, seqs=[step.SequenceGroup(sequences=1024.0, new_tokens=1.0,
                                                     context=1024.0)])
    return seen


@pytest.mark.parametrize(("ep", "moe_tp"), [(16, 1), (8, 2), (4, 4), (2, 8)])
def test_moe_layer_over_two_nodes_crosses_them(ep: int, moe_tp: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    links = _links(Deployment(ep=ep, moe_tp=moe_tp, num_gpus=16, attention_dp=16,
                              runtime="sglang"), monkeypatch)
    # the expert shards sit together on a node, the EP ranks etp apart across both nodes
    assert links[("all_to_all", "ep", "XE")] == links[("all_to_all", "ep", "ED")] == "infiniband"
    if moe_tp > 1:
        assert links[("all_reduce", "etp", "D")] == "nvswitch"


def test_moe_layer_inside_one_node_stays_on_nvlink(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    links = _links(Deployment(ep=4, moe_tp=2, num_gpus=8, attention_dp=8, runtime="sglang"),
                   monkeypatch)
    assert set(links.values()) == {"nvswitch"}


@pytest.mark.parametrize(("ep", "etp", "per_node"), [(16, 1, 8), (8, 2, 4), (4, 4, 2), (2, 8, 1),
                                                     (4, 2, 4), (8, 1, 8)])
def test_expert_parallel_group_per_node(ep: int, etp: int, per_node: int) -> None:
    degrees = {"tp": 1, "ep": ep, "etp": etp, "adp": ep * etp}
    assert group_per_node(dim="ep", degrees=degrees, gpus_per_node=8) == per_node
    assert group_per_node(dim="etp", degrees=degrees, gpus_per_node=8) == min(etp, 8)


def test_crossing_expert_group_priced_hierarchically() -> None:
    """EP8 x etp 2 over two 8-GPU nodes: the all-to-all as scale_out_cost prices 8 GPUs in
    two domains of 4 (what crosses goes through the NICs, the rest over NVLink)."""
    _, ctx = checked_context(model="deepseek-v3", gpu="H200",
                             deployment=Deployment(ep=8, moe_tp=2, num_gpus=16,
                                                   attention_dp=16, runtime="sglang"))


    _, collectives = _layout(Deployment(ep=8, moe_tp=2, num_gpus=16, attention_dp=16,
                                        runtime="sglang"))
    dispatch = next(c for c in collectives if c.kind == "all_to_all")
    inter = ctx.calibration.link(gpu=ctx.gpu.name, kind=ctx.gpu.inter_node.kind)
    got = step._on_link(ctx=ctx, collective=dispatch, nbytes=8e6, sms=None, link=inter,
                        bandwidth=ctx.gpu.inter_node.bandwidth_bytes_per_s)
    want = scale_out_cost(kind="all_to_all", message_bytes=8e6, group_size=8, gpus_per_node=4,
                          intra_bandwidth=ctx.gpu.intra_node.bandwidth_bytes_per_s,
                          intra=ctx.calibration.link(gpu=ctx.gpu.name, kind=ctx.gpu.intra_node.kind),
                          inter_bandwidth=ctx.gpu.inter_node.bandwidth_bytes_per_s,
                          inter=inter)
    assert got == want
