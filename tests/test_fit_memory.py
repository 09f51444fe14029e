"""The HBM streaming curve fitted on this project's weight-streaming GEMMs."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_memory import MAX_ROWS, MIN_BYTES, fit_memory, streams
from energylens.hardware import load_gpu

DATA = Path(__file__).resolve().parents[1] / "data/measurements/energylens-gpu"
FIELDS = ("dtype", "layer", "m", "n", "k", "time_s", "tflops", "weight_bytes")


def _write(folder: Path, rows: list[dict[str, object]]) -> None:
    run = folder / "2026-01-01-a"
    run.mkdir(parents=True)
    with (run / "gemm.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def test_recovers_a_known_curve_and_ignores_rows_that_do_not_stream(tmp_path: Path) -> None:
    peak = load_gpu("H100").hbm_bandwidth_bytes_per_s
    true_max, true_half = 0.81, 6.0e6
    rows: list[dict[str, object]] = []
    for i, n in enumerate((1024, 2048, 4096, 8192, 16384, 28672, 57344)):
        k = 4096
        for m in (1, 8):
            moved = 2.0 * n * k + 2.0 * m * (n + k)
            seconds = moved / (peak * true_max * moved / (moved + true_half))
            rows.append({"dtype": "bf16", "layer": f"l{i}", "m": m, "n": n, "k": k,
                         "time_s": seconds, "tflops": 0.0, "weight_bytes": 2 * n * k})
    # rows that are not HBM streams: compute-bound, fp8, or small enough to sit in L2;
    # timed absurdly so that fitting any of them would move the constants
    rows.append({"dtype": "bf16", "layer": "big", "m": 4096, "n": 8192, "k": 8192,
                 "time_s": 1.0, "tflops": 0.0, "weight_bytes": 2 * 8192 * 8192})
    rows.append({"dtype": "fp8", "layer": "fp8", "m": 1, "n": 8192, "k": 8192,
                 "time_s": 1.0, "tflops": 0.0, "weight_bytes": 8192 * 8192})
    rows.append({"dtype": "bf16", "layer": "small", "m": 1, "n": 1024, "k": 1024,
                 "time_s": 1.0, "tflops": 0.0, "weight_bytes": 2 * 1024 * 1024})
    _write(tmp_path, rows)
    labels, _, _ = streams(tmp_path)
    assert len(labels) == 12  # 1024 x 4096 x 2 B = 8 MB is under MIN_BYTES: not a stream
    fit = fit_memory(folder=tmp_path, gpu_name="H100")
    assert fit.values["memory_efficiency_max"] == pytest.approx(true_max, rel=1e-3)
    assert fit.values["memory_half_bytes"] == pytest.approx(true_half, rel=1e-2)
    assert not fit.at_bound


def test_too_few_rows_is_a_data_error(tmp_path: Path) -> None:
    _write(tmp_path, [{"dtype": "bf16", "layer": "x", "m": 1, "n": 28672, "k": 4096,
                       "time_s": 1e-4, "tflops": 0.0, "weight_bytes": 2 * 28672 * 4096}])
    with pytest.raises(CalibrationDataError, match="weight-streaming"):
        fit_memory(folder=tmp_path, gpu_name="H100")


@pytest.mark.parametrize(("folder", "gpu"), [("h100-sxm", "H100-SXM"), ("h200-sxm", "H200-SXM")])
def test_measured_curve_is_identified_and_matches_the_largest_streams(folder: str, gpu: str) -> None:
    """Inside its bounds (Vidur's fit of the same constants ends at 0.98 and 10 kB), and
    the largest weight streams (470-940 MB, where the half-bandwidth size no longer
    matters) run at the fitted bandwidth within 6 %."""
    fit = fit_memory(folder=DATA / folder, gpu_name=gpu)
    assert not fit.at_bound
    assert 0.6 < fit.values["memory_efficiency_max"] < 0.95
    assert MIN_BYTES / 10 < fit.values["memory_half_bytes"] < 10 * MIN_BYTES
    labels, moved, seconds = streams(DATA / folder)
    assert all(int(label.rsplit("/m", 1)[1]) <= MAX_ROWS for label in labels)
    peak = load_gpu(gpu).hbm_bandwidth_bytes_per_s
    big = moved > 400e6
    share = fit.values["memory_efficiency_max"] * moved / (moved + fit.values["memory_half_bytes"])
    measured_share = moved / seconds / peak
    assert big.sum() >= 4
    assert np.all(np.abs(share[big] / measured_share[big] - 1) < 0.06)


def test_calibrate_reports_the_curve_beside_the_calibration_and_leaves_it_unapplied() -> None:
    """``calibrate`` discovers the GEMM tables, writes each GPU's measured curve with the
    shipped value over it, and prices with the shipped (Vidur-fitted) curve."""
    from energylens.calibration.file import default_calibration
    from energylens.calibration.run import discover
    from energylens.calibration.tables import compare_measured_memory, report_memory_streams

    data = discover(DATA.parent)
    folders = sorted({p.parents[1] for p in data.stream_tables})
    assert [f.name for f in folders] == ["h100-sxm", "h200-sxm"]
    fits: dict = {}
    report_memory_streams(folders=folders, fits=fits, log=lambda _: None)
    calibration = default_calibration()
    compare_measured_memory(fits=fits, calibration=calibration)
    entry = fits["energylens-gpu-memory/H100-SXM"]
    assert entry["applied"] is False and entry["n_points"] == len(entry["identified_by"]) == 24
    shipped = calibration.kernel("H100-SXM").memory_efficiency_max
    assert entry["calibrated_over_measured"]["memory_efficiency_max"] == pytest.approx(
        shipped / entry["measured"]["memory_efficiency_max"], rel=1e-3)
