"""K-shot calibration on measured steps: ``energylens validate steps PATH --k-shot K``.

Each steps file (one GPU, one weight dtype, one model) is a group. An overlay
(:mod:`energylens.calibration.overlay`: a few scale factors regularised toward the shipped
calibration) is fitted on the step time and energy of K of its rows, chosen spread over
phase, batch, new tokens and context (the seed picks the first), and the group's other rows
are priced with it. Only those other rows are scored. K = 0 is plain ``validate steps``.
Issue 11's static-batch target reads on these rows: prefill and decode-step latency per
(model, GPU) after K measurements of the user's own.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.file import resolve_calibration
from energylens.calibration.overlay import FitRow, apply_overlay, fit_overlay
from energylens.cost.constants import Calibration
from energylens.cost.step import StepContext
from energylens.errors import MeasurementError
from energylens.hardware import GPU
from energylens.measurements.energylens_gpu import StepTime, load_step_files
from energylens.validation.kshot import spread_pick
from energylens.validation.steps import (
    IdleCheck,
    StepReport,
    StepRow,
    file_calibration,
    group_errors,
    price_step,
    priceable_steps,
    priced_row,
    resolve_gpu,
    steps_context,
)


@dataclass(frozen=True, kw_only=True)
class StepsKShot:
    """Held-out rows scored after a K-row overlay per (GPU, dtype) group."""

    k: int
    seed: int
    report: StepReport  # the rows no overlay was fitted on
    fitted_on: tuple[StepRow, ...]  # priced with their own group's overlay
    overlays: dict[str, dict[str, float]]  # "GPU/dtype" -> factor -> value (1: unchanged)
    base: tuple[StepRow, ...] = ()  # report.rows priced without the overlay (K = 0), in order

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object: the held-out report, the rows fitted on, the overlays."""
        return {**self.report.as_dict(), "fitted": f"overlay on {self.k} rows per group",
                "k": self.k, "seed": self.seed, "overlays": self.overlays,
                "fitted_on": [r.as_dict() for r in self.fitted_on]}


class _Pricer:
    """Step prices of one file's rows under whichever calibration the fit tries (the step
    context is rebuilt only when the calibration changes)."""

    def __init__(self, *, gpu: GPU, dtype: str) -> None:
        self.gpu, self.dtype = gpu, dtype
        self._calibration: Calibration | None = None
        self._ctx: StepContext | None = None

    def context(self, calibration: Calibration) -> StepContext:
        if self._ctx is None or calibration is not self._calibration:
            self._ctx = steps_context(gpu=self.gpu, dtype=self.dtype, calibration=calibration)
            self._calibration = calibration
        return self._ctx

    def fit_row(self, step: StepTime) -> FitRow:
        def predict(calibration: Calibration) -> dict[str, float]:
            price = price_step(ctx=self.context(calibration), phase=step.phase,
                               batch=step.batch, tokens=step.tokens, context=step.context,
                               prefill_tokens=step.prefill_tokens)
            return {"time_s": price.latency_s, "energy_j": price.energy_j}

        return FitRow(gpu=self.gpu.name,
                      measured={"time_s": step.step_time_s, "energy_j": step.energy_per_call_j},
                      predict=predict)


def _features(step: StepTime) -> list[float]:
    return [1.0 if step.phase == "prefill" else 0.0, float(np.log(step.batch)),
            float(np.log(step.tokens)), float(np.log1p(step.context)),
            float(np.log1p(step.prefill_tokens))]


def k_shot_steps(*, path: str | Path, k: int, seed: int = 0, gpu: str | None = None,
                 calibration: Calibration | str | Path | None = None) -> StepsKShot:
    """Per steps file at ``path``: fit an overlay on ``k`` spread rows, price the others."""
    if k < 0:
        raise MeasurementError(f"--k-shot must be >= 0, got {k}")
    cal = resolve_calibration(calibration)
    held: list[StepRow] = []
    held_base: list[StepRow] = []
    fitted: list[StepRow] = []
    overlays: dict[str, dict[str, float]] = {}
    idle: list[IdleCheck] = []
    unpriced: dict[str, str] = {}
    failed = 0
    files = load_step_files(path=path)
    for file in files:
        spec = resolve_gpu(file=file, gpu=gpu)
        failed += file.failed
        steps = priceable_steps(file, unpriced=unpriced)
        key = f"{spec.name}/{file.weight_dtype}"
        chosen: list[int] = []
        base = file_calibration(file=file, gpu=spec, calibration=cal)
        tuned = base
        if k > 0 and steps:
            rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
            chosen = spread_pick(np.array([_features(s) for s in steps]), k, rng)
            pricer = _Pricer(gpu=spec, dtype=file.weight_dtype)
            fit = fit_overlay(rows=[pricer.fit_row(steps[i]) for i in chosen], base=base)
            overlays[key] = dict(fit.overlay.factors)
            if fit.overlay.factors:
                tuned = apply_overlay(base, fit.overlay)
        ctx = steps_context(gpu=spec, dtype=file.weight_dtype, calibration=tuned)
        idle.append(IdleCheck(path=str(file.path), gpu=spec.name, measured_w=file.idle_power_w,
                              static_power_w=ctx.constants.static_power_w))
        base_ctx = ctx if tuned is base else steps_context(gpu=spec, dtype=file.weight_dtype,
                                                           calibration=base)
        for i, step in enumerate(steps):
            (fitted if i in chosen else held).append(priced_row(step=step, gpu=spec, ctx=ctx))
            if i not in chosen:
                held_base.append(priced_row(step=step, gpu=spec, ctx=base_ctx))
    report = StepReport(path=str(path), calibration=cal.source, rows=tuple(held),
                        groups=group_errors(rows=held, by_phase=True),
                        totals=group_errors(rows=held, by_phase=False), idle=tuple(idle),
                        failed=failed, unpriced=unpriced)
    return StepsKShot(k=k, seed=seed, report=report, fitted_on=tuple(fitted), overlays=overlays,
                      base=tuple(held_base))
