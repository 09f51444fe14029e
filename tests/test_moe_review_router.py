"""The router reads its whole weight (every expert's column) whatever experts are active;
the experts' grouped GEMMs read only the active experts' matrices."""

from __future__ import annotations

import pytest

from energylens.cost.roofline import kernel_cost
from energylens.cost.step import _compiled
from energylens.cost.work import ACTIVE_EXPERTS
from energylens.deployment import Deployment
from energylens.predict import checked_context

D, E = 7168, 256  # DeepSeek-V3: hidden size, routed experts


def _kernels() -> tuple[object, dict]:
    _, ctx = checked_context(model="deepseek-v3", gpu="H200",
                             deployment=Deployment(ep=8, num_gpus=8, runtime="sglang"))
    group = next(g for g in ctx.graph.groups if g.is_moe)
    compiled = _compiled(group, ctx.degrees, ctx.fusion, ctx.activation_dtype)
    return ctx, {k.name: k for k in compiled.kernels}


def _cost(ctx, kernel, active: float | None):  # type: ignore[no-untyped-def]
    phase = {"b": 1.0, "m": 1.0, "p": 1.0, "t": 1.0, "n": 1.0}
    if active is not None:
        phase[ACTIVE_EXPERTS] = active
    return kernel_cost(kernel=kernel, phase=phase, window=None, gpu=ctx.gpu,
                       constants=ctx.constants, clock=ctx.clock, weight_dtype=ctx.weight_dtype,
                       kv_dtype=ctx.kv_dtype, compute_slowdown=1.0)


@pytest.mark.parametrize("active", [0.3, 1.0, 2.4, 32.0])
def test_router_reads_every_expert_column(active: float) -> None:
    ctx, kernels = _kernels()
    router = kernels["router"]
    cost = _cost(ctx, router, active)
    # WR[d,x] in bf16 (routers stay 16-bit), N2[1,d] in and R[1,E] out in bf16
    assert float(cost.bytes) == D * E * 2 + D * 2 + E * 2
    # and the GEMM keeps its shape: the same time as with no active-expert count
    assert float(cost.latency_s) == float(_cost(ctx, router, None).latency_s)


def test_expert_gemm_reads_only_active_experts() -> None:
    ctx, kernels = _kernels()
    experts = kernels["egate+eup"]
    one, four = (float(_cost(ctx, experts, a).bytes) for a in (1.0, 4.0))
    # each active expert adds its gate and up matrices, d x f in FP8 (f = 2048)
    assert four - one == 3 * 2 * D * 2048 * 1.0
