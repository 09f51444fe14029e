"""One 16-bit definition for the precision fold and the expected error; a NaN fold figure
is missing, never ordered."""

from __future__ import annotations

from types import SimpleNamespace

from energylens.calibration.regimes import FOLDS, metric_of
from energylens.validation.accuracy import AccuracyReport
from energylens.validation.docs import _regime_rows
from energylens.validation.expected_error import SIXTEEN_BIT, _worst

PRECISION = next(f for f in FOLDS if f.regime == "precision")


def test_fp16_weights_are_on_the_training_side_of_both():
    for precision in ("fp16", "float16", "bf16", "bfloat16"):
        row = SimpleNamespace(values={"weight_precision": precision})
        assert PRECISION.train(row) and not PRECISION.test(row)  # type: ignore[arg-type]
        assert precision in SIXTEEN_BIT
    row = SimpleNamespace(values={"weight_precision": "fp8"})
    assert PRECISION.test(row) and "fp8" not in SIXTEEN_BIT  # type: ignore[arg-type]


def _entry(mape: float) -> dict:
    return {"errors": {"energy_per_token_joules": {"mape": mape, "n": 3},
                       "median_itl_ms": {"mape": mape, "n": 3}}}


def test_a_nan_fold_is_no_worst_fold():
    for order in (("nan", "a", "b"), ("a", "nan", "b"), ("b", "a", "nan")):
        folds = {name: _entry({"nan": float("nan"), "a": 0.05, "b": 0.20}[name])
                 for name in order}
        worst = _worst(folds=folds, metric="median_itl_ms", field="tpot_s")
        assert worst is not None and worst.fold == "b" and worst.mape == 0.20
    assert _worst(folds={"nan": _entry(float("nan"))}, metric="median_itl_ms",
                  field="tpot_s") is None
    assert metric_of(_entry(float("nan")), "median_itl_ms") is None


def test_a_nan_fold_sorts_last_in_the_docs_table():
    keys = [f"{f.regime}: {f.name}" for f in FOLDS]
    mapes = [float("nan"), 0.05, 0.30, 0.10, float("nan"), 0.20]
    fits = {"regimes/mlenergy/H100-SXM": {k: _entry(m) for k, m in zip(keys, mapes, strict=True)}}
    rows = _regime_rows(AccuracyReport(datasets={}, fits=fits, calibration_source="t"))[2:]
    h100 = [line for line in rows if "| H100-SXM |" in line]
    order = [line.split(" |")[0].removeprefix("| ") for line in h100]
    assert order[:4] == [keys[2], keys[5], keys[3], keys[1]]
    assert set(order[4:]) == {keys[0], keys[4]}
