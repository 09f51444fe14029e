"""Fit serving-engine overheads and power constants to ML.ENERGY steady-state rows.

The latency constants of the GPU's kernels come from the Vidur fit and stay fixed here.
What the ML.ENERGY rows add: the engine's time per step and per running sequence
(scheduling, sampling, input preparation: CPU work the GPU waits for), and the power
constants (busy power while kernels run, energy per tensor FLOP and per HBM byte, and the
extra power of a GPU while its communication kernels run). Static power, paid by every GPU
for the whole wall time, is not fitted: steady-state rows leave GPUs idle for a few percent
of a step, so they cannot tell it from the busy power (fitted, it ended at a bound of its
range on B200, and on H100 in one regime fold). It is the GPU's measured idle power with a
CUDA context (``fit_power``), or its relative's (``transfer``). Residuals are log errors of
energy per output token and of the median inter-token latency. Each model is held out in
turn (leave-one-model-out).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.fitting import (
    ErrorStats,
    FitResult,
    Param,
    fit_bounded,
    log_residual,
    map_forked,
)
from energylens.cost.constants import Calibration
from energylens.hardware import load_gpu
from energylens.measurements.formats import load_measurements
from energylens.measurements.mlenergy import (
    RUNTIME,
    ServingCase,
    UnsupportedRow,
    predicted_metrics,
    serving_case,
)
from energylens.measurements.mlenergy_screen import host_bound_rows, row_key
from energylens.predict import predict

#: Metrics the fit minimises (log error), with their weights.
FIT_METRICS = {"energy_per_token_joules": 1.0, "median_itl_ms": 1.0}
REPORT_METRICS = ("energy_per_token_joules", "median_itl_ms", "avg_power_watts",
                  "output_throughput_tokens_per_sec")
LINK_PREFIX = "link."
#: Fit variables of the runtime's (runtime, GPU) section: ``runtime.<constant>``.
RUNTIME_PREFIX = "runtime."
FLOP_SHARE = "tensor_power_share"


def serving_params(gpu_name: str) -> tuple[Param, ...]:
    """Fitted constants and their physical ranges for ``gpu_name``."""
    gpu = load_gpu(gpu_name)
    return (
        Param(f"{RUNTIME_PREFIX}step_overhead_s", 1.0e-3, 1.0e-5, 20.0e-3, log=True),
        Param(f"{RUNTIME_PREFIX}per_sequence_overhead_s", 10.0e-6, 1.0e-7, 200.0e-6, log=True),
        Param(f"{RUNTIME_PREFIX}ep_moe_layer_overhead_s", 20.0e-6, 1.0e-7, 500.0e-6, log=True),
        Param("busy_power_w", 150.0, 0.0, 0.6 * gpu.tdp_w),
        # Fitted as the share of the power headroom (TDP - static - busy) that a GEMM at
        # the Vidur-measured rate (peak x gemm_efficiency_max) draws for its FLOPs; < 1 so
        # the power cap never slows the GEMMs the latency fit already timed.
        Param(FLOP_SHARE, 0.5, 0.02, 0.95),
        Param("energy_per_hbm_byte_j", 30.0e-12, 5.0e-12, 150.0e-12, log=True),
        Param(f"{LINK_PREFIX}{gpu.intra_node.kind}.power_w", 40.0, 0.0, 300.0),
    )


@dataclass(frozen=True)
class ServingRow:
    """One supported row: model group, prediction inputs, measured metrics."""

    model: str
    values: dict[str, Any]
    case: ServingCase
    measured: dict[str, float]
    #: a run the host paced (``energylens.measurements.mlenergy_screen``): predicted, never fitted
    host_bound: bool = False


def fitted_rows(rows: list[ServingRow]) -> list[ServingRow]:
    """The rows a fit may use: transformer rows of GPU-paced runs in tensor-parallel
    attention layouts. Only predicted: hybrid Mamba-2 rows (kept out so that the family fold
    predicts a family no fit has seen), host-bound runs, and data-parallel attention rows
    (vLLM 0.11's DP + EP runs far below what its kernels allow: throughput flat in the
    batch, ITL not monotonic)."""
    return [r for r in rows if model_kind(r) != "hybrid" and not r.host_bound
            and r.case.deployment.attention_dp == 1]


def serving_rows(*, files: list[Path], gpu_name: str,
                 input_tokens: dict[str, float] | None = None) -> tuple[list[ServingRow], int]:
    """Supported rows of ``gpu_name`` (deduplicated across files) and how many were skipped."""
    gpu = load_gpu(gpu_name).name
    rows: list[ServingRow] = []
    seen: set[tuple] = set()
    skipped = 0
    loaded = [row for path in files for row in load_measurements(format="mlenergy", path=path).rows]
    host_bound = host_bound_rows((row.input, row.measured) for row in loaded)
    for row in loaded:
        try:
            if load_gpu(str(row.input["gpu_model"])).name != gpu:
                continue
        except ValueError:
            continue
        key = tuple(sorted((k, str(v)) for k, v in row.input.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            case = serving_case(row.input, input_tokens=input_tokens)
        except UnsupportedRow:
            skipped += 1
            continue
        rows.append(ServingRow(model=str(row.input["model_id"]), values=row.input,
                               case=case, measured=row.measured,
                               host_bound=row_key(row.input) in host_bound))
    return rows, skipped


def materialise(calibration: Calibration, gpu_name: str,
                values: dict[str, float]) -> dict[str, float]:
    """Fit variables -> constants: ``tensor_power_share`` becomes ``energy_per_tensor_flop_j``."""
    if FLOP_SHARE not in values:
        return dict(values)
    gpu = load_gpu(gpu_name)
    k = calibration.kernel(gpu.name)
    busy = values.get("busy_power_w", k.busy_power_w)
    rate = gpu.peak_flops_per_s("bf16") * k.gemm_efficiency_max
    out = {n: v for n, v in values.items() if n != FLOP_SHARE}
    headroom = max(gpu.tdp_w - k.static_power_w - busy, 1.0)
    out["energy_per_tensor_flop_j"] = values[FLOP_SHARE] * headroom / rate
    return out


def apply(calibration: Calibration, gpu_name: str, values: dict[str, float]) -> Calibration:
    """``calibration`` with fitted kernel (``name``), link (``link.<kind>.<name>``) and
    runtime (``runtime.<name>``, the rows' runtime on ``gpu_name``) values."""
    values = materialise(calibration, gpu_name, values)
    prefixes = (LINK_PREFIX, RUNTIME_PREFIX)
    kernel = {k: v for k, v in values.items() if not k.startswith(prefixes)}
    out = calibration.with_kernel(gpu_name, **kernel) if kernel else calibration
    runtime = {k[len(RUNTIME_PREFIX):]: v for k, v in values.items() if k.startswith(RUNTIME_PREFIX)}
    if runtime:
        out = out.with_runtime(runtime=RUNTIME, gpu=gpu_name, **runtime)
    for key, value in values.items():
        if key.startswith(LINK_PREFIX):
            kind, name = key[len(LINK_PREFIX):].rsplit(".", 1)
            out = out.with_link(f"{gpu_name}:{kind}", **{name: value})
    return out


def predict_rows(rows: list[ServingRow], calibration: Calibration) -> list[dict[str, float] | None]:
    """Predicted metrics per row (None when the prediction is infeasible)."""
    out: list[dict[str, float] | None] = []
    for row in rows:
        c = row.case
        result = predict(model=c.model, gpu=c.gpu, deployment=c.deployment, workload=c.workload,
                         calibration=calibration)
        out.append(predicted_metrics(result) if result.feasible else None)
    return out


def _residuals(rows: list[ServingRow], predicted: list[dict[str, float] | None]) -> np.ndarray:
    res = []
    for row, pred in zip(rows, predicted, strict=True):
        for metric, weight in FIT_METRICS.items():
            value = np.nan if pred is None else pred[metric]
            res.append(weight * float(log_residual(np.array([value]), np.array([row.measured[metric]]))[0]))
    return np.nan_to_num(np.array(res), nan=10.0)


def errors(rows: list[ServingRow], predicted: list[dict[str, float] | None]) -> dict[str, ErrorStats]:
    """MAPE per metric over rows with a prediction."""
    out = {}
    for metric in REPORT_METRICS:
        pairs = [(p[metric], r.measured[metric]) for r, p in zip(rows, predicted, strict=True)
                 if p is not None]
        p, m = (np.array(x) for x in zip(*pairs, strict=True)) if pairs else (np.array([]),) * 2
        out[metric] = ErrorStats.of(p, m)
    return out


def model_kind(row: ServingRow) -> str:
    """``hybrid`` (Mamba-2 / attention blocks), ``moe`` or ``dense`` (transformers)."""
    if row.case.model.hybrid is not None:
        return "hybrid"
    return "moe" if row.case.model.moe is not None else "dense"


def row_group(row: ServingRow) -> str:
    """``dense``/``moe``/``hybrid`` x ``1-gpu``/``multi-gpu``: the groups the accuracy
    targets name."""
    return f"{model_kind(row)},{'1-gpu' if int(row.values['num_gpus']) == 1 else 'multi-gpu'}"


def grouped_errors(rows: list[ServingRow],
                   predicted: list[dict[str, float] | None]) -> dict[str, dict[str, ErrorStats]]:
    """:func:`errors` per :func:`row_group` and per model kind."""
    out = {}
    keys = {row_group(r) for r in rows} | {row_group(r).split(",")[0] for r in rows}
    for key in sorted(keys):
        pick = [i for i, r in enumerate(rows) if row_group(r) == key or row_group(r).split(",")[0] == key]
        out[key] = errors([rows[i] for i in pick], [predicted[i] for i in pick])
    return out


def fit_rows(rows: list[ServingRow], *, gpu_name: str, base: Calibration,
             params: tuple[Param, ...], max_nfev: int) -> tuple[dict[str, float], list[str]]:
    """Fit variables on ``rows`` (on top of ``base``), and those that ended at a bound."""
    def residuals(values: dict[str, float]) -> np.ndarray:
        return _residuals(rows, predict_rows(rows, apply(base, gpu_name, values)))

    values, _, at_bound = fit_bounded(params=params, residuals=residuals, max_nfev=max_nfev)
    return values, at_bound


def _fold(args: tuple) -> list[dict[str, float] | None]:
    """One leave-one-model-out fold (module level so a process pool can run it)."""
    train, test, gpu, base, params, max_nfev = args
    values, _ = fit_rows(train, gpu_name=gpu, base=base, params=params, max_nfev=max_nfev)
    return predict_rows(test, apply(base, gpu, values))


def fit_serving(*, files: list[Path], gpu_name: str, base: Calibration,
                leave_out: bool = True, input_tokens: dict[str, float] | None = None,
                max_nfev: int = 60, jobs: int = 1) -> tuple[FitResult, dict[str, list]]:
    """Fit engine overheads and power constants of ``gpu_name`` on the transformer rows of
    ML.ENERGY files (hybrid Mamba-2 rows are only predicted).

    Leave-one-model-out folds start from the full fit (warm start, a third of the
    evaluation budget) and run on ``jobs`` processes.
    """
    gpu = load_gpu(gpu_name).name
    rows, skipped = serving_rows(files=files, gpu_name=gpu, input_tokens=input_tokens)
    # Memory feasibility does not depend on any fitted constant: drop those rows up front.
    feasible = [r for r, p in zip(rows, predict_rows(rows, base), strict=True) if p is not None]
    kept = fitted_rows(feasible)
    hybrid = sum(model_kind(r) == "hybrid" for r in feasible)
    notes = [f"{skipped} row(s) of {gpu} not modelled (reason per row in `energylens validate`)",
             f"{len(rows) - len(feasible)} row(s) infeasible in the memory model, not fitted",
             f"{hybrid} row(s) of hybrid Mamba-2 models never fitted (the family fold "
             f"predicts them unseen)",
             f"{len(feasible) - len(kept) - hybrid} row(s) of host-bound runs or "
             f"data-parallel attention layouts never fitted"]
    rows = kept
    params = serving_params(gpu)
    values, at_bound = fit_rows(rows, gpu_name=gpu, base=base, params=params, max_nfev=max_nfev)
    predicted = predict_rows(rows, apply(base, gpu, values))
    rms = float(np.sqrt(np.mean(_residuals(rows, predicted) ** 2)))
    result = FitResult(values=materialise(base, gpu, values), rms_log_residual=rms,
                       in_sample=errors(rows, predicted),
                       fitted_on=[str(f) for f in files], n_points=len(rows), at_bound=at_bound,
                       in_sample_groups=grouped_errors(rows, predicted), notes=notes)
    held: dict[str, list] = {"rows": [], "predicted": []}
    models = sorted({r.model for r in rows})
    if leave_out and len(models) > 1:
        warm = tuple(Param(p.name, values[p.name], p.low, p.high, p.log) for p in params)
        tasks = [([r for r in rows if r.model != m], [r for r in rows if r.model == m], gpu, base,
                  warm, max(max_nfev // 3, 5)) for m in models]
        outputs = map_forked(_fold, tasks, jobs=jobs)
        for task, pred in zip(tasks, outputs, strict=True):
            held["rows"] += task[1]
            held["predicted"] += pred
        result.leave_out = errors(held["rows"], held["predicted"])
        result.leave_out_groups = grouped_errors(held["rows"], held["predicted"])
    return result, held
