"""Fit collective latency/bandwidth constants per ``<GPU>:<link kind>`` to measured NCCL times.

Two sources: Vidur's ``all_reduce.csv`` / ``send_recv.csv`` (NCCL kernel time of one
collective by message size and worker layout; a group spans nodes when
``num_workers > devices_per_node``, then the scale-out link, e.g. InfiniBand, carries it),
and AIConfigurator's NCCL tables (``kernels/<gpu>/comm/nccl/<version>/nccl_perf.parquet``:
``op_name``, ``nccl_dtype``, ``num_gpus``, ``message_size`` in elements, ``latency`` in ms;
one host, every group inside it). The form is :func:`energylens.cost.comm.collective_cost`;
its latency, per-hop latency, achieved bus-bandwidth fraction and half-bandwidth size are
fitted by least squares on log time, on the all-reduce rows (send/recv, and a table's
all-to-all fixed time, on their own rows after): a table, or a Vidur layout with one group
size, in a two-protocol form (two alpha-beta lines, the faster taken); Vidur's DGX rows,
at three group sizes, in a soft join of latency and wire time with a ramp to full
bandwidth. Honesty: each worker count is held out in turn (fit on the others, predict it);
a table's all-gather and reduce-scatter rows are priced with the all-reduce's constants and
never fitted.
"""

from __future__ import annotations

from collections import defaultdict
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
from energylens.cost.comm import collective_cost
from energylens.cost.constants import LinkConstants
from energylens.hardware import UnknownGPUError, load_gpu
from energylens.measurements.formats import MeasurementSet, load_measurements
from energylens.measurements.topology import PAIRWISE_KIND, link_of

ALL_REDUCE_PARAMS = (
    Param("latency_s", 20.0e-6, 1.0e-6, 200.0e-6, log=True),
    Param("latency_per_hop_s", 2.0e-6, 0.0, 30.0e-6),
    Param("bus_bandwidth_fraction", 0.6, 0.02, 1.0),
    Param("bandwidth_group_exponent", 0.1, -0.5, 1.0),
    Param("half_bandwidth_bytes", 1.0e5, 1.0e3, 1.0e8, log=True),
    Param("latency_sharpness", 2.0, 1.0, 8.0, log=True),
    Param("bulk_latency_s", 150.0e-6, 5.0e-6, 5.0e-3, log=True),
    Param("bulk_bandwidth_fraction", 0.8, 0.02, 1.0),  # start active at large sizes
)
#: AIConfigurator's NCCL tables (NCCL 2.27-2.29, NVSwitch): two alpha-beta lines, the faster
#: one taken, as NCCL's tuner picks its low-latency protocol for small messages and its
#: bandwidth protocol (ring/NVLS, Simple) for large ones; no ramp, no soft join (the Vidur
#: form's ramp and sharpness ended at their bounds on these tables).
TABLE_PARAMS = (
    Param("latency_s", 5.0e-6, 1.0e-6, 200.0e-6, log=True),
    Param("latency_per_hop_s", 2.0e-6, 0.0, 30.0e-6),
    Param("bus_bandwidth_fraction", 0.3, 0.02, 1.0),
    Param("bandwidth_group_exponent", 0.1, -0.5, 1.0),
    Param("bulk_latency_s", 30.0e-6, 5.0e-6, 5.0e-3, log=True),
    Param("bulk_bandwidth_fraction", 0.7, 0.02, 1.0),
)
#: A PCIe host: a larger group crosses slower hops (a PCIe switch, the root complex, the
#: link between sockets), so the bus bandwidth may fall steeply with the group (L40S's
#: host: 17, 5 and 1.4 GB/s at 2, 4 and 8 GPUs); one protocol, latency and wire time add
#: (a sharper join, fitted, ended at its bound, and a second protocol raised the held-out
#: error from 13 to 15 %, docs/gpus.md).
PCIE_PARAMS = (
    Param("latency_s", 10.0e-6, 1.0e-6, 200.0e-6, log=True),
    Param("latency_per_hop_s", 2.0e-6, 0.0, 30.0e-6),
    Param("bus_bandwidth_fraction", 0.6, 0.02, 1.0),
    Param("bandwidth_group_exponent", -1.0, -3.0, 1.0),
    Param("half_bandwidth_bytes", 1.0e5, 1.0e3, 1.0e8, log=True),
)
#: What each table form fixes rather than fits (written with the fitted constants).
TABLE_FIXED = {"latency_sharpness": 1.0, "half_bandwidth_bytes": 0.0}
PCIE_FIXED = {"latency_sharpness": 1.0, "bulk_bandwidth_fraction": 0.0}
#: An all-to-all's fixed time (one round of exchanges), where a table measures all-to-alls.
ALL_TO_ALL_LATENCY = Param("all_to_all_latency_s", 10.0e-6, 1.0e-6, 200.0e-6, log=True)
#: Only identifiable with several group sizes.
GROUP_PARAMS = ("latency_per_hop_s", "bandwidth_group_exponent")
#: A second start for the two-protocol form (:data:`TABLE_PARAMS`): the low-latency line
#: quick to start and slow to move data, the bulk line the reverse, as NCCL's LL and Simple
#: protocols are. From the form's own initial values both lines can settle on one (H100's
#: bridged pair read against 300 GB/s: rms log 0.167, where this start finds 0.160). Not
#: given to the soft-join form, whose leave-one-group-out refits of A100's NVSwitch it moved
#: from 11.6 to 20.7 % held out (two group sizes left for eight constants) at the same fit.
SEPARATED_PROTOCOLS = {"latency_s": 2.0e-6, "bus_bandwidth_fraction": 0.05,
                       "bulk_latency_s": 100.0e-6, "bulk_bandwidth_fraction": 0.9}
