"""The small-kernel classes fitted on this project's own timings (fit_elementwise)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from energylens.calibration.file import calibration_document, default_calibration
from energylens.calibration.fit_elementwise import MEASURED_OPS, elementwise_cases, fit_elementwise
from energylens.calibration.fit_kernels import NO_ENERGY
from energylens.cost.constants import KernelConstants
from energylens.errors import MeasurementError
from energylens.hardware import load_gpu
from energylens.measurements.vidur_ops import Geometry, kernel_for, op_latency_s

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "data/measurements/energylens-gpu/h200-sxm/2026-11-29-a/elementwise.csv"
#: (geometry, hidden, ffn shard, query heads, kv heads per GPU, tp), as the script writes them.
SHAPES = (("llama3.1-8b", 4096, 14336, 32, 8, 1), ("llama3.1-70b", 8192, 3584, 8, 1, 8),
          ("qwen3-32b", 5120, 12800, 32, 4, 2))
TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
TRUE = {"norm_overhead_s": 1.8e-6, "norm_bandwidth_efficiency": 0.9, "norm_floor_sharpness": 1.6,
        "rope_overhead_s": 1.7e-6, "rope_bandwidth_efficiency": 0.85, "rope_floor_sharpness": 1.8,
        "activation_overhead_s": 1.4e-6, "activation_bandwidth_efficiency": 0.95,
        "activation_floor_sharpness": 2.0, "elementwise_overhead_s": 1.3e-6,
        "elementwise_bandwidth_efficiency": 0.96, "elementwise_floor_sharpness": 2.3}


def _table(path: Path, *, truth: KernelConstants, cold_factor: float = 1.0) -> Path:
    """Rows in the script's layout whose hot times are what ``truth`` prices (cold rows
    ``cold_factor`` x slower)."""
    gpu = load_gpu("H200-SXM")
    rows = []
    for name, hidden, ffn, q_heads, kv_heads, tp in SHAPES:
        for op, vidur_op in MEASURED_OPS.items():
            geometry = Geometry(n_head=q_heads * tp, n_kv_head=kv_heads * tp, n_embd=hidden,
                                n_expanded_embd=ffn * tp, use_gated_mlp=True, tp=tp)
            for tokens in TOKENS:
                t = float(op_latency_s(op=vidur_op, geometry=geometry, num_tokens=tokens,
                                       gpu=gpu, constants=truth))
                for mode, factor in (("hot", 1.0), ("cold", cold_factor)):
                    rows.append({"op": op, "geometry": name, "hidden": hidden, "ffn_shard": ffn,
                                 "q_heads": q_heads, "kv_heads": kv_heads, "tp": tp,
                                 "tokens": tokens, "mode": mode, "time_s": t * factor})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_geometry_of_a_row_is_the_shard_the_script_timed(tmp_path: Path) -> None:
    """Llama-3.1-70B at TP 8: one KV head and 8 query heads of 128 per GPU for rope, a
    3,584-wide activation, the full 8,192-wide hidden state for the norm."""
    frame = pd.DataFrame([{"op": op, "geometry": "llama3.1-70b", "hidden": 8192,
                           "ffn_shard": 3584, "q_heads": 8, "kv_heads": 1, "tp": 8,
                           "tokens": 16, "mode": "hot", "time_s": 1e-5}
                          for op in ("rope", "silu_mul", "rmsnorm")])
    path = tmp_path / "elementwise.csv"
    frame.to_csv(path, index=False)
    cases = {c.op: c for c in elementwise_cases(path)}
    sizes = {op: kernel_for(op=op, geometry=c.geometry).op_sizes[0] for op, c in cases.items()}
    assert (sizes["attn_rope"]["g"], sizes["attn_rope"]["r"], sizes["attn_rope"]["e"]) == (1, 8, 128)
    assert sizes["mlp_act"]["f"] == 3584
    assert sizes["input_layernorm"]["d"] == 8192


def test_fit_recovers_the_constants_that_made_the_rows(tmp_path: Path) -> None:
    base = replace(KernelConstants(), **NO_ENERGY)
    truth = replace(base, **TRUE)
    path = _table(tmp_path / "elementwise.csv", truth=truth, cold_factor=3.0)
    result = fit_elementwise(paths=[path], gpu=load_gpu("H200-SXM"), base=base)
    for name, value in TRUE.items():
        assert result.values[name] == pytest.approx(value, rel=0.05), name
    assert result.in_sample["all"].mape < 0.01  # the cold rows (3x slower) are not read
    assert result.leave_out["all"].mape < 0.02
    assert result.n_points == len(SHAPES) * len(MEASURED_OPS) * len(TOKENS)


def test_missing_column_is_a_measurement_error(tmp_path: Path) -> None:
    path = tmp_path / "elementwise.csv"
    pd.DataFrame([{"op": "add", "tokens": 1, "time_s": 1e-6}]).to_csv(path, index=False)
    with pytest.raises(MeasurementError, match="missing columns"):
        elementwise_cases(path)


def test_shipped_h200_timings_fit_and_transfer_across_geometries() -> None:
    """The shipped H200 run: every class identified inside its bounds, a launch floor of
    1-3 us (a CUDA-graph node) and a share of HBM peak at most 1.1 (a hot L2 only
    shortens small tensors); held out by geometry within 15 % MAPE."""
    base = replace(KernelConstants(), **NO_ENERGY)
    result = fit_elementwise(paths=[SHIPPED], gpu=load_gpu("H200-SXM"), base=base)
    assert not result.at_bound
    for klass in ("norm", "rope", "activation", "elementwise"):
        assert 1e-6 <= result.values[f"{klass}_overhead_s"] <= 3e-6
        assert 0.5 <= result.values[f"{klass}_bandwidth_efficiency"] <= 1.1
    assert result.leave_out["all"].mape < 0.15
    assert np.isfinite(result.rms_log_residual)


def test_calibration_reports_the_h200_fit_beside_the_constants_it_keeps() -> None:
    """Reported, not applied: the fit and the shipped constants' error on the same timings
    are in ``fits``; H200's kernel section keeps the constants borrowed from H100."""
    doc = calibration_document(default_calibration())
    fit = doc["fits"]["energylens-gpu-elementwise/H200-SXM"]
    assert fit["applied"] is False and "H100" in fit["why_not_applied"]
    assert fit["leave_one_geometry_out"]["all"]["mape"] < 0.5 * fit["shipped_constants"]["all"]["mape"]
    for name in TRUE:
        assert doc["kernels"]["H200-SXM"][name]["kind"] == "assumed"
        assert name in fit["fitted"]
