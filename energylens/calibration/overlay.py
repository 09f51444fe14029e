"""Few-shot calibration: a handful of scale factors fitted on a user's own rows.

An overlay multiplies groups of the base calibration's constants, on the GPUs it names:

- ``step_overhead``: the runtime's time per step, per running sequence, per MoE layer,
  per pipeline-stage hand-off (its earlier releases' ``@legacy`` overheads too);
- ``kernel_overhead``: every kernel's fixed time (launch, prologue and tail; the small
  kernels' floors, the attention tile), which a framework's kernel count multiplies;
- ``compute_efficiency``: the share of peak reached by GEMMs, attention and vector ops;
- ``memory_efficiency``: the share of HBM bandwidth reached by every stream (capped at 1;
  the part a kernel constant cannot take goes to the engines' own scales, so that an engine
  whose kernels run below the reference's can still reach the cap: :data:`ENGINE_SCALES`);
- ``collective_latency``: the fixed times of collectives, the runtime's all-reduce and its
  ranks' arrival at each all-reduce of a real step;
- ``power``: static and busy power, energy per FLOP, per HBM byte, per link byte.

:func:`fit_overlay` fits them on measured rows, regularised toward 1 (the base values):
log residuals over an assumed 5 % measurement noise, a log-normal prior of width
``PRIOR_SIGMA`` on every factor, and factors freed one at a time, each only if it lowers
the objective by more than ``FREE_COST`` (Akaike: 2 per parameter) and never more
factors than rows; with two rows or more, only as many of them are kept (in the order
freed, none at all included) as predict each row best when fitted on the others
(leave-one-row-out). Factors are chosen on the model linearised at the base (one
prediction per row and factor), then refitted on the real model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from energylens.calibration.coverage import require_constants
from energylens.calibration.fitting import Param, fit_bounded
from energylens.cost.constants import Calibration, runtime_key
from energylens.hardware import load_gpu
from energylens.runtime import runtime_names
from energylens.runtime.profile import legacy_runtime

#: Factor -> (section, constants it multiplies).
FACTORS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "step_overhead": (("runtime", ("step_overhead_s", "per_sequence_overhead_s",
                                   "ep_moe_layer_overhead_s", "stage_handoff_s")),),
    "kernel_overhead": (("kernel", ("kernel_overhead_s", "expert_extra_overhead_s",
                                    "fp8_expert_extra_overhead_s", "norm_overhead_s",
                                    "rope_overhead_s",
                                    "activation_overhead_s", "elementwise_overhead_s",
                                    "attention_tile_s")),),
    "compute_efficiency": (("kernel", ("gemm_efficiency_max", "attention_efficiency_max",
                                       "vector_efficiency")),),
    "memory_efficiency": (("kernel", ("memory_efficiency_max", "kv_bandwidth_efficiency",
                                      "expert_bandwidth_efficiency", "norm_bandwidth_efficiency",
                                      "rope_bandwidth_efficiency",
                                      "activation_bandwidth_efficiency",
                                      "elementwise_bandwidth_efficiency")),),
    "collective_latency": (("link", ("latency_s", "latency_per_hop_s", "p2p_latency_s",
                                     "all_to_all_latency_s", "bulk_latency_s",
                                     "overlap_sync_s")),
                           ("runtime", ("allreduce_latency_s", "allreduce_latency_per_hop_s",
                                        "collective_sync_s"))),
    "power": (("kernel", ("static_power_w", "busy_power_w", "energy_per_tensor_flop_j",
                          "energy_per_vector_flop_j", "energy_per_hbm_byte_j")),
              ("link", ("energy_per_byte_j", "power_w"))),
}
FACTOR_NAMES = tuple(FACTORS)
#: Efficiencies are shares of a peak: scaled up, they stop at 1.
CAPPED = ("compute_efficiency", "memory_efficiency")
#: Kernel efficiencies an engine's own (runtime, GPU) scale multiplies (llama.cpp's
#: kernels at 0.6 of the reference's on H100: runtime/profile.py ``calibration_for``, which
#: caps the product): what a factor cannot add to the kernel constant under its cap goes
#: to every engine's scale, so that an engine below the reference can still be scaled up
#: to the engine's own cap, while an engine at scale 1 reaches that cap as before.
ENGINE_SCALES = {"gemm_efficiency_max": ("gemm_efficiency_scale",),
                 "attention_efficiency_max": ("attention_efficiency_scale",),
                 "memory_efficiency_max": ("memory_efficiency_scale",),
                 "kv_bandwidth_efficiency": ("kv_bandwidth_scale", "mha_kv_bandwidth_scale"),
                 "expert_bandwidth_efficiency": ("expert_bandwidth_scale",)}
#: An unset (0) expert-bandwidth scale is the memory scale (``calibration_for``).
SCALE_FALLBACK = {"expert_bandwidth_scale": "memory_efficiency_scale"}
FACTOR_RANGE = (0.2, 5.0)
NOISE_SIGMA = 0.05  # assumed relative measurement noise of one metric
PRIOR_SIGMA = 0.5  # width of the log-normal prior of a factor around 1
FREE_COST = 2.0  # objective decrease a factor must buy to be freed (AIC)
_STEP = float(np.log(1.1))  # log step of the linearisation


@dataclass(frozen=True, kw_only=True)
class Overlay:
    """Scale factors (1 = the base value) applied on ``gpus`` (canonical names)."""

    factors: dict[str, float]
    gpus: tuple[str, ...]
    provenance: dict[str, Any] = field(default_factory=dict)


def apply_overlay(calibration: Calibration, overlay: Overlay) -> Calibration:
    """``calibration`` with the overlay's factors applied to its GPUs' constants (borrowed
    ones materialised first, so a GPU without constants of its own is scaled too)."""
    out = calibration
    for name in overlay.gpus:
        gpu = load_gpu(name)
        out = require_constants(calibration=out, gpu=gpu)
        kernels, links, runtimes = dict(out.kernels), dict(out.links), dict(out.runtimes)
        kernel = asdict(out.kernel(gpu.name))
        link_keys = {f"{gpu.name}:{kind}" for kind in gpu.link_kinds}
        link_values = {key: asdict(out.link(gpu=gpu.name, kind=key.split(":", 1)[1]))
                       for key in link_keys}
        # every runtime's section, and the earlier-release (``@legacy``) ones the GPU has
        sections = [*runtime_names(), *(legacy_runtime(r) for r in runtime_names()
                                        if runtime_key(runtime=legacy_runtime(r), gpu=gpu.name)
                                        in out.runtimes)]
        runtime_values = {runtime_key(runtime=r, gpu=gpu.name):
                          asdict(out.runtime(runtime=r, gpu=gpu.name)) for r in sections}
        engine_scales = {key: dict(values) for key, values in runtime_values.items()}
        for factor, value in overlay.factors.items():
            if value == 1.0:  # the identity leaves every constant as it is
                continue
            for section, names in FACTORS[factor]:
                targets = {"kernel": [kernel], "link": list(link_values.values()),
                           "runtime": list(runtime_values.values())}[section]
                for constants in targets:
                    for constant in names:
                        before = constants[constant]
                        scaled = before * value
                        # a share of a peak stops at 1 (or where it already was: a small
                        # kernel's share can pass 1 on L2 hits)
                        constants[constant] = (min(scaled, max(1.0, before))
                                               if factor in CAPPED else scaled)
                        if section == "kernel" and constant in ENGINE_SCALES \
                                and constants[constant] < scaled:
                            _scale_engines(runtime_values, engine_scales, ENGINE_SCALES[constant],
                                           scaled / constants[constant])
        kernels[gpu.name] = replace(out.kernel(gpu.name), **kernel)
        for key, values in link_values.items():
            links[key] = replace(out.link(gpu=gpu.name, kind=key.split(":", 1)[1]), **values)
        for key, values in runtime_values.items():
            runtimes[key] = replace(out.runtime(runtime=key.split("/", 1)[0], gpu=gpu.name),
                                    **values)
        out = replace(out, kernels=kernels, links=links, runtimes=runtimes)
    return replace(out, source=f"{calibration.source} + overlay")


def _scale_engines(runtime_values: dict[str, dict[str, Any]],
                   engine_scales: dict[str, dict[str, Any]], fields: tuple[str, ...],
                   remainder: float) -> None:
    """Multiply each engine's ``fields`` (its own scales of one kernel efficiency, as they
    were before the overlay: ``engine_scales``) by ``remainder``; an unset (0) scale stays
    unset unless it falls back to another (:data:`SCALE_FALLBACK`), which it then takes
    scaled; a scale another falls back to, scaled, first pins the unset one at its value
    before (so that it moves only with its own kernel efficiency)."""
    for key, values in runtime_values.items():
        base = engine_scales[key]
        for name in fields:
            own = base[name] or base.get(SCALE_FALLBACK.get(name, ""), 0.0)
            if not own:
                continue
            for unset, fallback in SCALE_FALLBACK.items():
                if fallback == name and not values[unset]:
                    values[unset] = base[name]
            values[name] = own * remainder


@dataclass(frozen=True, kw_only=True)
class FitRow:
    """A measured row: its GPU, measured metrics and how to predict them (None when the
    calibration makes it infeasible)."""

    gpu: str
    measured: dict[str, float]
    predict: Callable[[Calibration], dict[str, float] | None]


@dataclass(frozen=True, kw_only=True)
class OverlayFit:
    """The fitted overlay, the factors moved in the order they were freed, the RMS log
    error of the rows before and after, and the factors that ended at a bound."""

    overlay: Overlay
    freed: tuple[str, ...]
    rms_log_before: float
    rms_log_after: float
    at_bound: tuple[str, ...] = ()  # factors at a bound of FACTOR_RANGE: not identified


def _log_errors(rows: Sequence[FitRow], calibration: Calibration,
                metrics: list[list[str]]) -> np.ndarray:
    out = []
    for row, names in zip(rows, metrics, strict=True):
        predicted = row.predict(calibration)
        for name in names:
            value = np.nan if predicted is None else predicted.get(name, np.nan)
            out.append(np.log(max(value, 1e-30)) - np.log(row.measured[name])
                       if np.isfinite(value) else np.nan)
    return np.array(out, dtype=float)


def _ridge(r0: np.ndarray, jac: np.ndarray, free: list[int]) -> tuple[np.ndarray, float]:
    """Minimiser and objective of |(r0 + J x) / noise|^2 + |x / prior|^2 over ``free``."""
    if not free:
        return np.zeros(0), float(np.sum((r0 / NOISE_SIGMA) ** 2))
    a = jac[:, free] / NOISE_SIGMA
    lhs = a.T @ a + np.eye(len(free)) / PRIOR_SIGMA**2
    x = np.linalg.solve(lhs, -a.T @ (r0 / NOISE_SIGMA))
    cost = float(np.sum(((r0 + jac[:, free] @ x) / NOISE_SIGMA) ** 2) + np.sum((x / PRIOR_SIGMA) ** 2))
    return x, cost


def _held_out_size(r0: np.ndarray, jac: np.ndarray, free: list[int], owner: np.ndarray) -> int:
    """How many of the factors ``free`` (in the order freed) to keep: the count whose
    leave-one-row-out error on the linearised model is least (fewer on a tie; 0 = the
    base). One row cannot be held out: then every factor freed is kept."""
    rows = int(owner.max()) + 1
    if rows < 2:
        return len(free)
    errors = []
    for size in range(len(free) + 1):
        total = 0.0
        for i in range(rows):
            train, test = owner != i, owner == i
            x, _ = _ridge(r0[train], jac[train], free[:size])
            total += float(np.sum((r0[test] + jac[test][:, free[:size]] @ x) ** 2))
        errors.append(total)
    return int(np.argmin(errors))  # the first, i.e. the fewest factors, on a tie


def fit_overlay(*, rows: Sequence[FitRow], base: Calibration,
                max_free: int | None = None) -> OverlayFit:
    """Fit the overlay's factors on ``rows`` (on top of ``base``); see the module text.

    ``max_free`` caps the factors moved (default: one per row).
    """
    base_predictions = [r.predict(base) for r in rows]
    usable = [(r, sorted(m for m in r.measured if m in p))
              for r, p in zip(rows, base_predictions, strict=True) if p is not None]
    usable = [(r, names) for r, names in usable if names]
    fit_rows = [r for r, _ in usable]
    metrics = [names for _, names in usable]
    gpus = tuple(sorted({load_gpu(r.gpu).name for r in fit_rows}))  # the rows fitted on only
    none = Overlay(factors={}, gpus=gpus)
    if not fit_rows:
        return OverlayFit(overlay=none, freed=(), rms_log_before=float("nan"),
                          rms_log_after=float("nan"))
    r0 = _log_errors(fit_rows, base, metrics)
    jac = np.stack([(_log_errors(fit_rows, apply_overlay(
        base, Overlay(factors={f: float(np.exp(_STEP))}, gpus=gpus)), metrics) - r0) / _STEP
        for f in FACTOR_NAMES], axis=1)
    jac = np.nan_to_num(jac)
    limit = len(fit_rows) if max_free is None else max_free
    free: list[int] = []
    _, cost = _ridge(r0, jac, free)
    while len(free) < min(limit, len(FACTOR_NAMES)):
        trials = {j: _ridge(r0, jac, [*free, j])[1] for j in range(len(FACTOR_NAMES))
                  if j not in free and np.any(jac[:, j])}
        if not trials:
            break
        best = min(trials, key=lambda j: trials[j])
        if cost - trials[best] <= FREE_COST:
            break
        free.append(best)
        cost = trials[best]
    owner = np.concatenate([[i] * len(names) for i, names in enumerate(metrics)])
    free = free[:_held_out_size(r0, jac, free, owner)]
    before = float(np.sqrt(np.mean(r0**2)))
    if not free:
        return OverlayFit(overlay=none, freed=(), rms_log_before=before, rms_log_after=before)
    names = [FACTOR_NAMES[j] for j in free]
    # From the base (factors 1), not from the linearised solution, which can lie far out
    # where the model is not linear at all.
    params = [Param(n, 1.0, *FACTOR_RANGE, log=True) for n in names]

    def residuals(values: dict[str, float]) -> np.ndarray:
        cal = apply_overlay(base, Overlay(factors=values, gpus=gpus))
        data = _log_errors(fit_rows, cal, metrics) / NOISE_SIGMA
        prior = np.log([values[n] for n in names]) / PRIOR_SIGMA
        return np.concatenate([data, prior])

    values, _, at_bound = fit_bounded(params=params, residuals=residuals, max_nfev=40)
    if np.sum(np.nan_to_num(residuals(values), nan=10.0) ** 2) >= np.sum((r0 / NOISE_SIGMA) ** 2):
        return OverlayFit(overlay=none, freed=(), rms_log_before=before, rms_log_after=before)
    after = _log_errors(fit_rows, apply_overlay(base, Overlay(factors=values, gpus=gpus)), metrics)
    return OverlayFit(overlay=Overlay(factors=values, gpus=gpus), freed=tuple(names),
                      rms_log_before=before, rms_log_after=float(np.sqrt(np.mean(after**2))),
                      at_bound=tuple(n for n in names if n in at_bound))


def bound_note(name: str) -> str:
    """What an overlay says of factor ``name`` at a bound of its range."""
    return (f"at a bound of its range {FACTOR_RANGE[0]:g}-{FACTOR_RANGE[1]:g}: not identified "
            f"by the rows ({name} would move further)")


def overlay_document(*, fit: OverlayFit, base: str, fitted_on: dict[str, Any],
                     generated_by: str) -> dict[str, Any]:
    """The overlay file (format of :mod:`energylens.calibration.file`): every factor with
    its value and kind (``fitted`` on the named rows, or ``default``, i.e. 1)."""
    from energylens.calibration.file import FORMAT_VERSION

    factors: dict[str, Any] = {}
    for name in FACTOR_NAMES:
        if name in fit.overlay.factors:
            note = f"freed {fit.freed.index(name) + 1} of {len(fit.freed)}"
            if name in fit.at_bound:
                note += f"; {bound_note(name)}"
            factors[name] = {"value": float(f"{fit.overlay.factors[name]:.6g}"), "kind": "fitted",
                             "note": note}
        else:
            factors[name] = {"value": 1.0, "kind": "default",
                             "note": "not identified by the rows: the base value"}
    return {"version": FORMAT_VERSION, "generated_by": generated_by, "base": base,
            "overlay": {"gpus": list(fit.overlay.gpus), "factors": factors,
                        "fitted_on": fitted_on,
                        "note": (f"rms log error of the rows {fit.rms_log_before:.4f} on the "
                                 f"base, {fit.rms_log_after:.4f} with the overlay"
                                 + (f"; at a bound of its range: {', '.join(fit.at_bound)}"
                                    if fit.at_bound else ""))}}
