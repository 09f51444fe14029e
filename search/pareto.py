"""Non-dominated sorting and hypervolume, honouring each objective's direction.

Hypervolume is computed on normalised objectives: every objective is turned into
minimisation, then mapped so that a box's ``ideal`` goes to 0 and its ``nadir`` to 1, and
the reference point is ``1 + REFERENCE_MARGIN`` (1.1) on every axis. Reports use the box
of all feasible points of the study (ideal = best, nadir = worst feasible value per
objective); search-quality ratios use the true front's ideal and nadir, so a ratio of 1
means the true front was found.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pymoo.indicators.hv import HV

REFERENCE_MARGIN = 0.1


def as_minimization(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Negate maximised columns so that smaller is better everywhere."""
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    return np.asarray(points, dtype=float).reshape(-1, len(signs)) * signs


def non_dominated_mask(points: np.ndarray, *, directions: Sequence[str]) -> np.ndarray:
    """Boolean mask of the points no other point dominates (ties are all kept).

    A point dominates another when it is no worse in every objective and better in one.
    Two objectives: one sort and a running minimum (O(n log n), millions of points a
    second); more: candidates that dominate many points filter the rest first, then a
    sweep in lexicographic order.
    """
    f = as_minimization(points, directions)
    if len(f) == 0:
        return np.zeros(0, dtype=bool)
    if f.shape[1] == 2:
        return _mask_2d(f)
    mask = np.zeros(len(f), dtype=bool)
    survivors = np.flatnonzero(~_dominated_by(f, f[_pivots(f)]))
    mask[survivors[_sweep(f[survivors])]] = True
    return mask


def _mask_2d(f: np.ndarray) -> np.ndarray:
    order = np.lexsort((f[:, 1], f[:, 0]))
    a, b = f[order, 0], f[order, 1]
    first = np.r_[True, a[1:] != a[:-1]]
    group = np.cumsum(first) - 1
    group_best = b[first]  # sorted by b within a group of equal a
    earlier_best = np.r_[np.inf, np.minimum.accumulate(group_best)[:-1]]
    # dominated: a point of a smaller first objective is no worse in the second, or a point of
    # the same first objective is better in the second
    dominated = (earlier_best[group] <= b) | (group_best[group] < b)
    mask = np.zeros(len(f), dtype=bool)
    mask[order] = ~dominated
    return mask


def _pivots(f: np.ndarray, n: int = 16) -> np.ndarray:
    """Points likely to dominate many others: the best in each objective and by the sum of
    objectives scaled to their ranges."""
    span = np.ptp(f, axis=0)
    scaled = (f - f.min(axis=0)) / np.where(span > 0, span, 1.0)
    best_sum = np.argsort(scaled.sum(axis=1), kind="stable")[:n]
    return np.unique(np.r_[best_sum, np.argmin(f, axis=0)])


def _dominated_by(f: np.ndarray, others: np.ndarray, block: int = 65536) -> np.ndarray:
    """Whether each row of ``f`` is dominated by some row of ``others``."""
    out = np.zeros(len(f), dtype=bool)
    for start in range(0, len(f), block):
        part = f[start : start + block, None, :]
        no_worse = np.all(others[None] <= part, axis=2)
        better = np.any(others[None] < part, axis=2)
        out[start : start + block] = np.any(no_worse & better, axis=1)
    return out


def _sweep(f: np.ndarray) -> np.ndarray:
    order = np.lexsort(f.T[::-1])
    front = np.empty_like(f)
    n_front = 0
    mask = np.zeros(len(f), dtype=bool)
    # In lexicographic order a point can only be dominated by earlier points, and if some
    # earlier point dominates it, some earlier non-dominated point does.
    for i in order:
        current = front[:n_front]
        dominated = np.any(np.all(current <= f[i], axis=1) & np.any(current < f[i], axis=1))
        if not dominated:
            front[n_front] = f[i]
            n_front += 1
            mask[i] = True
    return mask


def bounds(points: np.ndarray, *, directions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ideal, nadir) of ``points`` in minimisation form: best and worst per objective."""
    f = as_minimization(points, directions)
    return f.min(axis=0), f.max(axis=0)


def hypervolume(
    points: np.ndarray, *, directions: Sequence[str], ideal: np.ndarray, nadir: np.ndarray
) -> float:
    """Normalised hypervolume of ``points`` in the box (ideal, nadir) given in minimisation
    form; points beyond the reference point add nothing."""
    f = _normalise(as_minimization(points, directions), ideal, nadir)
    reference = np.full(f.shape[1], 1.0 + REFERENCE_MARGIN)
    f = f[np.all(f < reference, axis=1)]
    return float(HV(ref_point=reference).do(f)) if len(f) else 0.0


def hypervolume_history(
    points: np.ndarray,
    feasible: np.ndarray,
    *,
    directions: Sequence[str],
    ideal: np.ndarray,
    nadir: np.ndarray,
) -> np.ndarray:
    """Hypervolume of the feasible front after each point, in the given order."""
    f = as_minimization(points, directions)
    history = np.zeros(len(f))
    front = np.empty((0, f.shape[1]))
    value = 0.0
    for i, point in enumerate(f):
        if feasible[i] and not np.any(np.all(front <= point, axis=1)):
            keep = ~(np.all(point <= front, axis=1) & np.any(point < front, axis=1))
            front = np.vstack([front[keep], point])
            value = hypervolume(front, directions=["minimize"] * f.shape[1], ideal=ideal, nadir=nadir)
        history[i] = value
    return history


def _normalise(f: np.ndarray, ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    span = np.where(nadir > ideal, nadir - ideal, 1.0)
    return (f - ideal) / span