P2P_PARAMS = (
    Param("p2p_latency_s", 8.0e-6, 1.0e-6, 100.0e-6, log=True),
    Param("p2p_bandwidth_fraction", 0.7, 0.02, 1.0),
)
@dataclass(frozen=True)
class CollectiveCase:
    """Rows of one file with the same collective and worker layout."""

    source: str
    collective: str
    num_workers: int
    devices_per_node: int
    size_bytes: np.ndarray
    measured_s: np.ndarray


def collective_cases(sets: list[MeasurementSet]) -> dict[str, list[CollectiveCase]]:
    """Cases grouped by link key ``<GPU>:<kind>`` (duplicated upstream files skipped)."""
    out: dict[str, list[CollectiveCase]] = defaultdict(list)
    for mset in sets:
        grouped: dict[tuple, list] = defaultdict(list)
        for row in mset.rows:
            if row.context.get("duplicate_of"):
                continue
            grouped[(row.input["collective"], row.input["num_workers"],
                     row.input["devices_per_node"])].append(row)
        for (collective, workers, per_node), rows in grouped.items():
            try:
                gpu = load_gpu(rows[0].context["gpu"])
            except UnknownGPUError:  # e.g. Vidur's A40 SKU: not in the hardware database
                continue
            kind, _ = link_of(gpu=gpu, num_workers=workers, devices_per_node=per_node,
                              topology=rows[0].context.get("link"), collective=collective)
            out[f"{gpu.name}:{kind}"].append(CollectiveCase(
                source=mset.file, collective=collective, num_workers=workers,
                devices_per_node=per_node,
                size_bytes=np.array([r.input["size"] for r in rows], dtype=float),
                measured_s=np.array([r.measured[collective] for r in rows]) * 1e-3))
    return out


def nccl_table_cases(path: Path) -> dict[str, list[CollectiveCase]]:
    """Cases of one AIConfigurator NCCL table (every op, half and int8 rows together, in
    bytes), by link key."""
    return collective_cases([load_measurements(format="aiconfigurator-nccl", path=path)])


def predict_case(case: CollectiveCase, *, bandwidth: float, constants: LinkConstants) -> np.ndarray:
    """Predicted NCCL time (s) of every row of ``case``."""
    group = 2 if case.collective == "send_recv" else case.num_workers
    return np.asarray(collective_cost(kind=case.collective, message_bytes=case.size_bytes,
                                      group_size=group, bandwidth=bandwidth,
                                      constants=constants).latency_s)


def _fit(cases: list[CollectiveCase], *, bandwidth: float, base: LinkConstants,
         params: tuple[Param, ...], starts: tuple[dict[str, float], ...] = ()) -> dict[str, float]:
    weights = [1.0 / np.sqrt(c.measured_s.size) for c in cases]

    def residuals(values: dict[str, float]) -> np.ndarray:
        constants = replace(base, **values)
        return np.concatenate([w * log_residual(predict_case(c, bandwidth=bandwidth,
                                                             constants=constants), c.measured_s)
                               for w, c in zip(weights, cases, strict=True)])

    values, _, _ = fit_bounded(params=params, residuals=residuals, starts=starts)
    return values


def _bulk_used(cases: list[CollectiveCase], *, bandwidth: float, constants: LinkConstants) -> bool:
    without = replace(constants, bulk_bandwidth_fraction=0.0)
    return any(np.any(predict_case(c, bandwidth=bandwidth, constants=constants)
                      < predict_case(c, bandwidth=bandwidth, constants=without))
               for c in cases)


