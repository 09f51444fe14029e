"""How close low-precision GEMMs come to their own peak, per GPU, from measured kernel tables.

A GPU's datasheet doubles the tensor rate for FP8 (and again for FP4), but the GEMMs engines
run do not double their speed: AIConfigurator's vLLM tables (``kernels/<gpu>/gemm/vllm/<v>/
gemm_perf.parquet``: ``m, n, k``, ``gemm_dtype`` bfloat16 / fp8 / fp8_block / nvfp4,
``latency`` in ms) time the same shapes in every precision. For a compute-bound shape the
ratio (BF16 time x BF16 peak) / (low-precision time x low-precision peak) is the fraction of
its peak a low-precision GEMM reaches, relative to what a BF16 GEMM reaches of its own. Its
median over the compute-bound shapes is the GPU's ``fp8_gemm_efficiency_ratio`` (FP8 with
per-tensor and with 128x128 block scales pooled: checkpoints use both) or
``fp4_gemm_efficiency_ratio`` (NVFP4), applied on top of the BF16 GEMM curve fitted on Vidur.

Honesty: the shapes are split in two halves by ``k`` (alternate values); each half's median
predicts the other half's low-precision times from their BF16 times, and that held-out error
is reported beside the in-sample one.
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
    return ShapeRatios(k=pairs["k"].to_numpy(dtype=float),
                       bf16_s=pairs["bf16"].to_numpy(dtype=float) * 1e-3,
                       low_s=pairs["latency"].to_numpy(dtype=float) * 1e-3,
                       peak_ratio=gpu.dense_flops_per_s[rate] / gpu.dense_flops_per_s["bf16"])


def fit_precision(*, path: Path, field: str) -> FitResult | None:
    """``field`` of the GPU of ``path``: the median efficiency ratio, with its error."""
    shapes = read_shapes(path=path, field=field)
    if shapes is None:
        return None
    ratios = shapes.efficiency_ratios()
    value = float(np.median(ratios))

    def predicted(ratio: float, rows: np.ndarray) -> np.ndarray:
        return shapes.bf16_s[rows] / (shapes.peak_ratio * ratio)

    everything = np.ones(ratios.size, dtype=bool)
    fitted = predicted(value, everything)
    ks = np.unique(shapes.k)
    first = np.isin(shapes.k, ks[::2])
    held = np.empty_like(fitted)
    for fold in (first, ~first):
        held[~fold] = predicted(float(np.median(ratios[fold])), ~fold)
    residual = np.log(fitted / shapes.low_s)
    return FitResult(values={field: value},
                     rms_log_residual=float(np.sqrt(np.mean(residual**2))),
                     in_sample={"latency": ErrorStats.of(fitted, shapes.low_s)},
                     leave_out={"latency": ErrorStats.of(held, shapes.low_s)},
                     fitted_on=[str(path)], n_points=int(ratios.size),
                     notes=[f"interquartile range of the per-shape ratio: "
                            f"{np.percentile(ratios, 25):.3f} - {np.percentile(ratios, 75):.3f}"])
