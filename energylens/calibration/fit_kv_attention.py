"""How fast a runtime's decode attention streams the KV cache, per GPU, from kernel tables.

The paged decode-attention kernel (FlashAttention-3 on Hopper, FlashInfer's TRT-LLM decode
kernel on Blackwell, FA2 on Ada/Ampere, as vLLM picks them) is memory-bound: each step reads
every cached key and value of every running sequence once. The share of HBM peak it reaches,
``kv_bandwidth_efficiency``, is a kernel property; it was fitted on end-to-end serving rows,
where MoE rows alone drove it to a third of its dense value. AIConfigurator times vLLM's
decode attention alone (``kernels/<gpu>/attention/vllm/<v>/generation_attention_perf.parquet``:
``batch_size``, ``step`` cached tokens, ``num_heads``, ``num_key_value_heads``, ``head_dim``,
``latency`` in ms, BF16 KV cache), so the constant is fitted there: the one value that makes the
cost model's own price of the fused ``qk + softmax + av`` kernel match those times best (least
squares on log time).

Honesty: the rows are split by KV-head count (alternate values); each half's fit predicts the
other half, and that held-out error is reported beside the in-sample one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fitting import ErrorStats, FitResult
from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import GPU, load_gpu
from energylens.model.families import family_part, parse_layer

FIELD = "kv_bandwidth_efficiency"
#: Search range of the efficiency (a share of the datasheet HBM bandwidth).
BOUNDS = (0.2, 1.0)
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


def predicted_s(*, table: DecodeAttentionTable, rows: np.ndarray, gpu: GPU,
                constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the fused decode-attention kernel for ``rows``."""
    out = np.empty(int(rows.sum()))
    picked = np.flatnonzero(rows)
    layer = parse_layer(name="attention", parts=[family_part("attention")], norm="rmsnorm")
    shapes = {(int(table.heads[i]), int(table.kv_heads[i]), int(table.head_dim[i]))
              for i in picked}
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    for heads, kv_heads, head_dim in sorted(shapes):
        sizes = {"d": heads * head_dim, "g": kv_heads, "r": heads // kv_heads, "e": head_dim}
        compiled = compile_layer(layer=layer, sizes=sizes, degrees={},
                                 fusion=frozenset({"attention"}))
        kernel = next(k for k in compiled.kernels if k.name == "qk+soft+av")
        mine = ((table.heads[picked] == heads) & (table.kv_heads[picked] == kv_heads)
                & (table.head_dim[picked] == head_dim))
        at = picked[mine]
        cost = kernel_cost(kernel=kernel, phase={"b": table.batch[at], "m": 1.0,
                                                 "p": table.context[at]},
                           window=None, gpu=gpu, constants=constants, clock=clock,
                           weight_dtype="bf16")
        out[mine] = np.broadcast_to(cost.latency_s, at.shape)
    return out


def _best(*, table: DecodeAttentionTable, rows: np.ndarray, gpu: GPU,
          constants: KernelConstants) -> float:
    from scipy.optimize import minimize_scalar

    measured = np.log(table.latency_s[rows])

    def loss(value: float) -> float:
        priced = predicted_s(table=table, rows=rows, gpu=gpu,
                             constants=replace(constants, **{FIELD: value}))
        return float(np.mean((np.log(priced) - measured) ** 2))

    return float(minimize_scalar(loss, bounds=BOUNDS, method="bounded",
                                 options={"xatol": 1e-4}).x)


def fit_kv_attention(*, table: DecodeAttentionTable, constants: KernelConstants,
                     leave_out: bool = True) -> FitResult:
    """``kv_bandwidth_efficiency`` of the table's GPU, given its other kernel constants."""
    gpu = load_gpu(table.gpu)
    everything = np.ones(table.latency_s.size, dtype=bool)
    value = _best(table=table, rows=everything, gpu=gpu, constants=constants)
    fitted = predicted_s(table=table, rows=everything, gpu=gpu,
                         constants=replace(constants, **{FIELD: value}))
    result = FitResult(values={FIELD: value},
                       rms_log_residual=float(np.sqrt(np.mean(
                           np.log(fitted / table.latency_s) ** 2))),
                       in_sample={"latency": ErrorStats.of(fitted, table.latency_s)},
                       fitted_on=[str(table.path)], n_points=int(table.latency_s.size),
                       at_bound=[FIELD] if min(abs(value - b) for b in BOUNDS) < 1e-3 else [])
    kv_values = np.unique(table.kv_heads)
    if leave_out and kv_values.size > 1:
        first = np.isin(table.kv_heads, kv_values[::2])
        held = np.empty_like(fitted)
        for fold in (first, ~first):
            half = _best(table=table, rows=fold, gpu=gpu, constants=constants)
            held[~fold] = predicted_s(table=table, rows=~fold, gpu=gpu,
                                      constants=replace(constants, **{FIELD: half}))
        result.leave_out = {"latency": ErrorStats.of(held, table.latency_s)}
    return result