def _pinned_first_line(cases: list[CollectiveCase], *, bandwidth: float, base: LinkConstants,
                       values: dict[str, float]) -> dict[str, float]:
    """The low-latency line's constants where the bulk line is the faster on every row:
    any line above it fits alike (A100's 2-per-node InfiniBand moved 0.02 -> 0.15 -> 0.28
    in its bandwidth share between runs of the same data), so it is written as the bulk
    line's latency and share, where that changes no prediction on the data (else as
    fitted)."""
    fitted = replace(base, **values)
    pinned = replace(fitted, latency_s=fitted.bulk_latency_s,
                     bus_bandwidth_fraction=fitted.bulk_bandwidth_fraction)
    for case in cases:  # a row the low-latency line wins would change: then it is identified
        if not np.array_equal(predict_case(case, bandwidth=bandwidth, constants=pinned),
                              predict_case(case, bandwidth=bandwidth, constants=fitted)):
            return {}
    return {"latency_s": pinned.latency_s, "bus_bandwidth_fraction": pinned.bus_bandwidth_fraction}


def _errors(cases: list[CollectiveCase], predicted: list[np.ndarray]) -> dict[str, ErrorStats]:
    by: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for case, pred in zip(cases, predicted, strict=True):
        for metric in (case.collective, f"{case.collective}@{case.num_workers}"):
            by[metric][0].append(pred)
            by[metric][1].append(case.measured_s)
    return {m: ErrorStats.of(np.concatenate(p), np.concatenate(y)) for m, (p, y) in by.items()}


def _fit_all(cases: list[CollectiveCase], *, bandwidth: float, base: LinkConstants,
             form: tuple[Param, ...]) -> dict[str, float]:
    """All-reduce constants on the all-reduce cases, then send/recv ones on the rest."""
    values: dict[str, float] = {}
    reduce_cases = [c for c in cases if c.collective == "all_reduce"]
    p2p_cases = [c for c in cases if c.collective == "send_recv"]
    if reduce_cases:
        several = len({c.num_workers for c in reduce_cases}) > 1
        params = tuple(p for p in form if several or p.name not in GROUP_PARAMS)
        values.update(_fit(reduce_cases, bandwidth=bandwidth, base=base, params=params,
                           starts=(SEPARATED_PROTOCOLS,) if form is TABLE_PARAMS else ()))
        bulk = any(p.name == "bulk_bandwidth_fraction" for p in params)
        if bulk and not _bulk_used(reduce_cases, bandwidth=bandwidth,
                                   constants=replace(base, **values)):
            # Never the faster protocol on the data: unidentified, so not extrapolated either.
            values["bulk_bandwidth_fraction"] = 0.0
        elif bulk:
            values.update(_pinned_first_line(reduce_cases, bandwidth=bandwidth, base=base,
                                             values=values))
    if p2p_cases:
        values.update(_fit(p2p_cases, bandwidth=bandwidth, base=replace(base, **values),
                           params=P2P_PARAMS))
    exchange_cases = [c for c in cases if c.collective == "all_to_all"]
    if exchange_cases:  # its own fixed time, on the all-reduce's bandwidth constants
        values.update(_fit(exchange_cases, bandwidth=bandwidth, base=replace(base, **values),
                           params=(ALL_TO_ALL_LATENCY,)))
    return values


