"""MoE routing: token load of the most-loaded EP rank and distinct activated experts.

Expert popularity comes from a routing distribution (uniform, Zipf with exponent ``s``,
Dirichlet with concentration ``alpha``, or a measured histogram). Experts are placed on
EP ranks in contiguous blocks; the hot experts' positions are random, so rank shares are
averaged over random placements (fixed seed: predictions are deterministic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from energylens.cost.work import Size
from energylens.errors import ConfigError

RoutingKind = Literal["uniform", "zipf", "dirichlet", "histogram"]
_PLACEMENTS = 64
_SEED = 20260101
_DRAWS = 256  # normal draws per expected maximum
#: The largest skew a routing takes. Zipf: at 100 the second expert already receives 2^-100
#: of the first's tokens (every token on one expert; larger exponents overflow the powers).
#: Dirichlet: alpha 100 spreads 128 experts' shares about 10 % around uniform (one standard
#: deviation; larger ones are closer still, and past 1e300 every draw is 0).
MAX_SKEW = 100.0


@dataclass(frozen=True, kw_only=True)
class Routing:
    """A routing distribution over experts. ``skew``: Zipf exponent or Dirichlet alpha (at
    most :data:`MAX_SKEW`).

    ``identical_sequences``: every sequence of a batch is the same (one prompt repeated,
    decoded greedily, as some benchmarks feed a static batch), so a step's tokens route
    as its tokens per sequence, each repeated once per sequence: the experts read are
    one sequence's, the tokens each expert computes are all of them."""

    kind: RoutingKind = "uniform"
    skew: float = 0.0
    histogram: tuple[float, ...] = ()
    identical_sequences: bool = False

    def __post_init__(self) -> None:
        if self.kind in ("zipf", "dirichlet") and self.skew <= 0 and self.kind == "dirichlet":
            raise ConfigError("dirichlet routing needs alpha > 0")
        if not math.isfinite(self.skew) or not 0 <= self.skew <= MAX_SKEW:
            raise ConfigError(f"routing skew must be a number from 0 to {MAX_SKEW:g}, got "
                              f"{self.skew:g}")
        if self.kind == "histogram" and (not self.histogram or min(self.histogram) < 0):
            raise ConfigError("histogram routing needs non-negative expert counts")


@dataclass(frozen=True, kw_only=True)
class ExpertLoad:
    """Per-step expert work of the EP group, for the critical (max) rank and the mean rank
    (arrays over configurations from :func:`expert_load_at`)."""

    tokens_max_rank: Size  # expected token-expert assignments on the most loaded rank
    tokens_mean_rank: Size
    active_experts_max_rank: Size  # distinct experts whose weights the slowest rank reads
    active_experts_mean_rank: Size


def expert_popularity(*, routing: Routing, num_experts: int) -> np.ndarray:
    """Probability that a routed slot goes to each expert (sums to 1), sorted descending."""
    if routing.kind == "uniform" or (routing.kind == "zipf" and routing.skew == 0):
        return np.full(num_experts, 1.0 / num_experts)
    if routing.kind == "zipf":
        weights = 1.0 / np.arange(1, num_experts + 1) ** routing.skew
    elif routing.kind == "dirichlet":
        weights = np.sort(np.random.default_rng(_SEED).dirichlet(
            np.full(num_experts, routing.skew)))[::-1]
    else:
        if len(routing.histogram) != num_experts:
            raise ConfigError(
                f"routing histogram has {len(routing.histogram)} bins, model has {num_experts} experts"
            )
        weights = np.sort(np.asarray(routing.histogram, dtype=float))[::-1]
    return weights / weights.sum()


