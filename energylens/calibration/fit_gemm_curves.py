"""Each GPU's GEMM curve from its own GEMM table: the kernels vLLM runs, timed shape by shape.

AIConfigurator's vLLM GEMM tables (``kernels/<gpu>/gemm/vllm/<v>/gemm_perf.parquet``:
``m, n, k``, ``gemm_dtype``, ``latency`` in ms) time about 36,000 BF16 shapes per GPU (9,000
on A100), m from 1 to 16,384 tokens. The GEMM curve of :mod:`energylens.cost.roofline` --
the constants of :data:`FIELDS` -- is fitted on each GPU's own rows by least squares on log
latency, every shape with the same weight, each shape priced by the kernel code a model's
step uses (:func:`energylens.cost.single_gemm.gemm_cost`).

Rows: a shape counts when its weight matrix is at least the GPU's L2 or the roofline puts
it on the compute side. The table times one op over and over, so a smaller matrix stays in
L2 and streams faster than HBM allows, which a served layer's weights (evicted by the other
layers' in between) never do; a compute-bound shape's time does not depend on where its
operands come from. The dropped shapes are counted in the report.

``gemm_m_half`` (the small-m ramp) is not fitted: below the ridge the weight stream hides
the GEMM's compute at every m the tables hold, so the rows do not identify it (fitted, it
runs to its bound on H100, H200 and A100), and the decode attention's MMA rows share it. A
constant that still ends at a bound of its range is not identified either: it keeps the
GPU's current value and the others are fitted again without it.

Honesty: the shapes are split in two halves by ``n`` (alternate values); each half's fit
predicts the other half. Reported beside the error of the curve the GPU ships (its Vidur
fit, or its relative's carried over), not applied (:data:`NOT_APPLIED`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration.fit_gemm_transfer import bf16_times
from energylens.calibration.fit_kernels import KERNEL_PARAMS, NO_ENERGY
from energylens.calibration.fitting import ErrorStats, FitResult, Param, fit_bounded
from energylens.cost.constants import KernelConstants
from energylens.cost.single_gemm import gemm_cost
from energylens.hardware import GPU

#: The GEMM curve's constants this fit sets (with the Vidur fit's ranges).
FIELDS = ("gemm_efficiency_max", "gemm_k_half", "wave_exponent", "roofline_sharpness",
          "memory_efficiency_max", "kernel_overhead_s")
PARAMS = tuple(p for p in KERNEL_PARAMS if p.name in FIELDS)
#: ``in_sample`` key of the shipped curve's error on the same rows.
CURRENT = "latency_shipped"
#: Why the tables' curves are reported and not applied (the calibration file carries it).
NOT_APPLIED = (
    "applied end to end on every GPU with a table (2026-11-28, nineteenth session) the GEMMs "
    "and the engine-free forward steps come out right (steps' time at K = 0: H100 bf16 7.4 -> "
    "5.5 %, fp8 7.7 -> 5.8 %, H200 bf16 11.5 -> 8.3 %, fp8 10.5 -> 9.5 %; H100 inter-token "
    "latency folds 1-4 points better), but the serving engines are slower than their kernels: "
    "AIConfigurator's serving TPOT 15.9 -> 17.2 % (at <= 4 clients every engine 17-20 % fast "
    "where it was 7-11 %), H100's gpu-count and MoE -> dense energy folds 8.6 -> 10.8 % and "
    "8.4 -> 10.9 %, Vidur's per-op GEMMs (an older PyTorch stack) 8.2 -> 17.8 % on H100. The "
    "slower shipped curve stands in for engine time per step the model does not price "
    "(SGLang's is assumed 0); docs/kernels-h200.md")


@dataclass(frozen=True)
class GemmTable:
    """The BF16 shapes of one GPU's table that this fit uses."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    latency_s: np.ndarray
    in_l2: int  # memory-bound shapes dropped: weights smaller than the GPU's L2


