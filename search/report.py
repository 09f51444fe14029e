"""Study reports: front and trial tables, Pareto plot, hypervolume history."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from search.config import StudyConfig
from search.frame import front_frame, trials_frame
from search.pareto import bounds, hypervolume_history
from search.plots import plot_hypervolume, plot_pareto


@dataclass(frozen=True, eq=False)
class Report:
    """Files written by :func:`write_report` and the tables they hold."""

    pareto_csv: Path
    trials_csv: Path
    pareto_png: Path
    hypervolume_png: Path
    trials: pd.DataFrame
    """:func:`search.frame.trials_frame` (``trials.csv``)."""
    front: pd.DataFrame
    """:func:`search.frame.front_frame`: distinct feasible configurations (``pareto.csv``)."""


ReportPaths = Report
"""Former name of :class:`Report`."""


def write_report(*, config: StudyConfig, study: optuna.Study) -> Report:
    """Write ``pareto.csv``, ``trials.csv``, ``pareto.png`` and ``hypervolume.png`` into
    ``config.results``.

    ``pareto.csv`` holds the feasible non-dominated configurations only (each once); the
    hypervolume uses the box of all feasible points (see :mod:`search.pareto`).
    """
    folder = config.results
    folder.mkdir(parents=True, exist_ok=True)
    trials = trials_frame(config=config, study=study)
    front = front_frame(config=config, trials=trials)
    report = Report(
        folder / "pareto.csv",
        folder / "trials.csv",
        folder / "pareto.png",
        folder / "hypervolume.png",
        trials=trials,
        front=front,
    )
    trials.to_csv(report.trials_csv, index=False)
    front.to_csv(report.pareto_csv, index=False)
    plot_pareto(config=config, trials=trials, front=front, path=report.pareto_png)
    plot_hypervolume(
        numbers=trials["number"].to_numpy(),
        history=hypervolume_trace(config, trials),
        title=f"{config.name}: feasible-front hypervolume",
        path=report.hypervolume_png,
    )
    return report


def hypervolume_trace(config: StudyConfig, trials: pd.DataFrame) -> np.ndarray:
    """Feasible-front hypervolume after each trial (trials in number order)."""
    names = [o.metric for o in config.objectives]
    feasible = trials["feasible"].to_numpy()
    if not feasible.any():
        return np.zeros(len(trials))
    points = trials[names].to_numpy(dtype=float)
    ideal, nadir = bounds(points[feasible], directions=config.directions)
    return hypervolume_history(points, feasible, directions=config.directions, ideal=ideal, nadir=nadir)
