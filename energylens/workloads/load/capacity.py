"""Capacity: the highest request rate a deployment sustains while a target share of
requests meets every SLO bound (DistServe's per-GPU goodput question), by bisection.

Open loop at each probed rate (Poisson, or the workload's arrival CV; the trace's clock
rescaled when the workload replays one), on one replica with one price table. The rate
is bracketed between 0 and the replica's service rate with every request queued at once
(doubled while the target is still attained), then halved ``STEPS`` times: the answer is
within 1/2^STEPS of that bracket, from below. A rate is sustained only where the run also
keeps up with it (:class:`Probe`): a finite run above the service rate can meet a TTFT bound for
most of its requests while its running batch and queue still grow. Each probe simulates at
least the default open-loop count (:func:`~energylens.workloads.load.arrivals.default_count`)
per engine, however few requests the workload asks for: a shorter run is mostly warm-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from energylens.workloads.load.arrivals import default_count
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


@dataclass(frozen=True)
class Probe:
    """One open-loop run at a probed rate: its SLO attainment, the requests/s it served
    and whether it kept up with the rate (``LoadMetrics.keeps_up``)."""

    attainment: float
    served_per_s: float
    keeps_up: bool

    def sustains(self, *, target: float) -> bool:
        """Whether the rate is sustained: ``target`` attained, and the engine kept up."""
        return self.attainment >= target and self.keeps_up


def capacity_per_replica(*, placement: Placement, workload: Workload, target: float) -> float:
    """Requests/s one replica serves with at least ``target`` of them meeting every SLO
    of ``workload`` (0 when even a trickle misses them)."""
    slos = tuple(SLO.parse(text) for text in workload.slo)
    one = replace(placement, replicas=1, gpus=placement.ctx.replica_gpus)

    def run(rate: float) -> Probe:
        probe = replace(workload, request_rate=rate, concurrency=None)
        result = simulate_replica(placement=one, workload=probe, table=tables.get("t"),
                                  at_least=default_count(clients=0))
        tables["t"] = result.table
        metrics = result.summary(ctx=placement.ctx, slos=slos)
        return Probe(metrics.slo_attainment, metrics.requests_per_s * result.engines,
                     metrics.keeps_up)

    tables: dict[str, StepTable] = {}
    return bisect_capacity(run=run, target=target)


def bisect_capacity(*, run: Callable[[float], Probe], target: float) -> float:
    """The highest rate whose ``run(rate)`` sustains ``target`` (:meth:`Probe.sustains`).
    The bracket starts at the rate served with every request queued at once (an
    underestimate when preemptions thrash) and doubles while that rate is sustained."""
    service = run(FLOOD_RATE).served_per_s
    low, high = 0.0, max(service, 1e-6)
    for _ in range(MAX_DOUBLINGS):
        if not run(high).sustains(target=target):
            break
        low, high = high, 2 * high
    for _ in range(STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if run(mid).sustains(target=target) else (low, mid)
    return low