@lru_cache(maxsize=4096)
def _rank_shares(routing: Routing, num_experts: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """Popularity per placement: shape (placements, ep, experts_per_rank)."""
    popularity = expert_popularity(routing=routing, num_experts=num_experts)
    per_rank = num_experts // ep
    if routing.kind == "uniform" or np.allclose(popularity, popularity[0]):
        placed = np.broadcast_to(popularity.reshape(1, ep, per_rank), (1, ep, per_rank))
        return placed, placed.sum(axis=2)
    rng = np.random.default_rng(_SEED)
    perms = np.stack([rng.permutation(num_experts) for _ in range(_PLACEMENTS)])
    placed = popularity[perms].reshape(_PLACEMENTS, ep, per_rank)
    return placed, placed.sum(axis=2)


@lru_cache(maxsize=4096)
def _pick_scale(routing: Routing, num_experts: int, top_k: int) -> float:
    """The ``c`` of the per-token pick probabilities ``q_i = min(1, c p_i)``, which sum to
    ``top_k`` (water-filling: a token picks ``top_k`` distinct experts, so no expert is
    picked more than once per token however popular; ``c = top_k`` where none saturates)."""
    popularity = expert_popularity(routing=routing, num_experts=num_experts)  # descending
    tails = np.cumsum(popularity[::-1])[::-1]  # tails[m] = sum of p_i for i >= m
    for capped in range(min(top_k, num_experts)):  # the first ``capped`` experts at 1
        scale = (top_k - capped) / tails[capped]
        if scale * popularity[capped] <= 1.0:
            return float(scale)
    return math.inf  # every expert on every token (top_k >= num_experts)


@dataclass(frozen=True)
class _Draws:
    """The fixed-seed standard-normal sample behind :func:`_expected_max_normal` for one
    shape ``(placements, ranks)``: ``z`` as ``(ranks, placements, draws)`` (read-only) and
    each (placement, rank)'s smallest and largest draw."""

    z: np.ndarray
    low: np.ndarray  # (placements, ranks)
    high: np.ndarray


@lru_cache(maxsize=64)
def _normal_draws(shape: tuple[int, ...]) -> _Draws:
    """Draws ``(draws, placements, ranks)`` from the fixed seed, once per shape."""
    z = np.random.default_rng(_SEED).standard_normal((_DRAWS, *shape))
    ranks_first = np.ascontiguousarray(np.transpose(z, (2, 1, 0)))
    ranks_first.flags.writeable = False
    return _Draws(z=ranks_first, low=z.min(axis=0), high=z.max(axis=0))


def _expected_max_normal(mean: np.ndarray, std: np.ndarray) -> float:
    """E[max_r X_r] for independent normals, by a fixed-seed sample (cached inputs):
    the mean over draws and placements of max(0, max over ranks of mean + std z).

    A rank is skipped on placements where it cannot be the maximum: where its largest
    sampled value (mean + std x its largest z) lies below another rank's smallest, it
    never is (rounding is monotone, so this holds for the computed values too); a rank
    that can be the maximum on most placements is evaluated on all of them (evaluating
    a rank that never is the maximum changes nothing). The maximum is the same number,
    laid out as ``(draws, placements)`` before the mean, so the mean is the same too."""
    if mean.shape[-1] == 1:
        return float(mean.mean())
    draws = _normal_draws(mean.shape)
    floor = (draws.low * std + mean).max(axis=-1, keepdims=True)
    alive = draws.high * std + mean >= floor  # (placements, ranks)
    top = np.full(draws.z.shape[1:], -np.inf)  # (placements, draws)
    for rank in range(mean.shape[-1]):
        rows = np.flatnonzero(alive[:, rank])
        if 2 * rows.size > alive.shape[0]:  # most placements: the whole plane is cheaper
            values = draws.z[rank] * std[:, rank, None]
            values += mean[:, rank, None]
            np.maximum(top, values, out=top)
        elif rows.size:
            values = draws.z[rank, rows] * std[rows, rank, None]
            values += mean[rows, rank, None]
            top[rows] = np.maximum(top[rows], values)
    by_draw = np.ascontiguousarray(top.T)
    np.maximum(by_draw, 0.0, out=by_draw)
    return float(by_draw.mean())


#: Slots (tokens x top_k) up to which a uniform routing's busiest rank is computed exactly
#: (:func:`_uniform_busiest_rank`, sub-millisecond); past it the normal approximation
#: holds to a few per cent and is clipped to the load's hard bounds.
EXACT_SLOTS = 64


def _power_coefficient(rows: np.ndarray, power: int, degree: int) -> np.ndarray:
    """Coefficient ``degree`` of each row's polynomial (coefficients by degree) raised to
    ``power``, by repeated squaring truncated at ``degree``."""
    size = 1 << (2 * degree + 1).bit_length()

    def times(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        product = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)
        return product[..., :degree + 1]

    out: np.ndarray | None = None
    base = rows
    while power:
        if power & 1:
            out = base if out is None else times(out, base)
        power >>= 1
        if power:
            base = times(base, base)
    assert out is not None
    return out[..., degree]


@lru_cache(maxsize=4096)
def _uniform_busiest_rank(num_experts: int, top_k: int, ep: int, tokens: int) -> float:
    """E[max over ranks of the rank's slots] for ``tokens`` tokens each picking ``top_k``
    of ``num_experts`` uniformly, ``num_experts / ep`` experts a rank.

    The ``tokens x top_k`` picks are taken as that many distinct (token, expert) cells of
    the ``tokens x num_experts`` grid, uniformly (exact for one token; for more, dropping
    that each token picks exactly ``top_k`` changes a rank's variance by a factor
    (E - 1) / (E - 1/T), and 3,000-draw Monte Carlos agree within 1 %). Rank loads are
    then independent binomials over each rank's cells conditioned on their total ``n``:
    P(max <= L) = [z^n] (pmf truncated at L)^ep / [z^n] pmf^ep."""
    slots = tokens * top_k
    cells = tokens * (num_experts // ep)
    top = min(slots, cells)  # no rank holds more (tokens x min(top_k, experts a rank))
    floor = -(-slots // ep)  # some rank holds at least the mean, a whole number
    if floor >= top:
        return float(top)
    share = top_k / num_experts
    counts = np.arange(top + 1)
    log_pmf = np.array([math.lgamma(cells + 1) - math.lgamma(c + 1) - math.lgamma(cells - c + 1)
                        for c in counts]) + counts * math.log(share) \
        + (cells - counts) * math.log1p(-share)
    pmf = np.exp(log_pmf)
    levels = np.arange(floor, top)  # P(max <= L) for L below the floor is 0
    rows = np.vstack([np.where(counts <= levels[:, None], pmf, 0.0), pmf])
    below = _power_coefficient(rows, ep, slots)
    return floor + float(np.sum(1.0 - below[:-1] / below[-1]))


@lru_cache(maxsize=65536)
def expert_load(*, routing: Routing, num_experts: int, top_k: int, ep: int,
                tokens: float) -> ExpertLoad:
    """Expected per-rank load when ``tokens`` tokens each pick ``top_k`` of the experts."""
    if num_experts % ep:
        raise ConfigError(f"ep={ep} does not divide {num_experts} experts")
    placed, _ = _rank_shares(routing, num_experts, ep)
    slots = tokens * top_k
    # P(expert i chosen by one token), water-filled: min(1, c p_i), summing to top_k
    pick = np.minimum(1.0, _pick_scale(routing, num_experts, top_k) * placed)
    mean_load = tokens * pick.sum(axis=2)  # (placements, ep)
    std_load = np.sqrt(tokens * (pick * (1.0 - pick)).sum(axis=2))
    chosen = 1.0 - (1.0 - pick) ** tokens
    active = chosen.sum(axis=2)  # (placements, ep)
    per_rank = num_experts // ep
    if ep == 1:
        return ExpertLoad(tokens_max_rank=slots, tokens_mean_rank=slots,
                          active_experts_max_rank=float(active.mean()),
                          active_experts_mean_rank=float(active.mean()))
    whole = math.floor(tokens + 1e-9)  # a load's bounds hold for whole tokens
    floor = -(-whole * top_k // ep)  # some rank holds at least the mean
    cap = tokens * min(top_k, per_rank)  # a token sends a rank at most this many slots
    uniform = placed.shape[0] == 1
    if uniform and tokens * top_k <= EXACT_SLOTS:
        below = _uniform_busiest_rank(num_experts, top_k, ep, whole) if whole else 0.0
        above = (below if whole == tokens
                 else _uniform_busiest_rank(num_experts, top_k, ep, whole + 1))
        tokens_max = below + (tokens - whole) * (above - below)  # between whole counts
    else:
        tokens_max = min(max(_expected_max_normal(mean_load, std_load), floor, slots / ep), cap)
    active_std = np.sqrt((chosen * (1.0 - chosen)).sum(axis=2))
    active_max = _expected_max_normal(active, active_std)
    # one token's picks are distinct experts: a rank's active experts are its slots; more
    # tokens activate at least top_k distinct experts, ceil(top_k / ep) on some rank
    active_max = (tokens_max if tokens <= 1.0 else
                  max(active_max, float(active.mean()), -(-top_k // ep)))
    return ExpertLoad(
        tokens_max_rank=tokens_max,
        tokens_mean_rank=slots / ep,
        active_experts_max_rank=min(active_max, per_rank, tokens_max),
        active_experts_mean_rank=float(active.mean()),
    )


def expert_load_at(*, routing: Routing, num_experts: int, top_k: int, ep: int,
                   tokens: Size) -> ExpertLoad:
    """:func:`expert_load` at one token count or an array of them (each distinct count is
    priced once, through the same cache)."""
    if np.ndim(tokens) == 0:
        return expert_load(routing=routing, num_experts=num_experts, top_k=top_k, ep=ep,
                           tokens=float(tokens))
    counts, inverse = np.unique(np.asarray(tokens, dtype=float), return_inverse=True)
    loads = [expert_load(routing=routing, num_experts=num_experts, top_k=top_k, ep=ep,
                         tokens=float(count)) for count in counts]
    shape = np.shape(tokens)
    return ExpertLoad(**{name: np.array([getattr(load, name) for load in loads])[inverse]
                         .reshape(shape) for name in _LOAD_FIELDS})


_LOAD_FIELDS = ("tokens_max_rank", "tokens_mean_rank", "active_experts_max_rank",
                "active_experts_mean_rank")


def attention_rank_sequences(*, sequences: Size, attention_dp: int, critical: bool) -> Size:
    """Sequences one of ``attention_dp`` data-parallel attention ranks holds: the mean
    share, or (``critical``) the slowest rank's, the share rounded up (the scheduler
    spreads whole sequences, and every MoE layer waits for the rank holding the most)."""
    if attention_dp == 1:
        return sequences
    share = sequences / attention_dp
    return np.ceil(share - 1e-9) if critical else share
