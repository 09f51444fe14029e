"""Quickstart study wall time and trials/s per storage, on the real objective.

Runs ``studies/llama70b_tpot.yaml`` (2,000 trials, Optuna NSGA-II) end to end (sampling,
prediction, storage, report) with the embedded journal file and with SQLite, ``--repeats``
times each in fresh folders, and prints the median wall time and trials/s.
Usage: ``python benchmarks/bench_study.py [--repeats 3] [--trials 2000]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import optuna

from energylens.cli.study import study_problem
from search.config import load_study
from search.report import write_report
from search.runner import run_study

STUDY = Path(__file__).resolve().parents[1] / "studies" / "llama70b_tpot.yaml"


def one_run(*, storage_kind: str, trials: int) -> float:
    """Wall time of one complete study run plus its report, in a fresh folder."""
    config = load_study(STUDY)
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder)
        storage = (f"sqlite:///{results / 'study.db'}" if storage_kind == "sqlite"
                   else str(results / "storage.journal"))
        config = replace(config, results=results, storage=storage)
        start = time.perf_counter()
        study = run_study(config=config, problem=study_problem(config), n_trials=trials)
        write_report(config=config, study=study)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    optuna.logging.set_verbosity(logging.WARNING)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    for kind in ("journal", "sqlite"):
        walls = [one_run(storage_kind=kind, trials=args.trials) for _ in range(args.repeats)]
        median = statistics.median(walls)
        print(f"{kind:8s} median {median:6.1f} s over {args.repeats} runs "
              f"({args.trials / median:6.1f} trials/s); runs: {', '.join(f'{w:.1f}' for w in walls)}")


if __name__ == "__main__":
    main()
