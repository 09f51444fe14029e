"""PNG figures of a study, drawn on Agg canvases (no pyplot, no global backend state)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from search.config import StudyConfig

# Longest suffix first: "_per_s" before "_s".
_UNITS = (
    ("_per_s", "1/s"),
    ("_bytes", "B"),
    ("_flop", "FLOP"),
    ("_hz", "Hz"),
    ("_s", "s"),
    ("_j", "J"),
    ("_w", "W"),
)


def axis_label(metric: str) -> str:
    """``energy_per_token_j`` -> ``energy per token [J]``; ``tokens_per_s`` -> ``tokens [1/s]``."""
    for suffix, unit in _UNITS:
        if metric.endswith(suffix) and len(metric) > len(suffix):
            return f"{metric[: -len(suffix)].replace('_', ' ')} [{unit}]"
    return metric.replace("_", " ")


def plot_pareto(*, config: StudyConfig, trials: pd.DataFrame, front: pd.DataFrame, path: Path) -> None:
    """First two objectives (or the only one against trial number): feasible and infeasible
    points, the feasible front as a step line, and SLO lines on plotted metrics."""
    fig = Figure(figsize=(7, 5))
    ax = fig.subplots()
    if len(config.objectives) >= 2:
        x, y = config.objectives[0], config.objectives[1]
        xcol, ycol = x.metric, y.metric
    else:
        x, y = None, config.objectives[0]
        xcol, ycol = "number", y.metric
    feasible = trials[trials["feasible"]]
    infeasible = trials[~trials["feasible"]].dropna(subset=[xcol, ycol])
    ax.scatter(infeasible[xcol], infeasible[ycol], s=10, c="lightgray", label="infeasible")
    ax.scatter(feasible[xcol], feasible[ycol], s=12, c="tab:blue", alpha=0.6, label="feasible")
    if len(front):
        line = front.sort_values(xcol)
        drawstyle = "steps-post" if x is None or x.direction == "minimize" else "steps-pre"
        ax.plot(line[xcol], line[ycol], drawstyle=drawstyle, c="tab:red", lw=1.5)
        ax.scatter(line[xcol], line[ycol], s=30, c="tab:red", zorder=3, label="feasible front")
    for constraint in config.constraints:
        if constraint.metric == ycol:
            ax.axhline(constraint.bound, ls="--", c="tab:orange", label=f"SLO {constraint}")
        elif constraint.metric == xcol:
            ax.axvline(constraint.bound, ls="--", c="tab:orange", label=f"SLO {constraint}")
    _log_if_wide(ax.set_xscale, trials[xcol])
    _log_if_wide(ax.set_yscale, trials[ycol])
    ax.set_xlabel("trial" if x is None else axis_label(xcol))
    ax.set_ylabel(axis_label(ycol))
    ax.set_title(config.name)
    ax.legend(loc="best", fontsize="small")
    _save(fig, path)


def plot_hypervolume(*, numbers: np.ndarray, history: np.ndarray, title: str, path: Path) -> None:
    """Feasible-front hypervolume against trial number."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.plot(numbers, history, drawstyle="steps-post")
    ax.set_xlabel("trial")
    ax.set_ylabel("hypervolume (normalised, ref. 1.1)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_ranking(*, ranking: pd.DataFrame, title: str, path: Path) -> None:
    """Horizontal bars: loss when pinned to baseline beside global importance."""
    ranking = ranking.iloc[::-1]
    fig = Figure(figsize=(10, 0.5 * len(ranking) + 1.5))
    left, right = fig.subplots(1, 2, sharey=True)
    lost = ranking["feasibility_lost"].to_numpy()
    loss = ranking["loss_pct"].fillna(0.0).to_numpy()
    left.barh(ranking["knob"], loss, color=np.where(lost, "tab:red", "tab:blue"))
    for i, flag in enumerate(lost):
        if flag:
            left.text(0, i, " no feasible configuration", va="center", fontsize="small")
    left.set_xlabel("loss of best feasible value when pinned [%]")
    right.barh(ranking["knob"], ranking["importance"].fillna(0.0), color="tab:gray")
    right.set_xlabel("PED-ANOVA importance (feasible trials)")
    fig.suptitle(title)
    _save(fig, path)


def _log_if_wide(set_scale: Callable[[str], None], values: pd.Series) -> None:
    """Log scale when positive values span more than two decades."""
    values = values.dropna()
    if len(values) and values.min() > 0 and values.max() / values.min() > 100:
        set_scale("log")


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
