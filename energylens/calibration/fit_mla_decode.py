"""How fast MLA's decode (weight-absorbed) attention runs, per GPU, from TensorRT-LLM's table.

MLA models (DeepSeek-V3/R1, Kimi-K2, GLM-5) decode in the absorbed form
(``energylens/data/families/attention_mla.yaml``): every query head of a sequence meets the
one latent cache ``LC[b,p,l]`` (576 wide), the heads (x new tokens) the MMA's rows. Kernels
of this kind (TensorRT-LLM's MLA generation kernel, FlashMLA, FlashInfer's trtllm-gen MLA)
take the rows in tiles of 64 (:data:`energylens.cost.constants.MLA_DECODE_ROW_TILE`), stream
the latent cache once per sequence and, with an FP8 cache on Blackwell, run FP8 MMAs. Its
price is the cost model's fused attention kernel with its own constants
(:meth:`KernelConstants.for_mla_decode`): ``mla_decode_efficiency_max``, the share of the
MMA dtype's dense peak on the rows padded to whole tiles; ``mla_decode_kv_bandwidth_efficiency``,
the share of HBM peak the cache streams at; ``mla_decode_tile_s``, a fixed time per
(sequence, row tile) amortised over the SMs (split-KV partials and their reduction); and
``mla_decode_overhead_s``, the kernel's launch time. AIConfigurator times TensorRT-LLM's
MLA generation kernel alone (``kernels/<gpu>/mla/trtllm/<v>/generation_mla_perf.parquet``:
``num_heads`` per GPU, ``batch_size`` sequences with ``step`` cached tokens, bf16 and fp8
KV cache, ``latency`` in ms); the four are fitted there (least squares on log time), each
row priced by the cost model's own decode-form kernel of DeepSeek-V3 at tensor parallelism
128 / ``num_heads``, given the GPU's other kernel constants. Rows: :data:`MIN_HEADS` to
128 heads per GPU (dividing 128; tensor parallelism <= 8 or attention DP, as MLA models
are deployed), every batch and context, both cache dtypes.

Honesty: the rows are split by head count (alternate values); each half's fit predicts the
other half, and that held-out error is reported. Only the Hopper and Blackwell tables
(TensorRT-LLM 1.3) are copied into ``data/measurements``: the A100 and L40S tables (1.0)
time another kernel, which streams the cache at ~37 % of HBM peak and is not what serving
engines run there; those GPUs borrow a relative's constants as for every other kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fit_mla_prompt import HEADS, MIN_HEADS, mla_attention_kernel
from energylens.calibration.fitting import FitResult, fit_kernel_table, least_squares_log
from energylens.cost.constants import KernelConstants
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import GPU, load_gpu

#: The fitted constants and their search ranges: shares of the MMA peak and of HBM peak,
#: seconds per (sequence, row tile) (up to 1 us) and per launch (up to 100 us).
FIELDS = ("mla_decode_efficiency_max", "mla_decode_kv_bandwidth_efficiency",
          "mla_decode_tile_s", "mla_decode_overhead_s")
BOUNDS = ((0.05, 1.0), (0.1, 1.0), (0.0, 1e-6), (0.0, 1e-4))
#: The times are searched in these units (every unknown of order 1-100 for the solver).
_UNITS = (1.0, 1.0, 1e-9, 1e-6)
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True)
class MlaDecodeTable:
    """The kept rows of one GPU's MLA generation table."""

    path: Path
    gpu: str
    batch: np.ndarray
    context: np.ndarray  # cached tokens each sequence's new token attends to
    heads: np.ndarray  # query heads per GPU
    kv_dtype: np.ndarray  # energylens dtype names (bf16, fp8)
    latency_s: np.ndarray


