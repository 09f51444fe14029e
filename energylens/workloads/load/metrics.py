"""Serving metrics of a simulated load run: latency percentiles, throughput, goodput,
SLO attainment, energy (idle power included) and queue statistics.

Warm-up and drain are discarded: request metrics cover the requests from the 10th to the
90th percentile of arrival order, and rates, energy and time averages cover the window
from the first one's arrival to the last one's completion (the later requests keep the
system loaded until then; the whole run when that window is empty).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from energylens.errors import ConfigError
from energylens.workloads.load.costs import StepTable, interpolate
from energylens.workloads.load.simulator import SimRun
from energylens.workloads.workload import DEFAULT_WARMUP_FRACTION, Workload

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
#: Per-request latencies an SLO may bound (ITL is per token, not per request).
SLO_LATENCIES = ("ttft", "tpot", "e2e")
_SLO = re.compile(r"^\s*(ttft|tpot|e2e)_(p\d{1,2}|mean)_s\s*<=\s*([0-9.eE+-]+)\s*$")
#: Share of the offered requests a run must complete to keep up (``LoadMetrics.keeps_up``;
#: assumed: Llama-3.1-8B on one H100, Poisson, 3,000 requests, seed 0: 0.97 at 38
#: requests/s, where the requests in flight level off, 0.93 at 40, where 10,000 requests
#: show them still growing).
KEEPS_UP_SHARE = 0.95
#: Fewest offered requests the count test judges: below 16 its noise allowance (twice the
#: square root of the count) passes a run that completed half of them.
MIN_COUNTED = 16


@dataclass(frozen=True, kw_only=True)
class SLO:
    """``<latency>_<statistic>_s <= bound``: each request's latency should be within
    ``bound``; the statistic over requests is what is checked (p90: 90 % of them)."""

    latency: str
    statistic: str  # "p90", "mean", ...
    bound_s: float

    @property
    def metric(self) -> str:
        """The metric it bounds, e.g. ``ttft_p90_s``."""
        return f"{self.latency}_{self.statistic}_s"

    @classmethod
    def parse(cls, text: str) -> SLO:
        """``"ttft_p90_s<=1"`` -> SLO; one-line :class:`ConfigError` otherwise."""
        match = _SLO.match(text)
        bound = float("nan")
        if match:
            try:
                bound = float(match.group(3))
            except ValueError:
                bound = float("nan")
        if not match or not math.isfinite(bound) or bound <= 0:
            raise ConfigError(f"SLO {text!r}: expected <latency>_<pNN|mean>_s<=<seconds > 0> "
                              f"with latency one of {', '.join(SLO_LATENCIES)}, e.g. "
                              "ttft_p90_s<=1")
        return cls(latency=match.group(1), statistic=match.group(2), bound_s=bound)


@dataclass(frozen=True, kw_only=True)
class LoadMetrics:
    """Everything a load run reports (SI units; latencies in seconds)."""

    latency_s: dict[str, float]  # "ttft_p90_s" -> value, for every latency and statistic
    requests_per_s: float
    # requests arriving per second in the window (a trace's clock: its local rate, which
    # idle gaps elsewhere in the replayed rows set apart from the rate asked for)
    offered_requests_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float
    slo_attainment: float  # share of requests meeting every SLO bound
    slo_met: bool  # every SLO's statistic within its bound
    energy_j: float  # whole run: iterations + idle
    iteration_energy_j: float  # whole run, static power during iterations included
    idle_energy_j: float  # whole run, static power while no iteration runs
    run_s: float  # whole run: iterations and idle time
    window_s: float
    window_energy_j: float
    window_output_tokens: float
    # (wall s, compute J, memory J, communication J) of the decode-only records and of
    # those carrying prompt tokens, in the window (static power not included)
    decode_only_window: tuple[float, float, float, float]
    prefill_window: tuple[float, float, float, float]
    mean_output_tokens: float  # of the measured requests
    mean_running: float
    mean_waiting: float
    preemptions: float  # per stream: a mean over streams of different kinds
    peak_kv_tokens: float
    measured_requests: int
    # requests completed over those offered, one mean E2E apart (see keeping_up): near 1
    # where the engine keeps up, the service over the offered rate past it
    completed_share: float = 1.0
    keeps_up: bool = True  # completed_share >= KEEPS_UP_SHARE, counting noise allowed

    def as_dict(self) -> dict[str, float | int | bool]:
        """Flat JSON form (the latency keys at the top level)."""
        return {**self.latency_s, "requests_per_s": self.requests_per_s,
                "offered_requests_per_s": self.offered_requests_per_s,
                "goodput_requests_per_s": self.goodput_requests_per_s,
                "slo_attainment": self.slo_attainment, "slo_met": self.slo_met,
                "idle_energy_j": self.idle_energy_j, "iteration_energy_j": self.iteration_energy_j,
                "total_energy_j": self.energy_j, "mean_running": self.mean_running,
                "mean_queue_length": self.mean_waiting, "preemptions": self.preemptions,
                "peak_kv_tokens": self.peak_kv_tokens, "measured_requests": self.measured_requests,
                "completed_share": self.completed_share, "keeps_up": self.keeps_up}


def not_simulated() -> LoadMetrics:
    """The metrics of a load not simulated, its requests longer than the model's context:
    no figure (NaN), and no request served within its SLOs (goodput and attainment 0)."""
    nan = math.nan
    return LoadMetrics(
        latency_s={f"{name}_{s}_s": nan for name in LATENCIES
                   for s in ("mean", *(f"p{q}" for q in PERCENTILES))},
        requests_per_s=nan, offered_requests_per_s=nan, output_tokens_per_s=nan,
        goodput_requests_per_s=0.0,
        slo_attainment=0.0, slo_met=False, energy_j=nan, iteration_energy_j=nan,
        idle_energy_j=nan, run_s=nan, window_s=nan, window_energy_j=nan,
        window_output_tokens=nan, decode_only_window=(nan, nan, nan, nan),
        prefill_window=(nan, nan, nan, nan), mean_output_tokens=nan, mean_running=nan,
        mean_waiting=nan, preemptions=0, peak_kv_tokens=nan, measured_requests=0,
        completed_share=nan, keeps_up=False)


def warmup_share(workload: Workload) -> float:
    """Share of the requests left out of the statistics at each end of a run."""
    share = workload.warmup_fraction
    return DEFAULT_WARMUP_FRACTION if share is None else share


def _stats(name: str, values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    """Mean and percentiles (weighted: each value counts ``weights`` times)."""
    if weights is None:
        weights = np.ones_like(values)
    if len(values) == 0 or float(np.sum(weights)) <= 0:
        return {f"{name}_{s}_s": 0.0 for s in ("mean", *(f"p{q}" for q in PERCENTILES))}
    out = {f"{name}_mean_s": float(np.sum(values * weights) / np.sum(weights))}
    for q in PERCENTILES:
        out[f"{name}_p{q}_s"] = _percentile(values, weights, q)
    return out


def _percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value with at least ``q`` % of the weight at or below it."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order].astype(float))
    index = min(int(np.searchsorted(cum, q / 100.0 * cum[-1] * (1 - 1e-12))), len(values) - 1)
    return float(values[order][index])


def _statistic(values: np.ndarray, weights: np.ndarray, statistic: str) -> float:
    if statistic == "mean":
        return float(np.sum(values * weights) / np.sum(weights))
    return _percentile(values, weights, float(statistic[1:]))


def _stalled_gaps(*, run: SimRun, step: np.ndarray, weight: np.ndarray,
                  share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token gaps with prefill-first stalls: the decodes that wait through a run of
    prompt steps take their next token in the decode record after it, a gap longer by the
    prompt steps each waited through (those that join mid-run wait through the rest)."""
    stall_rows = np.flatnonzero(run.stalled > 0)
    decode_rows = np.flatnonzero(run.decode > 0)
    nxt = np.searchsorted(decode_rows, stall_rows)
    stall_rows, nxt = stall_rows[nxt < len(decode_rows)], nxt[nxt < len(decode_rows)]
    if len(stall_rows) == 0:
        return step, weight
    target = decode_rows[nxt]
    stalled = run.stalled[stall_rows]
    first = np.concatenate(([True], target[1:] != target[:-1]))  # a run's first prompt step
    joined = np.where(first, stalled, stalled - np.concatenate(([0], stalled[:-1])))
    joined = np.clip(joined, 0, None).astype(float)
    after = np.concatenate((np.cumsum(run.wall_s[stall_rows][::-1])[::-1], [0.0]))
    last = np.flatnonzero(np.concatenate((first[1:], [True])))  # each run's last prompt step
    waited = after[:-1] - after[last[np.cumsum(first) - 1] + 1]
    moved = joined * share[target]
    weight = weight.copy()
    np.subtract.at(weight, target, moved)
    weight = np.clip(weight, 0.0, None)
    return np.concatenate((step, step[target] + waited)), np.concatenate((weight, moved))


