"""TTFT and TPOT errors of ``--workload load`` on AIConfigurator's measured serving rows,
per engine and GPU (issue 12 validation).

Usage: python benchmarks/validate_load_aic.py [--rows CSV | --silicon FILE] [--json RESULT]
Predicts every row of the shipped measurement CSV
``data/measurements/aiconfigurator/silicon_sample_agg.csv`` (AIConfigurator's aggregated
rows: closed loops of ``silicon_concurrency`` clients, fixed lengths) with ``energylens
validate measurements --json`` (``--silicon``: convert a raw ``silicon_sample.csv`` first
with ``energylens measurements convert aiconfigurator``; ``--json``: read a saved result)
and prints MAPE per (engine, GPU), with the rows left out and why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from energylens.cli.main import main as energylens

ROWS = (Path(__file__).resolve().parents[1] / "data" / "measurements" / "aiconfigurator"
        / "silicon_sample_agg.csv")


def _validate(rows: Path) -> dict[str, object]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if energylens(["validate", "measurements", str(rows), "--json"]):
            raise SystemExit("validation failed")
    result: dict[str, object] = json.loads(out.getvalue())
    return result


def _converted(silicon: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        rows = Path(folder) / "aic.csv"
        if energylens(["measurements", "convert", "aiconfigurator", str(silicon), "-o", str(rows)]):
            raise SystemExit("conversion failed")
        return _validate(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--rows", type=Path, default=ROWS, help="a measurement CSV")
    source.add_argument("--silicon", type=Path, help="a raw AIConfigurator silicon_sample.csv")
    source.add_argument("--json", type=Path, help="a saved 'validate measurements --json' result")
    args = parser.parse_args()
    if args.json:
        result = json.loads(args.json.read_text())
    else:
        result = _converted(args.silicon) if args.silicon else _validate(args.rows)
    errors: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    left_out: Counter[str] = Counter()
    for row in result["rows"]:  # type: ignore[index]
        measured, predicted = row["input"], row["predicted"]
        if not predicted:
            left_out[str(row.get("error") or "no prediction").split(";")[0][:70]] += 1
            continue
        group = errors[(measured["runtime"], measured["gpu"])]
        for metric in ("ttft_s", "tpot_s"):
            group[metric].append(abs(predicted[metric] / measured[metric] - 1) * 100)
            group[f"{metric}_signed"].append((predicted[metric] / measured[metric] - 1) * 100)
    print("| engine | GPU | rows | TTFT MAPE | TTFT median error | TPOT MAPE | TPOT median error |")
    print("|---|---|---|---|---|---|---|")
    every: dict[str, list[float]] = defaultdict(list)
    for (engine, gpu), group in sorted(errors.items()):
        for metric in ("ttft_s", "tpot_s"):
            every[metric] += group[metric]
        print(f"| {engine} | {gpu} | {len(group['ttft_s'])} | {statistics.mean(group['ttft_s']):.1f} % "
              f"| {statistics.median(group['ttft_s_signed']):+.1f} % "
              f"| {statistics.mean(group['tpot_s']):.1f} % "
              f"| {statistics.median(group['tpot_s_signed']):+.1f} % |")
    if every:
        print(f"| all | | {len(every['ttft_s'])} | {statistics.mean(every['ttft_s']):.1f} % | "
              f"| {statistics.mean(every['tpot_s']):.1f} % | |")
    print("\nleft out:")
    for reason, count in left_out.most_common():
        print(f"- {count} rows: {reason}")


if __name__ == "__main__":
    main()
