"""``energylens validate kernels``: the H200 run folder's loader, the cost model's price of
one GEMM and one attention call against physical floors, and the CLI's table and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.cli import main
from energylens.errors import MeasurementError
from energylens.hardware import load_gpu
from energylens.measurements.energylens_gpu import load_kernel_run
from energylens.predict import calibration_for_gpu
from energylens.validation.kernels import (
    COMPUTE_BOUND,
    MEMORY_BOUND,
    KernelRow,
    attention_cost,
    gemm_cost,
    group_errors,
    roofline_regime,
)

RUN = Path(__file__).resolve().parents[1] / "data/measurements/energylens-gpu/h200-sxm/2026-11-27-a"
H200 = load_gpu("NVIDIA H200")
CONSTANTS = calibration_for_gpu(default_calibration(), H200).kernel(H200.name)


@pytest.fixture(scope="module")
def run():
    return load_kernel_run(path=RUN)


def test_loader_reads_every_committed_row_in_seconds(run):
    assert run.device_name == "NVIDIA H200"
    assert load_gpu(run.device_name).name == "H200-SXM"
    assert len(run.gemm) == 182  # 98 bf16 + 84 fp8 (the folder README's "280" is a log total)
    assert sum(g.dtype == "bf16" for g in run.gemm) == 98
    assert sum(g.dtype == "fp8" for g in run.gemm) == 84
    assert len(run.attention) == 18 and run.untimed == 0
    big = next(g for g in run.gemm if g.dtype == "bf16" and (g.m, g.n, g.k) == (8192, 8192, 8192))
    assert 0.5e-3 < big.time_s < 5e-3
    for g in run.gemm:  # weight bytes: n x k elements of the row's dtype
        assert g.weight_bytes == g.n * g.k * (1 if g.dtype == "fp8" else 2)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_large_gemm_is_never_faster_than_the_datasheet_peak(dtype):
    m = n = k = 8192
    cost = gemm_cost(m=m, n=n, k=k, dtype=dtype, gpu=H200, constants=CONSTANTS)
    assert cost.latency_s >= 2 * m * n * k / H200.peak_flops_per_s(dtype)
    assert roofline_regime(cost=cost, dtype=dtype, gpu=H200) == COMPUTE_BOUND


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gemv_is_never_faster_than_streaming_its_weights(run, dtype):
    rows = [g for g in run.gemm if g.dtype == dtype and g.m == min(x.m for x in run.gemm
                                                                    if x.dtype == dtype)]
    assert rows
    for g in rows:
        cost = gemm_cost(m=g.m, n=g.n, k=g.k, dtype=dtype, gpu=H200, constants=CONSTANTS)
        assert cost.bytes >= g.weight_bytes  # the model reads at least the measured weights
        assert cost.latency_s >= g.weight_bytes / H200.hbm_bandwidth_bytes_per_s
        assert roofline_regime(cost=cost, dtype=dtype, gpu=H200) == MEMORY_BOUND


def test_attention_is_never_faster_than_its_flops_or_kv_bytes():
    s, heads, kv_heads, d = 8192, 32, 8, 128
    prefill = attention_cost(batch=1, q_len=s, kv_len=s, heads_q=heads, heads_kv=kv_heads,
                             head_dim=d, gpu=H200, constants=CONSTANTS)
    assert prefill.latency_s >= 4 * heads * d * s * s / 2 / H200.peak_flops_per_s("bf16")
    b, kv = 32, 4096
    decode = attention_cost(batch=b, q_len=1, kv_len=kv, heads_q=heads, heads_kv=kv_heads,
                            head_dim=d, gpu=H200, constants=CONSTANTS)
    kv_bytes = 2 * b * kv_heads * kv * d * 2
    assert decode.bytes >= kv_bytes
    assert decode.latency_s >= kv_bytes / H200.hbm_bandwidth_bytes_per_s
    assert roofline_regime(cost=decode, dtype="bf16", gpu=H200) == MEMORY_BOUND


def test_group_errors_by_hand():
    rows = [KernelRow(kernel="gemm", dtype="bf16", regime=MEMORY_BOUND, shape="a",
                      measured_s=1.0, predicted_s=1.1),
            KernelRow(kernel="gemm", dtype="bf16", regime=MEMORY_BOUND, shape="b",
                      measured_s=1.0, predicted_s=0.7),
            KernelRow(kernel="gemm", dtype="fp8", regime=MEMORY_BOUND, shape="c",
                      measured_s=2.0, predicted_s=3.0)]
    worst, other = group_errors(rows=rows)
    assert (worst.dtype, worst.n, worst.mape) == ("fp8", 1, pytest.approx(0.5))
    assert (other.n, other.mape, other.median_error) == (2, pytest.approx(0.2),
                                                         pytest.approx(-0.1))
    assert other.max_ape == pytest.approx(0.3)


def test_cli_prints_the_group_table(capsys):
    assert main(["validate", "kernels", str(RUN), "--max-rows", "0"]) == 0
    out = capsys.readouterr().out
    assert "H200-SXM" in out and "MAPE" in out
    for name in ("gemm", "attention prefill", "attention decode", COMPUTE_BOUND, MEMORY_BOUND):
        assert name in out


def test_cli_json_counts_every_row_worst_group_first(capsys):
    assert main(["validate", "kernels", str(RUN), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu"] == "H200-SXM" and len(out["rows"]) == 200
    assert sum(g["n"] for g in out["groups"]) == 200
    mapes = [g["mape"] for g in out["groups"]]
    assert mapes == sorted(mapes, reverse=True)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


def test_cli_missing_folder_is_one_line_exit_2(capsys, tmp_path):
    err = _one_line_error(capsys, ["validate", "kernels", str(tmp_path / "nope")])
    assert "no such folder" in err


def test_cli_wrong_columns_is_one_line_exit_2(capsys, tmp_path):
    (tmp_path / "device.json").write_text('{"name": "NVIDIA H200"}')
    (tmp_path / "gemm.csv").write_text("dtype,layer,m,n,k,seconds\nbf16,x,1,2,3,1e-5\n")
    err = _one_line_error(capsys, ["validate", "kernels", str(tmp_path)])
    assert "'time_s'" in err and "'weight_bytes'" in err


def test_untimed_rows_are_counted_not_loaded(tmp_path):
    (tmp_path / "device.json").write_text('{"name": "NVIDIA H200"}')
    (tmp_path / "gemm.csv").write_text(
        "dtype,layer,m,n,k,time_s,tflops,weight_bytes,error\n"
        "bf16,x,16,4096,4096,1e-5,1.0,33554432,\n"
        "fp8,x,16,4096,4096,,,,CUDA error: out of memory\n")
    run = load_kernel_run(path=tmp_path)
    assert len(run.gemm) == 1 and run.untimed == 1 and run.attention == ()
    (tmp_path / "gemm.csv").write_text(
        "dtype,layer,m,n,k,time_s,weight_bytes\nbf16,x,16,4096,4096,-1,33554432\n")
    with pytest.raises(MeasurementError, match="must be positive"):
        load_kernel_run(path=tmp_path)


def test_a_small_kernel_run_is_priced_as_the_layers_kernels():
    """An elementwise.csv run (no GEMMs): its 240 hot timings of four ops, each priced at
    least at its class's launch floor and at least as long as streaming its bytes at HBM
    peak over its class's share (a memory-bound kernel)."""
    from energylens.validation.kernels import validate_kernels

    small = RUN.parent / "2026-11-29-a"
    run = load_kernel_run(path=small)
    assert run.gemm == () and run.elementwise == small / "elementwise.csv"
    report = validate_kernels(run=run)
    assert len(report.rows) == 240
    assert {g.kernel for g in report.groups} == {"rmsnorm", "rope", "silu x mul", "residual add"}
    floors = {"rmsnorm": CONSTANTS.norm_overhead_s, "rope": CONSTANTS.rope_overhead_s,
              "silu x mul": CONSTANTS.activation_overhead_s,
              "residual add": CONSTANTS.elementwise_overhead_s}
    assert all(r.predicted_s >= floors[r.kernel] * (1 - 1e-9) for r in report.rows)
    adds = [r for r in report.rows if r.kernel == "residual add" and r.shape.startswith(
        "llama3.1-8b/tp1 tokens=16384")]
    (add,) = adds  # x + y -> out: three 16,384 x 4,096 bf16 tensors
    peak_s = 3 * 16384 * 4096 * 2 / (H200.hbm_bandwidth_bytes_per_s
                                      * CONSTANTS.elementwise_bandwidth_efficiency)
    assert add.predicted_s >= peak_s * (1 - 1e-6)


def test_a_folder_without_gemms_or_small_kernels_is_refused(tmp_path):
    (tmp_path / "device.json").write_text('{"name": "NVIDIA H200"}')
    with pytest.raises(MeasurementError, match="gemm.csv or an elementwise.csv"):
        load_kernel_run(path=tmp_path)
