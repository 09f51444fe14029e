"""How fast a runtime's decode attention streams the KV cache, per GPU, from kernel tables.

The paged decode-attention kernel (FlashAttention-3 on Hopper, FlashInfer's TRT-LLM decode
kernel on Blackwell, FA2 on Ada/Ampere, as vLLM picks them) is memory-bound: each step reads
every cached key and value of every running sequence once. Two kernel properties set its
time: ``kv_bandwidth_efficiency``, the share of HBM peak the stream reaches (long
contexts), and ``attention_tile_s``, a fixed time per work tile, one (sequence, KV head)
pair, amortised over the SMs (page-table walk, prologue, split-KV reduction: many short
sequences). AIConfigurator times vLLM's decode attention alone
(``kernels/<gpu>/attention/vllm/<v>/generation_attention_perf.parquet``: ``batch_size``,
``step`` cached tokens, ``num_heads``, ``num_key_value_heads``, ``head_dim``, ``latency`` in
ms, BF16 KV cache): both are fitted there, the values that make the cost model's own price
of the fused ``qk + softmax + av`` kernel match those times best (least squares on log
time). Different shapes identify them: 2 sequences of 64k tokens and 1,024 of 64 read
similar bytes through 2 and 1,024 x KV-heads tiles.

Honesty: the rows are split by KV-head count (alternate values); each half's fit predicts the
other half, and that held-out error is reported beside the in-sample one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fitting import FitResult, fit_kernel_table, least_squares_log
from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import GPU, load_gpu
from energylens.model.families import family_part, parse_layer

#: The fitted constants and their search ranges: a share of the datasheet HBM bandwidth,
#: and seconds per tile (up to 1 us: 8 KV heads of 1,024 sequences would then take 8 ms).
FIELDS = ("kv_bandwidth_efficiency", "attention_tile_s")
BOUNDS = ((0.2, 1.0), (0.0, 1e-6))
#: The tile time is searched in nanoseconds (both unknowns of order 1 for the solver).
_TILE_UNIT_S = 1e-9
COLUMNS = ["batch_size", "step", "num_heads", "num_key_value_heads", "head_dim",
           "kv_cache_dtype", "latency"]


@dataclass(frozen=True)
class DecodeAttentionTable:
    """BF16-KV rows of one GPU's decode-attention table."""

    path: Path
    gpu: str
    batch: np.ndarray
    context: np.ndarray  # cached tokens read per sequence
    heads: np.ndarray
    kv_heads: np.ndarray
    head_dim: np.ndarray
    latency_s: np.ndarray


def read_table(*, path: Path) -> DecodeAttentionTable:
    """The BF16-KV rows of ``path``."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path, columns=COLUMNS)
    except (OSError, ValueError, KeyError) as exc:
        raise CalibrationDataError(f"{path}: not a decode-attention table ({exc})") from None
    rows = frame[(frame["kv_cache_dtype"] == "bfloat16")
                 & (frame["num_heads"] % frame["num_key_value_heads"] == 0)]
    if rows.empty:
        raise CalibrationDataError(f"{path}: no BF16-KV rows")
    return DecodeAttentionTable(
        path=path, gpu=table_gpu(path),
        batch=rows["batch_size"].to_numpy(dtype=float),
        context=rows["step"].to_numpy(dtype=float) + 1.0,
        heads=rows["num_heads"].to_numpy(dtype=int),
        kv_heads=rows["num_key_value_heads"].to_numpy(dtype=int),
        head_dim=rows["head_dim"].to_numpy(dtype=int),
        latency_s=rows["latency"].to_numpy(dtype=float) * 1e-3)


def fused_attention_s(*, heads: np.ndarray, kv_heads: np.ndarray, head_dim: np.ndarray,
                      rows: np.ndarray, phase: Callable[[np.ndarray], dict[str, Any]],
                      gpu: GPU, constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the attention family's fused ``qk+soft+av`` kernel for the
    ``rows`` (a mask) of a kernel table whose row i has ``heads[i]`` query heads,
    ``kv_heads[i]`` and ``head_dim[i]``; ``phase(at)`` sizes the rows ``at`` (indices)."""
    out = np.empty(int(rows.sum()))
    picked = np.flatnonzero(rows)
    layer = parse_layer(name="attention", parts=[family_part("attention")], norm="rmsnorm")
    shapes = {(int(heads[i]), int(kv_heads[i]), int(head_dim[i])) for i in picked}
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    for q_heads, kv, dim in sorted(shapes):
        sizes = {"d": q_heads * dim, "g": kv, "r": q_heads // kv, "e": dim}
        compiled = compile_layer(layer=layer, sizes=sizes, degrees={},
                                 fusion=frozenset({"attention"}))
        kernel = next(k for k in compiled.kernels if k.name == "qk+soft+av")
        mine = (heads[picked] == q_heads) & (kv_heads[picked] == kv) & (head_dim[picked] == dim)
        at = picked[mine]
        cost = kernel_cost(kernel=kernel, phase=phase(at), window=None, gpu=gpu,
                           constants=constants, clock=clock, weight_dtype="bf16")
        out[mine] = np.broadcast_to(cost.latency_s, at.shape)
    return out


def predicted_s(*, table: DecodeAttentionTable, rows: np.ndarray, gpu: GPU,
                constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the fused decode-attention kernel for ``rows``."""
    return fused_attention_s(
        heads=table.heads, kv_heads=table.kv_heads, head_dim=table.head_dim, rows=rows,
        phase=lambda at: {"b": table.batch[at], "m": 1.0, "p": table.context[at]},
        gpu=gpu, constants=constants)


def _values(x: np.ndarray) -> dict[str, float]:
    return {FIELDS[0]: float(x[0]), FIELDS[1]: float(x[1]) * _TILE_UNIT_S}


def _best(*, table: DecodeAttentionTable, rows: np.ndarray, gpu: GPU,
          constants: KernelConstants) -> dict[str, float]:
    lower = [BOUNDS[0][0], BOUNDS[1][0] / _TILE_UNIT_S]
    upper = [BOUNDS[0][1], BOUNDS[1][1] / _TILE_UNIT_S]
    return _values(least_squares_log(
        price=lambda x: predicted_s(table=table, rows=rows, gpu=gpu,
                                    constants=replace(constants, **_values(x))),
        measured_s=table.latency_s[rows], lower=lower, upper=upper, x_scale=[0.1, 10.0],
        start=[min(max(constants.kv_bandwidth_efficiency, lower[0]), upper[0]), 10.0]))


def fit_kv_attention(*, table: DecodeAttentionTable, constants: KernelConstants,
                     leave_out: bool = True) -> FitResult:
    """``kv_bandwidth_efficiency`` and ``attention_tile_s`` of the table's GPU, given its
    other kernel constants."""
    gpu = load_gpu(table.gpu)

    def at_bound(values: dict[str, float]) -> list[str]:
        return [name for name, (low, high) in zip(FIELDS, BOUNDS, strict=True)
                if min(abs(values[name] - low), abs(values[name] - high)) < 1e-3 * (high - low)]

    return fit_kernel_table(
        latency_s=table.latency_s, split_by=table.kv_heads, at_bound=at_bound,
        best=lambda rows: _best(table=table, rows=rows, gpu=gpu, constants=constants),
        price=lambda rows, values: predicted_s(table=table, rows=rows, gpu=gpu,
                                               constants=replace(constants, **values)),
        fitted_on=[str(table.path)], leave_out=leave_out)
