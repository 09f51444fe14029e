"""AIConfigurator's measured NCCL tables as measurement rows (``aiconfigurator-nccl``).

``kernels/<gpu>/comm/nccl/<version>/nccl_perf.parquet``: one host's NCCL collectives,
``op_name`` (all_reduce, all_gather, reduce_scatter, alltoall), ``nccl_dtype`` (half, int8),
``num_gpus``, ``message_size`` in **elements** (half 256 to 2^28, int8 512 to 2^29: the same
bytes), ``latency`` in ms, ``device`` (the GPU's name as CUDA reports it). Rows come out as
Vidur's collective rows do (``collective``, ``num_workers``, ``devices_per_node``, ``size``
in bytes; the time in ms under the collective's name), every group inside one host.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from energylens.errors import MeasurementError

if TYPE_CHECKING:  # formats imports this module when it reads a table
    from energylens.measurements.formats import MeasurementRow

#: AIConfigurator's op names -> this model's collective kinds.
OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
       "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all"}
#: Bytes per element of a table's dtype column (``nccl_dtype``; the engines' custom
#: all-reduce tables' ``allreduce_dtype``).
ELEMENT_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "fp8": 1}
COLUMNS = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency", "device")


def load_nccl_table(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Rows of one table (``gpu`` overrides its ``device`` column)."""
    import pandas as pd

    from energylens.hardware import UnknownGPUError, load_gpu
    from energylens.measurements.formats import MeasurementRow

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise MeasurementError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MeasurementError(f"{path}: is a directory, expected a file") from None
    if not raw.strip():
        raise MeasurementError(f"{path}: empty file")
    try:
        frame = pd.read_parquet(io.BytesIO(raw))
    except (OSError, ValueError) as exc:
        raise MeasurementError(f"{path}: not a readable Parquet table ({exc})") from None
    missing = sorted(set(COLUMNS) - set(frame.columns))
    if missing:
        raise MeasurementError(f"{path}: missing columns {missing}")
    unknown = sorted((set(frame["op_name"]) - set(OPS)) | (set(frame["nccl_dtype"]) - set(ELEMENT_BYTES)))
    if unknown:
        raise MeasurementError(f"{path}: unknown op_name or nccl_dtype {unknown}")
    devices = sorted(set(frame["device"]))
    if gpu is None and len(devices) != 1:
        raise MeasurementError(f"{path}: one device per table expected, found {devices}")
    try:
        spec = load_gpu(gpu or str(devices[0]))
    except UnknownGPUError as exc:
        raise MeasurementError(f"{path}: {exc}") from None
    hosts = int(frame["num_gpus"].max())
    context = {"gpu": spec.name, "link": None, "time_unit": "ms", "size_unit": "bytes",
               "version": path.parent.name}
    out = []
    for op, dtype, workers, elements, latency_ms in zip(
            frame["op_name"].astype(str), frame["nccl_dtype"].astype(str),
            frame["num_gpus"].to_numpy(dtype=int), frame["message_size"].to_numpy(dtype=float),
            frame["latency"].to_numpy(dtype=float), strict=True):
        collective = OPS[op]
        out.append(MeasurementRow(
            input={"collective": collective, "num_workers": int(workers),
                   "devices_per_node": max(hosts, int(workers)),
                   "size": float(elements) * ELEMENT_BYTES[dtype], "dtype": dtype},
            measured={collective: float(latency_ms)}, context=dict(context)))
    return out
