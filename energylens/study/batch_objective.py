"""A deployment study's objective over many configurations at once (``predict_many``).

:func:`evaluate_table` is the columnar hook of :mod:`search.problem` (one row per
configuration, one column per knob), :func:`evaluate_many` the list hook; both give what
:meth:`DeploymentProblem.evaluate` gives row by row. Configurations the columnar path does
not cover (load workloads, per-phase clocks, disaggregated pools) are evaluated one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from energylens.deployment import FUSIONS
from energylens.errors import ConfigError, EnergyLensError
from energylens.hardware import load_gpu
from energylens.predict import predict_many
from energylens.runtime import DEFAULT_RUNTIME
from energylens.workloads import get_kind
from search.problem import REASON_COLUMN, Evaluation

if TYPE_CHECKING:
    from energylens.study.objective import DeploymentProblem

#: Knobs the columnar path reads; a table with any other knob is evaluated row by row.
COLUMNAR_KNOBS = frozenset({"gpu", "num_gpus", "tp", "pp", "ep", "dp", "batch", "input_tokens",
                            "output_tokens", "fusion", "overlap_sms", "runtime", "freq_mhz",
                            "clock_fraction", "dtype", "kv_dtype", *(f"fuse_{name}" for name in FUSIONS)})
#: Tables shorter than this are priced row by row: a generation of a sampler (tens of varied
#: configurations, few sharing a kernel list) costs 1.7 ms per row through ``predict_many``
#: against 0.7 ms one by one (50-row batches of the quickstart study, CPU time), while grid
#: blocks of thousands of rows gain 100x.
MIN_COLUMNAR_ROWS = 512
#: Knobs that shape the fusion set (with the runtime, whose defaults they start from).
_FUSION_KNOBS = ("fusion", "runtime", *(f"fuse_{name}" for name in FUSIONS))


def evaluate_many(problem: DeploymentProblem,
                  batch: Sequence[Mapping[str, Any]]) -> list[Evaluation]:
    """:meth:`DeploymentProblem.evaluate` of each configuration, priced together."""
    if not batch:
        return []
    frame = evaluate_table(problem, pd.DataFrame([dict(params) for params in batch]))
    metrics = frame.drop(columns=[REASON_COLUMN])
    names = [str(c) for c in metrics.columns]
    out = []
    for values, reason in zip(metrics.to_numpy(dtype=float), frame[REASON_COLUMN], strict=True):
        refused = bool(np.isnan(values).all())
        out.append(Evaluation(metrics={} if refused else dict(zip(names, map(float, values),
                                                                  strict=True)),
                              infeasible_reason=reason))
    return out


def evaluate_table(problem: DeploymentProblem, table: pd.DataFrame) -> pd.DataFrame:
    """Metrics of every row of ``table`` (knob and fixed values): ``table``'s index, one
    float column per metric (NaN where a configuration cannot run) and the reason column."""
    from energylens.study.objective import METRICS

    out = pd.DataFrame(np.nan, index=table.index, columns=list(METRICS))
    reasons = pd.Series(None, index=table.index, dtype=object)
    columnar = getattr(get_kind(problem.workload.kind), "columns", None) is not None
    if (not columnar or not set(table.columns) <= COLUMNAR_KNOBS
            or len(table) < MIN_COLUMNAR_ROWS):
        return _one_by_one(problem, table, out, reasons)
    knobs = table.reset_index(drop=True)
    gpus = _canonical_gpus(knobs)
    known = gpus.notna().to_numpy()
    lengths = [c for c in ("input_tokens", "output_tokens") if c in knobs.columns]
    scalar_rows: list[int] = list(np.flatnonzero(~known))
    for _, rows in (knobs[known].groupby(lengths, sort=False) if lengths
                    else [(None, knobs[known])]):
        workload = problem.workload
        first = rows.iloc[0]
        try:
            lengths_of: dict[str, Any] = {c: float(first[c]) for c in lengths}
            workload = replace(workload, **lengths_of)
        except ConfigError:
            scalar_rows.extend(rows.index)
            continue
        deployments, unfused = _deployment_table(problem, rows, gpus[rows.index])
        scalar_rows.extend(unfused)
        deployments = deployments.drop(index=unfused)
        if deployments.empty:
            continue
        result = predict_many(model=problem.model, workload=workload, table=deployments,
                              calibration=problem.calibration)
        refused = result["ttft_s"].isna()
        sm_count = deployments["gpu"].map(_per_gpu(deployments["gpu"], "sm_count"))
        # the objective refuses too many overlap SMs in its own words, before predicting
        own_words = refused & (deployments["overlap_sms"] >= sm_count)
        scalar_rows.extend(deployments.index[own_words])
        done = ~own_words
        metrics = _metric_columns(problem, result[done], deployments[done])
        out.loc[table.index[metrics.index], list(metrics.columns)] = metrics.to_numpy()
        reasons[table.index[metrics.index]] = result.loc[done, "infeasible_reason"].to_numpy()
    if scalar_rows:
        picked = table.iloc[sorted(scalar_rows)]
        _one_by_one(problem, picked, out, reasons)
    return out.assign(**{REASON_COLUMN: reasons})


def _one_by_one(problem: DeploymentProblem, table: pd.DataFrame, out: pd.DataFrame,
                reasons: pd.Series) -> pd.DataFrame:
    metrics: list[dict[str, float]] = []
    found: list[str | None] = []
    for params in table.to_dict("records"):
        evaluation = problem.evaluate({str(k): v for k, v in params.items() if not _missing(v)})
        metrics.append(evaluation.metrics)
        found.append(evaluation.infeasible_reason)
    # written once: a pandas cell assignment per metric and row cost more than the model
    values = pd.DataFrame(metrics, index=table.index, dtype=float)
    for name in values.columns:
        if name not in out.columns:
            out[name] = np.nan
    if len(values.columns):
        out.loc[table.index, list(values.columns)] = values.to_numpy()
    reasons[table.index] = found
    return out.assign(**{REASON_COLUMN: reasons})


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _canonical_gpus(knobs: pd.DataFrame) -> pd.Series:
    """Each row's GPU by its canonical name (None where the database has no such GPU)."""
    names = knobs["gpu"].astype(str) if "gpu" in knobs.columns else pd.Series(
        "H100", index=knobs.index)
    canonical: dict[str, str | None] = {}
    for name in names.unique():
        try:
            canonical[name] = load_gpu(name).name
        except EnergyLensError:
            canonical[name] = None
    return names.map(canonical).astype(object)


