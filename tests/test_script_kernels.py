"""The engine-free steps are priced with the kernels the measuring script runs beyond an
engine's layer: eager RMSNorm passes, SiLU and multiply apart, FP8 pads."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.roofline import kernel_cost
from energylens.cost.step import SequenceGroup, step_cost
from energylens.hardware import load_gpu
from energylens.validation.script_kernels import script_kernels, script_overhead
from energylens.validation.steps import price_step, steps_context


def test_an_eager_rmsnorm_moves_22_bytes_per_element_beyond_the_fused_one() -> None:
    """Hand count per token of hidden size d, beyond the fused norm's read and write:
    cast to fp32 (2 + 4 B), square (4 + 4), mean (reads 4, writes one fp32 per token),
    add eps and rsqrt (one fp32 in and out per token each), cast back (4 in, 2 out) and
    x * rsqrt (2 + 2 per element, 2 per token): 22 B per element and 28 B per token."""
    ctx = steps_context(gpu=load_gpu("H100-SXM"), dtype="bf16",
                        calibration=default_calibration())
    hidden = ctx.graph.model.hidden_size
    norm = script_kernels(hidden=hidden, ffn=ctx.graph.model.ffn_size, fp8=False)[:7]
    tokens = 1000.0
    nbytes = sum(float(kernel_cost(kernel=k, phase={"b": 1.0, "m": tokens}, window=None,
                                   gpu=ctx.gpu, constants=ctx.constants, clock=ctx.clock,
                                   weight_dtype="bf16").bytes) for k in norm)
    assert nbytes == pytest.approx(tokens * (22.0 * hidden + 28.0))


def test_the_script_runs_15_more_kernels_per_layer_and_4_more_in_fp8() -> None:
    """Two norms of 7 extra passes and the SiLU apart; FP8 pads the four GEMM inputs."""
    assert len(script_kernels(hidden=4096, ffn=14336, fp8=False)) == 15
    assert len(script_kernels(hidden=4096, ffn=14336, fp8=True)) == 19


def test_a_step_price_is_the_model_step_plus_the_script_kernels() -> None:
    """A batch-1 decode step: the price adds the extra kernels' time to step_cost's, at
    least their launch floors (32 layers x 15 kernels)."""
    ctx = steps_context(gpu=load_gpu("H100-SXM"), dtype="bf16",
                        calibration=default_calibration())
    price = price_step(ctx=ctx, phase="decode", batch=1, tokens=1, context=1024)
    model = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=1.0,
                                                   context=1024.0)])
    extra_s, _, _ = script_overhead(ctx=ctx, tokens=1.0)
    assert price.latency_s == pytest.approx(float(model.latency_s) + extra_s, rel=1e-12)
    floor = min(ctx.constants.elementwise_overhead_s, ctx.constants.activation_overhead_s)
    assert extra_s >= 32 * 15 * floor
