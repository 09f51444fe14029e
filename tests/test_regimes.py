"""Leave-one-regime-out folds: they hold out what they say, and nothing leaks in."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_serving import serving_rows
from energylens.calibration.regimes import FOLDS, constant_spread, generation_fold, metric_of
from energylens.hardware import list_gpus, load_gpu

ROOT = Path(__file__).resolve().parents[1]
MLENERGY = sorted((ROOT / "data" / "measurements" / "mlenergy" / "tasks").glob("*.json"))


@pytest.fixture(scope="module")
def h100_rows():
    rows, _ = serving_rows(files=MLENERGY, gpu_name="H100")
    return rows


@pytest.mark.parametrize("fold", FOLDS, ids=lambda f: f"{f.regime}: {f.name}")
def test_a_fold_never_fits_on_a_row_it_predicts(fold, h100_rows):
    train = [r for r in h100_rows if fold.train(r)]
    test = [r for r in h100_rows if fold.test(r)]
    assert train and test, "the H100 rows must populate both sides of every fold"
    assert not {id(r) for r in train} & {id(r) for r in test}


def test_the_folds_hold_out_the_regimes_they_name(h100_rows):
    by_name = {f"{f.regime}: {f.name}": f for f in FOLDS}
    count = by_name["gpu-count: fit 1-2 GPUs, predict 4-8"]
    assert all(int(r.values["num_gpus"]) >= 4 for r in h100_rows if count.test(r))
    precision = by_name["precision: fit BF16, predict FP8/MXFP4"]
    assert {r.values["weight_precision"] for r in h100_rows if precision.train(r)} == {"bfloat16"}
    task = by_name["task: fit chat, predict reasoning/FIM"]
    assert {r.values["task"] for r in h100_rows if task.train(r)} == {"lm-arena-chat"}
    dense = by_name["family: fit dense, predict MoE"]
    assert all(r.case.model.moe is None for r in h100_rows if dense.train(r))


def test_the_generation_fold_ignores_the_gpus_own_constants():
    """B200 predicted from H100 alone: corrupting B200's own fitted constants changes
    nothing, since the fold strips them and borrows down the declared chain."""
    cal = default_calibration()
    b200 = load_gpu("B200")
    corrupt = replace(cal, kernels={**cal.kernels,
                                    "B200": replace(cal.kernel("B200"), static_power_w=5000.0)})
    a = generation_fold(files=MLENERGY, gpu=b200, calibration=cal)
    b = generation_fold(files=MLENERGY, gpu=b200, calibration=corrupt)
    assert a == b
    (entry,) = a.values()
    assert entry["borrowed_from"] == b200.borrows_from and entry["train_rows"] == 0
    assert metric_of(entry, "energy_per_token_joules") is not None


def test_the_generation_fold_keeps_what_the_gpus_kernel_tables_measure():
    """A GEMM efficiency measured on B200's own kernel tables (no serving run) is kept."""
    cal = default_calibration()
    b200 = load_gpu("B200")
    slower = replace(cal, kernels={**cal.kernels, "B200": replace(
        cal.kernel("B200"), gemm_efficiency_max=0.5 * cal.kernel("B200").gemm_efficiency_max)})
    (a,) = generation_fold(files=MLENERGY, gpu=b200, calibration=cal).values()
    (b,) = generation_fold(files=MLENERGY, gpu=b200, calibration=slower).values()
    assert metric_of(a, "median_itl_ms") != metric_of(b, "median_itl_ms")


def test_a_gpu_without_a_relative_has_no_generation_fold():
    measured = next(gpu for gpu in list_gpus() if gpu.borrows_from is None)
    with pytest.raises(ValueError, match="no relative"):
        generation_fold(files=MLENERGY, gpu=measured, calibration=default_calibration())


def test_constant_spread_is_the_range_over_the_largest_magnitude():
    folds = {"a": {"values": {"x": 1.5, "y": 2.0, "z": 0.0}}, "b": {"values": {"x": 0.9}},
             "c": {}}
    spread = constant_spread(full={"x": 1.0, "y": 2.0, "z": 1e-9}, folds=folds)
    assert spread == {"x": pytest.approx(0.4), "y": 0.0, "z": 1.0}
