"""Quickstart study wall time, per-500-trial slices, CPU time and peak memory, per storage.

Runs ``studies/llama70b_tpot.yaml`` (2,000 trials, Optuna NSGA-II, a generation of 50 at a
time) end to end (sampling, prediction, storage, report) with the embedded journal file and
with SQLite, ``--repeats`` times each, every run in a fresh process and folder, and prints
medians: wall time of the run and of the report, the wall time of each 500-trial slice (flat
when the per-trial cost does not grow with the study), CPU time, the share of the run spent
in the objective, and peak RSS. ``--cli`` also times ``energylens study run`` as a fresh
process (imports and report included).
Usage: ``python benchmarks/bench_study.py [--repeats 3] [--trials 2000] [--cli]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "llama70b_tpot.yaml"
SLICE = 500


class Timed:
    """The problem, recording when each batch finished and the time spent inside it."""

    def __init__(self, problem: Any) -> None:
        self.problem = problem
        self.marks: list[tuple[int, float]] = []
        self.inside_s = 0.0
        self.count = 0

    def evaluate(self, params: Any) -> Any:
        return self.evaluate_many([params])[0]

    def evaluate_many(self, batch: list[Any]) -> list[Any]:
        start = time.perf_counter()
        many = getattr(self.problem, "evaluate_many", None)
        out = many(batch) if many is not None else [self.problem.evaluate(p) for p in batch]
        end = time.perf_counter()
        self.inside_s += end - start
        self.count += len(batch)
        self.marks.append((self.count, end))
        return out


def one_run(*, storage_kind: str, trials: int) -> dict[str, Any]:
    """One complete study run plus its report, in a fresh folder (this process)."""
    import optuna

    from energylens.cli.study import study_problem
    from search.config import load_study
    from search.report import write_report
    from search.runner import run_study

    optuna.logging.set_verbosity(logging.WARNING)
    config = load_study(STUDY)
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder)
        storage = (f"sqlite:///{results / 'study.db'}" if storage_kind == "sqlite"
                   else str(results / "storage.journal"))
        config = replace(config, results=results, storage=storage)
        problem = Timed(study_problem(config))
        start, cpu = time.perf_counter(), time.process_time()
        study = run_study(config=config, problem=problem, n_trials=trials)
        run_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        write_report(config=config, study=study)
        report_s = time.perf_counter() - start - run_s
    slices, last = [], start
    for k in range(SLICE, trials + 1, SLICE):
        at = next(t for n, t in problem.marks if n >= k)
        slices.append(at - last)
        last = at
    return {"run_s": run_s, "report_s": report_s, "cpu_s": cpu_s, "objective_s": problem.inside_s,
            "slices_s": slices, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def cli_run(trials: int) -> float:
    """Wall time of ``energylens study run`` as a fresh process (imports, run, report), on a
    copy of the study file whose results and storage are in a temporary folder."""
    import yaml

    with tempfile.TemporaryDirectory() as folder:
        data = yaml.safe_load(STUDY.read_text())
        data["space"] = str((STUDY.parent / data["space"]).resolve())
        data["results"] = str(Path(folder) / "results")
        study = Path(folder) / STUDY.name
        study.write_text(yaml.safe_dump(data))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "energylens.cli", "study", "run", str(study), "--trials",
                        str(trials)], check=True, capture_output=True, cwd=folder)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--storages", default="journal,sqlite")
    parser.add_argument("--cli", action="store_true", help="also time the command line")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(storage_kind=args.child, trials=args.trials)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    for kind in args.storages.split(","):
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, __file__, "--child", kind, "--trials", str(args.trials)],
                                 check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("run_s", "report_s", "cpu_s", "objective_s", "peak_mib")}
        slices = [statistics.median(r["slices_s"][i] for r in runs) for i in range(len(runs[0]["slices_s"]))]
        rate = args.trials / med["run_s"]
        print(f"{kind:8s} median over {args.repeats}: run {med['run_s']:.2f} s ({rate:.0f} "
              f"trials/s), report {med['report_s']:.2f} s, CPU {med['cpu_s']:.2f} s, objective "
              f"{med['objective_s']:.2f} s ({med['objective_s'] / med['run_s']:.0%} of the run), "
              f"peak RSS {med['peak_mib']:.0f} MiB")
        print(f"         per {SLICE}-trial slice: {', '.join(f'{s:.2f}' for s in slices)} s; "
              f"runs: {', '.join(format(r['run_s'], '.2f') for r in runs)} s")
    if args.cli:
        walls = [cli_run(args.trials) for _ in range(args.repeats)]
        median = statistics.median(walls)
        print(f"energylens study run (fresh process, report included): median {median:.2f} s; "
              f"runs: {', '.join(f'{w:.2f}' for w in walls)} s")


if __name__ == "__main__":
    main()
