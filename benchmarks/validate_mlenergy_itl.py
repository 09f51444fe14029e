"""Inter-token latency percentiles under load: the load kind against ML.ENERGY's measured
median, p90 and p99 ITL of vLLM serving at a full running batch.

Usage: python benchmarks/validate_mlenergy_itl.py [--length-cv CV ...] [--tasks DIR]

Each ML.ENERGY run kept ``avg_batch_size`` sequences running (its ``max_num_seqs``, or what
its KV cache held) and measured every token's latency, so a step that admits a new prompt
shows in the tail: at batch b and mean output O, about b / O prompts join each step. Each
run is written as the measurement format's ``load`` row that keeps the same batch running,
a closed loop of ``round(avg_batch_size)`` clients (the converted ``serving`` row of
``energylens measurements convert mlenergy`` with ``workload = load``, its ``concurrency``
and the run's ``p90_itl_ms`` / ``p99_itl_ms`` as ``itl_p90_s`` / ``itl_p99_s``), and
predicted by ``validate measurements`` with the shipped calibration (whose serving
constants were fitted on these runs' means, never on a percentile). Host-paced runs are
screened as the fits screen them, each task file's against the other task files of its
folder (a reasoning run is judged against the model's chat run), and left out of the
tables. The runs do not record
their prompt or output lengths beyond the means, and how much the lengths vary sets how
often prompts arrive together: ``--length-cv`` draws both from gamma distributions of that
CV (``length_cv``); by default the output-length CV of the Azure 2023 conversation trace
(``data/measurements/traces/splitwise_conv.csv``), and 0 (fixed lengths) beside it.
Validation only: nothing is fitted.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from energylens.calibration.file import default_calibration
from energylens.measurements.convert import Converted, Options, converters, to_csv
from energylens.measurements.user_csv import load_user_csv
from energylens.validation.kshot import RowOutcome, validate_measured

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "data" / "measurements" / "mlenergy" / "tasks"
CONVERSATIONS = ROOT / "data" / "measurements" / "traces" / "splitwise_conv.csv"
METRICS = ("itl_p50_s", "itl_p90_s", "itl_p99_s")
TAILS = {"itl_p90_s": "p90_itl_ms", "itl_p99_s": "p99_itl_ms"}


def trace_output_cv(path: Path = CONVERSATIONS) -> float:
    """Coefficient of variation of the output lengths of a Vidur-format trace."""
    with path.open() as f:
        outputs = [float(r["num_decode_tokens"]) for r in csv.DictReader(f)]
    return statistics.pstdev(outputs) / statistics.fmean(outputs)


def load_rows(task_file: Path, *, length_cv: float) -> list[dict[str, Any]]:
    """The task file's runs as closed-loop ``load`` rows with their ITL percentiles."""
    configs = json.loads(task_file.read_text())["configurations"]
    siblings = tuple(f for f in sorted(task_file.parent.glob("*.json")) if f != task_file)
    rows = converters()["mlenergy"](task_file, Options(screen_with=siblings)).rows
    out = []
    for row, config in zip(rows, configs, strict=True):
        if row["input_tokens"] is None:
            continue  # a task without an input length: refused as it is in validate
        out.append({**row, "workload": "load", "concurrency": max(1, round(row["batch"])),
                    "length_cv": length_cv,
                    **{m: config[key] / 1e3 for m, key in TAILS.items() if key in config}})
    return out


