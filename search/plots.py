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
from search.files import atomic_path, write_atomic
from search.pareto import REFERENCE_MARGIN
from search.problem import ERROR_PREFIX

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


def color_column(config: StudyConfig) -> str | None:
    """The knob points are coloured by: the first of the problem schema's ``color_by``
    that is a knob of the space."""
    wanted = () if config.schema is None else config.schema.color_by
    return next((name for name in wanted if name in config.space.names), None)


def plotted_columns(config: StudyConfig) -> tuple[str, str]:
    """(x, y) columns of the Pareto plot: the first two objectives, or trial number and the
    only objective."""
    if len(config.objectives) >= 2:
        return config.objectives[0].metric, config.objectives[1].metric
    return "number", config.objectives[0].metric


def pareto_figure(*, config: StudyConfig, trials: pd.DataFrame, front: pd.DataFrame) -> Figure:
    """First two objectives (or the only one against trial number): feasible points (coloured
    by :func:`color_column` when there is one) and infeasible ones, the feasible front as a
    step line, a line for each SLO on a plotted metric (the other SLOs are listed in the
    title); an axis whose values span more than :data:`LOG_AXIS_DECADES` decades is
    logarithmic."""
    fig = Figure(figsize=(7, 5))
    ax = fig.subplots()
    xcol, ycol = plotted_columns(config)
    x = config.objectives[0] if xcol != "number" else None
    feasible = trials[trials["feasible"]]
    infeasible = trials[~trials["feasible"]].dropna(subset=[xcol, ycol])
    ax.scatter(infeasible[xcol], infeasible[ycol], s=10, c="lightgray", label="infeasible")
    group = color_column(config)
    if group is None:
        ax.scatter(feasible[xcol], feasible[ycol], s=12, c="tab:blue", alpha=0.6, label="feasible")
    else:
        for value, points in feasible.groupby(group, sort=False, dropna=False):
            ax.scatter(points[xcol], points[ycol], s=12, alpha=0.6, label=_group_label(group, value))
    if len(front):
        line = front.sort_values(xcol)
        drawstyle = "steps-post" if x is None or x.direction == "minimize" else "steps-pre"
        ax.plot(line[xcol], line[ycol], drawstyle=drawstyle, c="tab:red", lw=1.5)
        ax.scatter(line[xcol], line[ycol], s=30, c="tab:red", zorder=3, label="feasible front")
        xerr, yerr = (_error_bar(line, column) for column in (xcol, ycol))
        if xerr is not None or yerr is not None:
            ax.errorbar(line[xcol], line[ycol], xerr=xerr, yerr=yerr, fmt="none", ecolor="tab:red",
                        alpha=0.5, capsize=2, label="expected error of the front's points")
    elsewhere = []
    for constraint in config.constraints:
        if constraint.metric == ycol:
            ax.axhline(constraint.bound, ls="--", c="tab:orange", label=f"SLO {constraint}")
        elif constraint.metric == xcol:
            ax.axvline(constraint.bound, ls="--", c="tab:orange", label=f"SLO {constraint}")
        else:
            elsewhere.append(str(constraint))
    for column, set_scale in ((xcol, ax.set_xscale), (ycol, ax.set_yscale)):
        slo_bounds = [c.bound for c in config.constraints if c.metric == column]
        if spans_decades(np.concatenate([trials[column].to_numpy(dtype=float), slo_bounds])):
            set_scale("log")
    ax.set_xlabel("trial" if x is None else axis_label(xcol))
    ax.set_ylabel(axis_label(ycol))
    ax.set_title(config.name + (f"\nfeasible also meets {', '.join(elsewhere)}" if elsewhere else ""),
                 fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    return fig


def _group_label(group: str, value: object) -> str:
    """Legend of the feasible points of one ``group`` value (empty: a configuration that
    does not read the knob)."""
    missing = value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))
    return f"feasible, {group} not read" if missing else f"feasible, {group} = {value}"


