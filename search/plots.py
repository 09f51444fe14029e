"""PNG figures of a study, drawn on Agg canvases (no pyplot, no global backend state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from search.config import StudyConfig

LOG_AXIS_DECADES = 1.0
"""An axis whose positive values span more than this many decades is drawn in log scale
(energy per token spans 0.5-100 J: on a linear axis the front is squashed against it)."""

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
    """Write :func:`pareto_figure` to ``path``."""
    _save(pareto_figure(config=config, trials=trials, front=front), path)


def pareto_figure(*, config: StudyConfig, trials: pd.DataFrame, front: pd.DataFrame) -> Figure:
    """First two objectives (or the only one against trial number): feasible and infeasible
    points, the feasible front as a step line, and SLO lines on plotted metrics; an axis
    whose values span more than :data:`LOG_AXIS_DECADES` decades is logarithmic."""
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
    for column, set_scale in ((xcol, ax.set_xscale), (ycol, ax.set_yscale)):
        slo_bounds = [c.bound for c in config.constraints if c.metric == column]
        if spans_decades(np.concatenate([trials[column].to_numpy(dtype=float), slo_bounds])):
            set_scale("log")
    ax.set_xlabel("trial" if x is None else axis_label(xcol))
    ax.set_ylabel(axis_label(ycol))
    ax.set_title(config.name)
    ax.legend(loc="best", fontsize="small")
    return fig


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
    """Horizontal bars: loss when pinned to baseline (with the seed-noise band) beside
    global importance."""
    ranking = ranking.iloc[::-1]
    fig = Figure(figsize=(10, 0.5 * len(ranking) + 1.5))
    left, right = fig.subplots(1, 2, sharey=True)
    lost = ranking["feasibility_lost"].to_numpy()
    loss = ranking["loss_pct"].fillna(0.0).to_numpy()
    noise = float(ranking["noise_pct"].iloc[0]) if "noise_pct" in ranking and len(ranking) else 0.0
    if noise > 0:
        left.axvspan(-noise, noise, color="0.88", zorder=0, label=f"seed noise (\u00b1{noise:.3g} %)")
        left.legend(loc="lower right", fontsize="small")
    left.barh(ranking["knob"], loss, color=np.where(lost, "tab:red", "tab:blue"))
    for i, flag in enumerate(lost):
        if flag:
            left.text(0, i, " no feasible configuration", va="center", fontsize="small")
    left.axvline(0, c="0.3", lw=0.8)
    linear_up_to = max(noise if noise > 0 else 0.0, 1.0)
    largest = float(np.abs(loss).max()) if len(loss) else 0.0
    if largest > 30 * linear_up_to:  # one knob dwarfs the rest: log beyond the noise band
        left.set_xscale("symlog", linthresh=linear_up_to)
        decades = 10.0 ** np.arange(np.ceil(np.log10(linear_up_to)), np.ceil(np.log10(largest)) + 1)
        left.set_xticks([*(-decades[decades <= -loss.min()]), 0.0, *decades])
        left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.set_xlabel("loss of best feasible value when pinned, vs unpinned control [%]")
    right.barh(ranking["knob"], ranking["importance"].fillna(0.0), color="tab:gray")
    right.set_xlabel("PED-ANOVA importance (feasible trials)")
    fig.suptitle(title)
    _save(fig, path)


def spans_decades(values: Sequence[float] | np.ndarray, decades: float = LOG_AXIS_DECADES) -> bool:
    """Whether ``values`` (NaN ignored) are all positive and span more than ``decades``
    (the test for a log axis; plotted SLO bounds count as values)."""
    array = np.asarray(values, dtype=float)
    array = array[~np.isnan(array)]
    return bool(array.size and array.min() > 0 and array.max() / array.min() > 10**decades)


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
