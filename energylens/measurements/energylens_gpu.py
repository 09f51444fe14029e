"""Kernel times this project measured on lent GPUs (``data/measurements/energylens-gpu``).

A run folder (``<gpu>/<date>-<letter>``, written by ``benchmarks/gpu/measure_kernels.py``)
holds ``device.json`` (the board as NVML and PyTorch report it: ``name`` resolves through
the hardware database), ``gemm.csv`` (``dtype, layer, m, n, k, time_s, weight_bytes``:
``y = x @ W^T`` with ``x`` m x k and ``W`` n x k, seconds per call) and, optionally,
``attention.csv`` (PyTorch SDPA: ``phase, batch, q_len, kv_len, heads_q, heads_kv,
head_dim, causal, time_s``); a run of ``benchmarks/gpu/measure_elementwise.py`` holds
``elementwise.csv`` instead of ``gemm.csv`` (the layer's small kernels, read where they are
priced). A row the script could not time (its ``error`` column set,
``time_s`` empty) is counted, not loaded. Anything else unreadable is a one-line
:class:`MeasurementError`.

Whole forward steps (``benchmarks/gpu/measure_decode_step.py``) are ``steps_<dtype>.csv``
files in a run folder whose ``gpu.txt`` (``nvidia-smi --query-gpu`` CSV) names the board:
``phase`` (idle, idle_after, decode, prefill), ``batch``, ``tokens`` per sequence,
``context`` (cached tokens), ``layers``, ``weight_dtype`` (absent in the script's first
version: the file name says it), ``step_time_s`` (median graph replay) and the power
columns over back-to-back replays (``power_w``, ``time_per_call_s``, ``energy_per_call_j``
= their product, ``sm_clock_mhz``, ``clock_event_reasons``): :func:`load_step_files`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from energylens.errors import MeasurementError
from energylens.measurements.formats import _csv_rows, read_text

DEVICE_FILE = "device.json"
GEMM_FILE = "gemm.csv"
ATTENTION_FILE = "attention.csv"
#: The layer's small kernels (``benchmarks/gpu/measure_elementwise.py``), read where they
#: are priced (:mod:`energylens.calibration.fit_elementwise`).
ELEMENTWISE_FILE = "elementwise.csv"
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
    elementwise: Path | None = None  # the run's elementwise.csv, if it has one


def load_kernel_run(*, path: str | Path) -> KernelRun:
    """Read run folder ``path`` (one-line :class:`MeasurementError` if it cannot be used)."""
    folder = Path(path)
    if not folder.exists():
        raise MeasurementError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise MeasurementError(f"{folder}: not a folder (expected a run folder holding "
                               f"{DEVICE_FILE} and {GEMM_FILE})")
    elementwise = folder / ELEMENTWISE_FILE
    if not (folder / DEVICE_FILE).is_file() or not (
            (folder / GEMM_FILE).is_file() or elementwise.is_file()):
        raise MeasurementError(f"{folder}: no {DEVICE_FILE} with a {GEMM_FILE} or an "
                               f"{ELEMENTWISE_FILE} (not a run folder of measure_kernels.py "
                               f"or measure_elementwise.py)")
    gemm: tuple[GemmTime, ...] = ()
    gemm_untimed = 0
    if (folder / GEMM_FILE).is_file():
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
                     attention=attention, untimed=gemm_untimed + attention_untimed,
                     elementwise=elementwise if elementwise.is_file() else None)


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
    _, rows = _csv_rows(path, required)
    timed: list[tuple[int, dict[str, str]]] = []
    untimed = 0
    for number, row in enumerate(rows, start=1):
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


# --- whole forward steps (benchmarks/gpu/measure_decode_step.py) -----------------------

STEPS_GLOB = "steps*.csv"
#: A folder's step files: ``steps_<dtype>.csv`` (``--host-gaps`` runs, whose period holds a
#: host sleep after each step, are another measurement: not steps).
STEPS_NAME = re.compile(r"steps(_[a-z0-9]+)?\.csv")
GPU_FILE = "gpu.txt"  # ``nvidia-smi --query-gpu=name,... --format=csv`` of the run's board
STEP_COLUMNS = ("phase", "batch", "tokens", "context", "step_time_s", "time_per_call_s",
                "power_w", "energy_per_call_j")
STEP_PHASES = ("decode", "prefill", "mixed")
IDLE_PHASES = ("idle", "idle_after")
SOFTWARE_POWER_CAP = 0x4  # NVML clock event reason: the board held under its power limit


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """One measured forward step: ``batch`` sequences of ``tokens`` new tokens each over
    ``context`` cached tokens (0 for a prefill), its graph-replay time and its board power
    and energy over back-to-back replays."""

    row: int  # 1 = first data row of the file
    phase: str  # decode, prefill, mixed (decode sequences and a prompt chunk in one step)
    batch: int
    tokens: int
    context: int
    layers: int | None  # None: the file has no 'layers' column
    weight_dtype: str
    step_time_s: float  # median of graph replays
    time_per_call_s: float  # window / calls while replaying back to back
    power_w: float  # NVML energy over the window / window
    energy_per_call_j: float  # = power_w x time_per_call_s
    sm_clock_mhz: float | None
    power_capped: bool  # NVML reported the software power cap (0x4) in the window
    prefill_tokens: int = 0  # a mixed step's prompt chunk (causal, no cached prefix)


@dataclass(frozen=True, kw_only=True)
class StepFile:
    """One ``steps_<dtype>.csv``: its steps, the idle power measured around them and the
    board they ran on."""

    path: Path
    device_name: str | None  # from gpu.txt / device.json next to the file, if any
    folder_gpu: str  # name of the folder above the run folder (``h100-sxm``)
    weight_dtype: str
    steps: tuple[StepTime, ...]
    idle_power_w: tuple[float, ...]  # idle rows (before, after), a CUDA context held
    failed: int  # rows the script could not measure (``error`` set)


def load_step_files(*, path: str | Path) -> tuple[StepFile, ...]:
    """Read one ``steps_<dtype>.csv`` or every ``steps*.csv`` of a folder (those directly in
    it; if there are none, those below it). One-line :class:`MeasurementError` if unusable."""
    target = Path(path)
    if not target.exists():
        raise MeasurementError(f"{target}: no such file or folder")
    if target.is_dir():
        files = ([f for f in sorted(target.glob(STEPS_GLOB)) if STEPS_NAME.fullmatch(f.name)]
                 or [f for f in sorted(target.rglob(STEPS_GLOB)) if STEPS_NAME.fullmatch(f.name)])
        if not files:
            raise MeasurementError(f"{target}: no {STEPS_GLOB} in it or below it (files of "
                                   f"benchmarks/gpu/measure_decode_step.py)")
    else:
        if target.suffix.lower() != ".csv":
            raise MeasurementError(f"{target}: expected a steps_<dtype>.csv or a folder of them")
        files = [target]
    return tuple(_step_file(f) for f in files)


def _step_file(path: Path) -> StepFile:
    _, rows = _csv_rows(path, STEP_COLUMNS)
    # the script's first version wrote no weight_dtype column: the name says it (bf16 else)
    stem = path.stem.removeprefix("steps").lstrip("_")
    file_dtype = stem if stem in GEMM_DTYPES else "bf16"
    steps: list[StepTime] = []
    idle: list[float] = []
    failed = 0
    for number, row in enumerate(rows, start=1):
        if (row.get("error") or "").strip():
            failed += 1
            continue
        if float((row.get("host_gap_s") or "0").strip() or 0.0) > 0.0:
            raise MeasurementError(f"{path}:{number + 1}: a step followed by a host gap "
                                   f"(measure_decode_step.py --host-gaps): not a step time")
        phase = _choice(path, number, row, "phase", STEP_PHASES + IDLE_PHASES)
        if phase in IDLE_PHASES:
            idle.append(_number(path, number, row, "power_w"))
            continue
        steps.append(_step(path, number, row, phase=phase, default_dtype=file_dtype))
    if not steps:
        raise MeasurementError(f"{path}: no decode, prefill or mixed rows")
    dtypes = sorted({s.weight_dtype for s in steps})
    if len(dtypes) > 1:
        raise MeasurementError(f"{path}: rows of several weight dtypes ({', '.join(dtypes)}); "
                               f"expected one file per dtype")
    return StepFile(path=path, device_name=_run_device_name(path.parent),
                    folder_gpu=path.parent.parent.name, weight_dtype=dtypes[0],
                    steps=tuple(steps), idle_power_w=tuple(idle), failed=failed)


def _step(path: Path, number: int, row: dict[str, str], *, phase: str,
          default_dtype: str) -> StepTime:
    dtype = (row.get("weight_dtype") or "").strip() or default_dtype
    if dtype not in GEMM_DTYPES:
        raise MeasurementError(f"{path}: column 'weight_dtype' has {dtype!r} in row {number} "
                               f"(known: {', '.join(GEMM_DTYPES)})")
    cached = _cached_tokens(path, number, row)
    layers = _count(path, number, row, "layers") if (row.get("layers") or "").strip() else None
    clock = row.get("sm_clock_mhz") or ""
    reasons = 0
    for mask in (row.get("clock_event_reasons") or "").split("|"):
        try:
            reasons |= int(mask.strip(), 16) if mask.strip() else 0
        except ValueError:
            raise MeasurementError(f"{path}: column 'clock_event_reasons' has {mask!r} in "
                                   f"row {number} (expected hexadecimal masks)") from None
    prompt = (_count(path, number, row, "prefill_tokens")
              if (row.get("prefill_tokens") or "").strip() else 0)
    if (phase == "mixed") != (prompt > 0):
        raise MeasurementError(f"{path}: row {number}: a 'mixed' step, and only one, has "
                               f"prefill_tokens > 0 (phase {phase!r}, prefill_tokens {prompt})")
    return StepTime(row=number, phase=phase, batch=_count(path, number, row, "batch"),
                    prefill_tokens=prompt,
                    tokens=_count(path, number, row, "tokens"), context=cached, layers=layers,
                    weight_dtype=dtype,
                    step_time_s=_number(path, number, row, "step_time_s"),
                    time_per_call_s=_number(path, number, row, "time_per_call_s"),
                    power_w=_number(path, number, row, "power_w"),
                    energy_per_call_j=_number(path, number, row, "energy_per_call_j"),
                    sm_clock_mhz=_number(path, number, row, "sm_clock_mhz") if clock.strip()
                    else None,
                    power_capped=bool(reasons & SOFTWARE_POWER_CAP))


def _cached_tokens(path: Path, number: int, row: dict[str, str]) -> int:
    """The 'context' column: a whole number of cached tokens, 0 allowed (a prefill)."""
    raw = (row.get("context") or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(f"{path}: column 'context' has non-numeric value {raw!r} "
                               f"in row {number}") from None
    if not math.isfinite(value) or value < 0 or not value.is_integer():
        raise MeasurementError(f"{path}: column 'context' must be a whole number >= 0, got "
                               f"{raw!r} in row {number}")
    return int(value)


def _run_device_name(folder: Path) -> str | None:
    """The board's name from ``gpu.txt`` (nvidia-smi CSV: a header with ``name``, then one
    line per GPU) or ``device.json``; None if neither names it."""
    if (folder / GPU_FILE).is_file():
        lines = [line for line in read_text(folder / GPU_FILE).splitlines() if line.strip()]
        if len(lines) >= 2:
            header = [c.strip() for c in lines[0].split(",")]
            values = [c.strip() for c in lines[1].split(",")]
            if "name" in header and len(values) == len(header) and values[header.index("name")]:
                return values[header.index("name")]
    if (folder / DEVICE_FILE).is_file():
        return _device_name(folder / DEVICE_FILE)
    return None
