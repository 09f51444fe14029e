"""How fast MLA's prompt (decompressed) attention runs, per GPU, from TensorRT-LLM's table.

MLA models (DeepSeek-V3/R1, Kimi-K2, GLM-5) prefill in the decompressed form
(``energylens/data/families/attention_mla_prompt.yaml``): every query head meets its own
keys, ``q k^T`` over 192 dimensions (128 + the 64-wide rope part) and ``a v`` over 128,
a multi-head kernel of its own (FlashInfer / TensorRT-LLM FMHA / FA3 with unequal head
dimensions), not the grouped-query kernel the context-attention tables time. Its price has
the form of :func:`energylens.cost.roofline.attention_efficiency`: a share
``prompt_attention_efficiency_max`` of the dense BF16 peak, ramped by X / (X +
``prompt_attention_m_half``) with X the keys a query row meets (no cached prefix: the
prompt's length). AIConfigurator times TensorRT-LLM's MLA context attention alone
(``kernels/<gpu>/mla/trtllm/<v>/context_mla_perf.parquet``: ``num_heads`` per GPU,
``batch_size`` prompts of ``isl`` tokens, ``latency`` in ms); both constants are fitted
there (least squares on log time), each row priced by the cost model's own prompt-form
kernel of DeepSeek-V3 at tensor parallelism 128 / ``num_heads``, given the GPU's other
kernel constants. Rows: a bf16 KV cache, :data:`MIN_HEADS` to 128 heads per GPU (dividing 128), prompts of
at least :data:`MIN_PROMPT_TOKENS` (shorter ones are one query tile whose fixed time the
ramp does not describe; the kernel's launch floor prices them).

Honesty: the rows are split by head count (alternate values; each half spans every prompt
length); each half's fit predicts the other half, and that held-out error is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fitting import FitResult, fit_efficiency_ramp
from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import GPU, load_gpu

#: The fitted constants and their search ranges: a share of the datasheet BF16 peak, and
#: the keys per query row at which a prompt reaches half of it.
FIELDS = ("prompt_attention_efficiency_max", "prompt_attention_m_half")
BOUNDS = ((0.1, 0.95), (1.0, 50000.0))
#: The model whose MLA shapes the table's kernel runs (its ``num_heads`` are per GPU).
MODEL = "deepseek-ai/DeepSeek-V3"
HEADS = 128
MIN_PROMPT_TOKENS = 128
#: Fewest query heads per GPU kept: tensor parallelism <= 8 over DeepSeek-V3's 128 heads,
#: as MLA models are deployed (attention DP keeps all 128 on a rank). With 1-8 heads a
#: GPU's prompt runs too few tiles to fill its SMs, an occupancy effect the form lacks.
MIN_HEADS = 16
KERNEL = "qk+soft+av"


@dataclass(frozen=True)
class MlaPromptTable:
    """The kept rows of one GPU's MLA context-attention table."""

    path: Path
    gpu: str
    batch: np.ndarray
    isl: np.ndarray  # prompt tokens per sequence: new queries = keys
    heads: np.ndarray  # query heads per GPU
    latency_s: np.ndarray


def read_table(*, path: Path) -> MlaPromptTable:
    """The bf16-KV rows of ``path`` with :data:`MIN_HEADS` to 128 heads (dividing 128) and
    prompts of at least :data:`MIN_PROMPT_TOKENS` tokens."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise CalibrationDataError(f"{path}: not an MLA context table ({exc})") from None
    missing = [c for c in ("batch_size", "isl", "num_heads", "kv_cache_dtype", "latency")
               if c not in frame.columns]
    if missing:
        raise CalibrationDataError(f"{path}: not an MLA context table (no column "
                                   f"{', '.join(missing)})")
    keep = ((frame["kv_cache_dtype"] == "bfloat16") & (HEADS % frame["num_heads"] == 0)
            & (frame["num_heads"] >= MIN_HEADS) & (frame["isl"] >= MIN_PROMPT_TOKENS)
            & (frame["latency"] > 0))
    rows = frame[keep]
    if rows.empty:
        raise CalibrationDataError(f"{path}: no bf16-KV rows of >= {MIN_PROMPT_TOKENS} tokens")
    return MlaPromptTable(path=path, gpu=table_gpu(path),
                          batch=rows["batch_size"].to_numpy(dtype=float),
                          isl=rows["isl"].to_numpy(dtype=float),
                          heads=rows["num_heads"].to_numpy(dtype=int),
                          latency_s=rows["latency"].to_numpy(dtype=float) * 1e-3)


@lru_cache(maxsize=32)
def mla_attention_kernel(*, heads: int, prompt: bool) -> tuple[Kernel, float | None]:
    """DeepSeek-V3's fused MLA attention kernel on one GPU holding ``heads`` query heads,
    in the prompt (decompressed) form or the decode (absorbed) one, and the layer's
    attention window."""
    from energylens.model import get_model
    from energylens.model.families import build_graph

    group = next(g for g in build_graph(get_model(MODEL)).groups
                 if g.prompt_attention is not None)
    layer = group.prompt_attention if prompt else group.layer
    assert layer is not None
    compiled = compile_layer(layer=layer, sizes=group.sizes, degrees={"tp": HEADS // heads},
                             fusion=frozenset({"attention"}))
    return next(k for k in compiled.kernels if k.name == KERNEL), group.window


def predicted_s(*, table: MlaPromptTable, rows: np.ndarray, gpu: GPU,
                constants: KernelConstants) -> np.ndarray:
    """The cost model's time of the prompt-form attention kernel for ``rows`` (a mask)."""
    prompt = constants.for_prompt_attention()
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    picked = np.flatnonzero(rows)
    out = np.empty(picked.size)
    for heads in np.unique(table.heads[picked]):
        mine = table.heads[picked] == heads
        at = picked[mine]
        kernel, window = mla_attention_kernel(heads=int(heads), prompt=True)
        phase = {"b": table.batch[at], "m": table.isl[at], "p": table.isl[at],
                 "n": np.ones(at.size), "t": np.ones(at.size)}
        cost = kernel_cost(kernel=kernel, phase=phase, window=window, gpu=gpu,
                           constants=prompt, clock=clock, weight_dtype="bf16", kv_dtype="bf16")
        out[mine] = np.broadcast_to(cost.latency_s, at.shape)
    return out


def fit_mla_prompt(*, table: MlaPromptTable, constants: KernelConstants,
                   leave_out: bool = True) -> FitResult:
    """``prompt_attention_efficiency_max`` and ``prompt_attention_m_half`` of the table's
    GPU, given its other kernel constants."""
    gpu = load_gpu(table.gpu)
    return fit_efficiency_ramp(
        fields=FIELDS, bounds=BOUNDS, start_efficiency=constants.attention_efficiency_max,
        latency_s=table.latency_s, split_by=table.heads, fitted_on=[str(table.path)],
        price=lambda rows, values: predicted_s(table=table, rows=rows, gpu=gpu,
                                               constants=replace(constants, **values)),
        leave_out=leave_out)
