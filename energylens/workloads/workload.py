"""What runs: the workload a deployment serves (its kind names a registered scheduler)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from energylens.errors import ConfigError

#: Fields only the ``load`` kind reads (requests arriving over time).
LOAD_FIELDS = ("request_rate", "concurrency", "trace", "num_requests", "seed", "arrival_cv",
               "length_cv", "slo", "capacity_attainment", "warmup_fraction",
               "shared_prefix_tokens")
#: Share of a load run's requests (by arrival) left out of its statistics at each end:
#: the warm-up while the queue fills and the drain after the last arrival (assumed).
DEFAULT_WARMUP_FRACTION = 0.1


def _is_set(value: object) -> bool:
    """A load field given a value other than its default (None, 0, an empty tuple)."""
    if isinstance(value, tuple):
        return bool(value)
    return value is not None and value != 0


#: The longest prompt, output or shared prefix a workload takes [tokens]: 2^31, 2,048 times
#: the longest context in the zoo (Llama-4-Maverick's 1,048,576). Lengths stay exact in
#: int64 arithmetic, and where a model's context is unknown (not checked) a load request
#: is simulated in seconds (2^31 prompt tokens in 262,144 chunks: 2.4 s for Llama-3.1-8B
#: on an H100).
MAX_TOKENS = 2**31
#: The most requests a load run simulates (about a minute and 1 GB for Llama-3.1-8B on an
#: H100: 100,000 requests took 4.6 s and 170 MB).
MAX_REQUESTS = 10**6
#: The most clients of a closed loop: at the default 20 requests a client, MAX_REQUESTS.
MAX_CONCURRENCY = MAX_REQUESTS // 20
#: The lowest request rate a load workload takes [1/s]: one request every 11.6 days. Far
#: slower arrivals put the requests so far apart in time that a step's duration is lost in
#: the rounding of their arrival times (below 1e-15/s every step rounds away).
MIN_REQUEST_RATE = 1e-6


#: The widest request-length spread a load workload draws (gamma CV): at 3, 43 % of the
#: requests of a 512-token mean already round to one token (4: 60 %); the Azure 2023 code
#: trace's outputs, the widest spread in data/measurements/traces, have a CV of 2.15.
MAX_LENGTH_CV = 3.0


@dataclass(frozen=True, kw_only=True)
class Workload:
    """``batch``: one static batch, prefill then decode. ``serving``: continuous batching
    at steady state with ``batch`` running sequences of mean input/output lengths.
    ``load``: requests arriving over time, simulated through the runtime's scheduler:
    open loop at ``request_rate`` (gamma inter-arrivals of CV ``arrival_cv``, 1 = Poisson;
    or a ``trace``'s own timestamps, rescaled to ``request_rate`` when it is given) or a
    closed loop of ``concurrency`` clients (``batch`` clients when neither is given);
    lengths ``input_tokens``/``output_tokens`` (gamma of CV ``length_cv`` around them) or
    the ``trace``'s; ``slo`` bounds such as ``"ttft_p90_s<=1"``; ``capacity_attainment``:
    also find the highest request rate at which that share of requests meets them;
    ``warmup_fraction``: the share of requests left out at each end of the run (default
    :data:`DEFAULT_WARMUP_FRACTION`; 0 averages over every request, as a benchmark of
    ``num_requests`` requests reports); ``shared_prefix_tokens``: the first tokens of every
    prompt are the same (a system prompt) and the engine's prefix cache holds them once
    (vLLM's automatic prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse,
    all on by default): each prompt computes only its other tokens, its KV cache shares
    the prefix's blocks, and the cache is warm from the first request."""

    kind: str = "batch"
    batch: float = 1  # may be fractional in ``serving`` (a measured mean)
    input_tokens: float = 512  # per request; a mean may be fractional (>= 1)
    output_tokens: float = 128
    request_rate: float | None = None  # requests/s of the whole deployment
    concurrency: int | None = None  # closed-loop clients of the whole deployment
    trace: str | None = None  # CSV with num_prefill_tokens, num_decode_tokens[, arrived_at]
    num_requests: int | None = None  # None: enough for a steady state (the kind decides)
    seed: int = 0
    arrival_cv: float | None = None  # None: Poisson, or the trace's timestamps
    length_cv: float = 0.0  # 0: fixed lengths
    slo: tuple[str, ...] = ()
    capacity_attainment: float | None = None  # also find the rate sustained at this share
    warmup_fraction: float | None = None  # None: DEFAULT_WARMUP_FRACTION
    shared_prefix_tokens: int = 0  # prompt tokens every request shares (cached once)

    def __post_init__(self) -> None:
        from energylens.workloads.registry import kind_names

        if self.kind not in kind_names():
            raise ConfigError(f"workload must be one of {', '.join(kind_names())}, got {self.kind!r}")
        if not math.isfinite(self.batch) or self.batch <= 0:
            raise ConfigError(f"batch must be a finite number > 0, got {self.batch}")
        for name in ("input_tokens", "output_tokens"):  # means: at least one token each
            value = getattr(self, name)
            if not math.isfinite(value) or value < 1:
                raise ConfigError(f"{name} must be a finite number >= 1, got {value}")
        for name in ("input_tokens", "output_tokens", "shared_prefix_tokens"):
            if getattr(self, name) > MAX_TOKENS:
                raise ConfigError(f"{name} must be at most 2**31 = {MAX_TOKENS:,}, got "
                                  f"{getattr(self, name):g}")
        for name in ("request_rate", "arrival_cv"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {value}")
        if self.request_rate is not None and self.request_rate < MIN_REQUEST_RATE:
            raise ConfigError(f"request_rate must be at least {MIN_REQUEST_RATE:g} requests/s "
                              f"(one every 11.6 days), got {self.request_rate:g}")
        target = self.capacity_attainment
        if target is not None and not (math.isfinite(target) and 0 < target <= 1):
            raise ConfigError(f"capacity_attainment must be a share in (0, 1], got {target}")
        if target is not None and not self.slo:
            raise ConfigError("capacity_attainment needs at least one slo bound")
        warmup = self.warmup_fraction
        if warmup is not None and not (math.isfinite(warmup) and 0 <= warmup < 0.5):
            raise ConfigError(f"warmup_fraction must be a share in [0, 0.5), got {warmup}")
        if not math.isfinite(self.length_cv) or not 0 <= self.length_cv <= MAX_LENGTH_CV:
            raise ConfigError(f"length_cv must be a number in [0, {MAX_LENGTH_CV:g}], got "
                              f"{self.length_cv} (a gamma of larger CV puts most requests at "
                              "one token)")
        prefix = self.shared_prefix_tokens
        if isinstance(prefix, bool) or int(prefix) != prefix or prefix < 0:
            raise ConfigError(f"shared_prefix_tokens must be an integer >= 0, got {prefix}")
        try:  # numpy's generators take no negative (or fractional) seed
            whole_seed = not isinstance(self.seed, bool) and int(self.seed) == self.seed
        except (TypeError, ValueError):
            whole_seed = False
        if not whole_seed or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        for name, most in (("concurrency", MAX_CONCURRENCY), ("num_requests", MAX_REQUESTS)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
                raise ConfigError(f"{name} must be an integer >= 1, got {value}")
            if value is not None and value > most:
                raise ConfigError(f"{name} must be at most {most:,}, got {value:,}")
        if self.request_rate is not None and self.concurrency is not None:
            raise ConfigError("give a request rate (open loop) or a concurrency (closed loop), "
                              "not both")
        used = [name for name in LOAD_FIELDS if _is_set(getattr(self, name))]
        if self.kind != "load" and used:
            raise ConfigError(f"{', '.join(used)}: only a 'load' workload reads "
                              f"{'it' if len(used) == 1 else 'them'} (got kind {self.kind!r})")
