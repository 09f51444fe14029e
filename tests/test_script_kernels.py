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


def _run_folder(path, rows: list[tuple[str, int, int, int, float]]) -> None:
    import json

    path.mkdir(parents=True)
    (path / "device.json").write_text(json.dumps({"name": "NVIDIA H100 80GB HBM3"}))
    lines = ["dtype,layer,m,n,k,time_s,weight_bytes"]
    lines += [f"{d},x,{m},{n},{k},{t},1" for d, m, n, k, t in rows]
    (path / "gemm.csv").write_text("\n".join(lines) + "\n")


def test_the_scripts_fp8_gemms_are_priced_at_the_measured_cublas_ratio(tmp_path) -> None:
    from energylens.measurements.energylens_gpu import StepFile
    from energylens.validation.steps import file_calibration, script_fp8_ratio

    gpu = load_gpu("H100")
    peak = gpu.dense_flops_per_s["fp8"] / gpu.dense_flops_per_s["bf16"]  # 2 on H100
    # FP8 at 1.8x and 1.6x BF16's speed on compute-bound shapes: ratios 0.9 and 0.8, median
    # 0.85; the m = 8 shape is memory-bound and a shape timed in one dtype has no pair.
    _run_folder(tmp_path / "h100-sxm" / "kernels", [
        ("bf16", 4096, 4096, 4096, 1.8e-3), ("fp8", 4096, 4096, 4096, 1.0e-3),
        ("bf16", 8192, 4096, 4096, 3.2e-3), ("fp8", 8192, 4096, 4096, 2.0e-3),
        ("bf16", 8, 4096, 4096, 2.0e-5), ("fp8", 8, 4096, 4096, 1.0e-5),
        ("fp8", 2048, 2048, 2048, 1.0e-6)])
    steps = tmp_path / "h100-sxm" / "steps" / "steps_fp8.csv"
    steps.parent.mkdir()
    file = StepFile(path=steps, device_name=None, folder_gpu="h100-sxm", weight_dtype="fp8",
                    steps=(), idle_power_w=(), failed=0)
    ratio = script_fp8_ratio(file=file, gpu=gpu)
    assert ratio == pytest.approx(((1.8 / 1.0) / peak + (3.2 / 2.0) / peak) / 2)
    cal = default_calibration()
    assert file_calibration(file=file, gpu=gpu, calibration=cal).kernel(
        gpu.name).fp8_gemm_efficiency_ratio == pytest.approx(ratio)
    # a BF16 file, or no GEMM tables beside it: the shipped ratio
    bf16 = StepFile(path=steps.with_name("steps_bf16.csv"), device_name=None,
                    folder_gpu="h100-sxm", weight_dtype="bf16", steps=(), idle_power_w=(),
                    failed=0)
    shipped = cal.kernel(gpu.name).fp8_gemm_efficiency_ratio
    assert file_calibration(file=bf16, gpu=gpu, calibration=cal).kernel(
        gpu.name).fp8_gemm_efficiency_ratio == shipped
    lone = tmp_path / "other" / "steps" / "steps_fp8.csv"
    lone.parent.mkdir(parents=True)
    assert script_fp8_ratio(file=StepFile(path=lone, device_name=None, folder_gpu="other",
                                          weight_dtype="fp8", steps=(), idle_power_w=(),
                                          failed=0), gpu=gpu) is None


def test_the_scripts_decode_attention_is_priced_with_sdpas_measured_streaming(tmp_path) -> None:
    """Decode rows timed as the cost model prices them with known constants (90 % of the
    HBM peak, 5 ns per tile) give those constants back, which the file's steps are then
    priced with; a row whose cycled KV copies fit in L2 (batch 1, 1,024 keys: 8 x 4 MiB)
    is left out, however fast it ran."""
    from dataclasses import replace
    from pathlib import Path

    import numpy as np

    from energylens.calibration.fit_kv_attention import DecodeAttentionTable, predicted_s
    from energylens.measurements.energylens_gpu import StepFile
    from energylens.validation.steps import file_calibration, script_decode_attention

    gpu = load_gpu("H100")
    cal = default_calibration()
    constants = cal.kernel(gpu.name)
    truth = {"kv_bandwidth_efficiency": 0.9, "attention_tile_s": 5e-9}
    shapes = [(b, keys) for b in (1, 8, 32, 128) for keys in (1024, 4096, 16384)]
    table = DecodeAttentionTable(
        path=Path("x"), gpu=gpu.name, batch=np.array([b for b, _ in shapes], dtype=float),
        context=np.array([k for _, k in shapes], dtype=float), heads=np.full(len(shapes), 32),
        kv_heads=np.full(len(shapes), 8), head_dim=np.full(len(shapes), 128),
        latency_s=np.ones(len(shapes)))
    times = predicted_s(table=table, rows=np.ones(len(shapes), dtype=bool), gpu=gpu,
                        constants=replace(constants, **truth))
    times[0] = 1e-9  # the L2-served row: far faster than HBM allows
    run = tmp_path / "h100-sxm" / "kernels"
    _run_folder(run, [("bf16", 8, 4096, 4096, 2.0e-5)])
    lines = ["phase,batch,q_len,kv_len,heads_q,heads_kv,head_dim,causal,time_s"]
    lines += [f"decode,{b},1,{k},32,8,128,False,{t}" for (b, k), t in
              zip(shapes, times, strict=True)]
    (run / "attention.csv").write_text("\n".join(lines) + "\n")
    steps = tmp_path / "h100-sxm" / "steps" / "steps_bf16.csv"
    steps.parent.mkdir()
    file = StepFile(path=steps, device_name=None, folder_gpu="h100-sxm", weight_dtype="bf16",
                    steps=(), idle_power_w=(), failed=0)
    fitted = script_decode_attention(file=file, gpu=gpu, constants=constants)
    assert fitted is not None
    assert fitted["kv_bandwidth_efficiency"] == pytest.approx(0.9, rel=1e-3)
    assert fitted["attention_tile_s"] == pytest.approx(5e-9, rel=1e-2)
    priced = file_calibration(file=file, gpu=gpu, calibration=cal).kernel(gpu.name)
    assert priced.kv_bandwidth_efficiency == pytest.approx(fitted["kv_bandwidth_efficiency"])
    assert priced.attention_tile_s == pytest.approx(fitted["attention_tile_s"])
