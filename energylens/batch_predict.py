"""Predict many deployments at once: one table row per configuration, NumPy over rows.

Rows are grouped by the GPU and every Deployment field but the array columns (parallel
degrees, dtypes, fusions, runtime and release, routing, scheduler limits, speculation, and
whether communication holds SMs); each group is priced in one pass of the same cost code
:func:`energylens.predict.predict` runs, with the batch, the replicas, the clock and the
overlap SMs as arrays over the group's rows. A row that
``predict`` would refuse (a bad deployment, an unknown GPU) comes back infeasible with the
refusal's first line as its reason and NaN metrics.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from energylens.calibration.file import resolve_calibration
from energylens.cost.constants import Calibration
from energylens.cost.moe import Routing
from energylens.cost.roofline import ClockState, dynamic_scale_at
from energylens.deployment import Deployment, check_deployment, sharded_model
from energylens.errors import EnergyLensError
from energylens.hardware import GPU, load_gpu
from energylens.model.config import ModelConfig
from energylens.model.zoo import get_model
from energylens.workloads import Workload, get_kind
from energylens.workloads.result import COLUMNS

__all__ = ["DEPLOYMENT_COLUMNS", "RESULT_COLUMNS", "predict_many"]

#: Table columns read besides ``gpu`` and ``batch`` (missing ones take Deployment's defaults).
DEPLOYMENT_COLUMNS = tuple(f.name for f in fields(Deployment))
#: Columns of the result, in order.
RESULT_COLUMNS = COLUMNS
#: Columns that vary inside a group (arrays); every other one is part of the group key.
_ARRAY_COLUMNS = ("batch", "num_gpus", "dp", "overlap_sms", "freq_mhz")
_KEY_COLUMNS = ("gpu", *(name for name in DEPLOYMENT_COLUMNS if name not in _ARRAY_COLUMNS))
#: Key columns of whole numbers (a table's integer column may come back as floats).
_INT_COLUMNS = ("tp", "pp", "ep", "attention_dp", "moe_tp", "max_num_seqs",
                "prefill_chunk_tokens", "speculative_tokens")


def predict_many(*, model: str | ModelConfig, workload: Workload, table: pd.DataFrame,
                 calibration: Calibration | str | Path | None = None) -> pd.DataFrame:
    """Predict every row of ``table`` (columns ``gpu``, ``batch`` and any
    :class:`~energylens.deployment.Deployment` field; ``workload`` fixes the rest).

    Returns a frame with ``table``'s index and :data:`RESULT_COLUMNS`, equal to
    :func:`energylens.predict.predict` row by row (to float rounding).

    Raises:
        EnergyLensError: an unknown model or calibration file, or a table without ``gpu``.
    """
    from energylens.predict import calibration_for_gpu, place, step_context

    model_cfg = get_model(model) if isinstance(model, str) else model
    cal = resolve_calibration(calibration)
    if "gpu" not in table.columns:
        raise EnergyLensError("predict_many: the table needs a 'gpu' column")
    rows = len(table)
    columns, keys = _normalised(table=table, workload=workload)
    out: dict[str, Any] = {name: np.full(rows, np.nan) for name in COLUMNS}
    out["feasible"] = np.zeros(rows, dtype=bool)
    out["infeasible_reason"] = np.full(rows, None, dtype=object)
    kind = get_kind(workload.kind)
    columnar = getattr(kind, "columns", None)
    for index in _groups([codes for codes, _ in keys.values()]):
        values = {c: uniques[codes[index[0]]] for c, (codes, uniques) in keys.items()}
        sub = {c: columns[c][index] for c in _ARRAY_COLUMNS}
        try:
            gpu = load_gpu(str(values["gpu"]))
            base = _deployment(values, overlap_sms=0, freq_mhz=None, num_gpus=None, dp=None)
            group_cal = calibration_for_gpu(cal, gpu)
            group_model = sharded_model(deployment=base, model=model_cfg)
        except EnergyLensError as exc:
            out["infeasible_reason"][index] = _reason(exc)
            continue
        valid = _valid_rows(values=values, sub=sub, model=group_model, gpu=gpu, workload=workload,
                            out=out, index=index)
        if columnar is None:
            _row_by_row(out=out, index=index[valid], values=values, sub=sub, valid=valid,
                        model=group_model, workload=workload, calibration=cal)
            continue
        for overlap in (False, True):  # overlapping collectives change which kernels share SMs
            part = valid & ((sub["overlap_sms"] > 0) == overlap)
            if not part.any():
                continue
            rows_sub = {c: v[part] for c, v in sub.items()}
            ctx = step_context(model=group_model, gpu=gpu, calibration=group_cal,
                               deployment=replace(base, overlap_sms=int(overlap)))
            ratio = np.where(np.isnan(rows_sub["freq_mhz"]), 1.0,
                             rows_sub["freq_mhz"] / gpu.boost_clock_mhz)
            ctx = replace(ctx, overlap_sms=rows_sub["overlap_sms"], clock=ClockState(
                ratio=cast(float, ratio),
                dynamic_scale=cast(float, dynamic_scale_at(ratio=ratio, gpu=gpu,
                                                           constants=ctx.constants))))
            replicas = _replicas(base=base, num_gpus=rows_sub["num_gpus"], dp=rows_sub["dp"])
            try:  # a refusal found while pricing (a routing histogram of the wrong size)
                placement, memory = place(ctx=ctx, model=group_model, kind=kind,
                                          workload=workload, batch=rows_sub["batch"],
                                          replicas=replicas,
                                          gpus=base.gpus_per_replica * replicas,
                                          max_num_seqs=base.max_num_seqs,
                                          prefill_chunk_tokens=base.prefill_chunk_tokens)
                result = columnar(placement=placement, workload=workload, memory=memory,
                                  batch=rows_sub["batch"])
            except EnergyLensError as exc:
                out["infeasible_reason"][index[part]] = _reason(exc)
                continue
            _scatter(out=out, index=index[part], result=result)
    # object dtype, so that a configuration that runs has None (not NaN) as its reason
    return pd.DataFrame({name: pd.Series(out[name], index=table.index,
                                         dtype=object if name == "infeasible_reason" else None)
                         for name in COLUMNS}, index=table.index)


def _normalised(*, table: pd.DataFrame, workload: Workload) -> tuple[
        dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The array columns as float arrays (the default where the table has no column or a
    cell is None or NaN: "not given"), and each key column as (codes, values)."""
    defaults = Deployment()
    rows = len(table)
    keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in _KEY_COLUMNS:
        default = None if name == "gpu" else getattr(defaults, name)
        if name not in table.columns:
            constant = np.empty(1, dtype=object)
            constant[0] = default
            keys[name] = (np.zeros(rows, dtype=np.int64), constant)
            continue
        codes, uniques = pd.factorize(table[name], use_na_sentinel=False)
        values = np.empty(len(uniques), dtype=object)
        values[:] = [str(v) if name == "gpu" else _key_value(name, v, default) for v in uniques]
        keys[name] = (np.asarray(codes, dtype=np.int64), values)
    columns: dict[str, np.ndarray] = {}
    numeric = {"batch": workload.batch, "num_gpus": np.nan, "dp": np.nan,
               "overlap_sms": defaults.overlap_sms, "freq_mhz": np.nan}
    for name, default in numeric.items():
        if name in table.columns:
            values = pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float, copy=True)
            values[np.isnan(values)] = default
        else:
            values = np.full(rows, default, dtype=float)
        columns[name] = values
    return columns, keys


