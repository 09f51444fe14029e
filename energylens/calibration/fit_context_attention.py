"""How fast a runtime's causal prefill (context) attention runs, per GPU, from kernel tables.

The fused causal attention kernel of a prompt (FlashAttention-3 on Hopper, FlashInfer's
TRT-LLM prefill kernel on Blackwell, FA2 on Ada/Ampere, as vLLM picks them) is
compute-bound from about a thousand tokens up: every new query meets every earlier key once,
``m (p + 1) / 2`` pairs per (sequence, query head), 2 FLOPs per pair and head dimension in
``q k^T`` and as many in ``a v``, plus the softmax's vector FLOPs. Its speed rises slowly
with the prompt: the per-tile prologue, softmax rescaling and causal diagonal weigh less
the more keys a query row visits. The cost model prices its tensor FLOPs at
``attention_efficiency_max x M / (M + gemm_m_half) x X / (X + attention_m_half)`` of the
dense BF16 peak (:func:`energylens.cost.roofline.attention_efficiency`), M = the GEMM rows
of ``qk`` and ``av`` (new tokens x query heads per KV head, m x r) and X = r x keys, which is
M here (no cached prefix: m = p = ``isl``), while decode (m = 1, M = r) keeps its own
small-row price. AIConfigurator times vLLM's context attention alone
(``kernels/<gpu>/attention/vllm/<v>/context_attention_perf.parquet``: ``batch_size``,
``isl`` prompt tokens, ``num_heads``, ``num_key_value_heads``, ``head_dim``, ``latency`` in
ms; BF16, full attention): both constants are fitted there, the values that make the cost
model's own price of the fused ``qk + soft + av`` kernel match those times best (least
squares on log time), given the GPU's other kernel constants (the decode fit's KV bandwidth
and tile time, the vector efficiency that prices the softmax, included). The fitted
efficiency is that of the tensor FLOPs alone: the softmax's time is priced on top of it.

Honesty: the rows are split by query-head count (alternate values; each half spans every
prompt length, 1k to 16k tokens); each half's fit predicts the other half, and that
held-out error is reported beside the in-sample one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fit_kv_attention import fused_attention_s
from energylens.calibration.fitting import FitResult, fit_efficiency_ramp
from energylens.cost.constants import KernelConstants
from energylens.hardware import GPU, load_gpu

#: The fitted constants and their search ranges: a share of the datasheet BF16 peak, and
#: the query rows (tokens x query heads per KV head, no cached prefix) of half that share.
FIELDS = ("attention_efficiency_max", "attention_m_half")
BOUNDS = ((0.1, 0.95), (1.0, 20000.0))
COLUMNS = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
           "attn_dtype", "kv_cache_dtype", "latency"]


@dataclass(frozen=True)
class ContextAttentionTable:
    """BF16, full-attention rows of one GPU's context-attention table."""

    path: Path
    gpu: str
    batch: np.ndarray
    isl: np.ndarray  # prompt tokens per sequence: new queries = keys
    heads: np.ndarray
    kv_heads: np.ndarray
    head_dim: np.ndarray
    latency_s: np.ndarray


def read_table(*, path: Path) -> ContextAttentionTable:
    """The BF16 full-attention rows of ``path`` without a cached prefix (a table without
    ``window_size`` holds full attention only)."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise CalibrationDataError(f"{path}: not a context-attention table ({exc})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise CalibrationDataError(f"{path}: not a context-attention table (no column "
                                   f"{', '.join(missing)})")
    keep = ((frame["attn_dtype"] == "bfloat16") & (frame["kv_cache_dtype"] == "bfloat16")
            & (frame["num_heads"] % frame["num_key_value_heads"] == 0)
            & (frame["latency"] > 0))
    if "window_size" in frame.columns:  # 0 = full attention
        keep &= frame["window_size"] <= 0
    if "step" in frame.columns:  # 0 = no cached prefix: the prompt's keys only
        keep &= frame["step"] == 0
    rows = frame[keep]
    if rows.empty:
        raise CalibrationDataError(f"{path}: no BF16 full-attention rows")
    return ContextAttentionTable(
        path=path, gpu=table_gpu(path),
        batch=rows["batch_size"].to_numpy(dtype=float),
        isl=rows["isl"].to_numpy(dtype=float),
        heads=rows["num_heads"].to_numpy(dtype=int),
        kv_heads=rows["num_key_value_heads"].to_numpy(dtype=int),
        head_dim=rows["head_dim"].to_numpy(dtype=int),
        latency_s=rows["latency"].to_numpy(dtype=float) * 1e-3)


def predicted_s(*, table: ContextAttentionTable, rows: np.ndarray, gpu: GPU,
                constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the fused causal attention kernel for ``rows``: ``batch``
    prompts of ``isl`` tokens, no cached prefix (``m = p = isl``)."""
    return fused_attention_s(
        heads=table.heads, kv_heads=table.kv_heads, head_dim=table.head_dim, rows=rows,
        phase=lambda at: {"b": table.batch[at], "m": table.isl[at], "p": table.isl[at]},
        gpu=gpu, constants=constants)


def fit_context_attention(*, table: ContextAttentionTable, constants: KernelConstants,
                          leave_out: bool = True) -> FitResult:
    """``attention_efficiency_max`` and ``attention_m_half`` of the table's GPU, given its
    other kernel constants."""
    gpu = load_gpu(table.gpu)
    return fit_efficiency_ramp(
        fields=FIELDS, bounds=BOUNDS, start_efficiency=constants.attention_efficiency_max,
        latency_s=table.latency_s, split_by=table.heads, fitted_on=[str(table.path)],
        price=lambda rows, values: predicted_s(table=table, rows=rows, gpu=gpu,
                                               constants=replace(constants, **values)),
        leave_out=leave_out)

