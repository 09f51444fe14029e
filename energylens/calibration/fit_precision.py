"""How close low-precision GEMMs come to their own peak, per GPU, from measured kernel tables.

A GPU's datasheet doubles the tensor rate for FP8 (and again for FP4), but the GEMMs engines
run do not double their speed: AIConfigurator's vLLM tables (``kernels/<gpu>/gemm/vllm/<v>/
gemm_perf.parquet``: ``m, n, k``, ``gemm_dtype`` bfloat16 / fp8 / fp8_block / nvfp4,
``latency`` in ms) time the same shapes in every precision. For a compute-bound shape the
ratio (BF16 time x BF16 peak) / (low-precision time x low-precision peak) is the fraction of
its peak a low-precision GEMM reaches, relative to what a BF16 GEMM reaches of its own.

The tables time vLLM's linear layer, not the GEMM alone: a low-precision layer quantises its
16-bit input first (a pass over the m x k input, the scales, their launches), work the cost
model prices as a kernel of its own where the runtime does not fuse it into the kernel
before (``cost/kernels.py``). So each table is first read as that sum, per shape:

    layer time = BF16 time / (peak ratio x r) + c0[dtype] + c1[dtype] x m x k

(least squares on relative error; r shared by the pooled dtypes, the input's fixed and
per-element costs per dtype). Where the reading holds (0 < r <= 1, no negative cost, and it
predicts the shapes of one half of the ``k`` values from a fit on the other better than a
single ratio does), r is the GEMM's own ratio and the GPU's ``fp8_gemm_efficiency_ratio``
(FP8 with per-tensor and with 128x128 block scales pooled: checkpoints use both) or
``fp4_gemm_efficiency_ratio`` (NVFP4). Where it does not (the Blackwell FP8 tables: r above
1 beside fixed costs of 0.1-0.3 ms per layer, a shape dependence the sum does not
describe), the median ratio over the compute-bound shapes, the input's work included, stays
the fit, as before the thirty-second session, which used it everywhere and so charged the
input's quantisation twice where the model prices it apart. A check from outside the
tables: this project's own H200 measurement of a bare cuBLAS FP8 GEMM on a pre-quantised
input reaches 0.92 (``docs/kernels-h200.md``), the sum's r for H200 0.922.

Honesty: the shapes are split in two halves by ``k`` (alternate values); each half's fit
predicts the other half's low-precision times from their BF16 times, and that held-out error
is reported beside the in-sample one, for both readings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fitting import ErrorStats, FitResult
from energylens.hardware import load_gpu

#: KernelConstants field -> (table dtypes pooled into it, the GPU's tensor-rate key).
RATIOS = {"fp8_gemm_efficiency_ratio": (("fp8", "fp8_block"), "fp8"),
          "fp4_gemm_efficiency_ratio": (("nvfp4",), "fp4")}
#: Shapes with every dimension at least this large are compute-bound in both precisions
#: (arithmetic intensity above ~680 FLOP/B even for FP8 operands).
COMPUTE_BOUND_DIM = 2048


@dataclass(frozen=True)
class ShapeRatios:
    """Matched compute-bound shapes of one low-precision dtype group on one GPU."""

    dtype: np.ndarray
    m: np.ndarray
    k: np.ndarray
    bf16_s: np.ndarray
    low_s: np.ndarray
    peak_ratio: float  # low-precision peak / BF16 peak (datasheet)

    def efficiency_ratios(self) -> np.ndarray:
        """Per shape: fraction of its peak the low-precision GEMM reaches / BF16's."""
        return self.bf16_s / (self.low_s * self.peak_ratio)


def read_shapes(*, path: Path, field: str) -> ShapeRatios | None:
    """The compute-bound shapes of ``path`` timed in BF16 and in ``field``'s dtypes (None
    when the table has no such rows or the GPU has no native rate for them)."""
    import pandas as pd

    dtypes, rate = RATIOS[field]
    gpu = load_gpu(table_gpu(path))
    if rate not in gpu.dense_flops_per_s:
        return None
    try:
        frame = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    except (OSError, ValueError, KeyError) as exc:
        raise CalibrationDataError(f"{path}: not a GEMM table ({exc})") from None
    big = frame[(frame["m"] >= COMPUTE_BOUND_DIM) & (frame["n"] >= COMPUTE_BOUND_DIM)
                & (frame["k"] >= COMPUTE_BOUND_DIM)]
    bf16 = big[big["gemm_dtype"] == "bfloat16"].groupby(["m", "n", "k"])["latency"].median()
    low = big[big["gemm_dtype"].isin(dtypes)].groupby(["gemm_dtype", "m", "n", "k"])["latency"]
    pairs = low.median().reset_index().join(bf16.rename("bf16"), on=["m", "n", "k"]).dropna()
    if pairs.empty:
        return None
    return ShapeRatios(dtype=pairs["gemm_dtype"].astype(str).to_numpy(),
                       m=pairs["m"].to_numpy(dtype=float),
                       k=pairs["k"].to_numpy(dtype=float),
                       bf16_s=pairs["bf16"].to_numpy(dtype=float) * 1e-3,
                       low_s=pairs["latency"].to_numpy(dtype=float) * 1e-3,
                       peak_ratio=gpu.dense_flops_per_s[rate] / gpu.dense_flops_per_s["bf16"])


