"""Fit a runtime's own small all-reduce per GPU to AIConfigurator's measured kernel tables.

vLLM (and TensorRT-LLM) all-reduce messages up to a few MB over NVLink peer memory with
their own one-/two-shot kernels instead of NCCL. Decode all-reduces are small, so this
kernel's fixed latency is a per-layer cost that does not shrink with more GPUs. The tables
(``kernels/<gpu>/comm/<runtime>/<version>/custom_allreduce_perf.parquet``: ``num_gpus``,
``message_size`` in elements of ``allreduce_dtype``, ``latency`` in ms; vLLM's rows carry
``backend = vllm_graph`` under CUDA graphs, TensorRT-LLM's one ``implementation``) identify
it from the kernel alone, at 2, 4 and 8 GPUs and 128 elements up to the runtime's size
limit, instead of leaving it to the end-to-end serving fit.

``message_size`` counts elements, not bytes: in AIConfigurator's NCCL table of the same
layout (``comm/nccl/.../nccl_perf.parquet``, H100 x 8) a ``half`` all-reduce of 2^28
elements takes 2.11 ms and an ``int8`` one 1.38 ms, 1.5x apart at the same ``message_size``;
as bytes (2 per half) the two give 445 and 350 GB/s of bus bandwidth, NCCL's published NVLS
and ring figures on H100 (~480 and ~370 GB/s, REFERENCE.md), as equal bytes they could not.

Form (:func:`energylens.cost.comm.collective_cost` with
:func:`energylens.cost.comm.own_allreduce_link`): time = latency + latency_per_hop x log2(n)
+ 2(n-1)/n x bytes / (link bandwidth x bus bandwidth fraction), an additive alpha-beta model
without NCCL's bandwidth ramp. Honesty: each GPU count is held out in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fitting import (
    ErrorStats,
    FitResult,
    Param,
    fit_bounded,
    log_residual,
)
from energylens.cost.comm import collective_cost, own_allreduce_link
from energylens.cost.constants import LinkConstants, RuntimeConstants
from energylens.hardware import GPU, UnknownGPUError, load_gpu
from energylens.measurements.nccl_table import ELEMENT_BYTES  # ``message_size`` counts elements

#: The three constants, as ``RuntimeConstants`` fields.
PARAMS = (
    Param("allreduce_latency_s", 5.0e-6, 0.5e-6, 100.0e-6, log=True),
    Param("allreduce_latency_per_hop_s", 0.2e-6, 0.0, 20.0e-6),
    Param("allreduce_bus_bandwidth_fraction", 0.3, 0.01, 1.0),
)
#: AIConfigurator's GPU folder names -> this database's GPU names (a100_sxm was measured on
#: an 'NVIDIA A100-SXM4-80GB', per its ``device`` column).
GPU_FOLDERS = {"a100_sxm": "A100-80GB-SXM", "h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM",
               "b200_sxm": "B200", "gb200": "GB200", "l40s": "L40S"}


@dataclass(frozen=True)
class AllReduceTable:
    """The rows of one runtime's table on one GPU (vLLM's under CUDA graphs) up to
    ``max_bytes``, their messages in bytes."""

    path: Path
    runtime: str
    gpu: str
    num_gpus: np.ndarray
    message_bytes: np.ndarray
    latency_s: np.ndarray


def table_gpu(path: Path) -> str:
    """Database GPU name of a ``kernels/<gpu>/comm/<runtime>/<version>/`` table."""
    folder = path.parts[-5]
    try:
        return load_gpu(GPU_FOLDERS.get(folder, folder)).name
    except UnknownGPUError as exc:
        raise CalibrationDataError(f"{path}: {exc}") from None


def read_table(*, path: Path, max_bytes: float) -> AllReduceTable:
    """Rows of ``path`` of the runtime's kernel (vLLM's: under CUDA graphs), with messages
    of at most ``max_bytes`` bytes."""
    import pandas as pd

    runtime = path.parts[-3]
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise CalibrationDataError(f"{path}: not a readable Parquet table ({exc})") from None
    missing = {"num_gpus", "message_size", "latency", "allreduce_dtype"} - set(frame.columns)
    if missing or not {"backend", "implementation"} & set(frame.columns):
        raise CalibrationDataError(f"{path}: missing columns "
                                   f"{sorted(missing) or ['backend or implementation']}")
    unknown = set(frame["allreduce_dtype"]) - set(ELEMENT_BYTES)
    if unknown:
        raise CalibrationDataError(f"{path}: unknown allreduce_dtype {sorted(unknown)}")
    message_bytes = frame["message_size"] * frame["allreduce_dtype"].map(ELEMENT_BYTES)
    mode = (frame["backend"] == f"{runtime}_graph" if "backend" in frame.columns
            else frame["implementation"] == runtime)
    rows = frame[mode & (message_bytes <= max_bytes)]
    if rows.empty:
        raise CalibrationDataError(f"{path}: no {runtime} rows up to {max_bytes:.0f} bytes")
    return AllReduceTable(path=path, runtime=runtime, gpu=table_gpu(path),
                          num_gpus=rows["num_gpus"].to_numpy(dtype=float),
                          message_bytes=message_bytes[rows.index].to_numpy(dtype=float),
                          latency_s=rows["latency"].to_numpy(dtype=float) * 1e-3)


def predicted_s(*, values: dict[str, float], gpu: GPU, num_gpus: np.ndarray,
                message_bytes: np.ndarray) -> np.ndarray:
    """Predicted time of every row with the constants ``values``."""
    link = own_allreduce_link(constants=RuntimeConstants(**values), link=LinkConstants())
    out = np.empty_like(message_bytes)
    for n in np.unique(num_gpus):
        rows = num_gpus == n
        out[rows] = collective_cost(kind="all_reduce", message_bytes=message_bytes[rows],
                                    group_size=int(n),
                                    bandwidth=gpu.intra_node.bandwidth_bytes_per_s,
                                    constants=link).latency_s
    return out


def _fit(table: AllReduceTable, rows: np.ndarray) -> tuple[dict[str, float], list[str]]:
    gpu = load_gpu(table.gpu)

    def residuals(values: dict[str, float]) -> np.ndarray:
        return log_residual(predicted_s(values=values, gpu=gpu, num_gpus=table.num_gpus[rows],
                                        message_bytes=table.message_bytes[rows]),
                            table.latency_s[rows])

    values, _, at_bound = fit_bounded(params=PARAMS, residuals=residuals)
    return values, at_bound


def fit_custom_allreduce(*, table: AllReduceTable, leave_out: bool = True) -> FitResult:
    """Fit the three constants on every row; hold out each GPU count in turn."""
    gpu = load_gpu(table.gpu)
    everything = np.ones(table.latency_s.size, dtype=bool)
    values, at_bound = _fit(table, everything)
    fitted = predicted_s(values=values, gpu=gpu, num_gpus=table.num_gpus,
                         message_bytes=table.message_bytes)
    result = FitResult(values=values,
                       rms_log_residual=float(np.sqrt(np.mean(
                           log_residual(fitted, table.latency_s) ** 2))),
                       in_sample={"latency": ErrorStats.of(fitted, table.latency_s)},
                       fitted_on=[str(table.path)], n_points=int(table.latency_s.size),
                       at_bound=at_bound)
    counts = np.unique(table.num_gpus)
    if leave_out and counts.size > 2:  # per-hop latency needs two counts in every fit
        held = np.empty_like(table.latency_s)
        for n in counts:
            out = table.num_gpus == n
            fold, _ = _fit(table, ~out)
            held[out] = predicted_s(values=fold, gpu=gpu, num_gpus=table.num_gpus[out],
                                    message_bytes=table.message_bytes[out])
        result.leave_out = {"latency": ErrorStats.of(held, table.latency_s)}
    return result
