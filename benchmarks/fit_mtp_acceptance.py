"""The draft acceptance of AIConfigurator's multi-token-prediction campaigns, fitted on one
GPU's rows and checked on the other's (docs/load.md, section "Speculative decoding").

Usage: python benchmarks/fit_mtp_acceptance.py [--rows CSV] [--steps N]

The shipped measurement CSV marks the TensorRT-LLM DeepSeek-R1 campaigns that ran
multi-token prediction (``speculative_tokens`` 3; which rows, and why, in
``energylens/measurements/convert/aiconfigurator.py``). For each GPU with such rows this
finds, by bisection, the acceptance at which the model's TPOT on that GPU's rows has a
median log error of zero (a higher acceptance only shortens a step per token), then
prints the TPOT MAPE of that value on every GPU's rows: in-sample on its own, held out on
the others. The converter's ``MTP_ACCEPTANCE`` is the B200 fit (H200 held out). About
10 minutes on one core.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from pathlib import Path

from energylens.measurements.user_csv import Case, load_user_csv, row_case
from energylens.predict import predict

ROWS = (Path(__file__).resolve().parents[1] / "data" / "measurements" / "aiconfigurator"
        / "silicon_sample_agg.csv")


def _errors(cases: list[tuple[Case, float]], acceptance: float) -> list[float]:
    """Predicted / measured TPOT - 1 of every row at ``acceptance``."""
    out = []
    for case, measured in cases:
        deployment = replace(case.deployment, draft_acceptance=acceptance)
        result = predict(model=case.model, gpu=case.gpu, deployment=deployment,
                         workload=case.workload)
        out.append(float(result.tpot_s) / measured - 1.0)
    return out


def fit(cases: list[tuple[Case, float]], steps: int) -> float:
    """The acceptance with zero median log TPOT error on ``cases`` (bisection on [0, 1])."""
    low, high = 0.0, 1.0
    for _ in range(steps):
        middle = (low + high) / 2
        median = statistics.median(math.log1p(e) for e in _errors(cases, middle))
        low, high = (middle, high) if median > 0 else (low, middle)
    return (low + high) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=ROWS)
    parser.add_argument("--steps", type=int, default=8, help="bisection steps (default 8)")
    args = parser.parse_args()
    by_gpu: dict[str, list[tuple[Case, float]]] = {}
    for row in load_user_csv(args.rows).rows:
        # TensorRT-LLM's campaigns only: SGLang's paired runs take the fitted value (a
        # transfer, docs/load.md), never fitted on
        if not row.values.get("speculative_tokens") or row.measured.get("tpot_s") is None \
                or row.values.get("runtime") != "trtllm":
            continue
        case = row_case(row)
        by_gpu.setdefault(case.gpu, []).append((case, float(row.measured["tpot_s"])))
    fitted = {gpu: fit(cases, args.steps) for gpu, cases in sorted(by_gpu.items())}
    print("| fitted on | acceptance | " + " | ".join(f"TPOT MAPE {g} ({len(by_gpu[g])} rows)"
                                                     for g in by_gpu) + " |")
    print("|---|---|" + "---|" * len(by_gpu))
    for gpu, acceptance in fitted.items():
        cells = []
        for other, cases in by_gpu.items():
            mape = 100 * statistics.mean(abs(e) for e in _errors(cases, acceptance))
            cells.append(f"{mape:.1f} % ({'in-sample' if other == gpu else 'held out'})")
        print(f"| {gpu} | {acceptance:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
