"""Fit the scale-out link's all-reduce constants to an nccl-tests run across nodes.

An ``all_reduce_perf`` log of ``k`` nodes x ``g`` GPUs (one CSV per run, columns
``size_bytes`` and ``oop_time_us``, out-of-place times) is predicted by
:func:`energylens.cost.comm.scale_out_cost`: the scale-up part with the GPU's fitted
scale-up constants, the part across nodes with the scale-out constants fitted here
(:data:`SCALE_OUT_PARAMS`), by least squares on log time. The scale-out bandwidth per
GPU is the run's own network, which the log does not state: :data:`NETWORKS` gives it per
cluster name, with its source.

Honesty: the sizes are split in two interleaved halves (every other size); each half is
fitted and the other predicted (``held_out``).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration.fitting import (
    ErrorStats,
    FitResult,
    Param,
    fit_bounded,
    log_residual,
    rms_log_residual,
)
from energylens.cost.comm import scale_out_cost
from energylens.cost.constants import LinkConstants
from energylens.errors import CalibrationDataError
from energylens.hardware import GPU, load_gpu

#: NCCL's two regimes on the run: a low-latency protocol whose time is flat to ~16 KB and
#: then grows slowly (its floor is the half-bandwidth term: the base latency and the
#: sharpness are not identified, so they keep their base values), and a bulk protocol
#: that takes over from ~16 MB.
SCALE_OUT_PARAMS = (
    Param("bus_bandwidth_fraction", 0.8, 0.02, 1.0),
    Param("half_bandwidth_bytes", 1.0e6, 1.0e3, 1.0e9, log=True),
    Param("bulk_latency_s", 500.0e-6, 5.0e-6, 5.0e-3, log=True),
    Param("bulk_bandwidth_fraction", 0.9, 0.02, 1.0),
)

#: Per-GPU, per-direction scale-out bandwidth of the clusters whose runs are read, by the
#: cluster token of the file name.
NETWORKS: dict[str, tuple[float, str]] = {
    "gcp_a3mega": (25.0e9, "Google Cloud A3 Mega (a3-megagpu-8g): 8 NICs of 200 Gb/s "
                           "(GPUDirect-TCPXO) per 8-GPU VM, 25 GB/s per GPU and direction "
                           "(Google Cloud documentation; recalled, not re-read here)"),
}

_NAME = re.compile(r"nccl_tests_allreduce_(\d+)x(\d+)_([A-Za-z0-9]+)_(\w+)\.csv")


@dataclass(frozen=True, kw_only=True)
class NcclTestsRun:
    """One multi-node all-reduce run: its layout, network and measured times."""

    source: str
    gpu: GPU
    nodes: int
    gpus_per_node: int
    network_bytes_per_s: float
    network_source: str
    size_bytes: np.ndarray
    measured_s: np.ndarray


def read_nccl_tests(path: Path) -> NcclTestsRun:
    """A ``nccl_tests_allreduce_<nodes>x<gpus>_<GPU>_<cluster>.csv`` file."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        raise CalibrationDataError(f"{path}: expected a name like "
                                   f"nccl_tests_allreduce_2x8_H100_gcp_a3mega.csv")
    nodes, per_node, gpu_name, cluster = match.groups()
    if cluster not in NETWORKS:
        raise CalibrationDataError(f"{path}: no scale-out bandwidth known for cluster "
                                   f"{cluster!r} (known: {', '.join(sorted(NETWORKS))})")
    sizes, times = [], []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                sizes.append(float(row["size_bytes"]))
                times.append(float(row["oop_time_us"]) * 1e-6)
            except (KeyError, TypeError, ValueError):
                raise CalibrationDataError(f"{path}: every row needs numeric size_bytes and "
                                           f"oop_time_us") from None
    if not sizes or min(times) <= 0:
        raise CalibrationDataError(f"{path}: no rows with positive times")
    return NcclTestsRun(source=str(path), gpu=load_gpu(gpu_name), nodes=int(nodes),
                        gpus_per_node=int(per_node), network_bytes_per_s=NETWORKS[cluster][0],
                        network_source=NETWORKS[cluster][1],
                        size_bytes=np.array(sizes), measured_s=np.array(times))


def predict_run(run: NcclTestsRun, *, intra: LinkConstants, inter: LinkConstants,
                rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    """Predicted all-reduce time (s) of ``run``'s ``rows``."""
    cost = scale_out_cost(kind="all_reduce", message_bytes=run.size_bytes[rows],
                          group_size=run.nodes * run.gpus_per_node,
                          gpus_per_node=run.gpus_per_node,
                          intra_bandwidth=run.gpu.intra_node.bandwidth_bytes_per_s, intra=intra,
                          inter_bandwidth=run.network_bytes_per_s, inter=inter)
    return np.asarray(cost.latency_s, dtype=float)


def _fit(run: NcclTestsRun, *, intra: LinkConstants, base: LinkConstants,
         rows: np.ndarray) -> tuple[dict[str, float], list[str]]:
    def residuals(values: dict[str, float]) -> np.ndarray:
        predicted = predict_run(run, intra=intra, inter=replace(base, **values), rows=rows)
        return log_residual(predicted, run.measured_s[rows])

    values, _, at_bound = fit_bounded(params=SCALE_OUT_PARAMS, residuals=residuals)
    return values, at_bound


def fit_scale_out(*, run: NcclTestsRun, intra: LinkConstants,
                  base: LinkConstants | None = None, leave_out: bool = True) -> FitResult:
    """Scale-out constants of ``run.gpu`` fitted on every size of ``run`` (``intra``: its
    fitted scale-up constants; ``base``: the scale-out constants not fitted here)."""
    base = base or LinkConstants()
    every = np.arange(run.size_bytes.size)
    values, at_bound = _fit(run, intra=intra, base=base, rows=every)
    predicted = predict_run(run, intra=intra, inter=replace(base, **values))
    result = FitResult(values=values, at_bound=at_bound,
                       rms_log_residual=rms_log_residual([predicted], [run.measured_s]),
                       in_sample={"all_reduce": ErrorStats.of(predicted, run.measured_s)},
                       fitted_on=[run.source], n_points=int(run.size_bytes.size),
                       notes=[f"scale-out bandwidth {run.network_bytes_per_s / 1e9:g} GB/s per "
                              f"GPU: {run.network_source}"])
    if leave_out:
        held = np.empty_like(run.measured_s)
        for half in (every % 2 == 0, every % 2 == 1):
            fold, _ = _fit(run, intra=intra, base=base, rows=every[~half])
            held[half] = predict_run(run, intra=intra, inter=replace(base, **fold),
                                     rows=every[half])
        result.leave_out = {"all_reduce": ErrorStats.of(held, run.measured_s)}
    return result

