"""Leave-one-regime-out folds of the serving fit: does the calibration transfer?

Leave-one-model-out keeps every regime (GPU count, precision, output length, family) in
the training set of every fold, so a constant that only one regime moves looks fine. Here
each fold holds out a whole regime, refits every serving constant from its initial value
(no warm start from the full fit, which has seen the held-out rows) on the rest, and
predicts the held-out rows:

- ``gpu-count``: fit on 1-2 GPU rows, predict 4-8 GPU rows;
- ``precision``: fit on BF16 checkpoints, predict FP8 and MXFP4 ones;
- ``task``: fit on chat (``lm-arena-chat``), predict long-output reasoning (``gpqa``) and
  long-prompt fill-in-the-middle (``sourcegraph-fim``);
- ``family``: fit on dense models, predict MoE, and the reverse; fit on transformers,
  predict the hybrid Mamba-2 models (which no fit sees);
- ``gpu-generation``: predict a GPU's rows with no constant fitted on its serving rows:
  power and engine constants borrowed from the relative its GPU file declares (datasheet
  ratios), e.g. B200 from H100; what its own kernel tables measure (GEMM and attention
  efficiencies, no serving run involved) is kept.

A constant that no training row of a fold exercises (the fixed time per expert-parallel
MoE layer, in a fold without expert-parallel rows) is not identified there: it takes the
value the same runtime's full fit on another GPU's rows gives (``borrowed``; that fit saw
none of this GPU's rows), as ``calibrate`` fills a GPU without data, instead of the
generic initial value of the fit. The kernel latency curves (Vidur per-op) and link curves
(Vidur NCCL) do not see these rows and are not refitted. A fold whose training or test side
has no rows is reported with its row counts and no errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from energylens.calibration.fit_serving import (
    FLOP_SHARE,
    REPORT_METRICS,
    RUNTIME_PREFIX,
    ServingRow,
    apply,
    errors,
    fit_rows,
    fitted_rows,
    materialise,
    model_kind,
    predict_rows,
    serving_params,
    serving_rows,
)
from energylens.calibration.fitting import map_forked
from energylens.calibration.transfer import borrowed_calibration
from energylens.cost.constants import Calibration
from energylens.hardware import GPU, load_gpu
from energylens.validation.expected_error import SIXTEEN_BIT

RowTest = Callable[[ServingRow], bool]
#: Marks a fold whose training rows are exactly the full fit's (the hybrid fold): its
#: refit repeats the full fit, so it is no second fit in the spread or the bound count.
SAME_AS_FULL = "same_rows_as_full_fit"
#: The fit variable of the fixed time per expert-parallel MoE layer; only EP rows move it.
EP_OVERHEAD = f"{RUNTIME_PREFIX}ep_moe_layer_overhead_s"


def _gpus(row: ServingRow) -> int:
    return int(row.values["num_gpus"])


def _sixteen_bit(row: ServingRow) -> bool:
    """The precision fold's training side ("fit BF16"): 16-bit weights, as
    ``expected_error`` reads a prediction's side."""
    return str(row.values["weight_precision"]).lower() in SIXTEEN_BIT


def _chat(row: ServingRow) -> bool:
    return str(row.values["task"]) == "lm-arena-chat"


def _kind(kind: str) -> RowTest:
    return lambda row: model_kind(row) == kind


@dataclass(frozen=True)
class Fold:
    """One held-out regime: the rows fitted on and the rows predicted."""

    regime: str
    name: str
    train: RowTest
    test: RowTest
    breakdown: Callable[[ServingRow], str]  # label of a test row's sub-regime


FOLDS: tuple[Fold, ...] = (
    Fold("gpu-count", "fit 1-2 GPUs, predict 4-8", lambda r: _gpus(r) <= 2,
         lambda r: _gpus(r) >= 4, lambda r: f"{_gpus(r)} GPUs"),
    Fold("precision", "fit BF16, predict FP8/MXFP4", _sixteen_bit, lambda r: not _sixteen_bit(r),
         lambda r: str(r.values["weight_precision"])),
    Fold("task", "fit chat, predict reasoning/FIM", _chat, lambda r: not _chat(r),
         lambda r: str(r.values["task"])),
    Fold("family", "fit dense, predict MoE", _kind("dense"), _kind("moe"), lambda r: "moe"),
    Fold("family", "fit MoE, predict dense", _kind("moe"), _kind("dense"), lambda r: "dense"),
    Fold("family", "fit transformers, predict hybrid Mamba-2",
         lambda r: model_kind(r) != "hybrid", _kind("hybrid"), lambda r: r.model),
)


