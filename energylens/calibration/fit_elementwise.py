"""Fit a GPU's small memory-bound kernel classes on this project's own timings of them.

Vidur profiles the layer's small kernels (RMSNorm, rotary embedding, SiLU x mul, the
residual add) on A100 and H100 only; every other GPU borrowed their constants from a
relative. ``benchmarks/gpu/measure_elementwise.py`` times the same four kernels on a lent
GPU over the model shapes (``data/measurements/energylens-gpu/<gpu>/<run>/elementwise.csv``).
Its ``hot`` rows (each call on the same tensors, back to back in a CUDA graph: as Vidur
profiles ops, and as a forward pass hands an activation from one kernel to the next
through L2) fit each class's launch floor, share of HBM peak and floor sharpness exactly
as :func:`energylens.calibration.fit_kernels.fit_class` fits them on Vidur's rows, with the
GPU's other kernel constants as they stand. The ``cold`` rows (tensors cycled past L2) and
the fused add + RMSNorm are data, not read here. Held out: each model geometry in turn
(fitted on the others). Reported, not applied (:data:`WHY_NOT_APPLIED`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from energylens.calibration.fit_kernels import OpCase, by_class, fit_class, predict_cases
from energylens.calibration.fitting import ErrorStats, FitResult, rms_log_residual
from energylens.cost.constants import KernelConstants
from energylens.errors import MeasurementError
from energylens.hardware import GPU
from energylens.measurements.vidur_ops import Geometry

#: The measured op -> the Vidur op the cost model prices the same kernel as.
MEASURED_OPS = {"rmsnorm": "input_layernorm", "add": "add", "silu_mul": "mlp_act",
                "rope": "attn_rope"}
#: Why ``calibrate`` reports the fit and keeps the borrowed constants.
WHY_NOT_APPLIED = (
    "the GPU's engine overheads are borrowed from H100's serving fit (ML.ENERGY), which was "
    "fitted around H100's Vidur small-kernel constants (vLLM's kernels timed eagerly, one "
    "launch each: slower floors than a CUDA graph's); these graph-mode constants on H200 "
    "alone made its engines' predicted TPOT faster than AIConfigurator's H200 rows by more "
    "(median SGLang -9.7 -> -14.7 %, vLLM -11.1 -> -14.8 %); applying them needs H100's "
    "small kernels timed the same way and its serving fit redone around them")
COLUMNS = ("op", "geometry", "hidden", "ffn_shard", "q_heads", "kv_heads", "tp", "tokens",
           "mode", "time_s")


def elementwise_cases(path: Path) -> list[OpCase]:
    """The ``hot`` rows of ``path`` as cases (one per op and geometry)."""
    frame = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise MeasurementError(f"{path}: missing columns {missing}")
    frame = frame[(frame["mode"] == "hot") & frame["op"].isin(list(MEASURED_OPS))]
    cases = []
    keys = ["op", "geometry", "hidden", "ffn_shard", "q_heads", "kv_heads", "tp"]
    for _, rows in frame.groupby(keys):
        first = rows.iloc[0]
        hidden, ffn, q_heads, kv_heads, tp = (int(first[k]) for k in keys[2:])
        geometry = Geometry(n_head=q_heads * tp, n_kv_head=kv_heads * tp, n_embd=hidden,
                            n_expanded_embd=ffn * tp, use_gated_mlp=True, tp=tp)
        cases.append(OpCase(model=f"{first['geometry']}/tp{tp}", op=MEASURED_OPS[str(first['op'])],
                            geometry=geometry, num_tokens=rows["tokens"].to_numpy(float),
                            measured_s=rows["time_s"].to_numpy(float)))
    if not cases:
        raise MeasurementError(f"{path}: no hot rows of {sorted(MEASURED_OPS)}")
    return cases


def _fit_all(cases: list[OpCase], *, gpu: GPU, base: KernelConstants) -> tuple[dict[str, float],
                                                                              list[str]]:
    values: dict[str, float] = {}
    at_bound: list[str] = []
    for klass, members in sorted(by_class(cases).items()):
        class_values, _, bound = fit_class(members, gpu=gpu, base=base, klass=klass)
        values.update(class_values)
        at_bound += bound
    return values, at_bound


def _errors(cases: list[OpCase], predicted: list[np.ndarray]) -> dict[str, ErrorStats]:
    by_op: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for case, pred in zip(cases, predicted, strict=True):
        for metric in (case.op, "all"):
            by_op[metric][0].append(pred)
            by_op[metric][1].append(case.measured_s)
    return {m: ErrorStats.of(np.concatenate(p), np.concatenate(y)) for m, (p, y) in by_op.items()}


def _all_cases(paths: list[Path]) -> list[OpCase]:
    return [case for path in paths for case in elementwise_cases(path)]


def case_errors(*, paths: list[Path], gpu: GPU, constants: KernelConstants) -> dict[str, ErrorStats]:
    """Error per op of ``constants`` on the hot rows of ``paths``."""
    cases = _all_cases(paths)
    return _errors(cases, predict_cases(cases, gpu=gpu, constants=constants))


def fit_elementwise(*, paths: list[Path], gpu: GPU, base: KernelConstants) -> FitResult:
    """The class constants of ``gpu`` fitted on the hot rows of ``paths`` (its runs),
    ``base`` the GPU's other constants; leave-one-geometry-out errors in ``leave_out``."""
    cases = _all_cases(paths)
    values, at_bound = _fit_all(cases, gpu=gpu, base=base)
    predicted = predict_cases(cases, gpu=gpu, constants=replace(base, **values))
    result = FitResult(values=values,
                       rms_log_residual=rms_log_residual(predicted, [c.measured_s for c in cases]),
                       in_sample=_errors(cases, predicted), fitted_on=[str(p) for p in paths],
                       n_points=sum(c.measured_s.size for c in cases), at_bound=at_bound)
    held_cases: list[OpCase] = []
    held_pred: list[np.ndarray] = []
    for geometry in sorted({c.model for c in cases}):
        train = [c for c in cases if c.model != geometry]
        test = [c for c in cases if c.model == geometry]
        held_values, _ = _fit_all(train, gpu=gpu, base=base)
        held_cases += test
        held_pred += predict_cases(test, gpu=gpu, constants=replace(base, **held_values))
    result.leave_out = _errors(held_cases, held_pred)
    return result