def _key_value(name: str, value: Any, default: Any) -> Hashable:
    """One group-key cell: None for a missing optional value, frozensets for fusions."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None if default is None else default
    if name == "fusion":
        names = value.split(",") if isinstance(value, str) else list(cast(Iterable[str], value))
        return frozenset(n.strip() for n in names if n.strip() and n.strip() != "none")
    if name in _INT_COLUMNS:
        return int(value)
    if name == "draft_acceptance":
        return float(value)
    if name == "routing" and not isinstance(value, Routing):
        raise EnergyLensError(f"predict_many: routing must hold Routing objects, got {value!r}")
    return cast(Hashable, value)


#: Largest mixed-radix group key before the combinations are renumbered (int64 headroom).
_MAX_SPAN = 2**62


def _groups(codes: list[np.ndarray]) -> Iterable[np.ndarray]:
    """Row indices of each distinct combination of the key columns' codes."""
    combined = np.zeros(len(codes[0]), dtype=np.int64)
    span = 1  # combined < span: the codes so far, in mixed radix (lexicographic order)
    for column in codes:
        radix = int(column.max(initial=0)) + 1
        if span * radix >= _MAX_SPAN:  # renumber the combinations seen before it overflows
            combined = np.unique(combined, return_inverse=True)[1].ravel()
            span = int(combined.max(initial=0)) + 1
        combined = combined * radix + column
        span *= radix
    order = np.argsort(combined, kind="stable")
    bounds = np.flatnonzero(np.diff(combined[order])) + 1
    yield from (rows for rows in np.split(order, bounds) if len(rows))


def _deployment(values: dict[str, Any], *, overlap_sms: int, freq_mhz: float | None,
                num_gpus: int | None, dp: int | None) -> Deployment:
    """The deployment of a group's key ``values`` with one row's array columns."""
    keyed = {name: values[name] for name in _KEY_COLUMNS if name != "gpu"}
    return Deployment(num_gpus=num_gpus, dp=dp, overlap_sms=overlap_sms, freq_mhz=freq_mhz,
                      **keyed)


def _optional_int(value: float) -> int | None:
    return None if np.isnan(value) else int(value)