def _test_report(rows: list[ServingRow], predicted: list[dict[str, float] | None],
                 fold: Fold) -> dict[str, Any]:
    out: dict[str, Any] = {"test_rows": len(rows),
                           "errors": {k: v.as_dict() for k, v in errors(rows, predicted).items()}}
    labels = sorted({fold.breakdown(r) for r in rows})
    if len(labels) > 1:
        out["by_group"] = {
            label: {k: v.as_dict() for k, v in errors(
                [r for r in rows if fold.breakdown(r) == label],
                [p for r, p in zip(rows, predicted, strict=True) if fold.breakdown(r) == label],
            ).items()}
            for label in labels}
    return out


def _run_fold(args: tuple[int, str, Calibration, int, list[Path], dict[str, float]]
              ) -> dict[str, Any]:
    """Fold ``FOLDS[index]`` on ``gpu``'s rows (module level so a process pool can run it)."""
    index, gpu, base, max_nfev, files, borrowed = args
    fold = FOLDS[index]
    rows, _ = serving_rows(files=files, gpu_name=gpu)
    rows = [r for r, p in zip(rows, predict_rows(rows, base), strict=True) if p is not None]
    # Folds fit on the rows the full fit uses and predict rows of the same kinds (only the
    # hybrid fold predicts hybrid rows; none predicts host-bound runs or DP attention).
    fitted = fitted_rows(rows)
    train = [r for r in fitted if fold.train(r)]
    hybrid = [r for r in rows if model_kind(r) == "hybrid"]
    test = [r for r in (fitted + hybrid if fold.regime == "family" else fitted)
            if fold.test(r) and not r.host_bound and r.case.deployment.attention_dp == 1]
    entry: dict[str, Any] = {"regime": fold.regime, "train_rows": len(train),
                             "test_rows": len(test)}
    if len(train) == len(fitted):  # trains on the full fit's rows: repeats the full fit
        entry[SAME_AS_FULL] = True
    params = serving_params(gpu)
    if EP_OVERHEAD in borrowed and not any(r.case.deployment.ep > 1 for r in train):
        params = tuple(replace(p, init=borrowed[EP_OVERHEAD]) if p.name == EP_OVERHEAD else p
                       for p in params)
        entry["borrowed"] = {EP_OVERHEAD: borrowed[EP_OVERHEAD]}
    if train and test:
        values, at_bound = fit_rows(train, gpu_name=gpu, base=base, params=params,
                                    max_nfev=max_nfev)
        entry["values"] = {k: float(f"{v:.6g}") for k, v in materialise(base, gpu, values).items()}
        if at_bound:
            entry["at_bound"] = sorted(at_bound)
        entry.update(_test_report(test, predict_rows(test, apply(base, gpu, values)), fold))
    return entry


def regime_folds(*, files: list[Path], gpu_name: str, base: Calibration, max_nfev: int = 60,
                 jobs: int = 1, borrowed: dict[str, float] | None = None) -> dict[str, Any]:
    """Every fold of :data:`FOLDS` on the ML.ENERGY rows of ``gpu_name``, on ``jobs``
    processes: per fold the row counts, the refitted values (each from its initial value,
    as the full fit; from ``borrowed``, fit variable -> another GPU's fitted value, where
    no training row identifies it) and the errors on the held-out rows, per metric."""
    gpu = load_gpu(gpu_name).name
    tasks = [(index, gpu, base, max_nfev, files, dict(borrowed or {}))
             for index in range(len(FOLDS))]
    entries = map_forked(_run_fold, tasks, jobs=jobs)
    return {f"{fold.regime}: {fold.name}": entry
            for fold, entry in zip(FOLDS, entries, strict=True)}


