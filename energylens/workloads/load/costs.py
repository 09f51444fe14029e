"""Step prices of a load run, from :func:`energylens.cost.step.step_cost` on a grid.

A step under continuous batching is ``d`` decoding sequences (mean context ``c``) plus
prefill chunks (``n`` new tokens after ``k`` cached ones). Attention kernels run once per
sequence group and every other kernel sees the step's tokens merged, so a step costs

    D(d, c) + F(d + sum n) - F(d) + sum_i A(n_i, k_i) + engine(d + chunks)

with D the decode-only step, F(T) the step of T tokens whose attention is negligible
(context 1) and A(n, k) = step(one chunk) - F(n) the attention of one chunk. Each term is
priced on a grid and interpolated linearly (costs are piecewise linear in the context and
smooth in the token counts); integer axes are tabulated at every integer so that the
scheduler's lookups are list indexing.

Under pipeline parallelism a step is one virtual engine's micro-batch (vLLM keeps ``pp``
of them in flight, :mod:`energylens.workloads.load.kind`): it is priced through the whole
model on one stage's tensor-parallel degrees (``step_cost`` at pp = 1, whose stage time
is that over ``pp``), plus ``pp`` stage-to-stage sends of its activations. A virtual
engine's next step starts when its micro-batch comes back, so with ``pp`` engines busy
every stage is, and each engine's step time is ``pp`` x (stage time + send).

Under data-parallel attention every attention rank schedules its own requests
(:mod:`energylens.workloads.load.kind`) and the ranks step together, the MoE layers
waiting for all of them. A table of ``ranks`` ranks prices each step as every rank running
the same batch (``ranks`` times the sequences, spread one share per rank): its time is the
replica's step, its energy each rank's share.

Under speculative decoding (``StepContext.speculation``) a scheduler step yields one token
per decoding sequence: ``D`` and the engine's time are the share of an engine step (drafts
and the check of every draft) per token a sequence gains on average.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace

import numpy as np

from energylens.cost.memory import stage_layer_share
from energylens.cost.step import (
    SequenceGroup,
    StepContext,
    decode_step_cost,
    engine_cost,
    pipeline_send,
    step_cost,
)

#: Fields of a step's price: wall time and the three dynamic energy components.
FIELDS = ("latency_s", "compute_energy_j", "memory_energy_j", "communication_energy_j")
#: Context points of the grids (the context axis is priced in one vectorised call).
CONTEXT_POINTS = 17
#: Shortest step [s]. A chunk's term A(n, k) may be negative (F(n) prices n one-token
#: sequences, whose attention can cost more than the chunk's); interpolation could take a
#: step's sum below zero, so every step's price is floored at this time and at zero
#: energy per component.
MIN_STEP_S = 1e-6


def _geometric_axis(top: int) -> np.ndarray:
    """1, 2, 3, 4, 6, 8, 12, ... up to ``top`` (two points per octave), ``top`` included."""
    points = {1, top}
    value = 2
    while value < top:
        points.update({value, value * 3 // 2})
        value *= 2
    return np.array(sorted(p for p in points if p <= top), dtype=float)


def _price(ctx: StepContext, groups: list[SequenceGroup], ranks: int,
           decode: bool = False) -> np.ndarray:
    """(fields, points) array of one vectorised step price: one virtual engine's step
    through every stage (the whole model at one stage's degrees, and ``ctx.pp`` sends of
    the step's activations from stage to stage, the last one back to the first), with
    each of ``ranks`` attention ranks running ``groups`` (energy: one rank's share).
    ``decode``: the groups decode, priced per token each gains (speculative decoding)."""
    groups = [replace(g, sequences=g.sequences * ranks) for g in groups]
    price = decode_step_cost if decode else step_cost
    cost = price(ctx=replace(ctx, pp=1), seqs=groups)
    tokens = sum(g.sequences * g.new_tokens for g in groups)
    send_s, send_j = pipeline_send(ctx=ctx, tokens=tokens)
    values = [np.atleast_1d(np.asarray(getattr(cost, f), dtype=float)) for f in FIELDS]
    # pp stage times of the most loaded stage (ceil(L / pp) of L layers), and the sends
    values[0] = values[0] * ctx.pp * stage_layer_share(graph=ctx.graph, pp=ctx.pp) \
        + ctx.pp * send_s
    values[3] = values[3] + ctx.pp * send_j
    values[1:] = [v / ranks for v in values[1:]]
    points = np.broadcast_shapes(*(v.shape for v in values))
    return np.stack([np.broadcast_to(v, points) for v in values])


def _fill_integers(axis: np.ndarray, values: np.ndarray, top: int) -> np.ndarray:
    """Values at every integer 0..top, linear between grid points (and through 0 at 0)."""
    xs = np.concatenate(([0.0], axis))
    ys = np.concatenate((np.zeros_like(values[:1]), values)).reshape(len(xs), -1)
    grid = np.arange(top + 1, dtype=float)
    # one set of brackets and weights for every column (np.interp's, column by column)
    right = np.clip(np.searchsorted(xs, grid, side="right"), 1, len(xs) - 1)
    x0, x1 = xs[right - 1], xs[right]
    weight = np.clip((grid - x0) / (x1 - x0), 0.0, 1.0)[:, None]
    out = ys[right - 1] + (ys[right] - ys[right - 1]) * weight
    return out.reshape((top + 1, *values.shape[1:]))


@dataclass(frozen=True, kw_only=True)
class StepTable:
    """Tabulated step prices of one replica. Arrays have the fields on the last axis."""

    decode: np.ndarray  # (d 0..max_decode, context point, field)
    merged: np.ndarray  # (tokens 0..max_tokens, field)
    chunk: np.ndarray  # (new tokens 0..budget, cached point, field)
    contexts: list[float]  # context points of ``decode``
    cached: list[float]  # cached-token points of ``chunk``
    engine_idle_s: float
    engine_busy_s_per_sequence: float
    engine_busy_j_per_sequence: float  # busy energy of the replica's GPUs per sequence
    # (one attention rank's share under data-parallel attention)
    # the engine's time runs beside each step, not after it (StepContext.cpu_overlapped)
    engine_overlapped: bool = False

    @classmethod
    def build(cls, *, ctx: StepContext, max_decode: int, max_context: int, budget: int,
              ranks: int = 1) -> StepTable:
        """Price the grids: ``max_decode`` sequences, contexts to ``max_context``, prefill
        chunks to ``budget`` tokens, on each of ``ranks`` attention ranks that step
        together (the prices of one rank's scheduler)."""
        contexts = np.unique(np.round(np.linspace(1.0, max(max_context, 2), CONTEXT_POINTS)))
        d_axis = _geometric_axis(max_decode)
        # each grid in one vectorised call: sizes broadcast (axis point x context point)
        decode = np.moveaxis(_price(ctx, [SequenceGroup(
            sequences=d_axis[:, None], new_tokens=1.0, context=contexts[None, :])], ranks,
            decode=True), 0, -1)
        t_axis = _geometric_axis(budget + max_decode)
        merged = _fill_integers(t_axis, _price(ctx, [SequenceGroup(
            sequences=t_axis, new_tokens=1.0, context=1.0)], ranks).T, budget + max_decode)
        cached = np.unique(np.round(np.linspace(0.0, max(max_context, 1), CONTEXT_POINTS)))
        n_axis = _geometric_axis(budget)
        # a one-token chunk decodes, longer ones prefill: priced apart (the step's forms)
        one = _price(ctx, [SequenceGroup(sequences=1.0, new_tokens=1.0, context=1.0 + cached)],
                     ranks).T[None]
        longer = n_axis[n_axis > 1.0]
        chunks = np.moveaxis(_price(ctx, [SequenceGroup(
            sequences=1.0, new_tokens=longer[:, None], context=longer[:, None] + cached[None, :])],
            ranks), 0, -1) if len(longer) else np.zeros((0, *one.shape[1:]))
        chunk = np.concatenate((one, chunks)) - merged[n_axis.astype(int)][:, None, :]
        idle_s, per_seq_s = ctx.runtime.step_overhead_s(constants=ctx.runtime_constants,
                                                        sequences=1.0)
        stage = replace(ctx, pp=1)  # a virtual engine's busy GPUs: one stage's share
        # a step of the scheduler yields one token per decoding sequence: under speculative
        # decoding the share of an engine step that does
        share = 1.0 / ctx.tokens_per_decode_step
        return cls(decode=_fill_integers(d_axis, decode, max_decode), merged=merged,
                   chunk=_fill_integers(n_axis, chunk, budget),
                   contexts=[float(c) for c in contexts], cached=[float(c) for c in cached],
                   engine_idle_s=float(idle_s) * share,
                   engine_busy_s_per_sequence=float(per_seq_s) * share,
                   engine_busy_j_per_sequence=0.0 if ctx.cpu_overlapped else float(
                       engine_cost(ctx=stage, sequences=1.0).compute_energy_j) / ranks * share,
                   engine_overlapped=ctx.cpu_overlapped)

    def latency_lists(self) -> tuple[list[list[float]], list[float], list[list[float]]]:
        """The latency tables as Python lists (the scheduler's fast path)."""
        return (self.decode[..., 0].tolist(), self.merged[:, 0].tolist(),
                self.chunk[..., 0].tolist())


def interpolate(points: list[float], row: list[float], x: float) -> float:
    """``row`` (values at ``points``) at ``x``, linear, clamped to the ends."""
    i = bisect_right(points, x)
    if i <= 0:
        return row[0]
    if i >= len(points):
        return row[-1]
    x0, x1 = points[i - 1], points[i]
    return row[i - 1] + (row[i] - row[i - 1]) * (x - x0) / (x1 - x0)


def interpolate_many(points: list[float], table: np.ndarray, rows: np.ndarray,
                     xs: np.ndarray) -> np.ndarray:
    """``table[rows]`` at ``xs`` along its second axis, every field: (len(xs), fields)."""
    grid = np.asarray(points)
    i = np.clip(np.searchsorted(grid, xs, side="right"), 1, len(grid) - 1)
    x0, x1 = grid[i - 1], grid[i]
    w = np.clip((xs - x0) / (x1 - x0), 0.0, 1.0)[:, None]
    return table[rows, i - 1] * (1 - w) + table[rows, i] * w