def _optional_float(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _valid_rows(*, values: dict[str, Any], sub: dict[str, np.ndarray], model: ModelConfig,
                gpu: GPU, workload: Workload, out: dict[str, Any],
                index: np.ndarray) -> np.ndarray:
    """Which rows of a group ``predict`` accepts; the others get its refusal as their reason.

    Every check of a deployment reads the degrees with num_gpus/dp, or the overlap SMs, or
    the clock, never two of them, so each distinct value is checked once. A row refused by
    one check gets that check's message; a row refused by several is re-checked whole for
    the message ``predict`` gives first."""
    def refusal(**changes: Any) -> str | None:
        try:
            deployment = _deployment(values, **{"overlap_sms": 0, "freq_mhz": None,
                                                "num_gpus": None, "dp": None, **changes})
            check_deployment(deployment=deployment, model=model, gpu_name=gpu.name,
                             gpu_clock_range=(gpu.min_clock_mhz, gpu.boost_clock_mhz),
                             gpu_sm_count=gpu.sm_count)
        except EnergyLensError as exc:
            return _reason(exc)
        return None

    rows = len(index)
    failures = np.zeros(rows, dtype=int)
    reasons = np.full(rows, None, dtype=object)
    # NaN (not given) compares unequal to itself: distinct values over a stand-in, -1
    num_gpus, dp = (np.nan_to_num(sub[c], nan=-1.0) for c in ("num_gpus", "dp"))
    placements = num_gpus * (dp.max(initial=0.0) + 2.0) + dp  # one number per pair
    def cell(name: str, row: int) -> float:
        return float(sub[name][row])

    checks = [(placements, lambda row: refusal(num_gpus=_optional_int(cell("num_gpus", row)),
                                               dp=_optional_int(cell("dp", row)))),
              (sub["overlap_sms"], lambda row: refusal(overlap_sms=int(cell("overlap_sms", row)))),
              (np.nan_to_num(sub["freq_mhz"], nan=-1.0),
               lambda row: refusal(freq_mhz=_optional_float(cell("freq_mhz", row))))]
    for column, check in checks:
        _, first, inverse = np.unique(column, return_index=True, return_inverse=True)
        found = np.empty(len(first), dtype=object)
        found[:] = [check(row) for row in first]
        per_row = found[inverse]
        refused = per_row != None  # noqa: E711 - elementwise over objects
        failures += refused
        reasons = np.where(refused, per_row, reasons)
    for row in np.flatnonzero(failures > 1):
        reasons[row] = refusal(
            num_gpus=_optional_int(sub["num_gpus"][row]), dp=_optional_int(sub["dp"][row]),
            overlap_sms=int(sub["overlap_sms"][row]),
            freq_mhz=_optional_float(sub["freq_mhz"][row]))
    distinct_batches, inverse = np.unique(sub["batch"], return_inverse=True)
    batch_reasons = np.empty(len(distinct_batches), dtype=object)
    batch_reasons[:] = [_batch_refusal(workload, b) for b in distinct_batches]
    reasons = np.where(failures == 0, batch_reasons[inverse.ravel()], reasons)
    valid = reasons == None  # noqa: E711
    out["infeasible_reason"][index[~valid]] = reasons[~valid]
    return np.asarray(valid, dtype=bool)


def _batch_refusal(workload: Workload, batch: float) -> str | None:
    try:
        replace(workload, batch=float(batch))
    except EnergyLensError as exc:
        return _reason(exc)
    return None


def _replicas(*, base: Deployment, num_gpus: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """:attr:`Deployment.replicas` per row (dp if given, else num_gpus // GPUs per replica)."""
    inferred = np.where(np.isnan(num_gpus), 1.0,
                        np.maximum(1.0, np.floor(num_gpus / base.gpus_per_replica)))
    return np.where(np.isnan(dp), inferred, dp).astype(np.int64)


def _scatter(*, out: dict[str, Any], index: np.ndarray, result: dict[str, Any]) -> None:
    """A group's columns into the result rows ``index`` (a number fills every row)."""
    for name in COLUMNS:
        value = result[name]
        if name == "infeasible_reason":
            column = np.empty(len(index), dtype=object)
            column[:] = value
            out[name][index] = column
        else:
            out[name][index] = value


def _reason(exc: Exception) -> str:
    """The refusal's first line, as the command line prints it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _row_by_row(*, out: dict[str, Any], index: np.ndarray, values: dict[str, Any],
                sub: dict[str, np.ndarray], valid: np.ndarray, model: ModelConfig,
                workload: Workload, calibration: Calibration) -> None:
    """A kind without columns (one that simulates requests): ``predict`` per row."""
    from energylens.predict import predict

    positions = np.flatnonzero(valid)
    for row, position in zip(index, positions, strict=True):
        deployment = _deployment(values, overlap_sms=int(sub["overlap_sms"][position]),
                                 freq_mhz=_optional_float(sub["freq_mhz"][position]),
                                 num_gpus=_optional_int(sub["num_gpus"][position]),
                                 dp=_optional_int(sub["dp"][position]))
        result = predict(model=model, gpu=str(values["gpu"]), deployment=deployment,
                         workload=replace(workload, batch=float(sub["batch"][position])),
                         calibration=calibration)
        record = {**{k: getattr(result, k) for k in COLUMNS if hasattr(result, k)},
                  **{f"{phase}_{f}": getattr(getattr(result, phase), f)
                     for phase in ("prefill", "decode")
                     for f in ("latency_s", "energy_j", "compute_j", "memory_j",
                               "communication_j", "static_j")}}
        for name in COLUMNS:
            value = record.get(name)
            out[name][row] = value if name == "infeasible_reason" else (
                np.nan if value is None else value)
