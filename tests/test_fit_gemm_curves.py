"""Each GPU's GEMM curve fitted on its own GEMM table (energylens/calibration/fit_gemm_curves.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fit_gemm_curves import (
    CURRENT,
    fit_gemm_curve,
    read_gemm_table,
)
from energylens.calibration.run import discover
from energylens.cost.constants import KernelConstants
from energylens.cost.single_gemm import gemm_cost
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "data" / "measurements" / "aiconfigurator" / "kernels"
H100, H200 = load_gpu("H100-SXM"), load_gpu("H200-SXM")
TRUE = KernelConstants(gemm_efficiency_max=0.82, gemm_k_half=150.0, wave_exponent=0.15,
                       roofline_sharpness=4.0, memory_efficiency_max=0.85,
                       kernel_overhead_s=3.0e-6)
START = KernelConstants(gemm_efficiency_max=0.70, gemm_k_half=20.0, wave_exponent=0.40,
                        roofline_sharpness=1.5, memory_efficiency_max=0.95,
                        kernel_overhead_s=5.0e-6)


def _shapes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    grid = [(m, n, k) for m in (1, 8, 32, 128, 512, 2048, 8192)
            for n in (1024, 4096, 8192, 14336, 28672) for k in (1024, 4096, 8192)]
    return tuple(np.array([s[i] for s in grid], dtype=float) for i in range(3))  # type: ignore[return-value]


def _table(path: Path, m: np.ndarray, n: np.ndarray, k: np.ndarray,
           latency_s: np.ndarray) -> Path:
    pd.DataFrame({"gemm_dtype": "bfloat16", "m": m.astype(int), "n": n.astype(int),
                  "k": k.astype(int), "latency": latency_s * 1e3}).to_parquet(path)
    return path


def test_an_array_of_shapes_is_priced_as_each_shape_alone():
    m, n, k = _shapes()
    together = gemm_cost(m=m, n=n, k=k, dtype="bf16", gpu=H100, constants=TRUE).latency_s
    alone = [float(gemm_cost(m=int(a), n=int(b), k=int(c), dtype="bf16", gpu=H100,
                             constants=TRUE).latency_s) for a, b, c in zip(m, n, k, strict=True)]
    assert np.allclose(together, alone, rtol=1e-12)


def test_the_curve_a_table_was_built_with_is_recovered(tmp_path: Path):
    m, n, k = _shapes()
    times = np.asarray(gemm_cost(m=m, n=n, k=k, dtype="bf16", gpu=H100, constants=TRUE).latency_s)
    result = fit_gemm_curve(path=_table(tmp_path / "t.parquet", m, n, k, times), gpu=H100,
                            base=START)
    assert result is not None
    fitted = replace(START, **result.values)
    predicted = gemm_cost(m=m, n=n, k=k, dtype="bf16", gpu=H100, constants=fitted).latency_s
    errors = np.abs(predicted / times - 1)
    assert errors.mean() < 0.01 and errors.max() < 0.03
    assert result.values["kernel_overhead_s"] == pytest.approx(3.0e-6, rel=0.05)
    assert result.values["gemm_efficiency_max"] == pytest.approx(0.82, rel=0.05)
    assert result.leave_out["latency"].mape < 0.02
    assert result.in_sample[CURRENT].mape > 0.1


def test_shapes_served_from_l2_are_left_out(tmp_path: Path):
    """A memory-bound shape whose weights fit in L2 times faster than HBM allows when the
    table repeats it: it must not pull the curve."""
    m, n, k = _shapes()
    times = np.asarray(gemm_cost(m=m, n=n, k=k, dtype="bf16", gpu=H100, constants=TRUE).latency_s)
    compute_s = 2 * m * n * k / H100.peak_flops_per_s("bf16")
    memory_s = 2 * (m * k + n * k + m * n) / H100.hbm_bandwidth_bytes_per_s
    in_l2 = (2 * n * k < H100.l2_bytes) & (compute_s < memory_s)
    times = np.where(in_l2, times / 3.0, times)
    path = _table(tmp_path / "t.parquet", m, n, k, times)
    table = read_gemm_table(path=path, gpu=H100)
    assert table.in_l2 == int(in_l2.sum()) > 0
    assert table.m.size == m.size - table.in_l2
    result = fit_gemm_curve(path=path, gpu=H100, base=START, leave_out=False)
    assert result is not None
    assert result.values["kernel_overhead_s"] == pytest.approx(3.0e-6, rel=0.05)


def test_a_constant_the_rows_do_not_identify_keeps_the_current_value(tmp_path: Path):
    """Compute-bound shapes only: the HBM share never sets a time, runs to a bound, and is
    left at the starting value."""
    m, n, k = (np.array(v, dtype=float) for v in zip(*[(a, b, c) for a in (4096, 8192, 16384)
                                                      for b in (4096, 8192, 16384)
                                                      for c in (4096, 8192)], strict=True))
    times = np.asarray(gemm_cost(m=m, n=n, k=k, dtype="bf16", gpu=H100, constants=TRUE).latency_s)
    result = fit_gemm_curve(path=_table(tmp_path / "t.parquet", m, n, k, times), gpu=H100,
                            base=START, leave_out=False)
    assert result is not None
    assert "memory_efficiency_max" not in result.values
    assert any("memory_efficiency_max" in note for note in result.notes)


def _fit_shipped_table(gpu: str, folder: str):
    path = next((TABLES / folder / "gemm" / "vllm").glob("*/gemm_perf.parquet"))
    return fit_gemm_curve(path=path, gpu=load_gpu(gpu), base=KernelConstants())


def test_h100_and_h200_share_a_die_and_their_tables_say_so():
    """Fitted on separate tables, the two GPUs' compute curves agree (same GH100 die and
    clocks); the measured HBM shares (3.35 vs 4.8 TB/s parts) need not."""
    h100, h200 = _fit_shipped_table("H100-SXM", "h100_sxm"), _fit_shipped_table("H200-SXM",
                                                                                "h200_sxm")
    assert h100 is not None and h200 is not None
    for result in (h100, h200):
        held = result.leave_out["latency"].mape
        assert held < 0.10 and held < result.in_sample[CURRENT].mape
    assert h100.values["gemm_efficiency_max"] == pytest.approx(h200.values["gemm_efficiency_max"],
                                                                rel=0.05)
    assert h100.values["kernel_overhead_s"] == pytest.approx(h200.values["kernel_overhead_s"],
                                                              rel=0.15)
    assert 1.5e-6 < h100.values["kernel_overhead_s"] < 6e-6


def test_calibrate_reports_every_table_and_ships_none_of_it():
    """The shipped calibration holds one curve report per GPU with a vLLM GEMM table in the
    repository, and no constant of the file cites one (reported, not applied)."""
    doc = yaml.safe_load((ROOT / "energylens" / "data" / "calibration.yaml").read_text())
    gpus = {table_gpu(path) for path in discover(ROOT / "data" / "measurements").gemm_tables}
    assert {"H100-SXM", "H200-SXM", "A100-80GB-SXM", "B200"} <= gpus
    for gpu in gpus:
        report = doc["fits"][f"aiconfigurator-gemm/{gpu}/curve"]
        assert report["applied"] is False and report["why_not_applied"]
        assert report["leave_one_n_half_out"]["latency"]["mape"] < \
            report["in_sample"][CURRENT]["mape"]
    cited = {entry.get("fit") for constants in doc["kernels"].values()
             for entry in constants.values()}
    assert not any(str(fit).endswith("/curve") for fit in cited)
