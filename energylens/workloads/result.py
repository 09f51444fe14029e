"""The result of a prediction: per-phase latency and energy, and the headline metrics."""

from __future__ import annotations

from dataclasses import dataclass

from energylens.cost.step import StepCost


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


def phase_result(*, cost: StepCost, wall_s: float, static_w: float, gpus: int) -> PhaseResult:
    """A phase from its dynamic cost, plus static power paid by every GPU over ``wall_s``."""
    static = static_w * gpus * wall_s
    dynamic = cost.compute_energy_j + cost.memory_energy_j + cost.communication_energy_j
    return PhaseResult(latency_s=wall_s, energy_j=float(dynamic + static),
                       compute_j=float(cost.compute_energy_j), memory_j=float(cost.memory_energy_j),
                       communication_j=float(cost.communication_energy_j), static_j=float(static))


BREAKDOWN = ("compute_j", "memory_j", "communication_j", "static_j")


def marginal_phase(*, whole: PhaseResult, rest: PhaseResult) -> PhaseResult:
    """What ``whole`` costs beyond ``rest`` (e.g. the prompts admitted into decode steps).

    The energy is the difference of the totals. Its breakdown is the difference per
    component, except that adding work can move busy power from one component to another
    (a prompt joining a memory-bound decode step makes it more compute-bound): a component
    whose difference is negative is shown as 0, and the positive ones are scaled so that
    the breakdown still sums to the energy."""
    energy = whole.energy_j - rest.energy_j
    parts = {k: max(getattr(whole, k) - getattr(rest, k), 0.0) for k in BREAKDOWN}
    total = sum(parts.values())
    scale = energy / total if total > 0 else 0.0
    return PhaseResult(latency_s=whole.latency_s - rest.latency_s, energy_j=energy,
                       **{k: v * scale for k, v in parts.items()})