def fit_link(*, key: str, cases: list[CollectiveCase], base: LinkConstants | None = None,
             leave_out: bool = True, form: tuple[Param, ...] = ALL_REDUCE_PARAMS) -> FitResult:
    """Fit link ``key`` (``<GPU>:<kind>``) on its cases with the constants of ``form`` (the
    rest from ``base``; send/recv and all-to-all, where measured, their own after the
    all-reduce's); hold out each all-reduce group size."""
    gpu_name, kind = key.split(":", 1)
    gpu = load_gpu(gpu_name)
    base = base or LinkConstants()
    first = cases[0]
    bandwidth = link_of(gpu=gpu, num_workers=first.num_workers,
                        devices_per_node=first.devices_per_node,
                        topology=PAIRWISE_KIND if kind.startswith(PAIRWISE_KIND) else None,
                        collective=first.collective)[1]
    fitted_kinds = ("all_reduce", "send_recv", "all_to_all")
    values = _fit_all(cases, bandwidth=bandwidth, base=base, form=form)
    fitted = replace(base, **values)
    fitted_cases = [c for c in cases if c.collective in fitted_kinds]
    predicted = [predict_case(c, bandwidth=bandwidth, constants=fitted) for c in fitted_cases]
    rms = rms_log_residual(predicted, [c.measured_s for c in fitted_cases])
    ranges = {p.name: p for p in (*form, *P2P_PARAMS, ALL_TO_ALL_LATENCY)}
    result = FitResult(values=values, rms_log_residual=rms,
                       in_sample=_errors(fitted_cases, predicted),
                       fitted_on=sorted({c.source for c in fitted_cases}),
                       n_points=sum(c.measured_s.size for c in fitted_cases),
                       at_bound=sorted(name for name, value in values.items()
                                       if name in ranges and ranges[name].at_bound(value)))
    if values.get("bulk_bandwidth_fraction", 0.0) > 0.0 and all(
            values.get(a) == values.get(b) for a, b in (("latency_s", "bulk_latency_s"), (
                "bus_bandwidth_fraction", "bulk_bandwidth_fraction"))):
        result.notes.append("the low-latency line is never the faster on these rows: not "
                            "identified, written as the bulk line's latency and share")
    others = [c for c in cases if c.collective not in fitted_kinds]
    if others:  # never fitted: what the all-reduce constants say of the other collectives
        result.notes.append("collectives never fitted, priced with the all-reduce's "
                            "constants (MAPE): " + ", ".join(
            f"{metric} {stats.mape:.1%}" for metric, stats in sorted(_errors(
                others, [predict_case(c, bandwidth=bandwidth, constants=fitted)
                         for c in others]).items())))
    group_cases = [c for c in cases if c.collective in ("all_reduce", "all_to_all")]
    groups = sorted({c.num_workers for c in group_cases if c.collective == "all_reduce"})
    if leave_out and len(groups) > 2:
        held: list[CollectiveCase] = []
        held_pred: list[np.ndarray] = []
        for workers in groups:
            train = [c for c in group_cases if c.num_workers != workers]
            test = [c for c in group_cases if c.num_workers == workers]
            out = replace(base, **_fit_all(train, bandwidth=bandwidth, base=base, form=form))
            held += test
            held_pred += [predict_case(c, bandwidth=bandwidth, constants=out) for c in test]
        result.leave_out = _errors(held, held_pred)
    return result


def vidur_form(cases: list[CollectiveCase]) -> tuple[tuple[Param, ...], dict[str, float]]:
    """The constants a Vidur link fits, and those its form fixes: with all-reduces at
    several group sizes (a DGX's NVSwitch) the soft-join form; at one group size (the
    InfiniBand, pairwise NVLink and PCIe-between-pairs layouts) the two-protocol form of
    the NCCL tables, as the soft join's sharpness and ramp ended at their bounds there
    (not identified by one group's rows; docs/gpus.md)."""
    groups = {c.num_workers for c in cases if c.collective == "all_reduce"}
    if len(groups) == 1:
        return TABLE_PARAMS, TABLE_FIXED
    return ALL_REDUCE_PARAMS, {}


def vidur_link_cases(*, files: list[Path]) -> dict[str, list[CollectiveCase]]:
    """Cases of the Vidur network files, by link key."""
    return collective_cases([load_measurements(format="vidur-network", path=f) for f in files])


def fit_links(*, files: list[Path], leave_out: bool = True) -> dict[str, FitResult]:
    """Fit every link found in the Vidur network files (:func:`fit_vidur_links`)."""
    return fit_vidur_links(cases=vidur_link_cases(files=files), leave_out=leave_out)


def fit_vidur_links(*, cases: dict[str, list[CollectiveCase]],
                    leave_out: bool = True) -> dict[str, FitResult]:
    """Fit every link of ``cases`` (Vidur's, by link key), each in :func:`vidur_form`; the
    values include what the form fixes."""
    out: dict[str, FitResult] = {}
    for key, link_cases in sorted(cases.items()):
        form, fixed = vidur_form(link_cases)
        result = fit_link(key=key, cases=link_cases, leave_out=leave_out, form=form,
                          base=replace(LinkConstants(), **fixed))
        result.values = {**fixed, **result.values}
        out[key] = result
    return out


def table_form(kind: str) -> tuple[tuple[Param, ...], dict[str, float]]:
    """The constants an NCCL table fits on a link of ``kind``, and those its form fixes."""
    return (PCIE_PARAMS, PCIE_FIXED) if kind == "pcie" else (TABLE_PARAMS, TABLE_FIXED)


def fit_nccl_table(*, path: Path, leave_out: bool = True) -> dict[str, FitResult]:
    """Fit every link an AIConfigurator NCCL table measures at three group sizes or more
    (so that each can be held out); the values include what the form fixes."""
    out: dict[str, FitResult] = {}
    for key, cases in sorted(nccl_table_cases(path).items()):
        if len({c.num_workers for c in cases if c.collective == "all_reduce"}) < 3:
            continue
        form, fixed = table_form(key.split(":", 1)[1])
        result = fit_link(key=key, cases=cases, leave_out=leave_out, form=form,
                          base=replace(LinkConstants(), **fixed))
        result.values = {**fixed, **result.values}
        out[key] = result
    return out