@dataclass(frozen=True, kw_only=True)
class StreamSamples:
    """One simulated stream's measured requests and its totals, before streams of
    different kinds are pooled (:func:`pool`): per measured request (arrival order, the
    warm-up left out) its latencies and output tokens; the ITL samples and the tokens each
    weighs in the window; totals over the window and the whole run."""

    window_s: float
    ttft: np.ndarray
    e2e: np.ndarray
    tpot: np.ndarray  # requests of more than one token (none: the step a 2nd token takes)
    request_tpot: np.ndarray  # per measured request, 0 for a one-token one
    outputs: np.ndarray
    itl: np.ndarray
    itl_tokens: np.ndarray
    completions: float  # in the window
    arrivals: float  # in the window
    tokens: float  # output tokens in the window
    window_j: float  # dynamic energy and static power in the window
    iteration_j: float  # whole run, static power during iterations included
    idle_j: float  # whole run, static power while no iteration runs
    run_s: float
    decode_only: tuple[float, float, float, float]  # (wall s, compute, memory, comm J)
    prefill: tuple[float, float, float, float]
    running_s: float  # running requests x seconds in the window
    waiting_s: float
    preemptions: int
    peak_kv_tokens: float
    completed_share: float
    keeps_up: bool


def _kept(run: SimRun, warmup_fraction: float) -> tuple[np.ndarray, float, float]:
    """The measured requests (arrival order) and the window (first one's arrival, last
    one's completion; the whole run where that is empty)."""
    n = len(run.arrival_s)
    skip = int(warmup_fraction * n) if n >= 10 else 0
    kept = np.argsort(run.arrival_s, kind="stable")[skip:n - skip]
    t_a, t_b = float(run.arrival_s[kept[0]]), float(run.finish_s[kept[-1]])
    if t_b <= t_a:
        t_a, t_b = float(run.arrival_s.min()), float(run.finish_s.max())
    return kept, t_a, t_b


