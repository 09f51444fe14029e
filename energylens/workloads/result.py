"""The result of a prediction: per-phase latency and energy, and the headline metrics.

The workload kinds compute a prediction as :data:`Columns` (numbers, or arrays over the
configurations of :func:`energylens.batch_predict.predict_many`); :func:`prediction` turns
one configuration's columns into a :class:`Prediction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from energylens.cost.memory import MemoryUse
from energylens.cost.step import StepCost
from energylens.cost.work import Size
from energylens.model.config import ModelConfig
from energylens.model.context import context_shortfall
from energylens.workloads.workload import Workload

#: Fields of a phase; its columns are ``prefill_<field>`` and ``decode_<field>``.
PHASE_FIELDS = ("latency_s", "energy_j", "compute_j", "memory_j", "communication_j", "static_j")
PHASES = ("prefill", "decode")
#: The columns a workload kind computes (:func:`prediction` reads them).
COLUMNS = ("feasible", "infeasible_reason", "num_gpus", "memory_per_gpu_gb", "ttft_s", "tpot_s",
           "energy_per_output_token_j", "energy_per_request_j", "avg_power_w",
           "output_tokens_per_s", "running_batch",
           *(f"{phase}_{field}" for phase in PHASES for field in PHASE_FIELDS))
#: A prediction by column name: numbers for one configuration, arrays for many (the
#: ``infeasible_reason`` of many is a list, None where the configuration fits).
Columns = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PhaseResult:
    """Latency and energy of a phase, all GPUs together."""

    latency_s: float
    energy_j: float
    compute_j: float
    memory_j: float
    communication_j: float
    static_j: float

    def as_dict(self) -> dict[str, object]:
        """JSON form."""
        return {"latency_s": self.latency_s, "energy_j": self.energy_j,
                "breakdown_j": {"compute": self.compute_j, "memory": self.memory_j,
                                "communication": self.communication_j, "static": self.static_j}}


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The result of :func:`energylens.predict.predict`; SI units throughout."""

    model: str
    gpu: str
    num_gpus: int
    workload: str
    feasible: bool
    infeasible_reason: str | None
    memory_per_gpu_gb: float
    ttft_s: float
    tpot_s: float
    energy_per_output_token_j: float
    energy_per_request_j: float
    avg_power_w: float
    output_tokens_per_s: float
    prefill: PhaseResult
    decode: PhaseResult
    #: Sequences each replica runs at once: the workload's batch per replica, or fewer
    #: where the runtime's KV capacity caps the running batch (serving). None for kinds
    #: that do not keep one running batch.
    running_batch: float | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON form with the documented keys."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("prefill", "decode")}
        out["prefill"] = self.prefill.as_dict()
        out["decode"] = self.decode.as_dict()
        return out


def value(number: Any) -> Size:
    """A float for one configuration, a float array for many."""
    return float(number) if np.ndim(number) == 0 else np.asarray(number, dtype=float)


def phase_columns(*, cost: StepCost, wall_s: Size, static_w: float, gpus: Size) -> dict[str, Size]:
    """A phase (:data:`PHASE_FIELDS`) from its dynamic cost, plus static power paid by every
    GPU over ``wall_s``."""
    static = static_w * gpus * wall_s
    dynamic = cost.compute_energy_j + cost.memory_energy_j + cost.communication_energy_j
    return {"latency_s": wall_s, "energy_j": value(dynamic + static),
            "compute_j": value(cost.compute_energy_j), "memory_j": value(cost.memory_energy_j),
            "communication_j": value(cost.communication_energy_j), "static_j": value(static)}


BREAKDOWN = ("compute_j", "memory_j", "communication_j", "static_j")


def marginal_phase(*, whole: dict[str, Size], rest: dict[str, Size]) -> dict[str, Size]:
    """What phase ``whole`` costs beyond phase ``rest`` (e.g. the prompts admitted into
    decode steps).

    The energy is the difference of the totals. Its breakdown is the difference per
    component, except that adding work can move busy power from one component to another
    (a prompt joining a memory-bound decode step makes it more compute-bound): a component
    whose difference is negative is shown as 0, and the positive ones are scaled so that
    the breakdown still sums to the energy. Where the extra work makes the whole cheaper
    (one-token prompts lifting a GEMM past a tile edge fill the SMs in fewer waves), the
    phase's energy is shown as 0 too: the totals, not this split, carry the cost."""
    energy = np.maximum(whole["energy_j"] - rest["energy_j"], 0.0)
    parts = {k: np.maximum(whole[k] - rest[k], 0.0) for k in BREAKDOWN}
    total = sum(parts.values())
    positive = total > 0
    scale = np.where(positive, energy / np.where(positive, total, 1.0), 0.0)
    return {"latency_s": whole["latency_s"] - rest["latency_s"], "energy_j": energy,
            **{k: value(v * scale) for k, v in parts.items()}}


def feasibility(*, memory: MemoryUse, gpu_name: str, model: ModelConfig,
                workload: Workload) -> tuple[Any, Any]:
    """(feasible, infeasible reason): numbers for one configuration, a bool array and a list
    of reasons (None where it fits) for many. A request longer than the model's context
    (:func:`energylens.model.context.context_shortfall`) is infeasible in every
    configuration, with that reason before any memory shortfall."""
    context = context_shortfall(model=model, input_tokens=workload.input_tokens,
                                output_tokens=workload.output_tokens)
    if np.ndim(memory.total_bytes) == 0:
        reason = context or memory.shortfall(gpu_name=gpu_name)
        return reason is None, reason
    if context is not None:
        rows = int(np.size(memory.total_bytes))
        return np.zeros(rows, dtype=bool), [context] * rows
    reasons = memory.shortfalls(gpu_name=gpu_name)
    return np.array([r is None for r in reasons]), reasons


def prediction(*, columns: Columns, model: str, gpu: str, workload: str) -> Prediction:
    """One configuration's columns as a :class:`Prediction`."""
    phases = {phase: PhaseResult(**{f: float(columns[f"{phase}_{f}"]) for f in PHASE_FIELDS})
              for phase in PHASES}
    running = columns["running_batch"]
    return Prediction(
        model=model, gpu=gpu, num_gpus=int(columns["num_gpus"]), workload=workload,
        feasible=bool(columns["feasible"]), infeasible_reason=columns["infeasible_reason"],
        memory_per_gpu_gb=float(columns["memory_per_gpu_gb"]), ttft_s=float(columns["ttft_s"]),
        tpot_s=float(columns["tpot_s"]),
        energy_per_output_token_j=float(columns["energy_per_output_token_j"]),
        energy_per_request_j=float(columns["energy_per_request_j"]),
        avg_power_w=float(columns["avg_power_w"]),
        output_tokens_per_s=float(columns["output_tokens_per_s"]),
        prefill=phases["prefill"], decode=phases["decode"],
        running_batch=None if running is None else float(running),
    )
