"""Fit per-GPU kernel latency constants to Vidur per-operator profiles (``mlp.csv``).

Each Vidur op is priced as the one kernel of our family spec it corresponds to (see
:mod:`energylens.measurements.vidur_ops`). The GEMM and memory-efficiency curves, the roofline
sharpness, the fixed kernel time and the vector-unit efficiency are fitted per GPU by
least squares on log latency over every modelled op of every model file of that GPU.
Honesty: each model is also held out in turn (fit on the other models, predict it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration.fitting import (
    ErrorStats,
    FitResult,
    Param,
    fit_bounded,
    rms_log_residual,
)
from energylens.cost.constants import KernelConstants
from energylens.cost.roofline import ELEMENTWISE, VECTOR_CLASSES, vector_class
from energylens.hardware import GPU, load_gpu
from energylens.measurements.formats import MeasurementSet, load_measurements
from energylens.measurements.vidur_ops import GEMM_OPS, VIDUR_OPS, Geometry, kernel_for, op_latency_s

#: Fitted latency constants and their physically meaningful ranges.
KERNEL_PARAMS = (
    Param("gemm_efficiency_max", 0.75, 0.40, 0.98),
    Param("gemm_k_half", 96.0, 1.0, 4096.0, log=True),
    Param("gemm_m_half", 16.0, 0.5, 1024.0, log=True),
    Param("wave_exponent", 0.5, 0.0, 1.5),
    Param("roofline_sharpness", 3.0, 1.0, 16.0, log=True),
    Param("memory_efficiency_max", 0.80, 0.40, 0.98),
    Param("memory_half_bytes", 1.0e6, 1.0e4, 1.0e8, log=True),
    Param("kernel_overhead_s", 4.0e-6, 0.5e-6, 30.0e-6, log=True),
)
#: ``vector_efficiency`` is not fitted: the elementwise ops that would identify it are
#: memory-bound (their classes' floor and bandwidth are fitted instead, below).


#: Weight of a non-GEMM op type relative to a GEMM op type in the GEMM fit. Elementwise
#: kernels last 1-70 us, are timed at 1 us resolution and partly hit L2 in Vidur's
#: back-to-back profiling: they get their own per-class fit instead of steering the GEMM
#: and memory curves.
NON_GEMM_WEIGHT = 0.0


def class_params(klass: str) -> tuple[Param, Param, Param]:
    """Launch floor, HBM share and floor sharpness (how the floor joins the stream time)
    of one class of small memory-bound kernels. The share may pass 1: Vidur times ops back
    to back, so a small kernel's inputs (the previous kernel's output) are partly served
    from L2 at more than HBM peak."""
    return (Param(f"{klass}_overhead_s", 4.0e-6, 0.3e-6, 30.0e-6, log=True),
            Param(f"{klass}_bandwidth_efficiency", 0.6, 0.05, 1.5),
            Param(f"{klass}_floor_sharpness", 1.0, 0.5, 8.0, log=True))


VECTOR_PARAMS = tuple(p for klass in (*sorted(set(VECTOR_CLASSES.values())), ELEMENTWISE)
                      for p in class_params(klass))


NO_ENERGY = {"energy_per_tensor_flop_j": 0.0, "energy_per_vector_flop_j": 0.0,
             "energy_per_hbm_byte_j": 0.0}


@dataclass(frozen=True)
class OpCase:
    """All rows of one model file that share a geometry, for one op."""

    model: str
    op: str
    geometry: Geometry
    num_tokens: np.ndarray
    measured_s: np.ndarray


def op_cases(sets: list[MeasurementSet]) -> list[OpCase]:
    """Group loaded ``vidur-mlp`` rows into vectorisable cases (modelled ops only)."""
    cases: list[OpCase] = []
    for mset in sets:
        grouped: dict[tuple[str, Geometry], list] = defaultdict(list)
        for row in mset.rows:
            grouped[(row.context["model"], Geometry.of(row.input))].append(row)
        for (model, geometry), rows in grouped.items():
            tokens = np.array([r.input["num_tokens"] for r in rows], dtype=float)
            for op in VIDUR_OPS:
                if op in rows[0].measured:
                    measured = np.array([r.measured[op] for r in rows]) * 1e-3
                    cases.append(OpCase(model=model, op=op, geometry=geometry,
                                        num_tokens=tokens, measured_s=measured))
    return cases


def predict_cases(cases: list[OpCase], *, gpu: GPU, constants: KernelConstants) -> list[np.ndarray]:
    """Predicted latency (s) per case."""
    return [np.asarray(op_latency_s(op=c.op, geometry=c.geometry, num_tokens=c.num_tokens,
                                    gpu=gpu, constants=constants)) for c in cases]


def _errors(cases: list[OpCase], predicted: list[np.ndarray]) -> dict[str, ErrorStats]:
    by_metric: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for case, pred in zip(cases, predicted, strict=True):
        for metric in (case.op, "gemm" if case.op in GEMM_OPS else "non_gemm"):
            by_metric[metric][0].append(pred)
            by_metric[metric][1].append(case.measured_s)
    return {m: ErrorStats.of(np.concatenate(p), np.concatenate(y)) for m, (p, y) in by_metric.items()}


def _fit(cases: list[OpCase], *, gpu: GPU, base: KernelConstants) -> tuple[dict[str, float], float,
                                                                          list[str]]:
    # Each op type weighs the same whatever its number of rows.
    counts: dict[str, int] = defaultdict(int)
    for c in cases:
        counts[c.op] += c.measured_s.size
    weights = [np.sqrt((1.0 if c.op in GEMM_OPS else NON_GEMM_WEIGHT) / counts[c.op]) for c in cases]
    measured = [np.log(c.measured_s) for c in cases]

    def residuals(values: dict[str, float]) -> np.ndarray:
        constants = replace(base, **values)
        predicted = predict_cases(cases, gpu=gpu, constants=constants)
        return np.concatenate([w * (np.log(np.maximum(p, 1e-30)) - y)
                               for w, p, y in zip(weights, predicted, measured, strict=True)])

    values, rms, at_bound = fit_bounded(params=KERNEL_PARAMS, residuals=residuals)
    fitted = replace(base, **values)
    for klass, members in sorted(by_class(cases).items()):
        class_values, _, class_bound = fit_class(members, gpu=gpu, base=fitted, klass=klass)
        values.update(class_values)
        at_bound += class_bound
    return values, rms, at_bound


def by_class(cases: list[OpCase]) -> dict[str, list[OpCase]]:
    """Non-GEMM cases by the class of small kernel they time."""
    out: dict[str, list[OpCase]] = defaultdict(list)
    for case in cases:
        klass = vector_class(kernel_for(op=case.op, geometry=case.geometry))
        if klass is not None:
            out[klass].append(case)
    return out


def fit_class(cases: list[OpCase], *, gpu: GPU, base: KernelConstants,
               klass: str) -> tuple[dict[str, float], float, list[str]]:
    """Floor and bandwidth share of one class on its own ops (each op type weighs the same)."""
    counts: dict[str, int] = defaultdict(int)
    for c in cases:
        counts[c.op] += c.measured_s.size
    weights = [np.sqrt(1.0 / counts[c.op]) for c in cases]
    measured = [np.log(c.measured_s) for c in cases]

    def residuals(values: dict[str, float]) -> np.ndarray:
        predicted = predict_cases(cases, gpu=gpu, constants=replace(base, **values))
        return np.concatenate([w * (np.log(np.maximum(p, 1e-30)) - y)
                               for w, p, y in zip(weights, predicted, measured, strict=True)])

    return fit_bounded(params=class_params(klass), residuals=residuals)


def fit_gpu_kernels(*, files: list[Path], gpu_name: str, base: KernelConstants | None = None,
                    leave_out: bool = True) -> FitResult:
    """Fit the latency constants of ``gpu_name`` on Vidur ``mlp.csv`` files of that GPU."""
    gpu = load_gpu(gpu_name)
    # Latency only: no power cap while fitting (the cap is checked after the power fit).
    base = replace(base or KernelConstants(), **NO_ENERGY)
    sets = [load_measurements(format="vidur-mlp", path=f, gpu=gpu.name) for f in files]
    cases = op_cases(sets)
    values, _, at_bound = _fit(cases, gpu=gpu, base=base)
    fitted = replace(base, **values)
    predicted = predict_cases(cases, gpu=gpu, constants=fitted)
    rms = rms_log_residual(predicted, [c.measured_s for c in cases])
    result = FitResult(values=values, rms_log_residual=rms, in_sample=_errors(cases, predicted),
                       fitted_on=[str(f) for f in files],
                       n_points=sum(c.measured_s.size for c in cases), at_bound=at_bound)
    models = sorted({c.model for c in cases})
    if leave_out and len(models) > 1:
        held_cases: list[OpCase] = []
        held_pred: list[np.ndarray] = []
        for model in models:
            train = [c for c in cases if c.model != model]
            test = [c for c in cases if c.model == model]
            values_out, _, _ = _fit(train, gpu=gpu, base=base)
            held_cases += test
            held_pred += predict_cases(test, gpu=gpu, constants=replace(base, **values_out))
        result.leave_out = _errors(held_cases, held_pred)
    return result