@dataclass(frozen=True)
class LayerSum:
    """A table read as layer time = BF16 time / (peak ratio x ``ratio``) + ``fixed_s`` +
    ``per_element_s`` x m x k, the last two per table dtype."""

    ratio: float
    fixed_s: dict[str, float]
    per_element_s: dict[str, float]

    def holds(self) -> bool:
        """Whether the reading is physical: 0 < ratio <= 1 and no negative cost."""
        costs = [*self.fixed_s.values(), *self.per_element_s.values()]
        return 0.0 < self.ratio <= 1.0 and min(costs) >= 0.0

    def predicted_s(self, shapes: ShapeRatios, rows: np.ndarray) -> np.ndarray:
        """Layer times of ``shapes[rows]``."""
        extra = np.array([self.fixed_s[d] + self.per_element_s[d] * m * k for d, m, k in
                          zip(shapes.dtype[rows], shapes.m[rows], shapes.k[rows], strict=True)])
        return shapes.bf16_s[rows] / (shapes.peak_ratio * self.ratio) + extra


def fit_layer_sum(shapes: ShapeRatios, rows: np.ndarray) -> LayerSum:
    """Least squares (relative error) of the layer-time sum on ``shapes[rows]``."""
    dtypes = sorted(set(shapes.dtype[rows]))
    columns = [shapes.bf16_s[rows]]
    for d in dtypes:
        mask = (shapes.dtype[rows] == d).astype(float)
        columns += [mask, mask * shapes.m[rows] * shapes.k[rows]]
    weight = 1.0 / shapes.low_s[rows]
    design = np.column_stack(columns) * weight[:, None]
    solution = np.linalg.lstsq(design, shapes.low_s[rows] * weight, rcond=None)[0]
    slope = float(solution[0])
    return LayerSum(ratio=1.0 / (shapes.peak_ratio * slope) if slope > 0 else float("inf"),
                    fixed_s={d: float(solution[1 + 2 * i]) for i, d in enumerate(dtypes)},
                    per_element_s={d: float(solution[2 + 2 * i]) for i, d in enumerate(dtypes)})


def fit_precision(*, path: Path, field: str) -> FitResult | None:
    """``field`` of the GPU of ``path``: the GEMM's ratio of the layer sum where the sum
    holds and predicts held-out shapes better, else the median ratio; with its error."""
    shapes = read_shapes(path=path, field=field)
    if shapes is None:
        return None
    ratios = shapes.efficiency_ratios()
    everything = np.ones(ratios.size, dtype=bool)
    ks = np.unique(shapes.k)
    first = np.isin(shapes.k, ks[::2])
    folds = ((first, ~first), (~first, first))

    def median_s(rows: np.ndarray, of: np.ndarray) -> np.ndarray:
        return shapes.bf16_s[of] / (shapes.peak_ratio * float(np.median(ratios[rows])))

    median_fit = median_s(everything, everything)
    median_held = np.empty_like(median_fit)
    layer = fit_layer_sum(shapes, everything)
    layer_fit = layer.predicted_s(shapes, everything)
    layer_held = np.empty_like(layer_fit)
    holds = layer.holds()
    for train, test in folds:
        median_held[test] = median_s(train, test)
        half = fit_layer_sum(shapes, train)
        holds = holds and half.holds()
        layer_held[test] = half.predicted_s(shapes, test)
    median_error = ErrorStats.of(median_held, shapes.low_s)
    layer_error = ErrorStats.of(layer_held, shapes.low_s)
    applied = holds and layer_error.mape < median_error.mape
    value = layer.ratio if applied else float(np.median(ratios))
    fitted, held = (layer_fit, layer_held) if applied else (median_fit, median_held)
    costs = "; ".join(f"{d}: {1e6 * layer.fixed_s[d]:.1f} us + "
                      f"{1e12 * layer.per_element_s[d]:.2f} ps per input element"
                      for d in layer.fixed_s)
    notes = [f"layer = GEMM at ratio {layer.ratio:.3f} + the input's work ({costs}): held-out "
             f"MAPE {100 * layer_error.mape:.1f} %"
             + ("" if holds else " (not physical in sample or in a half: ratio above 1 or a "
                                 "negative cost)"),
             f"median ratio over the shapes, the input's work included: "
             f"{np.median(ratios):.3f} (interquartile {np.percentile(ratios, 25):.3f} - "
             f"{np.percentile(ratios, 75):.3f}), held-out MAPE {100 * median_error.mape:.1f} %",
             f"applied: {'the GEMM ratio of the layer sum' if applied else 'the median ratio'}"]
    residual = np.log(fitted / shapes.low_s)
    return FitResult(values={field: value},
                     rms_log_residual=float(np.sqrt(np.mean(residual**2))),
                     in_sample={"latency": ErrorStats.of(fitted, shapes.low_s)},
                     leave_out={"latency": ErrorStats.of(held, shapes.low_s)},
                     fitted_on=[str(path)], n_points=int(ratios.size), notes=notes)
