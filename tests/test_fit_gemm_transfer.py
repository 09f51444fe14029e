"""GEMM efficiencies carried to a GPU without a per-op profile by measured table ratios."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from energylens.calibration.fit_gemm_transfer import EFFICIENCY_CAP, fit_gemm_transfer
from energylens.hardware import load_gpu

H100, H200 = load_gpu("H100-SXM"), load_gpu("H200-SXM")  # same bf16 peak, faster HBM on H200


def _table(path: Path, times_ms: dict[tuple[int, int, int], float]) -> Path:
    rows = [{"gemm_dtype": "bfloat16", "m": m, "n": n, "k": k, "latency": t}
            for (m, n, k), t in times_ms.items()]
    rows.append({"gemm_dtype": "fp8", "m": 4096, "n": 4096, "k": 4096, "latency": 1e-6})
    pd.DataFrame(rows).to_parquet(path)
    return path


COMPUTE = [(4096, 4096, 4096), (8192, 4096, 2048), (2048, 8192, 8192), (4096, 2048, 4096)]
MEMORY = [(1, 8192, 4096), (8, 8192, 8192), (32, 16384, 4096), (16, 4096, 8192)]


def test_ratios_are_recovered_from_tables_built_with_them(tmp_path: Path):
    """H200 built to reach 0.8 of H100's fraction of peak FLOP/s on compute-bound shapes
    and 0.9 of its fraction of HBM bandwidth on weight-streaming ones."""
    base = {shape: 0.1 * (i + 1) for i, shape in enumerate(COMPUTE + MEMORY)}
    bandwidth = H200.hbm_bandwidth_bytes_per_s / H100.hbm_bandwidth_bytes_per_s
    own = {s: t / 0.8 if s in COMPUTE else t / (bandwidth * 0.9) for s, t in base.items()}
    result = fit_gemm_transfer(path=_table(tmp_path / "h200.parquet", own),
                               relative_path=_table(tmp_path / "h100.parquet", base),
                               gpu=H200, relative=H100,
                               relative_values={"gemm_efficiency_max": 0.75,
                                                "memory_efficiency_max": 0.9})
    assert result is not None
    assert result.values["gemm_efficiency_max"] == pytest.approx(0.75 * 0.8)
    assert result.values["memory_efficiency_max"] == pytest.approx(0.9 * 0.9)
    assert result.in_sample["compute_latency"].mape == pytest.approx(0.0, abs=1e-12)


def test_an_efficiency_never_exceeds_its_cap(tmp_path: Path):
    base = {shape: 1.0 for shape in COMPUTE}
    own = {s: 0.5 for s in COMPUTE}  # twice the relative's fraction of the same peak
    result = fit_gemm_transfer(path=_table(tmp_path / "a.parquet", own),
                               relative_path=_table(tmp_path / "b.parquet", base),
                               gpu=H200, relative=H100,
                               relative_values={"gemm_efficiency_max": 0.75,
                                                "memory_efficiency_max": 0.9})
    assert result is not None and result.values["gemm_efficiency_max"] == EFFICIENCY_CAP
    assert "memory_efficiency_max" not in result.values  # no weight-streaming shapes