def _tpot(run: SimRun, table: StepTable, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TPOT of the measured requests of more than one token, TPOT per measured request:
    0 for one token). Where none has more than one, the step a second token would take
    alone stands for the first."""
    outputs = run.output_tokens[kept]
    multi = outputs > 1
    span = run.finish_s[kept] - run.first_token_s[kept]
    per_request = np.where(multi, span / np.maximum(outputs - 1, 1), 0.0)
    if multi.any():
        return span[multi] / (outputs[multi] - 1), per_request
    alone = interpolate(table.contexts, table.decode[1, :, 0].tolist(),
                        float(np.mean(run.input_tokens[kept])) + 1.0)
    engine_s = table.engine_idle_s + table.engine_busy_s_per_sequence
    return np.array([max(alone, engine_s) if table.engine_overlapped else alone + engine_s]), \
        per_request


def _itl(run: SimRun, share: np.ndarray, t_a: float, t_b: float) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token gaps and the tokens each stands for in the window: decode steps,
    prefill-first stalls, preemption stalls (a recompute's token after the gap)."""
    step = run.wall_s / run.count
    weight = run.decode * run.count * share
    values, weight = _stalled_gaps(run=run, step=step, weight=weight, share=share)
    resumed = ((run.resume_at_s >= t_a) & (run.resume_at_s <= t_b)).astype(float)
    return np.concatenate((values, run.resume_gap_s)), np.concatenate((weight, resumed))


