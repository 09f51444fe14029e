"""The requests of a load run: when each arrives (open loop) and how long it is.

Open loop: a renewal process at a rate (gamma inter-arrival times of a given CV; CV 1 is
Poisson) or a trace's own timestamps, optionally rescaled to a rate. Closed loop: no
arrival times; ``concurrency`` clients each send their next request when the last one
ends (``benchmark_serving --max-concurrency``, GenAI-Perf). Lengths are fixed, gamma
around the means, or a trace's rows. Everything is drawn from one seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from energylens.errors import ConfigError
from energylens.workloads.workload import MAX_TOKENS, Workload

LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
TIME_COLUMN = "arrived_at"
#: The latest arrival a run takes [s], about 317 years: float64 still resolves 2 us there,
#: well under a step (later, a step's duration is lost in the rounding of the clock).
MAX_ARRIVAL_S = 1e10


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A request trace: lengths per row and, when the file has them, arrival times [s]."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None


@dataclass(frozen=True, kw_only=True)
class Requests:
    """The requests one replica serves, in arrival order. ``arrival_s`` is None in a
    closed loop of ``clients`` clients. ``prefilled``: each arrives with its prompt's KV
    cache and first token (a decode pool of a disaggregated deployment). ``shared_prefix``:
    prompt tokens every request shares, cached once (at most a prompt's length - 1)."""

    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    arrival_s: np.ndarray | None
    clients: int
    prefilled: bool = False
    shared_prefix: int = 0

    @property
    def count(self) -> int:
        """Number of requests."""
        return len(self.input_tokens)


@lru_cache(maxsize=8)
def load_trace(path: str) -> Trace:
    """Read a trace CSV (Splitwise/Azure columns ``num_prefill_tokens``,
    ``num_decode_tokens`` and optionally ``arrived_at`` in seconds). One-line
    :class:`ConfigError` for anything unusable."""
    import pandas as pd  # on use: importing the workload kinds stays cheap

    try:
        frame = pd.read_csv(Path(path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read trace ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in LENGTH_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: trace lacks column {', '.join(missing)}")
    if frame.empty:
        raise ConfigError(f"{path}: trace has no requests")
    lengths = []
    for column in LENGTH_COLUMNS:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        if not (np.isfinite(values).all() and (values >= 1).all()
                and (values <= MAX_TOKENS).all()):
            raise ConfigError(f"{path}: {column}: expected numbers from 1 to 2**31 = "
                              f"{MAX_TOKENS:,} on every row")
        lengths.append(np.round(values).astype(np.int64))
    arrival = None
    if TIME_COLUMN in frame.columns:
        times = pd.to_numeric(frame[TIME_COLUMN], errors="coerce").to_numpy(dtype=float)
        if not (np.isfinite(times).all() and (np.diff(times) >= 0).all() and times[0] >= 0
                and times[-1] - times[0] <= MAX_ARRIVAL_S):
            raise ConfigError(f"{path}: {TIME_COLUMN}: expected non-decreasing seconds >= 0, "
                              f"spanning at most {MAX_ARRIVAL_S:g}")
        arrival = times - times[0]
    return Trace(input_tokens=lengths[0], output_tokens=lengths[1], arrival_s=arrival)


def _gamma(rng: np.random.Generator, *, mean: float, cv: float, size: int) -> np.ndarray:
    """``size`` draws of mean ``mean`` and coefficient of variation ``cv`` (fixed at 0)."""
    if cv == 0:
        return np.full(size, mean)
    shape = 1.0 / cv**2
    return rng.gamma(shape, mean / shape, size)


def _lengths(rng: np.random.Generator, *, mean: float, cv: float, size: int) -> np.ndarray:
    return np.maximum(np.round(_gamma(rng, mean=mean, cv=cv, size=size)), 1).astype(np.int64)


def replica_requests(*, workload: Workload, replicas: int, count: int,
                     clients: int | None = None) -> Requests:
    """``count`` requests of one of ``replicas`` replicas behind a round-robin balancer:
    every ``replicas``-th request of the deployment's stream. A closed loop's replica has
    ``clients`` clients, by default the most an even split gives one
    (:func:`split_clients`)."""
    rng = np.random.default_rng(workload.seed)
    total = count * replicas
    trace = load_trace(workload.trace) if workload.trace else None
    if trace is not None:
        # Replaying the trace's clock keeps its rows in order; otherwise rows are sampled.
        rows = np.arange(total) % len(trace.input_tokens) if _trace_clock(workload, trace) \
            else rng.integers(0, len(trace.input_tokens), total)
        inputs, outputs = trace.input_tokens[rows], trace.output_tokens[rows]
    else:
        inputs = _lengths(rng, mean=workload.input_tokens, cv=workload.length_cv, size=total)
        outputs = _lengths(rng, mean=workload.output_tokens, cv=workload.length_cv, size=total)
    arrival = _arrivals(workload=workload, rng=rng, trace=trace, total=total)
    if arrival is None:
        clients = max(1, split_clients(workload=workload, streams=replicas)[0][0]
                      if clients is None else clients)
    else:
        clients = 0
    pick = slice(0, total, replicas)
    return Requests(input_tokens=inputs[pick], output_tokens=outputs[pick],
                    arrival_s=None if arrival is None else arrival[pick], clients=clients,
                    shared_prefix=workload.shared_prefix_tokens)


def request_lengths(workload: Workload) -> tuple[float, float, float]:
    """Mean input, mean output and longest total length of the workload's requests (a
    trace's own; fixed lengths; a gamma spread's tail at 4 CVs above the mean)."""
    if workload.trace:
        trace = load_trace(workload.trace)
        total = trace.input_tokens + trace.output_tokens
        return (float(np.mean(trace.input_tokens)), float(np.mean(trace.output_tokens)),
                float(total.max()))
    longest = workload.input_tokens + workload.output_tokens
    if workload.length_cv > 0:  # gamma tail: 4 CVs above the mean
        longest *= 1 + 4 * workload.length_cv
    return workload.input_tokens, workload.output_tokens, longest


def _trace_clock(workload: Workload, trace: Trace | None) -> bool:
    """Whether arrivals replay the trace's own timestamps."""
    return (trace is not None and trace.arrival_s is not None and workload.arrival_cv is None
            and workload.concurrency is None)


def _closed_by_default(workload: Workload) -> bool:
    """No rate, no concurrency and no trace clock: a closed loop of ``batch`` clients."""
    if workload.request_rate is not None or workload.concurrency is not None:
        return False
    if workload.trace and workload.arrival_cv is None:
        return load_trace(workload.trace).arrival_s is None
    return workload.arrival_cv is None


def closed_loop_clients(workload: Workload) -> float:
    """Clients of the whole deployment in a closed loop (0 in an open loop)."""
    if workload.concurrency is not None:
        return float(workload.concurrency)
    return workload.batch if _closed_by_default(workload) else 0.0


def split_clients(*, workload: Workload, streams: int) -> tuple[tuple[int, int], ...]:
    """A closed loop's clients split over ``streams`` schedulers as evenly as whole clients
    go: ``(clients, schedulers)`` pairs, the fuller first: C mod S schedulers of
    ceil(C / S) clients and the others floor(C / S) (0: they stay idle). Empty in an open
    loop."""
    total = closed_loop_clients(workload)
    if total <= 0:
        return ()
    low, fuller = divmod(max(1, math.floor(total + 0.5)), streams)
    return tuple((c, n) for c, n in ((low + 1, fuller), (low, streams - fuller)) if n > 0)


def _arrivals(*, workload: Workload, rng: np.random.Generator, trace: Trace | None,
              total: int) -> np.ndarray | None:
    times = _clock(workload=workload, rng=rng, trace=trace, total=total)
    if times is not None and times[-1] > MAX_ARRIVAL_S:
        raise ConfigError(f"the {total:,} requests would arrive over {times[-1]:.3g} s, more "
                          f"than {MAX_ARRIVAL_S:g} s (a step is lost in the clock's rounding): "
                          "raise the request rate or lower the number of requests")
    return times


def _clock(*, workload: Workload, rng: np.random.Generator, trace: Trace | None,
           total: int) -> np.ndarray | None:
    if closed_loop_clients(workload) > 0:
        return None
    if trace is not None and trace.arrival_s is not None and _trace_clock(workload, trace):
        times = np.resize(trace.arrival_s, total)  # a longer run repeats the trace's clock
        span = trace.arrival_s[-1] + float(np.mean(np.diff(trace.arrival_s))) \
            if len(trace.arrival_s) > 1 else 1.0
        laps = np.arange(total) // len(trace.arrival_s)
        times = times + laps * span
        if workload.request_rate is not None and times[-1] > 0:
            times = times * ((total - 1) / times[-1]) / workload.request_rate
        return times
    if workload.request_rate is None:
        raise ConfigError("an open-loop load needs --request-rate (or a trace with arrived_at)")
    cv = 1.0 if workload.arrival_cv is None else workload.arrival_cv
    gaps = _gamma(rng, mean=1.0 / workload.request_rate, cv=cv, size=total)
    return np.cumsum(gaps) - gaps[0]


def default_count(*, clients: float) -> int:
    """Requests per replica for a steady state when none is given: 20 per client of a
    closed loop and at least 400; 1,000 in an open loop (``clients`` 0)."""
    return max(400, 20 * math.ceil(clients)) if clients > 0 else 1000
