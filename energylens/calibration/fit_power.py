"""Board-power constants of a GPU from this project's own NVML measurements.

``benchmarks/gpu/measure_kernels.py`` runs kernels back to back for >= 2 s each under NVML's
energy counter (``data/measurements/energylens-gpu/<gpu>/<run>/power*.csv``). A call's
dynamic energy is its energy less the idle power (CUDA context held, nothing running) over
its time. From rows of one mechanism each:

- ``static_power_w``: the idle rows (median over runs).
- ``energy_per_hbm_byte_j``: device-to-device copies (no FLOPs): dynamic energy / bytes
  read + written.
- ``energy_per_tensor_flop_j``: 8192^3 bf16 GEMMs run with one-block spin gaps after each
  call, so the board stays under its limit and the SMs at the full clock: (dynamic energy -
  bytes x the byte energy) / FLOPs. The fp8 GEMM's ratio to it is reported beside the
  model's assumed ``flop_energy_scale`` (the datasheet rate ratio, 0.5).
- ``energy_per_vector_flop_j``: a Triton kernel of fp32 FMAs on registers.
- ``voltage_floor``: the same GEMMs back to back, held by the power limit to a lower clock
  ratio r, draw (V(r)/V(1))^2 of the full-clock energy per FLOP; with V linear in the clock
  from ``voltage_floor`` at the minimum clock (``roofline.dynamic_scale_at``), each dtype's
  pair gives one value; the median of the dtypes is the constant.

Held out: the other sustained kernels (fill, SiLU x mul, GEMV, SDPA attention, smaller
GEMMs) are predicted from these constants with the roofline's power law at their measured
clock, never fitted; their error is the fit's check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.cost.kernel_plan import flop_energy_scale
from energylens.hardware import GPU, load_gpu

#: The measured constants ``energylens calibrate`` gives the GPU. Static power is the
#: board with a CUDA context and nothing running, exactly what the serving model charges
#: every GPU for its wall time; the serving rows cannot tell it from the busy power (GPUs
#: of a steady-state engine wait for a few percent of a step), so they never fit it. The
#: others (per tensor FLOP, per HBM byte) are fitted on serving rows with the engine's
#: busy power, which the measurements would double-count; calibrate reports their fitted /
#: measured ratio.
APPLIED = ("static_power_w", "energy_per_vector_flop_j", "voltage_floor")
#: A row counts as at the full clock within this many MHz of the board's maximum.
FULL_CLOCK_TOLERANCE_MHZ = 20.0
GEMM_8192 = "_8192x8192x8192"


@dataclass(frozen=True)
class PowerFit:
    """Constants of one GPU, their spread over runs, and the held-out kernels' errors."""

    gpu: str
    values: dict[str, float]
    #: constant -> (max - min) / median over runs, where more than one run identifies it
    spread: dict[str, float]
    #: constant -> the rows that identify it (run/kernel)
    identified_by: dict[str, list[str]]
    #: held-out kernel -> predicted / measured board power - 1
    held_out: dict[str, float] = field(default_factory=dict)
    #: fp8 tensor FLOP energy / bf16 (measured at the full clock)
    fp8_flop_energy_ratio: float = float("nan")
    files: list[str] = field(default_factory=list)


def _read(path: Path):  # -> pandas.DataFrame
    import pandas as pd

    frame = pd.read_csv(path)
    need = {"kernel", "energy_j", "window_s", "calls"}
    if not need <= set(frame.columns):
        raise CalibrationDataError(f"{path}: not a power table (needs {sorted(need)})")
    frame = frame[frame["energy_j"].notna()].copy()
    frame["run"] = path.parent.name
    for col in ("flops_per_call", "dram_bytes_per_call", "gap_cycles"):
        frame[col] = frame[col].fillna(0.0) if col in frame else 0.0
    return frame


def read_power_tables(folder: Path):  # -> pandas.DataFrame
    """Every ``power*.csv`` of the runs under ``folder`` (one GPU), idle-corrected: adds
    ``idle_w`` (the run's median idle power) and ``dynamic_j`` per call."""
    import pandas as pd

    files = sorted(folder.glob("*/power*.csv"))
    if not files:
        raise CalibrationDataError(f"{folder}: no */power*.csv")
    frames = []
    for path in files:
        frame = _read(path)
        idle = frame[frame["kernel"].str.startswith("idle")]
        if idle.empty:
            raise CalibrationDataError(f"{path}: no idle rows")
        frame["idle_w"] = float(np.median(idle["energy_j"] / idle["window_s"]))
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    busy = out["calls"] > 0
    spent = out["energy_j"] - out["idle_w"] * out["window_s"]
    out.loc[busy, "dynamic_j"] = spent[busy] / out["calls"][busy]
    return out


def _full_clock(frame, gpu: GPU):  # -> boolean Series
    return frame["sm_clock_mhz"] >= gpu.boost_clock_mhz - FULL_CLOCK_TOLERANCE_MHZ


def _labels(rows) -> list[str]:
    return [f"{r.run}/{r.kernel}" + (f"+gap{int(r.gap_cycles)}" if r.gap_cycles else "")
            for r in rows.itertuples()]


def _spread(values: dict[str, float]) -> float:
    v = np.array(list(values.values()))
    return float((v.max() - v.min()) / np.median(v)) if len(v) > 1 else float("nan")


def voltage_at(*, ratio: float, floor: float, gpu: GPU) -> float:
    """V(r)/V(1), linear from ``floor`` at the minimum clock (``roofline.dynamic_scale_at``)."""
    low = gpu.min_clock_mhz / gpu.boost_clock_mhz
    return floor + (1.0 - floor) * max(ratio - low, 0.0) / (1.0 - low)


