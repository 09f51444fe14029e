"""Engines: each runs a study until it holds a number of completed trials.

Every engine writes evaluations into the same Optuna storage with the conventions of
:mod:`search.outcome`, so reports and rankings work the same whatever ran.
"""

from __future__ import annotations

from collections.abc import Callable

from optuna.storages import BaseStorage

from search.config import StudyConfig
from search.engines import grid_engine, optuna_engine, pymoo_engine
from search.problem import Problem
from search.progress import TrialProgress

EngineRun = Callable[..., None]
"""``run(*, config, problem, storage, n_total, seed, progress) -> None``."""

_RUNS: dict[str, EngineRun] = {
    "optuna": optuna_engine.run,
    "pymoo": pymoo_engine.run,
    "grid": grid_engine.run,
}


def run_engine(
    *,
    config: StudyConfig,
    problem: Problem,
    storage: BaseStorage,
    n_total: int,
    seed: int | None,
    progress: TrialProgress,
) -> None:
    """Run ``config.engine`` until the study has ``n_total`` completed trials (or, for grid
    and pymoo, until the space has no new point to offer)."""
    _RUNS[config.engine](
        config=config, problem=problem, storage=storage, n_total=n_total, seed=seed, progress=progress
    )
