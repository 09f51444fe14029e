"""Where the Pareto points' steps spend their time and energy (``energylens study report``):
``breakdown.csv`` (per point, step and class of work: seconds and joules,
:mod:`energylens.cost.breakdown`) and ``breakdown.png`` (each point's decode-step energy and
time split by class), so that a front shows which work its points are made of and which
optimisation would move them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from energylens.cost.breakdown import CLASSES, StepBreakdown, representative_breakdown
from energylens.deployment import Deployment
from energylens.errors import EnergyLensError
from energylens.model.config import ModelConfig
from energylens.predict import checked_context
from energylens.runtime.launch import point_name
from energylens.study.objective import row_params
from energylens.workloads import Workload

#: Pareto points broken down at most (the first ones of ``pareto.csv``).
MAX_POINTS = 24


def front_breakdown(*, front: pd.DataFrame, model: ModelConfig, fixed: Mapping[str, Any],
                    knobs: tuple[str, ...],
                    deployment_of: Callable[[dict[str, Any]], Deployment],
                    workload_of: Callable[[dict[str, Any]], Workload]) -> pd.DataFrame:
    """One row per (point, step, class) of the first :data:`MAX_POINTS` points of ``front``;
    a point whose deployment cannot be priced is left out."""
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = [{str(k): v for k, v in r.items()}
                                     for r in front.head(MAX_POINTS).to_dict("records")]
    for index, row in enumerate(records):
        params = row_params(row, knobs=knobs, fixed=fixed)
        workload = workload_of(params)
        running = row.get("mean_running")
        sequences = float(running) if isinstance(running, int | float) and running == running \
            else float(workload.concurrency or workload.batch)
        try:
            _, ctx = checked_context(model=model, gpu=str(params.get("gpu", "H100")),
                                     deployment=deployment_of(params))
            steps = representative_breakdown(ctx=ctx, sequences=sequences,
                                             input_tokens=workload.input_tokens,
                                             output_tokens=workload.output_tokens)
        except EnergyLensError:
            continue
        rows.extend(_rows(point_name(row, index), steps))
    return pd.DataFrame(rows, columns=["point", "step", "work", "seconds", "joules"])


def _rows(point: str, steps: Mapping[str, StepBreakdown]) -> list[dict[str, Any]]:
    return [{"point": point, "step": name, "work": label,
             "seconds": step.seconds.get(label, 0.0), "joules": step.joules.get(label, 0.0)}
            for name, step in steps.items() for label in CLASSES
            if label in step.seconds or label in step.joules]


def write_front_breakdown(*, results: Path, model: ModelConfig, fixed: Mapping[str, Any],
                          knobs: tuple[str, ...],
                          deployment_of: Callable[[dict[str, Any]], Deployment],
                          workload_of: Callable[[dict[str, Any]], Workload]) -> list[Path]:
    """``results/breakdown.csv`` and ``breakdown.png`` for ``results/pareto.csv``'s points;
    the paths written (none without a front)."""
    path = results / "pareto.csv"
    if not path.is_file():
        return []
    table = front_breakdown(front=pd.read_csv(path), model=model, fixed=fixed, knobs=knobs,
                            deployment_of=deployment_of, workload_of=workload_of)
    if table.empty:
        return []
    csv_path, png_path = results / "breakdown.csv", results / "breakdown.png"
    table.to_csv(csv_path, index=False)
    _plot(table[table["step"] == "decode"], png_path)
    return [csv_path, png_path]


def _plot(decode: pd.DataFrame, path: Path) -> None:
    """Two stacked bars per point: its decode step's energy and time shares by class."""
    points = list(dict.fromkeys(decode["point"]))
    works = [w for w in CLASSES if w in set(decode["work"])]
    figure = Figure(figsize=(max(6.0, 0.5 * len(points) + 3.0), 6.5))
    FigureCanvasAgg(figure)
    palette = colormaps["tab10"]  # ten classes of work; static power in grey
    colours = {w: "lightgrey" if w == "static" else palette(i % 10)
               for i, w in enumerate(CLASSES)}
    for row, (column, unit) in enumerate((("joules", "energy"), ("seconds", "time"))):
        axes = figure.add_subplot(2, 1, row + 1)
        pivot = decode.pivot_table(index="point", columns="work", values=column,
                                   aggfunc="sum").reindex(index=points, columns=works).fillna(0.0)
        shares = pivot.div(pivot.sum(axis=1).replace(0.0, np.nan), axis=0).fillna(0.0)
        bottom = np.zeros(len(points))
        for work in works:
            axes.bar(points, shares[work].to_numpy(), bottom=bottom, color=colours[work],
                     label=work)
            bottom = bottom + shares[work].to_numpy()
        axes.set_ylabel(f"share of the decode step's {unit}")
        axes.set_ylim(0.0, 1.0)
        axes.tick_params(axis="x", labelrotation=60, labelsize=7)
        if row == 0:
            axes.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, 1.35))
    figure.suptitle("Pareto points: where a decode step's energy and time go", y=0.995)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
