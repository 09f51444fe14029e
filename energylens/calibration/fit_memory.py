"""HBM streaming efficiency of a GPU from this project's own weight-streaming GEMMs.

``benchmarks/gpu/measure_kernels.py`` times GEMMs whose weights cycle through enough copies
to miss L2 (``data/measurements/energylens-gpu/<gpu>/<run>/gemm.csv``). At one to eight
rows (``m <= 8``) such a GEMM is a stream of its weights from HBM, as a decode step's
layers are. The memory curve of the roofline,

    bandwidth(bytes) = peak x memory_efficiency_max x bytes / (bytes + memory_half_bytes)

is fitted to them by least squares on log time (rows of at least :data:`MIN_BYTES`, where
the launch floor is under a tenth of the time). Vidur's per-operator profiles time the same
kind of stream (Llama-2-7B's 180 MB gate/up projection at one to eight tokens on H100: 0.84
of peak, as this project's 235 MB one: 0.86), but in the Vidur fit the memory curve trades
off against the roofline's sharpness and the fixed kernel time, and it ends at the bounds
of its range (efficiency 0.98, half-bandwidth size 10 kB): not identified there. Here
nothing but the stream moves the time. ``energylens calibrate`` reports the fit beside the
calibration's values and does not apply it (docs/kernels-h200.md: held in H100's Vidur fit,
it moved the serving regime folds the wrong way).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fitting import Param, fit_bounded
from energylens.hardware import load_gpu

#: Constants this fit identifies (KernelConstants field names), with the Vidur fit's ranges.
MEMORY_PARAMS = (
    Param("memory_efficiency_max", 0.80, 0.40, 0.98),
    Param("memory_half_bytes", 1.0e6, 1.0e4, 1.0e8, log=True),
)
#: Smallest stream fitted: a 16 MB read takes >= 5 us on any GPU of the database, the
#: launch floor (~0.5 us of a CUDA-graph replay) under a tenth of it.
MIN_BYTES = 16.0e6
#: Rows per GEMM that still stream the weights (the activations are under 0.1 % of them).
MAX_ROWS = 8


@dataclass(frozen=True)
class MemoryFit:
    """The two memory-curve constants of one GPU and what identified them."""

    gpu: str
    values: dict[str, float]
    rms_log_residual: float
    rows: list[str]  # run/layer/m of each fitted row
    at_bound: list[str]
    files: list[str]


def streams(folder: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(labels, bytes moved, seconds) of the weight-streaming GEMMs under ``folder``."""
    labels: list[str] = []
    nbytes: list[float] = []
    seconds: list[float] = []
    for path in sorted(folder.glob("*/gemm.csv")):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("dtype") != "bf16" or not row.get("time_s"):
                    continue
                m, n, k = (int(row[c]) for c in ("m", "n", "k"))
                weights = float(row["weight_bytes"])
                if m > MAX_ROWS or weights < MIN_BYTES:
                    continue
                labels.append(f"{path.parent.name}/{row['layer']}/m{m}")
                nbytes.append(weights + 2.0 * m * (n + k))
                seconds.append(float(row["time_s"]))
    return labels, np.array(nbytes), np.array(seconds)


def fit_memory(*, folder: Path, gpu_name: str) -> MemoryFit:
    """Fit :data:`MEMORY_PARAMS` on the weight-streaming GEMMs of one GPU's runs."""
    gpu = load_gpu(gpu_name)
    labels, nbytes, seconds = streams(folder)
    if len(labels) < 2 * len(MEMORY_PARAMS):
        raise CalibrationDataError(f"{folder}: {len(labels)} weight-streaming GEMM rows "
                                   f"(bf16, m <= {MAX_ROWS}, >= {MIN_BYTES / 1e6:.0f} MB); "
                                   f"need {2 * len(MEMORY_PARAMS)}")
    peak = gpu.hbm_bandwidth_bytes_per_s

    def residuals(values: dict[str, float]) -> np.ndarray:
        share = values["memory_efficiency_max"] * nbytes / (nbytes + values["memory_half_bytes"])
        return np.log(nbytes / (peak * share)) - np.log(seconds)

    values, rms, at_bound = fit_bounded(params=MEMORY_PARAMS, residuals=residuals)
    return MemoryFit(gpu=gpu.name, values=values, rms_log_residual=rms, rows=labels,
                     at_bound=at_bound, files=[str(p) for p in sorted(folder.glob("*/gemm.csv"))])
