"""Fit, and hold out, the fixed latency of a disaggregated request's path
(``energylens.workloads.load.disagg.REQUEST_HANDOFF_S``: front end, router, KV-transfer
handshake, first-token delivery) on AIConfigurator's disaggregated rows.

Usage: python benchmarks/fit_disagg_handoff.py --json RESULT.json [--max-clients 8]

RESULT.json is ``energylens validate measurements
data/measurements/aiconfigurator/silicon_sample_disagg.csv --json`` (18 min in two
processes). Where neither pool queues (``--max-clients`` clients or fewer) a row's TTFT is
the prefill, the transfer and the handoff, so each such row's measured minus predicted TTFT,
plus the shipped handoff, measures the handoff; the fit is their median. Each fold leaves out
one engine or one GPU, refits the median on the other rows and scores TTFT MAPE on the
left-out rows (every concurrency), shifting the shipped predictions by the refitted value
minus the shipped one (a shift is what the handoff adds where nothing queues; in a closed
loop it also delays the next request, which the shift leaves out). Worst fold first.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from energylens.workloads.load.disagg import REQUEST_HANDOFF_S


def _mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured) * 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, type=Path, help="a validation result")
    parser.add_argument("--max-clients", type=int, default=8,
                        help="rows at this concurrency or lower fit the handoff (default 8)")
    args = parser.parse_args()
    rows = [r for r in json.loads(args.json.read_text())["rows"]
            if r.get("predicted") and r["input"].get("ttft_s") not in (None, "")]
    engine = np.array([str(r["input"]["runtime"]) for r in rows])
    gpu = np.array([str(r["input"]["gpu"]) for r in rows])
    clients = np.array([int(r["input"]["concurrency"]) for r in rows])
    measured = np.array([float(r["input"]["ttft_s"]) for r in rows])
    predicted = np.array([float(r["predicted"]["ttft_s"]) for r in rows])
    idle = clients <= args.max_clients
    handoff = measured - predicted + REQUEST_HANDOFF_S  # each idle row's measurement of it

    fit = float(np.median(handoff[idle]))
    print(f"shipped {REQUEST_HANDOFF_S:.3f} s; fitted on {int(idle.sum())} rows of "
          f"<= {args.max_clients} clients: {fit:.3f} s (quartiles "
          f"{np.percentile(handoff[idle], 25):.3f} / {np.percentile(handoff[idle], 75):.3f} s)")
    print(f"all {len(rows)} rows, in-sample: TTFT MAPE {_mape(predicted, measured):.1f} % "
          f"(without the handoff {_mape(predicted - REQUEST_HANDOFF_S, measured):.1f} %)")
    folds = []
    for kind, labels in (("engine", engine), ("GPU", gpu)):
        for label in np.unique(labels):
            out = labels == label
            refit = float(np.median(handoff[idle & ~out]))
            shifted = predicted[out] + refit - REQUEST_HANDOFF_S
            folds.append((_mape(shifted, measured[out]), kind, label, refit, int(out.sum()),
                          _mape(predicted[out] - REQUEST_HANDOFF_S, measured[out])))
    print("| fold | left out | rows | refitted handoff | TTFT MAPE held out | without |")
    print("|---|---|---|---|---|---|")
    for held, kind, label, refit, count, without in sorted(folds, reverse=True):
        print(f"| {kind} | {label} | {count} | {refit:.3f} s | {held:.1f} % | {without:.1f} % |")


if __name__ == "__main__":
    main()