def _per_gpu(names: pd.Series, attribute: str) -> dict[str, Any]:
    """A GPU attribute by name, looked up once per distinct GPU."""
    return {name: getattr(load_gpu(name), attribute) for name in names.unique()}


def _deployment_table(problem: DeploymentProblem, rows: pd.DataFrame,
                      gpus: pd.Series) -> tuple[pd.DataFrame, list[int]]:
    """predict_many's table for knob rows (as ``deployment_from_params`` reads them), and
    the rows whose fusion knobs are refused (evaluated one by one for the message)."""
    from energylens.study.objective import deployment_from_params, kv_dtype_param

    def column(name: str, default: Any) -> pd.Series:
        return rows[name] if name in rows.columns else pd.Series(default, index=rows.index)

    table = pd.DataFrame({"gpu": gpus.to_numpy()}, index=rows.index)
    for name in ("tp", "pp", "ep"):
        table[name] = column(name, 1).astype(int)
    for name in ("num_gpus", "dp"):
        table[name] = column(name, np.nan).astype(float)
    table["overlap_sms"] = column("overlap_sms", 0).astype(int)
    table["weight_dtype"] = column("dtype", None).astype(object)
    table["kv_dtype"] = column("kv_dtype", None).map(kv_dtype_param).astype(object)
    table["runtime"] = column("runtime", DEFAULT_RUNTIME).astype(str)
    table["batch"] = column("batch", problem.workload.batch).astype(float)
    boost = gpus.map(_per_gpu(gpus, "boost_clock_mhz")).astype(float)
    freq = column("freq_mhz", np.nan).astype(float)
    if "clock_fraction" in rows.columns:
        freq = freq.where(freq.notna(), rows["clock_fraction"].astype(float) * boost)
    table["freq_mhz"] = freq
    table["routing"] = pd.Series([problem.routing] * len(rows), index=rows.index, dtype=object)
    present = [k for k in _FUSION_KNOBS if k in rows.columns]
    fusion = pd.Series(None, index=rows.index, dtype=object)
    refused: list[int] = []
    if present:
        for values, group in rows.groupby(present, sort=False, dropna=False):
            params = {k: v for k, v in zip(present, values if isinstance(values, tuple)
                                           else (values,), strict=True) if not _missing(v)}
            try:
                chosen = deployment_from_params(params=params, boost_mhz=1.0).fusion
            except ConfigError:
                refused.extend(group.index)
                continue
            fusion[group.index] = [chosen] * len(group)
    table["fusion"] = fusion
    return table, refused


def _metric_columns(problem: DeploymentProblem, result: pd.DataFrame,
                    deployments: pd.DataFrame) -> pd.DataFrame:
    """``DeploymentProblem._metrics`` over columns."""
    prices = {name: problem.price_per_hour(name) for name in deployments["gpu"].unique()}
    num_gpus = result["num_gpus"]
    throughput = result["output_tokens_per_s"]
    dollars_per_s = deployments["gpu"].map(prices).astype(float) * num_gpus / 3600.0
    return pd.DataFrame({
        "energy_per_output_token_j": result["energy_per_output_token_j"],
        "energy_per_request_j": result["energy_per_request_j"],
        "tpot_s": result["tpot_s"],
        "ttft_s": result["ttft_s"],
        "output_tokens_per_s": throughput,
        "output_tokens_per_s_per_gpu": throughput / num_gpus,
        "num_gpus": num_gpus,
        "cost_per_million_tokens": dollars_per_s / throughput * 1e6,
        "avg_power_w": result["avg_power_w"],
        "memory_per_gpu_gb": result["memory_per_gpu_gb"],
        "batch_per_replica": result["running_batch"],
        "prefill_energy_j": result["prefill_energy_j"],
        "decode_energy_j": result["decode_energy_j"],
    }, index=result.index)
