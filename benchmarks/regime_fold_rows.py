"""Where each leave-one-regime-out fold misses: its held-out rows, grouped, with signed errors.

Usage: python benchmarks/regime_fold_rows.py [--calibration FILE] [--gpu H100-SXM ...]

``energylens calibrate`` stores, per GPU and fold, the serving constants refitted without
the held-out regime (``fits: regimes/mlenergy/<GPU>``) and the fold's MAPE. This script
applies each fold's constants to the calibration, predicts the fold's held-out ML.ENERGY
rows again and prints, per (model, GPUs, weight precision, task), the median signed error
of energy per output token, median inter-token latency and average power (predicted /
measured - 1): which models carry a fold's error, and in which direction. The rows and
constants are those of the calibration file; nothing is refitted (a second or two per GPU).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from energylens.calibration.file import calibration_fits, default_calibration, load_calibration
from energylens.calibration.fit_serving import (
    ServingRow,
    apply,
    fitted_rows,
    model_kind,
    predict_rows,
    serving_rows,
)
from energylens.calibration.regimes import FOLDS, generation_calibration
from energylens.hardware import load_gpu

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "data" / "measurements" / "mlenergy" / "tasks"
METRICS = ("energy_per_token_joules", "median_itl_ms", "avg_power_watts")


def _label(row: ServingRow) -> str:
    v = row.values
    return (f"{row.model.split('/')[-1]} {v['num_gpus']} GPU {v['weight_precision']} "
            f"{v['task']}")


def fold_rows(*, calibration_path: str | None, gpu: str) -> list[str]:
    """Lines of the report for ``gpu``: a header per fold, a line per group of rows."""
    calibration = (default_calibration() if calibration_path is None
                   else load_calibration(calibration_path))
    folds = calibration_fits(calibration).get(f"regimes/mlenergy/{gpu}", {})
    rows, _ = serving_rows(files=sorted(TASKS.glob("*.json")), gpu_name=gpu)
    rows = [r for r, p in zip(rows, predict_rows(rows, calibration), strict=True)
            if p is not None]
    fitted = fitted_rows(rows)
    hybrid = [r for r in rows if model_kind(r) == "hybrid"]
    lines = []
    for fold in FOLDS:
        entry = folds.get(f"{fold.regime}: {fold.name}")
        if not entry or "values" not in entry:
            continue
        test = [r for r in (fitted + hybrid if fold.regime == "family" else fitted)
                if fold.test(r) and not r.host_bound and r.case.deployment.attention_dp == 1]
        lines += _report(title=f"{gpu} {fold.regime}: {fold.name}", entry=entry, rows=test,
                         predicted=predict_rows(test, apply(calibration, gpu, entry["values"])))
    for name, entry in folds.items():  # a GPU predicted from its relative's constants
        if isinstance(entry, dict) and entry.get("regime") == "gpu-generation":
            borrowed, _ = generation_calibration(gpu=load_gpu(gpu), calibration=calibration)
            lines += _report(title=f"{gpu} {name}", entry=entry, rows=fitted,
                             predicted=predict_rows(fitted, borrowed))
    return lines


def _report(*, title: str, entry: dict, rows: list[ServingRow],
            predicted: list[dict[str, float] | None]) -> list[str]:
    """A fold's header and a line per group of its held-out rows, largest energy error first."""
    errors = entry["errors"]
    lines = [f"{title} (energy {100 * errors[METRICS[0]]['mape']:.1f} %, "
             f"ITL {100 * errors[METRICS[1]]['mape']:.1f} % MAPE)"]
    groups: dict[str, list[list[float]]] = defaultdict(list)
    for row, p in zip(rows, predicted, strict=True):
        if p is not None:
            groups[_label(row)].append([p[m] / row.measured[m] - 1.0 for m in METRICS])
    medians = {label: np.median(np.array(v), axis=0) for label, v in groups.items()}
    for label in sorted(medians, key=lambda k: -abs(medians[k][0])):
        energy, itl, power = (100 * x for x in medians[label])
        lines.append(f"  {label:<62} {len(groups[label]):>3} rows  energy {energy:+6.1f} %  "
                     f"ITL {itl:+6.1f} %  power {power:+6.1f} %")
    return lines


def main() -> None:
    """Print the report for each GPU asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", default=None, help="calibration file (default: shipped)")
    parser.add_argument("--gpu", nargs="+", default=["H100-SXM", "B200"])
    args = parser.parse_args()
    for gpu in args.gpu:
        print("\n".join(fold_rows(calibration_path=args.calibration, gpu=gpu)))


if __name__ == "__main__":
    main()