def stream_samples(*, run: SimRun, table: StepTable, static_w: float, gpus: float,
                   warmup_fraction: float) -> StreamSamples:
    """The samples and totals of one stream's run; ``static_w`` per GPU over its ``gpus``
    GPUs; ``warmup_fraction`` of the requests (by arrival) left out at each end."""
    kept, t_a, t_b = _kept(run, warmup_fraction)
    tpot, request_tpot = _tpot(run, table, kept)
    share = np.clip(np.minimum(run.start_s + run.wall_s, t_b) - np.maximum(run.start_s, t_a),
                    0.0, None) / run.wall_s
    itl, itl_tokens = _itl(run, share, t_a, t_b)
    dynamic = run.dynamic_energy(table)
    busy = float(np.sum(run.wall_s))
    static_per_s = static_w * gpus
    completed_share, keeps_up = keeping_up(arrival_s=run.arrival_s, finish_s=run.finish_s,
                                           kept=kept)
    wall_share = run.wall_s * share
    prefill_rows = run.prefill_tokens > 0

    def part(rows: np.ndarray) -> tuple[float, float, float, float]:
        joules = (dynamic[rows] * share[rows, None]).sum(axis=0)
        return (float(wall_share[rows].sum()), float(joules[0]), float(joules[1]),
                float(joules[2]))

    return StreamSamples(
        window_s=t_b - t_a, ttft=run.first_token_s[kept] - run.arrival_s[kept],
        e2e=run.finish_s[kept] - run.arrival_s[kept], tpot=tpot, request_tpot=request_tpot,
        outputs=run.output_tokens[kept], itl=itl, itl_tokens=itl_tokens,
        completions=float(np.sum((run.finish_s > t_a) & (run.finish_s <= t_b))),
        arrivals=float(np.sum((run.arrival_s >= t_a) & (run.arrival_s < t_b))),
        tokens=float(np.sum(run.tokens_out * share)),
        window_j=float(np.sum(dynamic * share[:, None])) + static_per_s * (t_b - t_a),
        iteration_j=float(np.sum(dynamic)) + static_per_s * busy,
        idle_j=static_per_s * run.idle_s, run_s=busy + run.idle_s,
        decode_only=part(~prefill_rows), prefill=part(prefill_rows),
        running_s=float(np.sum(run.running * wall_share)),
        waiting_s=float(np.sum(run.waiting * wall_share)),
        preemptions=int(run.preemptions.sum()), peak_kv_tokens=run.peak_kv_tokens,
        completed_share=completed_share, keeps_up=keeps_up)


def summarise(*, run: SimRun, table: StepTable, slos: tuple[SLO, ...], static_w: float,
              gpus: float, warmup_fraction: float) -> LoadMetrics:
    """Metrics of one replica's run; ``static_w`` per GPU over ``gpus`` GPUs of the replica;
    ``warmup_fraction`` of the requests (by arrival) left out at each end."""
    samples = stream_samples(run=run, table=table, static_w=static_w, gpus=gpus,
                             warmup_fraction=warmup_fraction)
    return pool(streams=((samples, 1),), slos=slos, static_per_s=static_w * gpus)