def folder_gpu(folder: Path) -> str:
    """The GPU of a ``<gpu>/`` folder of runs: the name NVML reported (``device.json``),
    else the folder's name."""
    import json

    for device in sorted(folder.glob("*/device.json")):
        name = json.loads(device.read_text()).get("name")
        if name:
            return load_gpu(str(name)).name
    return load_gpu(folder.name).name


def fit_power(*, folder: Path, gpu_name: str) -> PowerFit:
    """The power constants of ``gpu_name`` from the measured runs under ``folder``."""
    gpu = load_gpu(gpu_name)
    t = read_power_tables(folder)
    ident: dict[str, list[str]] = {}
    spread: dict[str, float] = {}
    used: set[int] = set()

    idle = t[t["kernel"].str.startswith("idle")]
    static_by_run = (idle["energy_j"] / idle["window_s"]).groupby(idle["run"]).median()
    static = float(np.median(static_by_run))
    ident["static_power_w"], spread["static_power_w"] = _labels(idle), _spread(static_by_run.to_dict())
    used |= set(idle.index)

    copy = t[t["kernel"].str.startswith("copy") & (t["flops_per_call"] == 0)]
    if copy.empty:
        raise CalibrationDataError(f"{folder}: no copy rows to identify the byte energy")
    byte_j = copy["dynamic_j"] / copy["dram_bytes_per_call"]
    e_byte = float(np.median(byte_j))
    ident["energy_per_hbm_byte_j"] = _labels(copy)
    spread["energy_per_hbm_byte_j"] = _spread(byte_j.groupby(copy["run"]).median().to_dict())
    used |= set(copy.index)

    def flop_energy(rows) -> np.ndarray:  # J per FLOP of each row, its bytes' energy removed
        dynamic = rows["dynamic_j"] - rows["dram_bytes_per_call"] * e_byte
        return (dynamic / rows["flops_per_call"]).to_numpy()

    full = _full_clock(t, gpu)
    gemm = {d: t[t["kernel"].str.startswith(f"gemm_{d}{GEMM_8192}")] for d in ("bf16", "fp8")}
    at_full = {d: g[full[g.index] & (g["gap_cycles"] > 0)] for d, g in gemm.items()}
    if at_full["bf16"].empty:
        raise CalibrationDataError(f"{folder}: no bf16 GEMM row at the full clock (run with gaps)")
    e_flop = {d: float(np.median(flop_energy(g))) for d, g in at_full.items() if not g.empty}
    ident["energy_per_tensor_flop_j"] = _labels(at_full["bf16"])
    used |= set(at_full["bf16"].index) | set(at_full["fp8"].index)

    low = gpu.min_clock_mhz / gpu.boost_clock_mhz
    floors, floor_rows = [], []
    for d, g in gemm.items():
        throttled = g[~full[g.index] & (g["gap_cycles"] == 0)]
        if throttled.empty or d not in e_flop:
            continue
        for row, e in zip(throttled.itertuples(), flop_energy(throttled), strict=True):
            # V(r)/V(1) = sqrt(energy per FLOP at r / at full clock) = floor + (1 - floor) x
            # (r - low) / (1 - low), solved for floor
            rise = (row.sm_clock_mhz / gpu.boost_clock_mhz - low) / (1.0 - low)
            floors.append((float(np.sqrt(e / e_flop[d])) - rise) / (1.0 - rise))
            floor_rows.append(f"{row.run}/{row.kernel}@{row.sm_clock_mhz:.0f}MHz")
        used |= set(throttled.index)
    if not floors:
        raise CalibrationDataError(f"{folder}: no throttled GEMM rows to identify the voltage floor")
    ident["voltage_floor"] = floor_rows + _labels(at_full["fp8"])
    floor = float(np.median(floors))
    spread["voltage_floor"] = float((max(floors) - min(floors)) / floor) if len(floors) > 1 else np.nan

    fma = t[t["kernel"].str.contains("fma")]
    if fma.empty:
        raise CalibrationDataError(f"{folder}: no FMA rows to identify the vector FLOP energy")
    e_vec = float(np.median(flop_energy(fma)))
    ident["energy_per_vector_flop_j"] = _labels(fma)
    used |= set(fma.index)

    values = {"static_power_w": static, "energy_per_hbm_byte_j": e_byte,
              "energy_per_tensor_flop_j": e_flop["bf16"], "energy_per_vector_flop_j": e_vec,
              "voltage_floor": floor}
    held = {}
    for row in t[(t["calls"] > 0) & ~t.index.isin(used)].itertuples():
        scale = voltage_at(ratio=row.sm_clock_mhz / gpu.boost_clock_mhz, floor=floor, gpu=gpu) ** 2
        fp8 = "fp8" in row.kernel
        flop_j = e_flop["bf16"] * (flop_energy_scale(dtype="fp8", gpu=gpu) if fp8 else 1.0)
        dynamic = row.flops_per_call * flop_j * scale + row.dram_bytes_per_call * e_byte
        predicted = row.idle_w + dynamic / row.time_per_call_s
        held[_labels(t.loc[[row.Index]])[0]] = predicted / (row.energy_j / row.window_s) - 1.0
    return PowerFit(gpu=gpu.name, values=values, spread=spread, identified_by=ident,
                    held_out=held, fp8_flop_energy_ratio=e_flop.get("fp8", np.nan) / e_flop["bf16"],
                    files=[str(p) for p in sorted(folder.glob("*/power*.csv"))])
