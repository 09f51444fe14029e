"""Capacity: the highest request rate a deployment sustains while a target share of
requests meets every SLO bound (DistServe's per-GPU goodput question), by bisection.

Open loop at each probed rate (Poisson, or the workload's arrival CV; the trace's clock
rescaled when the workload replays one), on one replica with one price table. The rate
is bracketed between 0 and the replica's service rate with every request queued at once
(doubled while the target is still attained), then halved ``STEPS`` times: the answer is
within 1/2^STEPS of that bracket, from below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from energylens.workloads.load.costs import StepTable
from energylens.workloads.load.kind import simulate_replica
from energylens.workloads.load.metrics import SLO
from energylens.workloads.registry import Placement
from energylens.workloads.workload import Workload

#: Bisection steps (the bracket shrinks 2^STEPS times).
STEPS = 7
#: A request rate at which every request is queued at once.
FLOOD_RATE = 1e6
#: Doublings of the bracket's top at most (2^6 times the flood's service rate).
MAX_DOUBLINGS = 6


def capacity_per_replica(*, placement: Placement, workload: Workload, target: float) -> float:
    """Requests/s one replica serves with at least ``target`` of them meeting every SLO
    of ``workload`` (0 when even a trickle misses them)."""
    slos = tuple(SLO.parse(text) for text in workload.slo)
    one = replace(placement, replicas=1, gpus=placement.ctx.replica_gpus)

    def run(rate: float) -> tuple[float, float]:
        probe = replace(workload, request_rate=rate, concurrency=None)
        result = simulate_replica(placement=one, workload=probe, table=tables.get("t"))
        tables["t"] = result.table
        metrics = result.summary(ctx=placement.ctx, slos=slos)
        return metrics.slo_attainment, metrics.requests_per_s * result.engines

    tables: dict[str, StepTable] = {}
    return bisect_capacity(run=run, target=target)


def bisect_capacity(*, run: Callable[[float], tuple[float, float]], target: float) -> float:
    """The highest rate at which ``run(rate)`` (SLO attainment, requests/s served) attains
    ``target``. The bracket starts at the rate served with every request queued at once
    (an underestimate when preemptions thrash) and doubles while it still attains."""
    _, service = run(FLOOD_RATE)
    low, high = 0.0, max(service, 1e-6)
    for _ in range(MAX_DOUBLINGS):
        if run(high)[0] < target:
            break
        low, high = high, 2 * high
    for _ in range(STEPS):
        mid = (low + high) / 2
        attained, _ = run(mid)
        low, high = (mid, high) if attained >= target else (low, mid)
    return low