def _error_bar(front: pd.DataFrame, column: str) -> np.ndarray | None:
    """Absolute error bar of ``column`` at each front point from its relative expected
    error column (:data:`ERROR_PREFIX` + column; missing values draw none), or None."""
    relative = front.get(ERROR_PREFIX + column)
    if relative is None:
        return None
    share = pd.to_numeric(relative, errors="coerce").to_numpy(dtype=float)
    bars = np.abs(front[column].to_numpy(dtype=float)) * share
    return None if np.isnan(bars).all() else np.nan_to_num(bars)


def _plotly_js() -> Path | None:
    """The plotly.js bundle shipped with the plotly package (None without plotly): found
    without importing plotly, whose figure classes cost tens of MiB."""
    import importlib.util

    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    bundle = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return bundle if bundle.is_file() else None


def _points(frame: pd.DataFrame, xcol: str, ycol: str, hover: list[str], **style: object) -> dict:
    """One plotly scatter trace as plain JSON data."""
    return {"type": "scatter", "x": frame[xcol].tolist(), "y": frame[ycol].tolist(),
            "hovertext": hover, "hoverinfo": "text", **style}


def _slo_line(axis: str, bound: float, label: str) -> tuple[dict, dict]:
    """A dashed line across the plot at ``bound`` on ``axis`` (x or y), and its label."""
    other = "x" if axis == "y" else "y"
    shape = {"type": "line", f"{axis}ref": axis, f"{axis}0": bound, f"{axis}1": bound,
             f"{other}ref": "paper", f"{other}0": 0, f"{other}1": 1, "line": {"dash": "dash"}}
    note = {"text": label, "showarrow": False, f"{axis}ref": axis, axis: bound,
            f"{other}ref": "paper", other: 1, "xanchor": "right" if axis == "y" else "left",
            "yanchor": "bottom"}
    return shape, note


def write_pareto_html(*, config: StudyConfig, trials: pd.DataFrame, front: pd.DataFrame, path: Path) -> bool:
    """An interactive Pareto plot (plotly.js, from the optional plotly package): hovering a
    point shows its configuration and metrics. The figure is written as plotly.js data with
    the bundle streamed into the file. Returns False, writing nothing, without plotly."""
    bundle = _plotly_js()
    if bundle is None:
        return False
    import json
    import shutil

    xcol, ycol = plotted_columns(config)
    hover_columns = [*config.space.names, *(c for c in (xcol, ycol) if c != "number"), "infeasible_reason"]

    def hover(frame: pd.DataFrame) -> list[str]:
        rows = frame[hover_columns].astype(object).itertuples(index=False)
        return [
            "<br>".join(f"{c} = {v}" for c, v in zip(hover_columns, row, strict=True)
                        if not pd.isna(v) and v != "")
            for row in rows
        ]

    infeasible = trials[~trials["feasible"]].dropna(subset=[xcol, ycol])
    data = [_points(infeasible, xcol, ycol, hover(infeasible), mode="markers", name="infeasible",
                    marker={"color": "lightgray", "size": 5})]
    feasible = trials[trials["feasible"]]
    group = color_column(config)
    groups = [("feasible", feasible)] if group is None else [
        (_group_label(group, value), points)
        for value, points in feasible.groupby(group, sort=False, dropna=False)
    ]
    data += [_points(points, xcol, ycol, hover(points), mode="markers", name=name, marker={"size": 6})
             for name, points in groups]
    line = front.sort_values(xcol)
    bars = {f"error_{axis}": {"type": "data", "array": err.tolist(), "visible": True}
            for axis, column in (("x", xcol), ("y", ycol))
            if (err := _error_bar(line, column)) is not None}
    data.append(_points(line, xcol, ycol, hover(line.assign(infeasible_reason="")),
                        mode="lines+markers", name="feasible front",
                        line={"color": "red", "shape": "hv"}, **bars))
    shapes, notes = [], []
    for constraint in config.constraints:
        axis = "y" if constraint.metric == ycol else "x" if constraint.metric == xcol else None
        if axis is not None:
            shape, note = _slo_line(axis, float(constraint.bound), f"SLO {constraint}")
            shapes.append(shape)
            notes.append(note)
    layout = {"title": {"text": config.name}, "shapes": shapes, "annotations": notes,
              "xaxis": {"title": {"text": "trial" if xcol == "number" else axis_label(xcol)}},
              "yaxis": {"title": {"text": axis_label(ycol)}}}
    figure = json.dumps({"data": data, "layout": layout}, default=float).replace("</", "<\\/")

    def write(f) -> None:  # the page, with the plotly.js bundle copied in, not held in memory
        f.write('<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body>\n'
                '<div id="pareto" style="height:90vh"></div>\n<script type="text/javascript">\n')
        with bundle.open(encoding="utf-8") as js:
            shutil.copyfileobj(js, f)
        f.write(f'\n</script>\n<script type="text/javascript">\nvar figure = {figure};\n'
                'Plotly.newPlot("pareto", figure.data, figure.layout);\n</script>\n</body></html>\n')

    write_atomic(path, write)
    return True