def read_gemm_table(*, path: Path, gpu: GPU) -> GemmTable:
    """The BF16 rows of ``path`` (median per shape) whose time HBM or compute sets."""
    times = bf16_times(path)
    m, n, k = (times.index.get_level_values(name).to_numpy(dtype=float) for name in "mnk")
    latency_s = times.to_numpy(dtype=float)
    compute_s = 2.0 * m * n * k / gpu.peak_flops_per_s("bf16")
    memory_s = 2.0 * (m * k + n * k + m * n) / gpu.hbm_bandwidth_bytes_per_s
    keep = (2.0 * n * k >= gpu.l2_bytes) | (compute_s >= memory_s)
    return GemmTable(m=m[keep], n=n[keep], k=k[keep], latency_s=latency_s[keep],
                     in_l2=int((~keep).sum()))


def _predict(table: GemmTable, pick: np.ndarray, *, gpu: GPU,
             constants: KernelConstants) -> np.ndarray:
    return np.asarray(gemm_cost(m=table.m[pick], n=table.n[pick], k=table.k[pick], dtype="bf16",
                                gpu=gpu, constants=constants).latency_s)


def _fit(table: GemmTable, pick: np.ndarray, *, gpu: GPU,
         base: KernelConstants) -> tuple[dict[str, float], list[str]]:
    """Fitted values on the ``pick`` rows, and the constants left at ``base`` because they
    ran to a bound."""
    measured = np.log(table.latency_s[pick])
    params: list[Param] = list(PARAMS)
    fixed: list[str] = []
    while True:
        def residuals(values: dict[str, float], params: list[Param] = params) -> np.ndarray:
            return np.log(_predict(table, pick, gpu=gpu, constants=replace(base, **values))) \
                - measured

        values, _, at_bound = fit_bounded(params=params, residuals=residuals)
        if not at_bound:
            return values, fixed
        fixed += at_bound
        params = [p for p in params if p.name not in at_bound]
        if not params:
            return {}, fixed


def fit_gemm_curve(*, path: Path, gpu: GPU, base: KernelConstants,
                   leave_out: bool = True) -> FitResult | None:
    """:data:`FIELDS` of ``gpu`` on its table ``path``, the rest of the curve from ``base``
    (the GPU's shipped constants, whose error is reported beside); None when the table has
    no usable BF16 rows."""
    table = read_gemm_table(path=path, gpu=gpu)
    if table.m.size == 0:
        return None
    base = replace(base, **NO_ENERGY)  # latency only: no power limit while fitting
    every = np.ones(table.m.size, dtype=bool)
    values, fixed = _fit(table, every, gpu=gpu, base=base)
    fitted = _predict(table, every, gpu=gpu, constants=replace(base, **values))
    current = _predict(table, every, gpu=gpu, constants=base)
    result = FitResult(values=values,
                       rms_log_residual=float(np.sqrt(np.mean(np.log(fitted / table.latency_s)
                                                              ** 2))),
                       in_sample={"latency": ErrorStats.of(fitted, table.latency_s),
                                  CURRENT: ErrorStats.of(current, table.latency_s)},
                       fitted_on=[str(path)], n_points=int(table.m.size),
                       notes=[f"{table.in_l2} memory-bound shapes with weights under the "
                              f"{gpu.l2_bytes / 1e6:.0f} MB L2 left out"])
    if fixed:
        result.notes.append("not identified (ran to a bound), kept at the current value: "
                            + ", ".join(sorted(fixed)))
    if leave_out:
        ns = np.unique(table.n)
        first = np.isin(table.n, ns[::2])
        held = np.empty_like(table.latency_s)
        for train in (first, ~first):
            half, _ = _fit(table, train, gpu=gpu, base=base)
            held[~train] = _predict(table, ~train, gpu=gpu, constants=replace(base, **half))
        result.leave_out = {"latency": ErrorStats.of(held, table.latency_s)}
    return result
