"""Embedded storage speed: Optuna journal file vs SQLite, 2,000 trials of a cheap objective.

Both write paths of the search engine are timed through ``search.runner.run_study`` on
the toy problem (evaluation cost is negligible): the Optuna engine with a random sampler
(one trial at a time: ask, set constraints and attrs, tell) and the grid engine (batched
``study.add_trials``, the path pymoo uses too).

Measured 2026-11 on the dev container (2 cores, local disk, other jobs running), trials/s:

    storage         optuna engine   grid engine
    journal                  463         5,277
    journal-fsync             85         2,170
    sqlite                    15            97

``journal`` is ``search.storage.JournalFile`` (fsync at most once a second);
``journal-fsync`` fsyncs every append like Optuna's ``JournalFileBackend`` (the default
before, 218 trials/s one at a time on a quiet disk: fsync-bound rows swing with disk load).
The journal file is the fastest embedded storage by far, so it is the default
(``<results>/storage.journal``). Run: ``python benchmarks/bench_search_storage.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import optuna

import search.storage
from search.config import load_study
from search.runner import run_study
from search.toy import ToyDeployment, write_toy_study


def measure(*, folder: Path, storage: str, engine: str, n_trials: int) -> float:
    """Trials per second of one fresh study."""
    study_file = write_toy_study(folder, sampler="random", seed=0)
    config = replace(load_study(study_file).with_engine(engine), name=f"bench-{engine}")
    start = time.perf_counter()
    run_study(config=config.overridden(storage=storage), problem=ToyDeployment(), n_trials=n_trials)
    return n_trials / (time.perf_counter() - start)


def main() -> None:
    """Print trials/s for each storage and engine."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    interval = search.storage.SYNC_INTERVAL_S
    print(f"{'storage':14} {'engine':7} {'trials/s':>9}")
    for engine in ("optuna", "grid"):
        for name in ("journal", "journal-fsync", "sqlite"):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                storage = f"sqlite:///{folder / 'storage.db'}" if name == "sqlite" else str(folder / "j")
                # journal-fsync: fsync on every append, as Optuna's own JournalFileBackend does
                search.storage.SYNC_INTERVAL_S = 0.0 if name == "journal-fsync" else interval
                rate = measure(folder=folder, storage=storage, engine=engine, n_trials=args.trials)
            print(f"{name:14} {engine:7} {rate:9.0f}")
    search.storage.SYNC_INTERVAL_S = interval


if __name__ == "__main__":
    main()
