"""Embedded storage speed: Optuna journal file vs SQLite, 2,000 trials of a cheap objective.

Both write paths of the search engine are timed through ``search.runner.run_study`` on
the toy problem (evaluation cost is negligible): the Optuna engine with a random sampler
(one trial at a time: ask, set constraints and attrs, tell) and the grid engine (batched
``study.add_trials``, the path pymoo uses too).

Measured 2026-11 on the dev container (2 cores, local disk), trials/s:

    storage   optuna engine   grid engine
    journal           218         1,564
    sqlite             28            97

The journal file is ~8x (one at a time) to ~16x (batched) faster, so it is the default
(``<results>/storage.journal``). Run: ``python benchmarks/bench_search_storage.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import optuna

from search.config import load_study
from search.runner import run_study
from search.toy import ToyDeployment, write_toy_study


def measure(*, folder: Path, storage: str, engine: str, n_trials: int) -> float:
    """Trials per second of one fresh study."""
    study_file = write_toy_study(folder, sampler="random", seed=0)
    config = replace(load_study(study_file).with_engine(engine), name=f"bench-{engine}")
    start = time.perf_counter()
    run_study(config=config, problem=ToyDeployment(), n_trials=n_trials, storage=storage)
    return n_trials / (time.perf_counter() - start)


def main() -> None:
    """Print trials/s for each storage and engine."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"{'storage':8} {'engine':7} {'trials/s':>9}")
    for engine in ("optuna", "grid"):
        for name in ("journal", "sqlite"):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                storage = (
                    str(folder / "storage.journal")
                    if name == "journal"
                    else f"sqlite:///{folder / 'storage.db'}"
                )
                rate = measure(folder=folder, storage=storage, engine=engine, n_trials=args.trials)
            print(f"{name:8} {engine:7} {rate:9.0f}")


if __name__ == "__main__":
    main()
