"""A fold that trains on exactly the full fit's rows repeats it: neither the spread nor the
bound count counts it as a second fit."""

from __future__ import annotations

from pathlib import Path

from energylens.calibration.fit_serving import fitted_rows, serving_rows
from energylens.calibration.regimes import (
    FOLDS,
    SAME_AS_FULL,
    constant_spread,
    distinct_refits,
)
from energylens.validation.accuracy import AccuracyReport
from energylens.validation.docs import _constants

ROOT = Path(__file__).resolve().parents[1]
MLENERGY = sorted((ROOT / "data" / "measurements" / "mlenergy" / "tasks").glob("*.json"))


def test_only_the_hybrid_fold_trains_on_every_fitted_row():
    rows, _ = serving_rows(files=MLENERGY, gpu_name="H100")
    fitted = fitted_rows(rows)
    same = [f"{f.regime}: {f.name}" for f in FOLDS
            if len([r for r in fitted if f.train(r)]) == len(fitted)]
    assert same == ["family: fit transformers, predict hybrid Mamba-2"]


FOLDS_BY_HAND = {
    "a": {"train_rows": 60, "values": {"x": 2.0}, "at_bound": ["x"]},
    "same": {"train_rows": 100, "values": {"x": 10.0}, "at_bound": ["x"], SAME_AS_FULL: True},
    "old file": {"train_rows": 100, "values": {"x": 10.0}, "at_bound": ["x"]},
    "borrowed": {"train_rows": 0, "errors": {}},
}


def test_distinct_refits_drop_the_repeat_and_the_unfitted_fold():
    assert list(distinct_refits(folds=FOLDS_BY_HAND)) == ["a", "old file"]
    assert list(distinct_refits(folds=FOLDS_BY_HAND, full_rows=100)) == ["a"]


def test_spread_ignores_a_fold_flagged_as_the_full_fit():
    folds = {k: v for k, v in FOLDS_BY_HAND.items() if k != "old file"}
    assert constant_spread(full={"x": 1.0}, folds=folds) == {"x": 0.5}  # (2 - 1) / 2


def test_docs_count_distinct_fits():
    fits = {"mlenergy/H100-SXM": {"n_points": 100, "at_bound": ["x"],
                                  "spread_across_regime_folds": {"x": 0.5}},
            "regimes/mlenergy/H100-SXM": FOLDS_BY_HAND}
    text = "\n".join(_constants(AccuracyReport(datasets={}, fits=fits, calibration_source="t")))
    assert "| constant | spread | flagged | at a bound in (of 2 distinct fits) |" in text
    assert "| `x` | 50.0 % | **yes** | 2 |" in text
