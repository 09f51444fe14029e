"""Where the Pareto points' steps spend their time and energy (``energylens study report``):
``breakdown.csv`` (per point, step and class of work: seconds and joules,
:mod:`energylens.cost.breakdown`) and ``breakdown.png`` (each point's decode-step energy and
time split by class), so that a front shows which work its points are made of and which
optimisation would move them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from energylens.cost.breakdown import CLASSES, StepBreakdown, representative_breakdown
from energylens.errors import EnergyLensError
from energylens.predict import checked_context
from energylens.runtime.launch import point_name
from energylens.study.objective import DeploymentProblem, row_params
from search.files import atomic_path, write_atomic

#: Pareto points broken down at most (the first ones of ``pareto.csv``).
MAX_POINTS = 24


def front_breakdown(*, front: pd.DataFrame, problem: DeploymentProblem,
                    knobs: tuple[str, ...], fixed: Mapping[str, Any]) -> pd.DataFrame:
    """One row per (point, step, class) of the first :data:`MAX_POINTS` points of ``front``:
    a decode step of the point's running batch per replica (``batch_per_replica``, else
    the workload's batch per replica) and one prompt's prefill, each on the deployment that
    runs it (a disaggregated point's prefill on its prefill pool, decode on its decode
    pool); a point whose deployment cannot be priced is left out."""
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = [{str(k): v for k, v in r.items()}
                                     for r in front.head(MAX_POINTS).to_dict("records")]
    for index, row in enumerate(records):
        params = row_params(row, knobs=knobs, fixed=fixed)
        try:
            gpu, deployment, workload, pools = problem.setup(params)
            running = row.get("batch_per_replica")
            sequences = float(running) if isinstance(running, int | float) and running == running \
                else workload.batch / deployment.replicas
            runs = [(gpu.name, deployment)] if pools is None else [
                (pools[0].gpu, pools[0].deployment), (pools[1].gpu, pools[1].deployment)]
            found = []
            for on, what in runs:
                _, ctx = checked_context(model=problem.model, gpu=on, deployment=what,
                                         calibration=problem.calibration)
                found.append(representative_breakdown(
                    ctx=ctx, sequences=sequences, input_tokens=workload.input_tokens,
                    output_tokens=workload.output_tokens))
            # the first (prefill pool's) prompt, the last (decode pool's) decode step
            steps = {"decode": found[-1]["decode"], "prefill": found[0]["prefill"]}
        except EnergyLensError:
            continue
        rows.extend(_rows(point_name(row, index), steps))
    return pd.DataFrame(rows, columns=["point", "step", "work", "seconds", "joules"])


def _rows(point: str, steps: Mapping[str, StepBreakdown]) -> list[dict[str, Any]]:
    return [{"point": point, "step": name, "work": label,
             "seconds": step.seconds.get(label, 0.0), "joules": step.joules.get(label, 0.0)}
            for name, step in steps.items() for label in CLASSES
            if label in step.seconds or label in step.joules]


def write_front_breakdown(*, results: Path, problem: DeploymentProblem,
                          knobs: tuple[str, ...], fixed: Mapping[str, Any]) -> list[Path]:
    """``results/breakdown.csv`` and ``breakdown.png`` for ``results/pareto.csv``'s points,
    each written atomically; the paths written (none without a front)."""
    path = results / "pareto.csv"
    if not path.is_file():
        return []
    table = front_breakdown(front=pd.read_csv(path), problem=problem, knobs=knobs, fixed=fixed)
    if table.empty:
        return []
    csv_path, png_path = results / "breakdown.csv", results / "breakdown.png"
    write_atomic(csv_path, lambda f: table.to_csv(f, index=False))
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
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=120)