def predict(rows: list[dict[str, Any]]) -> list[RowOutcome]:
    """``validate measurements`` on ``rows``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "itl.csv"
        path.write_text(to_csv(Converted(rows=rows)))
        return validate_measured(load_user_csv(path), calibration=default_calibration()).rows


def errors(outcomes: list[RowOutcome], metric: str, keep: Any = None) -> list[float]:
    """Signed relative errors of ``metric`` over the predicted, unscreened rows."""
    return [o.predicted[metric] / o.row.measured[metric] - 1 for o in outcomes
            if o.error is None and not o.screened and metric in o.predicted
            and metric in o.row.measured and (keep is None or keep(o))]


def table(results: dict[float, list[RowOutcome]]) -> list[str]:
    """Markdown: MAPE (median signed error) per task and metric, for each length CV."""
    out = ["| length CV | task | rows | " + " | ".join(METRICS) + " |",
           "|---|---|---|" + "---|" * len(METRICS)]
    for cv, outcomes in results.items():
        tasks = sorted({str(o.row.columns.get("task")) for o in outcomes})
        for task in [*tasks, "all"]:
            keep = None if task == "all" else (lambda o, t=task: o.row.columns.get("task") == t)
            cells = []
            for metric in METRICS:
                e = errors(outcomes, metric, keep)
                cells.append(f"{100 * statistics.fmean(abs(x) for x in e):.1f} % "
                             f"({100 * statistics.median(e):+.0f} %)" if e else "-")
            count = len(errors(outcomes, METRICS[0], keep))
            out.append(f"| {cv:.2f} | {task} | {count} | " + " | ".join(cells) + " |")
    return out


#: Running-batch bands of the second table (sequences of the whole deployment).
BANDS = ((1, 16), (17, 128), (129, 4096))


def by_batch(outcomes: list[RowOutcome]) -> list[str]:
    """Markdown: MAPE (median signed error) per running-batch band, and the median of
    measured minus predicted p99 in ms (what the tail misses in absolute time)."""
    out = ["| running batch | rows | " + " | ".join(METRICS) + " | p99 measured - predicted, median |",
           "|---|---|" + "---|" * len(METRICS) + "---|"]
    for low, high in BANDS:
        def keep(o: RowOutcome, low: int = low, high: int = high) -> bool:
            return low <= float(o.row.values["batch"]) < high + 1
        cells = []
        for metric in METRICS:
            e = errors(outcomes, metric, keep)
            cells.append(f"{100 * statistics.fmean(abs(x) for x in e):.1f} % "
                         f"({100 * statistics.median(e):+.0f} %)" if e else "-")
        gap = [1e3 * (o.row.measured["itl_p99_s"] - o.predicted["itl_p99_s"]) for o in outcomes
               if keep(o) and o.error is None and not o.screened and "itl_p99_s" in o.predicted]
        out.append(f"| {low}-{high} | {len(errors(outcomes, METRICS[0], keep))} | "
                   + " | ".join(cells) + f" | {statistics.median(gap):+.1f} ms |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length-cv", type=float, nargs="+", default=None,
                        help="length CVs to run (default: 0 and the conversation trace's)")
    parser.add_argument("--tasks", type=Path, default=TASKS)
    args = parser.parse_args()
    cvs = args.length_cv if args.length_cv is not None else [0.0, round(trace_output_cv(), 2)]
    results = {}
    for cv in cvs:
        rows = [r for f in sorted(args.tasks.glob("*.json")) for r in load_rows(f, length_cv=cv)]
        results[cv] = predict(rows)
    print("\n".join(table(results)))
    for cv, outcomes in results.items():
        flat = {m: [o.predicted["itl_p50_s"] / o.row.measured[m] - 1 for o in outcomes
                    if o.error is None and not o.screened and m in o.row.measured
                    and "itl_p50_s" in o.predicted] for m in ("itl_p90_s", "itl_p99_s")}
        print(f"\nLength CV {cv:.2f}, no tail (every percentile read as the predicted median "
              "step): " + ", ".join(f"{m} {100 * statistics.fmean(abs(x) for x in e):.1f} % "
                                    f"({100 * statistics.median(e):+.0f} %)"
                                    for m, e in flat.items()))
        print(f"\nLength CV {cv:.2f}, every task, per running batch:")
        print("\n".join(by_batch(outcomes)))


if __name__ == "__main__":
    main()