def plot_hypervolume(
    *, numbers: np.ndarray, history: np.ndarray, n_objectives: int, title: str, path: Path
) -> None:
    """Feasible-front hypervolume against trial number, its scale explained on the axis."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.plot(numbers, history, drawstyle="steps-post")
    ax.set_xlabel("trial")
    most = (1.0 + REFERENCE_MARGIN) ** n_objectives
    ax.set_ylabel(f"hypervolume (at most {most:.3g})")
    ax.set_title(title, fontsize="medium")
    fig.text(
        0.01, 0.01,
        f"objectives scaled so the feasible trials span [0, 1]; reference point {1 + REFERENCE_MARGIN:g} "
        "on each axis",
        fontsize="x-small", color="0.35",
    )
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_ranking(*, ranking: pd.DataFrame, title: str, path: Path, importance_column: str) -> None:
    """Horizontal bars: hypervolume lost when pinned to baseline (with the 95 % noise band)
    beside global importance."""
    ranking = ranking.iloc[::-1]
    fig = Figure(figsize=(11, 0.5 * len(ranking) + 2.0))
    left, right = fig.subplots(1, 2, sharey=True)
    labels = [f"{k} (tie)" if tie else str(k) for k, tie in zip(ranking["knob"], ranking["tie"], strict=True)]
    lost = ranking["feasibility_lost"].to_numpy()
    loss = ranking["hv_loss_pct"].fillna(0.0).to_numpy()
    band = float(ranking["ci95_pct"].iloc[0]) if len(ranking) else 0.0
    band = 0.0 if np.isnan(band) else band
    if band > 0:
        left.axvspan(-band, band, color="0.88", zorder=0, label=f"seed noise, 95 % (\u00b1{band:.3g} %)")
        left.legend(loc="lower right", fontsize="small")
    left.barh(labels, loss, color=np.where(lost, "tab:red", "tab:blue"))
    for i, flag in enumerate(lost):
        if flag:
            left.text(0, i, " no feasible configuration", va="center", fontsize="small")
    left.axvline(0, c="0.3", lw=0.8)
    linear_up_to = max(band, 1.0)
    largest = float(np.abs(loss).max()) if len(loss) else 0.0
    if largest > 30 * linear_up_to:  # one knob dwarfs the rest: log beyond the noise band
        left.set_xscale("symlog", linthresh=linear_up_to)
        decades = 10.0 ** np.arange(np.ceil(np.log10(linear_up_to)), np.ceil(np.log10(largest)) + 1)
        left.set_xticks([*(-decades[decades <= -loss.min()]), 0.0, *decades])
        left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.set_xlabel("hypervolume lost when pinned to baseline [%]\n(vs an unpinned control)")
    right.barh(labels, ranking[importance_column].fillna(0.0), color="tab:gray")
    metric = importance_column.removeprefix("importance[").removesuffix("]")
    right.set_xlabel(f"PED-ANOVA importance for {metric}\n(main study's feasible trials)")
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
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
