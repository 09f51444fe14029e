"""Bounded least squares with physically meaningful parameter ranges, and fit reports.

Every fitted constant has a range (``Param``); the optimiser works on an unbounded
logistic (or log-logistic) transform, so a fit can never leave the range. Residuals are
on log values (relative errors, symmetric for over- and under-prediction). A fit
reports the in-sample error and, separately, the error of leave-one-group-out refits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
from scipy.optimize import least_squares

T = TypeVar("T")
R = TypeVar("R")

#: A fitted constant within this share of its range (in log for a ``log`` parameter) of
#: either end is at a bound: not identified by the data. The one rule of every fit here.
BOUND_SHARE = 1e-3
#: Times a fit is resumed with the constants its solution brought into play (:func:`fit_bounded`).
WAKE_ROUNDS = 3


def near_bound(*, value: float, low: float, high: float) -> bool:
    """Whether ``value`` lies within :data:`BOUND_SHARE` of ``high - low`` of either end."""
    return min(abs(value - low), abs(high - value)) <= BOUND_SHARE * (high - low)


@dataclass(frozen=True)
class Param:
    """One fitted constant: name, initial value and bounds; ``log`` for scale parameters."""

    name: str
    init: float
    low: float
    high: float
    log: bool = False

    def to_unbounded(self, value: float) -> float:
        """Inverse of :meth:`to_bounded`."""
        lo, hi, v = (np.log(x) for x in (self.low, self.high, value)) if self.log else (
            self.low, self.high, value)
        frac = np.clip((v - lo) / (hi - lo), 1e-6, 1 - 1e-6)
        return float(np.log(frac / (1 - frac)))

    def at_bound(self, value: float) -> bool:
        """Whether ``value`` is at a bound of the range (:func:`near_bound`, in log if ``log``)."""
        if self.log:
            return near_bound(value=float(np.log(value)), low=float(np.log(self.low)),
                              high=float(np.log(self.high)))
        return near_bound(value=value, low=self.low, high=self.high)

    def to_bounded(self, z: float) -> float:
        """Map an unbounded optimiser variable into [low, high]."""
        frac = 1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0)))
        if self.log:
            return float(np.exp(np.log(self.low) + frac * (np.log(self.high) - np.log(self.low))))
        return float(self.low + frac * (self.high - self.low))


@dataclass
class ErrorStats:
    """Relative errors of a set of predictions."""

    mape: float  # mean |pred/meas - 1|
    median_ape: float
    n: int

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> ErrorStats:
        """Errors of ``predicted`` against ``measured`` (same shape, measured > 0)."""
        ape = np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)
        if ape.size == 0:
            return cls(mape=float("nan"), median_ape=float("nan"), n=0)
        return cls(mape=float(ape.mean()), median_ape=float(np.median(ape)), n=int(ape.size))

    def as_dict(self) -> dict[str, float | int]:
        """JSON/YAML form (fractions, not percent)."""
        return {"mape": round(self.mape, 5), "median_ape": round(self.median_ape, 5), "n": self.n}


@dataclass
class FitResult:
    """Fitted values, the residual of the fit and the data it was fitted on."""

    values: dict[str, float]
    rms_log_residual: float
    in_sample: dict[str, ErrorStats] = field(default_factory=dict)  # per metric
    leave_out: dict[str, ErrorStats] = field(default_factory=dict)  # per metric, held-out
    fitted_on: list[str] = field(default_factory=list)
    n_points: int = 0
    at_bound: list[str] = field(default_factory=list)
    in_sample_groups: dict[str, dict[str, ErrorStats]] = field(default_factory=dict)
    leave_out_groups: dict[str, dict[str, ErrorStats]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def fit_bounded(*, params: Sequence[Param], residuals: Callable[[dict[str, float]], np.ndarray],
                max_nfev: int = 400, starts: Sequence[dict[str, float]] = ()
                ) -> tuple[dict[str, float], float, list[str]]:
    """Minimise sum of squared ``residuals(values)``; returns values, rms residual, at-bound.

    The solver starts from the parameters' ``init``, then from each of ``starts`` (initial
    values overriding some of them, for a form with several basins); the lowest residual
    wins, the first start on ties.
    """
    fits = [_fit_from(params=[replace(p, init=start.get(p.name, p.init)) for p in params],
                      residuals=residuals, max_nfev=max_nfev) for start in ({}, *starts)]
    return min(fits, key=lambda fit: fit[1])


def _fit_from(*, params: Sequence[Param], residuals: Callable[[dict[str, float]], np.ndarray],
              max_nfev: int) -> tuple[dict[str, float], float, list[str]]:
    z0 = np.array([p.to_unbounded(p.init) for p in params])

    def unpack(z: np.ndarray) -> dict[str, float]:
        return {p.name: p.to_bounded(v) for p, v in zip(params, z, strict=True)}

    def fun(z: np.ndarray) -> np.ndarray:
        r = residuals(unpack(z))
        return np.where(np.isfinite(r), r, 10.0)

    # Forward differences with an absolute step (a relative step is zero at z = 0).
    def jac(z: np.ndarray, columns: np.ndarray) -> np.ndarray:
        f0 = fun(z)
        cols = []
        for i in np.flatnonzero(columns):
            step = np.zeros_like(z)
            step[i] = 1e-4
            cols.append((fun(z + step) - f0) / 1e-4)
        return np.stack(cols, axis=1)

    # A constant no residual depends on (its Jacobian column is zero: no row of this fit
    # exercises it, e.g. the EP overhead in a fold without EP rows) is not identified here:
    # it keeps its initial value instead of drifting (the trust-region solver does move
    # along such directions, to a bound). One that the others' fitted values bring into
    # play (a second protocol that only undercuts the first once the first has slowed) is
    # fitted with them from there, up to :data:`WAKE_ROUNDS` times.
    def active(z: np.ndarray) -> np.ndarray:
        return np.asarray(np.any(jac(z, np.ones(z.size, dtype=bool)) != 0.0, axis=0))

    z_fit = z0.copy()
    free = active(z0)
    for _ in range(WAKE_ROUNDS):
        if np.any(free):
            z_fit = _solve(fun=fun, jac=jac, z=z_fit, free=free, max_nfev=max_nfev)
        woken = active(z_fit) & ~free
        if not np.any(woken):
            break
        free = free | woken
    residual = fun(z_fit)
    values = unpack(z_fit)
    rms = float(np.sqrt(np.mean(residual**2))) if residual.size else 0.0
    at_bound = [p.name for p in params if p.at_bound(values[p.name])]
    return values, rms, at_bound


def _solve(*, fun: Callable[[np.ndarray], np.ndarray],
           jac: Callable[[np.ndarray, np.ndarray], np.ndarray], z: np.ndarray,
           free: np.ndarray, max_nfev: int) -> np.ndarray:
    """Least squares over the ``free`` components of ``z`` (the rest held)."""
    def full(y: np.ndarray) -> np.ndarray:
        out = z.copy()
        out[free] = y
        return out

    def fun_free(y: np.ndarray) -> np.ndarray:
        return fun(full(y))

    def jac_free(y: np.ndarray) -> np.ndarray:
        return jac(full(y), free)

    result = least_squares(fun_free, z[free], jac=jac_free, method="trf", x_scale=1.0,
                           max_nfev=max_nfev)
    return full(result.x)


def log_residual(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """log(pred) - log(meas), safe for non-positive predictions."""
    return np.log(np.maximum(np.asarray(predicted, dtype=float), 1e-30)) - np.log(measured)


def rms_log_residual(predicted: list[np.ndarray], measured: list[np.ndarray]) -> float:
    """Root-mean-square log residual over several groups of points."""
    residuals = [log_residual(p, m) for p, m in zip(predicted, measured, strict=True)]
    return float(np.sqrt(np.mean(np.concatenate(residuals) ** 2)))


def least_squares_log(*, price: Callable[[np.ndarray], np.ndarray], measured_s: np.ndarray,
                      start: Sequence[float], lower: Sequence[float], upper: Sequence[float],
                      x_scale: Sequence[float]) -> np.ndarray:
    """The unknowns, within their bounds, whose ``price(x)`` best matches ``measured_s`` in
    log time (least squares from ``start``)."""
    measured = np.log(measured_s)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(price(x)) - measured

    return np.asarray(least_squares(residual, list(start), bounds=(list(lower), list(upper)),
                                    x_scale=list(x_scale)).x)


def fit_kernel_table(*, latency_s: np.ndarray, best: Callable[[np.ndarray], dict[str, float]],
                     price: Callable[[np.ndarray, dict[str, float]], np.ndarray],
                     split_by: np.ndarray, at_bound: Callable[[dict[str, float]], list[str]],
                     fitted_on: list[str], leave_out: bool = True) -> FitResult:
    """A kernel table's constants: ``best(rows)`` fits them on the rows of a boolean mask,
    ``price(rows, values)`` times those rows with them. Fitted on every row; held out, the
    rows with alternate values of ``split_by`` fit and the other half is predicted."""
    everything = np.ones(latency_s.size, dtype=bool)
    values = best(everything)
    fitted = price(everything, values)
    result = FitResult(values=values,
                       rms_log_residual=float(np.sqrt(np.mean(np.log(fitted / latency_s) ** 2))),
                       in_sample={"latency": ErrorStats.of(fitted, latency_s)},
                       fitted_on=fitted_on, n_points=int(latency_s.size),
                       at_bound=at_bound(values))
    keys = np.unique(split_by)
    if leave_out and keys.size > 1:
        first = np.isin(split_by, keys[::2])
        held = np.empty_like(fitted)
        for fold in (first, ~first):
            held[~fold] = price(~fold, best(fold))
        result.leave_out = {"latency": ErrorStats.of(held, latency_s)}
    return result


def fit_efficiency_ramp(*, fields: tuple[str, str],
                        bounds: tuple[tuple[float, float], tuple[float, float]],
                        start_efficiency: float, latency_s: np.ndarray, split_by: np.ndarray,
                        price: Callable[[np.ndarray, dict[str, float]], np.ndarray],
                        fitted_on: list[str], leave_out: bool = True) -> FitResult:
    """A kernel table's efficiency (``fields[0]``, a share of a peak) and the half-point of
    its ramp (``fields[1]``, solved for in log10, started half-way along its log range, away
    from both bounds and from 0, no ramp): :func:`fit_kernel_table` with ``price(rows,
    values)``. A constant is at a bound by :func:`near_bound` on its (log) range."""
    log_bounds = ((bounds[0][0], bounds[0][1]), (np.log10(bounds[1][0]), np.log10(bounds[1][1])))
    lower = [low for low, _ in log_bounds]
    upper = [high for _, high in log_bounds]

    def values(x: np.ndarray) -> dict[str, float]:
        return {fields[0]: float(x[0]), fields[1]: float(10.0 ** x[1])}

    def best(rows: np.ndarray) -> dict[str, float]:
        start = [min(max(start_efficiency, lower[0]), upper[0]), (lower[1] + upper[1]) / 2.0]
        return values(least_squares_log(price=lambda x: price(rows, values(x)),
                                        measured_s=latency_s[rows], start=start, lower=lower,
                                        upper=upper, x_scale=[0.1, 1.0]))

    def at_bound(found: dict[str, float]) -> list[str]:
        scaled = (found[fields[0]], np.log10(found[fields[1]]))
        return [name for name, value, (low, high) in zip(fields, scaled, log_bounds, strict=True)
                if near_bound(value=float(value), low=low, high=high)]

    return fit_kernel_table(latency_s=latency_s, split_by=split_by, at_bound=at_bound,
                            best=best, price=price, fitted_on=fitted_on, leave_out=leave_out)


def map_forked(function: Callable[[T], R], items: Sequence[T], *, jobs: int) -> list[R]:
    """``function`` over ``items`` in order, on ``jobs`` forked processes (in this one when
    ``jobs`` is 1): the refits of held-out folds, independent of each other."""
    if jobs <= 1:
        return [function(item) for item in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return list(pool.map(function, items))