def _latencies(streams: Sequence[tuple[StreamSamples, float]], slos: tuple[SLO, ...],
               ) -> tuple[dict[str, float], float, bool, float]:
    """(latency statistics, SLO attainment, every SLO met, mean output tokens) over the
    pooled requests, each weighing its stream kind's ``weight``."""
    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(s, field) for s, _ in streams])

    def weights(field: str) -> np.ndarray:
        return np.concatenate([np.full(len(getattr(s, field)), w) for s, w in streams])

    ttft, e2e, tpot, request_tpot = cat("ttft"), cat("e2e"), cat("tpot"), cat("request_tpot")
    per_request = weights("ttft")
    latencies = {**_stats("ttft", ttft, per_request), **_stats("tpot", tpot, weights("tpot")),
                 **_stats("itl", cat("itl"), np.concatenate(
                     [s.itl_tokens * w for s, w in streams])),
                 **_stats("e2e", e2e, per_request)}
    values = {"ttft": ttft, "e2e": e2e, "tpot": request_tpot}
    good = np.ones(len(ttft), dtype=bool)
    met = True
    for slo in slos:
        good &= values[slo.latency] <= slo.bound_s
        checked, weight = (tpot, weights("tpot")) if slo.latency == "tpot" else \
            (values[slo.latency], per_request)
        met = met and (len(checked) == 0
                       or _statistic(checked, weight, slo.statistic) <= slo.bound_s)
    total = float(np.sum(per_request))
    attainment = float(np.sum(per_request * good)) / total if len(ttft) else 0.0
    return latencies, attainment, met, float(np.sum(per_request * cat("outputs"))) / total


def pool(*, streams: Sequence[tuple[StreamSamples, int]], slos: tuple[SLO, ...],
         static_per_s: float, idle_streams: int = 0) -> LoadMetrics:
    """The metrics of the mean stream of a deployment whose streams (schedulers) are of
    the kinds given, ``(samples, how many such streams)``, and ``idle_streams`` with no
    client that draw their static power (``static_per_s`` a stream): rates, window and run
    totals are per stream, so ``streams`` x them is the deployment's; the statistics pool
    every stream's requests, each standing for its stream's completions per second. The
    mean stream's window is the streams' mean; its run the longest, the shorter ones idle
    to its end."""
    total = sum(n for _, n in streams) + idle_streams
    window = sum(n * s.window_s for s, n in streams) / sum(n for _, n in streams)
    per_s = [n / s.window_s for s, n in streams]  # a kind's window totals -> per second

    def rate(field: str) -> np.ndarray:  # per second of the mean stream's window
        return sum((f * np.asarray(getattr(s, field), dtype=float)
                    for (s, _), f in zip(streams, per_s, strict=True)),
                   np.zeros(())) / total

    # each measured request stands for its kind's completions per second (the first's: 1)
    weight = [f * s.completions / len(s.ttft) for (s, _), f in zip(streams, per_s, strict=True)]
    latencies, attainment, met, mean_output = _latencies(
        [(s, w / weight[0]) for (s, _), w in zip(streams, weight, strict=True)], slos)
    requests = float(rate("completions"))
    run_s = max(s.run_s for s, _ in streams)
    iteration = sum(n * s.iteration_j for s, n in streams) / total
    idle = (sum(n * (s.idle_j + static_per_s * (run_s - s.run_s)) for s, n in streams)
            + idle_streams * static_per_s * run_s) / total
    return LoadMetrics(
        latency_s=latencies, requests_per_s=requests,
        offered_requests_per_s=float(rate("arrivals")), output_tokens_per_s=float(rate("tokens")),
        goodput_requests_per_s=requests * attainment, slo_attainment=attainment, slo_met=met,
        energy_j=iteration + idle, iteration_energy_j=iteration, idle_energy_j=idle,
        run_s=run_s, window_s=window,
        window_energy_j=window * (float(rate("window_j")) + idle_streams * static_per_s / total),
        window_output_tokens=window * float(rate("tokens")),
        decode_only_window=_part(window * rate("decode_only")),
        prefill_window=_part(window * rate("prefill")),
        mean_output_tokens=mean_output, mean_running=float(rate("running_s")),
        mean_waiting=float(rate("waiting_s")),
        preemptions=sum(n * s.preemptions for s, n in streams) / total,
        peak_kv_tokens=max(s.peak_kv_tokens for s, _ in streams),
        measured_requests=sum(len(s.ttft) for s, _ in streams),
        completed_share=min(s.completed_share for s, _ in streams),
        keeps_up=all(s.keeps_up for s, _ in streams))