def read_table(*, path: Path) -> MlaDecodeTable:
    """The rows of ``path`` with :data:`MIN_HEADS` to 128 heads (dividing 128)."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise CalibrationDataError(f"{path}: not an MLA generation table ({exc})") from None
    missing = [c for c in ("batch_size", "step", "num_heads", "kv_cache_dtype", "latency")
               if c not in frame.columns]
    if missing:
        raise CalibrationDataError(f"{path}: not an MLA generation table (no column "
                                   f"{', '.join(missing)})")
    keep = ((HEADS % frame["num_heads"] == 0) & (frame["num_heads"] >= MIN_HEADS)
            & frame["kv_cache_dtype"].isin(list(KV_DTYPES)) & (frame["latency"] > 0))
    rows = frame[keep]
    if rows.empty:
        raise CalibrationDataError(f"{path}: no rows with {MIN_HEADS}-{HEADS} heads")
    return MlaDecodeTable(path=path, gpu=table_gpu(path),
                          batch=rows["batch_size"].to_numpy(dtype=float),
                          context=rows["step"].to_numpy(dtype=float) + 1.0,
                          heads=rows["num_heads"].to_numpy(dtype=int),
                          kv_dtype=rows["kv_cache_dtype"].map(KV_DTYPES).to_numpy(dtype=str),
                          latency_s=rows["latency"].to_numpy(dtype=float) * 1e-3)


def predicted_s(*, table: MlaDecodeTable, rows: np.ndarray, gpu: GPU,
                constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the decode-form attention kernel for ``rows`` (a mask)."""
    decode = constants.for_mla_decode()
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    picked = np.flatnonzero(rows)
    out = np.empty(picked.size)
    for heads in np.unique(table.heads[picked]):
        kernel, window = mla_attention_kernel(heads=int(heads), prompt=False)
        for kv_dtype in np.unique(table.kv_dtype[picked]):
            mine = (table.heads[picked] == heads) & (table.kv_dtype[picked] == kv_dtype)
            at = picked[mine]
            phase = {"b": table.batch[at], "m": np.ones(at.size), "p": table.context[at],
                     "n": np.ones(at.size), "t": np.ones(at.size)}
            cost = kernel_cost(kernel=kernel, phase=phase, window=window, gpu=gpu,
                               constants=decode, clock=clock, weight_dtype="bf16",
                               kv_dtype=str(kv_dtype))
            out[mine] = np.broadcast_to(cost.latency_s, at.shape)
    return out


def _values(x: np.ndarray) -> dict[str, float]:
    return {name: float(v) * unit for name, v, unit in zip(FIELDS, x, _UNITS, strict=True)}


def fit_mla_decode(*, table: MlaDecodeTable, constants: KernelConstants,
                   leave_out: bool = True) -> FitResult:
    """The four MLA decode constants (:data:`FIELDS`) of the table's GPU, given its other
    kernel constants."""
    gpu = load_gpu(table.gpu)
    lower = [low / unit for (low, _), unit in zip(BOUNDS, _UNITS, strict=True)]
    upper = [high / unit for (_, high), unit in zip(BOUNDS, _UNITS, strict=True)]

    def price(rows: np.ndarray, values: dict[str, float]) -> np.ndarray:
        return predicted_s(table=table, rows=rows, gpu=gpu,
                           constants=replace(constants, **values))

    def best(rows: np.ndarray) -> dict[str, float]:
        return _values(least_squares_log(
            price=lambda x: price(rows, _values(x)), measured_s=table.latency_s[rows],
            start=[0.6, 0.8, 30.0, 10.0], lower=lower, upper=upper,
            x_scale=[0.1, 0.1, 10.0, 1.0]))

    def at_bound(values: dict[str, float]) -> list[str]:
        return [name for name, (low, high) in zip(FIELDS, BOUNDS, strict=True)
                if min(abs(values[name] - low), abs(values[name] - high)) < 1e-3 * (high - low)]

    return fit_kernel_table(latency_s=table.latency_s, split_by=table.heads, at_bound=at_bound,
                            best=best, price=price, fitted_on=[str(table.path)],
                            leave_out=leave_out)
