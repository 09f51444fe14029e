"""Pictures of a load run (``energylens predict --workload load --plot FILE.png``):
TTFT and TPOT (p50, p99) against the request rate, from 10 % to 110 % of the replica's
service rate, and the run's power and queue over time; and of a load study's trials,
throughput per GPU against throughput per user."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from energylens.workloads.load.kind import LoadRun, simulate_replica
from energylens.workloads.registry import Placement
from energylens.workloads.workload import Workload
from search.files import atomic_path

if TYPE_CHECKING:
    import pandas as pd

#: Rates of the sweep, as shares of the replica's service rate.
RATE_SHARES = np.linspace(0.1, 1.1, 11)
#: Time bins of the power and queue traces.
TIME_BINS = 200


def _series(run: LoadRun, *, static_w: float, gpus: int) -> tuple[np.ndarray, ...]:
    """Bin centres [s], average power [W] and mean waiting requests per bin of the replica
    (its virtual engines as the simulated one)."""
    sim = run.sim
    start = float(sim.arrival_s.min())
    edges = np.linspace(start, float(sim.finish_s.max()), TIME_BINS + 1)
    width = edges[1] - edges[0]
    dynamic = sim.dynamic_energy(run.table).sum(axis=1)
    joules = np.zeros(TIME_BINS)
    waiting = np.zeros(TIME_BINS)
    ends = sim.start_s + sim.wall_s
    for i in range(TIME_BINS):
        overlap = np.clip(np.minimum(ends, edges[i + 1]) - np.maximum(sim.start_s, edges[i]),
                          0.0, None)
        joules[i] = float(np.sum(dynamic * overlap / sim.wall_s))
        waiting[i] = float(np.sum(sim.waiting * overlap)) / width
    power = joules * run.engines / width + static_w * gpus  # static: all the time
    return (edges[:-1] + edges[1:]) / 2 - start, power, waiting * run.engines


def write_load_plot(*, placement: Placement, workload: Workload, path: Path) -> None:
    """Write the sweep and the time series of one replica of ``placement`` to ``path``."""
    ctx = placement.ctx
    one = replace(placement, replicas=1, gpus=ctx.replica_gpus)
    static_w = ctx.constants.static_power_w
    base = simulate_replica(placement=one, workload=workload)
    open_loop = replace(workload, concurrency=None, request_rate=1e6)
    flood = simulate_replica(placement=one, workload=open_loop)
    service = flood.summary(ctx=ctx, slos=()).requests_per_s * flood.engines
    rates = [float(share * service) for share in RATE_SHARES]
    curves: dict[str, list[float]] = {k: [] for k in (
        "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")}
    for rate in rates:
        run = simulate_replica(placement=one, workload=replace(open_loop, request_rate=rate),
                               table=flood.table)
        latency = run.summary(ctx=ctx, slos=()).latency_s
        for key, values in curves.items():
            values.append(latency[key])
    figure = Figure(figsize=(12, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    left, middle, right = figure.subplots(1, 3)
    for key, style in (("ttft_p50_s", "-"), ("ttft_p99_s", "--")):
        left.plot(rates, curves[key], style, color="tab:blue", label=key)
    for key, style in (("tpot_p50_s", "-"), ("tpot_p99_s", "--")):
        middle.plot(rates, np.asarray(curves[key]) * 1e3, style, color="tab:orange", label=key)
    left.set(xlabel="request rate per replica [1/s]", ylabel="TTFT [s]", yscale="log",
             title=f"TTFT vs rate ({ctx.gpu.name} x {ctx.replica_gpus})")
    middle.set(xlabel="request rate per replica [1/s]", ylabel="TPOT [ms]",
               title=f"TPOT vs rate (service rate {service:.2f}/s)")
    left.legend()
    middle.legend()
    times, power, waiting = _series(base, static_w=static_w, gpus=ctx.replica_gpus)
    right.plot(times, power / 1e3, color="tab:red")
    right.set(xlabel="time [s]", ylabel="power of the replica [kW]", title="this run")
    queue = right.twinx()
    queue.plot(times, waiting, color="tab:gray", alpha=0.7)
    queue.set_ylabel("waiting requests")
    with atomic_path(path) as tmp:  # a failed or killed write leaves the old file whole
        figure.savefig(tmp, dpi=110)


def front_points(frame: pd.DataFrame) -> pd.DataFrame:
    """The feasible trials of a load study as (group, tokens/s per user, tokens/s per GPU):
    a user sees one token per mean TPOT; the group is the GPU type and mode (a
    disaggregated trial's GPU is ``prefill/decode``)."""
    import pandas as pd

    frame = frame[frame["feasible"].astype(bool)]
    mode = frame["mode"] if "mode" in frame else pd.Series("colocated", index=frame.index)
    named = frame["gpu"] if "gpu" in frame else pd.Series("GPU", index=frame.index)
    gpu = named.where(mode == "colocated", frame.get("prefill_gpu", named) + "/"
                      + frame.get("decode_gpu", named))
    return pd.DataFrame({"group": gpu + " " + mode, "per_user": 1.0 / frame["tpot_s"],
                         "per_gpu": frame["output_tokens_per_s_per_gpu"]})


def write_front_plot(*, trials: dict[str, pd.DataFrame], path: Path) -> None:
    """Output tokens/s per GPU against tokens/s per user of the feasible trials of load
    studies (``trials.csv`` per label), one colour per GPU type and mode, each group's
    upper-right front drawn as a line."""
    figure = Figure(figsize=(7, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for label, frame in trials.items():
        for name, group in front_points(frame).groupby("group"):
            user, per_gpu = group["per_user"].to_numpy(), group["per_gpu"].to_numpy()
            points = axes.scatter(user, per_gpu, s=14, alpha=0.6, label=f"{label}: {name}")
            best, xs, ys = -np.inf, [], []
            for x, y in zip(user[np.argsort(-user)], per_gpu[np.argsort(-user)], strict=True):
                if y > best:
                    best = y
                    xs.append(x)
                    ys.append(y)
            axes.plot(xs, ys, color=points.get_facecolor()[0], alpha=0.9)
    axes.set(xlabel="output tokens/s per user (1 / mean TPOT)",
             ylabel="output tokens/s per GPU", title="throughput per GPU vs per user (feasible)")
    axes.legend(fontsize=7)
    with atomic_path(path) as tmp:  # a failed or killed write leaves the old file whole
        figure.savefig(tmp, dpi=110)
