"""Pictures of a load study's report (``energylens study report``, issue 12 item 7):
output tokens/s per GPU against tokens/s per user of the feasible trials, and TTFT and
TPOT (p50, p99) against the request rate for each Pareto point, re-simulated at a few
rates around the rate it served."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from energylens.study.objective import DeploymentProblem, row_params
from energylens.workloads.load.plots import write_front_plot
from search.files import atomic_path

#: Rates of the sweep, as multiples of the requests/s the Pareto point served in its trial.
RATE_SHARES = (0.25, 0.5, 1.0, 1.5, 2.0)
#: Requests per simulation of the sweep (cheap: the trial itself may have simulated more).
SWEEP_REQUESTS = 400
#: Pareto points swept at most (the first ones of ``pareto.csv``).
MAX_POINTS = 8
CURVES = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")


def rate_sweep(*, problem: DeploymentProblem, params: Mapping[str, Any],
               served_per_s: float) -> dict[str, list[float]]:
    """``request_rate`` (the deployment's, open loop, :data:`RATE_SHARES` of
    ``served_per_s``) and the latency percentiles of ``CURVES`` at each rate; a rate whose
    simulation is infeasible is left out."""
    quick = replace(problem, workload=replace(problem.workload, capacity_attainment=None,
                                              num_requests=SWEEP_REQUESTS))
    sweep: dict[str, list[float]] = {key: [] for key in ("request_rate", *CURVES)}
    for share in RATE_SHARES:
        rate = share * served_per_s
        found = quick.evaluate({**params, "request_rate": rate})
        if found.infeasible_reason is not None or not found.metrics:
            continue
        sweep["request_rate"].append(rate)
        for key in CURVES:
            sweep[key].append(found.metrics[key])
    return sweep


def _label(params: Mapping[str, Any], knobs: tuple[str, ...]) -> str:
    return " ".join(f"{k}={params[k]}" for k in knobs if k in params)


def write_load_report(*, results: Path, problem: DeploymentProblem, name: str,
                      knobs: tuple[str, ...], fixed: Mapping[str, Any]) -> list[Path]:
    """Write ``load_front.png`` and ``load_latency_vs_rate.png`` into ``results`` for a
    load study (nothing for another workload, or before any feasible trial); the paths
    written."""
    trials_csv, pareto_csv = results / "trials.csv", results / "pareto.csv"
    if problem.workload.kind != "load" or not trials_csv.exists():
        return []
    trials = pd.read_csv(trials_csv)
    if "feasible" not in trials or not trials["feasible"].astype(bool).any():
        return []
    # a knob the space fixes (the GPU of a one-GPU study) is not a column of trials.csv
    trials = trials.assign(**{k: v for k, v in fixed.items() if k not in trials.columns})
    front = results / "load_front.png"
    write_front_plot(trials={name: trials}, path=front)
    written = [front]
    pareto = pd.read_csv(pareto_csv) if pareto_csv.exists() else pd.DataFrame()
    sweeps = {}
    for _, row in pareto.head(MAX_POINTS).iterrows():
        params = row_params(row.to_dict(), knobs=knobs, fixed=fixed)
        sweeps[_label(params, knobs)] = rate_sweep(
            problem=problem, params=params, served_per_s=float(row["requests_per_s"]))
    if sweeps:
        path = results / "load_latency_vs_rate.png"
        _plot_sweeps(sweeps, path=path)
        written.append(path)
    return written


def _plot_sweeps(sweeps: Mapping[str, Mapping[str, list[float]]], *, path: Path) -> None:
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    ttft, tpot = figure.subplots(1, 2)
    for i, (label, sweep) in enumerate(sweeps.items()):
        colour = f"C{i % 10}"
        rates = sweep["request_rate"]
        for axes, metric, scale in ((ttft, "ttft", 1.0), (tpot, "tpot", 1e3)):
            axes.plot(rates, np.asarray(sweep[f"{metric}_p50_s"]) * scale, "-o", ms=3,
                      color=colour, label=f"{label} p50")
            axes.plot(rates, np.asarray(sweep[f"{metric}_p99_s"]) * scale, "--", color=colour,
                      label=f"{label} p99")
    ttft.set(xlabel="request rate [1/s]", ylabel="TTFT [s]", yscale="log",
             title="TTFT of the Pareto points")
    tpot.set(xlabel="request rate [1/s]", ylabel="TPOT [ms]", title="TPOT of the Pareto points")
    ttft.legend(fontsize=6)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=110)