def _part(values: np.ndarray) -> tuple[float, float, float, float]:
    return float(values[0]), float(values[1]), float(values[2]), float(values[3])



def keeping_up(*, arrival_s: np.ndarray, finish_s: np.ndarray,
               kept: np.ndarray) -> tuple[float, bool]:
    """(completed share, whether the engine keeps up) of a run whose requests arrive at
    ``arrival_s`` and finish at ``finish_s`` [s]; ``kept``: the measured ones, by arrival.

    The share: the requests completed from one mean E2E after the first measured arrival
    to the last one, over those that arrived one mean E2E earlier. A stable engine
    completes what arrived an E2E before, so the requests a short run still holds at its
    end do not count against it; past the service rate the share is about the service
    over the offered rate. The engine keeps up unless the shortfall exceeds both ``1 -
    KEEPS_UP_SHARE`` of the offered requests and twice their counting noise (the square
    root of the count, assumed). Measured arrivals spanning less than one mean E2E, or
    leaving fewer than :data:`MIN_COUNTED` requests to count, are compared by span with
    their completions instead (a flood: near 0; a short run whose queue grows: the share of
    the completions' span its arrivals took)."""
    e2e = float(np.mean(finish_s[kept] - arrival_s[kept]))
    first, last = float(arrival_s[kept[0]]), float(arrival_s[kept[-1]])
    offered = int(np.sum((arrival_s > first) & (arrival_s <= last - e2e)))
    if offered < MIN_COUNTED:
        spread = float(np.ptp(finish_s[kept]))
        share = min(1.0, (last - first) / spread) if spread > 0 else 1.0
        return share, share >= KEEPS_UP_SHARE
    served = int(np.sum((finish_s > first + e2e) & (finish_s <= last)))
    allowed = max((1 - KEEPS_UP_SHARE) * offered, 2 * math.sqrt(offered))
    return min(1.0, served / offered), offered - served <= allowed


#: Metrics a study may use on a ``load`` workload (name -> meaning [unit]).
STUDY_METRICS = {
    **{f"{name}_{s}_s": f"{what}, {s if s != 'mean' else 'mean'} over requests [s]"
       for name, what in (("ttft", "time to first token under load"),
                          ("tpot", "time per output token under load"),
                          ("itl", "inter-token latency under load (per token)"),
                          ("e2e", "request latency under load"))
       for s in ("mean", *(f"p{q}" for q in PERCENTILES))},
    "requests_per_s": "completed requests per second under load [1/s]",
    "goodput_requests_per_s": "requests/s meeting every SLO bound of the workload [1/s]",
    "goodput_per_gpu": "goodput per GPU [1/s]",
    "slo_attainment": "share of requests meeting every SLO bound of the workload",
    "mean_running": "time-average running requests per replica under load",
    "mean_queue_length": "time-average waiting requests per replica under load",
    "preemptions": "requests preempted for want of KV space during the run (0: the KV cache "
                   "never decided)",
    "idle_share": "share of the run's energy spent idle (static power, no iteration)",
    "capacity_requests_per_s": "highest request rate with capacity_attainment of the "
                               "requests meeting every SLO bound [1/s]",
    "capacity_per_gpu": "capacity per GPU [1/s]",
}


def study_metrics(load: dict[str, float | int | bool]) -> dict[str, float]:
    """The :data:`STUDY_METRICS` of a load prediction's ``load`` mapping."""
    out = {key: float(load[key]) for key in STUDY_METRICS if key in load}
    total = float(load["total_energy_j"])
    out["idle_share"] = float(load["idle_energy_j"]) / total if total > 0 else 0.0
    return out