def distinct_refits(*, folds: dict[str, Any], full_rows: int | None = None) -> dict[str, Any]:
    """The refitted folds (with ``values``) whose training rows are not the full fit's:
    not flagged :data:`SAME_AS_FULL` nor, in a file written before the flag, trained on
    ``full_rows`` rows (the full fit's count)."""
    return {key: entry for key, entry in folds.items()
            if isinstance(entry, dict) and "values" in entry and not entry.get(SAME_AS_FULL)
            and (full_rows is None or entry.get("train_rows") != full_rows)}


def constant_spread(*, full: dict[str, float], folds: dict[str, Any]) -> dict[str, float]:
    """Per fitted constant: (max - min) over the full fit and every fold that refits other
    rows (:func:`distinct_refits`), as a share of the largest magnitude (0: never moves; 1:
    some fold drives it to zero or flips its sign).

    A constant that moves a lot when one regime is left out is identified by that regime
    alone (or not at all)."""
    out: dict[str, float] = {}
    for name, value in full.items():
        seen = [value] + [entry["values"][name] for entry in distinct_refits(folds=folds).values()
                          if name in entry["values"]]
        largest = max(abs(v) for v in seen)
        out[name] = float(f"{(max(seen) - min(seen)) / largest:.4g}") if largest else 0.0
    return out


def generation_calibration(*, gpu: GPU, calibration: Calibration) -> tuple[Calibration, str]:
    """``calibration`` with no constant fitted on ``gpu``'s serving rows: those borrowed
    down its ``borrows:`` chain, its kernel-table constants kept; and the relative's name."""
    if gpu.borrows_from is None:
        raise ValueError(f"{gpu.name} declares no relative to borrow from")
    chain = [gpu]
    while chain[-1].borrows_from is not None and chain[-1].name not in (
            calibration.kernels.keys() - {gpu.name}):
        chain.append(load_gpu(str(chain[-1].borrows_from)))
    stripped = replace(
        calibration,
        kernels={k: v for k, v in calibration.kernels.items() if k != gpu.name},
        links={k: v for k, v in calibration.links.items() if k.split(":")[0] != gpu.name},
        runtimes={k: v for k, v in calibration.runtimes.items() if k.split("/")[1] != gpu.name})
    borrowed = borrowed_calibration(calibration=stripped, chain=chain)
    if gpu.name in calibration.kernels:
        # power constants come from serving rows or NVML runs, never from kernel tables
        serving = {"energy_per_tensor_flop_j" if p.name == FLOP_SHARE else p.name
                   for p in serving_params(gpu.name)} | {"static_power_w"}
        own = calibration.kernel(gpu.name)
        borrowed = borrowed.with_kernel(gpu.name, **{
            f.name: getattr(own, f.name) for f in fields(own) if f.name not in serving})
    return borrowed, chain[-1].name


def generation_fold(*, files: list[Path], gpu: GPU, calibration: Calibration) -> dict[str, Any]:
    """``gpu``'s rows predicted with :func:`generation_calibration` (the fold
    ``gpu-generation``)."""
    borrowed, relative = generation_calibration(gpu=gpu, calibration=calibration)
    rows, _ = serving_rows(files=files, gpu_name=gpu.name)
    rows = fitted_rows(rows)  # the kind of rows the relative's constants were fitted on
    predicted = predict_rows(rows, borrowed)
    fold = Fold("gpu-generation", f"fit {relative}, predict {gpu.name}",
                lambda r: False, lambda r: True, lambda r: gpu.name)
    return {f"{fold.regime}: {fold.name}": {
        "regime": fold.regime, "train_rows": 0, "borrowed_from": relative,
        **_test_report(rows, predicted, fold),
        "infeasible_rows": sum(p is None for p in predicted)}}


def metric_of(entry: dict[str, Any], metric: str) -> float | None:
    """Held-out MAPE of ``metric`` in a fold entry (None when the fold has no rows or the
    figure is not a number)."""
    value = entry.get("errors", {}).get(metric, {}).get("mape")
    return None if value is None or not math.isfinite(float(value)) else float(value)


__all__ = ["EP_OVERHEAD", "FOLDS", "REPORT_METRICS", "SAME_AS_FULL", "Fold", "constant_spread",
           "distinct_refits",
           "generation_fold", "metric_of", "regime_folds"]
