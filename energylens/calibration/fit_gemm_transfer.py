"""GEMM efficiencies of a GPU without a per-op profile: its relative's, scaled by measured ratios.

A GPU with no Vidur profile (B200, H200, L40S, GB200) borrows its GEMM curves from a
measured relative. The same fraction of peak on a new GPU is an assumption the kernel
tables can check: AIConfigurator's vLLM GEMM tables (``kernels/<gpu>/gemm/vllm/<v>/
gemm_perf.parquet``) time the same BF16 shapes on both GPUs. On the shapes the roofline
puts on one side:

- compute-bound (every dimension >= :data:`COMPUTE_BOUND_DIM`): (relative time x relative
  peak) / (own time x own peak) is the fraction of its peak FLOP rate the GPU reaches
  relative to the relative's: ``gemm_efficiency_max`` = relative's x its median;
- weight-streaming (m <= :data:`MEMORY_BOUND_M` tokens, n x k >= :data:`MEMORY_BOUND_WEIGHTS`
  weights): (relative time x relative HBM bandwidth) / (own time x own bandwidth), the same
  for ``memory_efficiency_max``.

The rest of each curve (its shape in m, n, k; the launch floor) stays the relative's. H200,
the H100 die with faster memory, is the check: its compute ratio comes out 0.99.

Honesty: the shapes are split in two halves by ``k`` (alternate values); each half's median
predicts the other half's times from the relative's, and that held-out error is reported
beside the in-sample one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fitting import ErrorStats, FitResult
from energylens.hardware import GPU

COMPUTE_BOUND_DIM = 2048
MEMORY_BOUND_M = 32
MEMORY_BOUND_WEIGHTS = 16 * 2**20
#: KernelConstants field -> which side of the roofline its shapes come from.
FIELDS = {"gemm_efficiency_max": "compute", "memory_efficiency_max": "memory"}
#: Upper bound of both efficiencies (the Vidur fit's range).
EFFICIENCY_CAP = 0.98


@dataclass(frozen=True)
class MatchedShapes:
    """BF16 shapes timed on both GPUs, on one side of the roofline."""

    k: np.ndarray
    own_s: np.ndarray
    relative_s: np.ndarray
    rate_ratio: float  # own peak (FLOP/s or B/s) / relative's

    def ratios(self) -> np.ndarray:
        """Per shape: the fraction of its peak the GPU reaches / the relative's."""
        return self.relative_s / (self.own_s * self.rate_ratio)


def bf16_times(path: Path):  # -> pandas.Series indexed by (m, n, k)
    """Median BF16 time (s) per (m, n, k) shape of a GEMM table."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    except (OSError, ValueError, KeyError) as exc:
        raise CalibrationDataError(f"{path}: not a GEMM table ({exc})") from None
    bf16 = frame[frame["gemm_dtype"] == "bfloat16"]
    return bf16.groupby(["m", "n", "k"])["latency"].median() * 1e-3


def matched_shapes(*, path: Path, relative_path: Path, gpu: GPU,
                   relative: GPU) -> dict[str, MatchedShapes]:
    """Per side (``compute``, ``memory``): the shapes both tables time in BF16."""
    import pandas as pd

    both = pd.concat([bf16_times(path).rename("own"),
                      bf16_times(relative_path).rename("relative")], axis=1).dropna()
    m, n, k = (both.index.get_level_values(name).to_numpy(dtype=float) for name in "mnk")
    sides = {
        "compute": ((m >= COMPUTE_BOUND_DIM) & (n >= COMPUTE_BOUND_DIM) & (k >= COMPUTE_BOUND_DIM),
                    gpu.peak_flops_per_s("bf16") / relative.peak_flops_per_s("bf16")),
        "memory": ((m <= MEMORY_BOUND_M) & (n * k >= MEMORY_BOUND_WEIGHTS),
                   gpu.hbm_bandwidth_bytes_per_s / relative.hbm_bandwidth_bytes_per_s),
    }
    out = {}
    for side, (pick, rate_ratio) in sides.items():
        if pick.any():
            out[side] = MatchedShapes(k=k[pick], own_s=both["own"].to_numpy()[pick],
                                      relative_s=both["relative"].to_numpy()[pick],
                                      rate_ratio=rate_ratio)
    return out


def fit_gemm_transfer(*, path: Path, relative_path: Path, gpu: GPU, relative: GPU,
                      relative_values: dict[str, float]) -> FitResult | None:
    """:data:`FIELDS` of ``gpu`` from ``relative_values`` (the relative's constants) and the
    two GEMM tables; None when the tables share no shapes."""
    shapes = matched_shapes(path=path, relative_path=relative_path, gpu=gpu, relative=relative)
    if not shapes:
        return None
    values: dict[str, float] = {}
    in_sample: dict[str, ErrorStats] = {}
    leave_out: dict[str, ErrorStats] = {}
    notes = []
    residuals = []
    for field, side in FIELDS.items():
        if side not in shapes or field not in relative_values:
            continue
        s = shapes[side]
        ratios = s.ratios()
        ratio = float(np.median(ratios))
        values[field] = min(relative_values[field] * ratio, EFFICIENCY_CAP)
        fitted = s.relative_s / (s.rate_ratio * ratio)
        ks = np.unique(s.k)
        first = np.isin(s.k, ks[::2])
        held = np.empty_like(fitted)
        for fold in (first, ~first):
            held[~fold] = s.relative_s[~fold] / (s.rate_ratio * float(np.median(ratios[fold])))
        in_sample[f"{side}_latency"] = ErrorStats.of(fitted, s.own_s)
        leave_out[f"{side}_latency"] = ErrorStats.of(held, s.own_s)
        residuals.append(np.log(fitted / s.own_s))
        notes.append(f"{field}: {relative.name}'s {relative_values[field]:.4g} x {ratio:.3f} "
                     f"(median over {ratios.size} {side}-bound shapes, interquartile "
                     f"{np.percentile(ratios, 25):.3f} - {np.percentile(ratios, 75):.3f})")
    if not values:
        return None
    residual = np.concatenate(residuals)
    return FitResult(values=values, rms_log_residual=float(np.sqrt(np.mean(residual**2))),
                     in_sample=in_sample, leave_out=leave_out,
                     fitted_on=[str(path), str(relative_path)], n_points=int(residual.size),
                     notes=notes)
