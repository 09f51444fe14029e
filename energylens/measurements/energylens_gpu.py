"""Kernel times this project measured on lent GPUs (``data/measurements/energylens-gpu``).

A run folder (``<gpu>/<date>-<letter>``, written by ``benchmarks/gpu/measure_kernels.py``)
holds ``device.json`` (the board as NVML and PyTorch report it: ``name`` resolves through
the hardware database), ``gemm.csv`` (``dtype, layer, m, n, k, time_s, weight_bytes``:
``y = x @ W^T`` with ``x`` m x k and ``W`` n x k, seconds per call) and, optionally,
``attention.csv`` (PyTorch SDPA: ``phase, batch, q_len, kv_len, heads_q, heads_kv,
head_dim, causal, time_s``). A row the script could not time (its ``error`` column set,
``time_s`` empty) is counted, not loaded. Anything else unreadable is a one-line
:class:`MeasurementError`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from energylens.errors import MeasurementError
from energylens.measurements.formats import read_text

DEVICE_FILE = "device.json"
GEMM_FILE = "gemm.csv"
ATTENTION_FILE = "attention.csv"
GEMM_COLUMNS = ("dtype", "layer", "m", "n", "k", "time_s", "weight_bytes")
ATTENTION_COLUMNS = ("phase", "batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim",
                     "causal", "time_s")
GEMM_DTYPES = ("bf16", "fp8")
PHASES = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class GemmTime:
    """One timed GEMM ``y[m, n] = x[m, k] @ W[n, k]^T``."""

    dtype: str
    layer: str
    m: int
    n: int
    k: int
    time_s: float
    weight_bytes: float


@dataclass(frozen=True, kw_only=True)
class AttentionTime:
    """One timed SDPA call: ``batch`` sequences of ``q_len`` queries over ``kv_len`` keys."""

    phase: str
    batch: int
    q_len: int
    kv_len: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool
    time_s: float


@dataclass(frozen=True, kw_only=True)
class KernelRun:
    """A run folder's timed kernels and the board they ran on."""

    path: Path
    device_name: str
    gemm: tuple[GemmTime, ...]
    attention: tuple[AttentionTime, ...]
    untimed: int  # rows the script could not time (``error`` set)


def load_kernel_run(*, path: str | Path) -> KernelRun:
    """Read run folder ``path`` (one-line :class:`MeasurementError` if it cannot be used)."""
    folder = Path(path)
    if not folder.exists():
        raise MeasurementError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise MeasurementError(f"{folder}: not a folder (expected a run folder holding "
                               f"{DEVICE_FILE} and {GEMM_FILE})")
    for name in (DEVICE_FILE, GEMM_FILE):
        if not (folder / name).is_file():
            raise MeasurementError(f"{folder}: no {name} (not a run folder of measure_kernels.py)")
    gemm_rows, gemm_untimed = _rows(folder / GEMM_FILE, GEMM_COLUMNS)
    gemm = tuple(_gemm(folder / GEMM_FILE, number, row) for number, row in gemm_rows)
    if not gemm:
        raise MeasurementError(f"{folder / GEMM_FILE}: no timed rows")
    attention: tuple[AttentionTime, ...] = ()
    attention_untimed = 0
    if (folder / ATTENTION_FILE).is_file():
        attention_rows, attention_untimed = _rows(folder / ATTENTION_FILE, ATTENTION_COLUMNS)
        attention = tuple(_attention(folder / ATTENTION_FILE, number, row)
                          for number, row in attention_rows)
    return KernelRun(path=folder, device_name=_device_name(folder / DEVICE_FILE), gemm=gemm,
                     attention=attention, untimed=gemm_untimed + attention_untimed)


def _device_name(path: Path) -> str:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise MeasurementError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise MeasurementError(f"{path}: no GPU 'name'")
    return name.strip()


def _rows(path: Path, required: tuple[str, ...]) -> tuple[list[tuple[int, dict[str, str]]], int]:
    """Numbered rows that have a time (1 = first data row) and the count of untimed ones."""
    reader = csv.DictReader(io.StringIO(read_text(path)))
    header = [name.strip() for name in reader.fieldnames or []]
    reader.fieldnames = header
    missing = [name for name in required if name not in header]
    if missing:
        names = ", ".join(f"'{name}'" for name in missing)
        raise MeasurementError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {names}")
    timed: list[tuple[int, dict[str, str]]] = []
    untimed = 0
    for number, row in enumerate(reader, start=1):
        if not (row.get("time_s") or "").strip() and (row.get("error") or "").strip():
            untimed += 1
            continue
        timed.append((number, row))
    return timed, untimed


def _number(path: Path, number: int, row: dict[str, str], column: str) -> float:
    raw = (row.get(column) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(f"{path}: column '{column}' has non-numeric value {raw!r} "
                               f"in row {number}") from None
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(f"{path}: column '{column}' must be positive, got {raw!r} "
                               f"in row {number}")
    return value


def _count(path: Path, number: int, row: dict[str, str], column: str) -> int:
    value = _number(path, number, row, column)
    if not value.is_integer():
        raise MeasurementError(f"{path}: column '{column}' must be a whole number, got "
                               f"{value:g} in row {number}")
    return int(value)


def _choice(path: Path, number: int, row: dict[str, str], column: str,
            allowed: tuple[str, ...]) -> str:
    value = (row.get(column) or "").strip()
    if value not in allowed:
        raise MeasurementError(f"{path}: column '{column}' has {value!r} in row {number} "
                               f"(known: {', '.join(allowed)})")
    return value


def _gemm(path: Path, number: int, row: dict[str, str]) -> GemmTime:
    m, n, k = (_count(path, number, row, c) for c in ("m", "n", "k"))
    return GemmTime(dtype=_choice(path, number, row, "dtype", GEMM_DTYPES),
                    layer=(row.get("layer") or "").strip(), m=m, n=n, k=k,
                    time_s=_number(path, number, row, "time_s"),
                    weight_bytes=_number(path, number, row, "weight_bytes"))


def _attention(path: Path, number: int, row: dict[str, str]) -> AttentionTime:
    causal = _choice(path, number, row, "causal", ("True", "False", "true", "false", "1", "0"))
    heads_q, heads_kv = (_count(path, number, row, c) for c in ("heads_q", "heads_kv"))
    if heads_q % heads_kv:
        raise MeasurementError(f"{path}: {heads_q} query heads are not a multiple of "
                               f"{heads_kv} KV heads in row {number}")
    return AttentionTime(phase=_choice(path, number, row, "phase", PHASES),
                         batch=_count(path, number, row, "batch"),
                         q_len=_count(path, number, row, "q_len"),
                         kv_len=_count(path, number, row, "kv_len"),
                         heads_q=heads_q, heads_kv=heads_kv,
                         head_dim=_count(path, number, row, "head_dim"),
                         causal=causal in ("True", "true", "1"),
                         time_s=_number(path, number, row, "time_s"))
