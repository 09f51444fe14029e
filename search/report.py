"""Study reports: front and trial tables, Pareto plots, hypervolume history.

Every file is written atomically (:mod:`search.files`): a killed report leaves the
previous file or the new one, never a truncated one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from search.config import StudyConfig
from search.files import write_atomic
from search.frame import front_frame, trials_frame
from search.pareto import bounds, hypervolume_history
from search.plots import plot_hypervolume, plot_pareto, write_pareto_html
from search.problem import FrontAnnotator


@dataclass(frozen=True, eq=False)
class Report:
    """Files written by :func:`write_report` and the tables they hold."""

    pareto_csv: Path
    trials_csv: Path
    pareto_png: Path
    hypervolume_png: Path
    pareto_html: Path | None
    """The interactive plot, or None when plotly is not installed."""
    trials: pd.DataFrame
    """:func:`search.frame.trials_frame` (``trials.csv``)."""
    front: pd.DataFrame
    """:func:`search.frame.front_frame`: distinct feasible configurations (``pareto.csv``)."""

    @property
    def files(self) -> list[Path]:
        """Every file written."""
        paths = [self.pareto_csv, self.trials_csv, self.pareto_png, self.hypervolume_png, self.pareto_html]
        return [p for p in paths if p is not None]


def write_report(*, config: StudyConfig, study: optuna.Study,
                 annotate: FrontAnnotator | None = None) -> Report:
    """Write ``pareto.csv``, ``trials.csv``, ``pareto.png``, ``hypervolume.png`` and, when
    plotly is installed, ``pareto.html`` into ``config.results``.

    ``pareto.csv`` holds the feasible non-dominated configurations only (each once), with
    the columns ``annotate`` adds; the hypervolume uses the box of all feasible points (see
    :mod:`search.pareto`).
    """
    folder = config.results
    trials = trials_frame(config=config, study=study)
    front = front_frame(config=config, trials=trials)
    if annotate is not None:
        front = annotate(config, front)
    write_atomic(folder / "trials.csv", lambda f: trials.to_csv(f, index=False))
    write_atomic(folder / "pareto.csv", lambda f: front.to_csv(f, index=False))
    plot_pareto(config=config, trials=trials, front=front, path=folder / "pareto.png")
    plot_hypervolume(
        numbers=trials["number"].to_numpy(),
        history=hypervolume_trace(config, trials),
        n_objectives=len(config.objectives),
        title=f"{config.name}: feasible-front hypervolume",
        path=folder / "hypervolume.png",
    )
    html = folder / "pareto.html"
    return Report(
        folder / "pareto.csv",
        folder / "trials.csv",
        folder / "pareto.png",
        folder / "hypervolume.png",
        html if write_pareto_html(config=config, trials=trials, front=front, path=html) else None,
        trials=trials,
        front=front,
    )


def hypervolume_trace(config: StudyConfig, trials: pd.DataFrame) -> np.ndarray:
    """Feasible-front hypervolume after each trial (trials in number order)."""
    names = [o.metric for o in config.objectives]
    feasible = trials["feasible"].to_numpy()
    if not feasible.any():
        return np.zeros(len(trials))
    points = trials[names].to_numpy(dtype=float)
    ideal, nadir = bounds(points[feasible], directions=config.directions)
    return hypervolume_history(points, feasible, directions=config.directions, ideal=ideal, nadir=nadir)
