"""Predict latency and energy of a deployment under a workload.

``batch``: one static batch: prefill of ``batch x input_tokens``, then ``output_tokens``
decode steps with a growing context, integrated with the midpoint rule over a few
context segments (per-op costs are piecewise linear in the context, so a handful of
points is exact up to the roofline kink) instead of a per-token loop.
``serving``: steady-state continuous batching: every step decodes one token for each of
``batch`` running sequences at the mean context and admits a Poisson number of new
prompts (mean ``batch / output_tokens``), prefilled whole in the same forward pass
(vLLM-style chunked prefill with prompts shorter than the token budget).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from energylens.calibration.file import default_calibration
from energylens.cost.constants import Calibration
from energylens.cost.memory import memory_use
from energylens.cost.roofline import ClockState
from energylens.cost.step import ZERO, SequenceGroup, StepContext, StepCost, step_cost
from energylens.deployment import Deployment, Workload, check_deployment
from energylens.hardware import GPU, load_gpu
from energylens.model.config import ModelConfig
from energylens.model.families import build_graph
from energylens.model.zoo import get_model

DECODE_SEGMENTS = 4
#: Median of Poisson(lambda) ~ max(lambda - ln 2, 0) (exact at the threshold lambda = ln 2).
MEDIAN_POISSON_OFFSET = float(np.log(2.0))
#: Prompt counts priced exactly (0, 1, ...); larger counts are priced at their conditional mean.
EXACT_ARRIVAL_COUNTS = 2
#: Prefill tokens processed per forward pass when sizing activation memory (chunked prefill).
PREFILL_CHUNK_TOKENS = 16384


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
    """The result of :func:`predict`; SI units throughout."""

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

    def as_dict(self) -> dict[str, object]:
        """JSON form with the documented keys."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("prefill", "decode")}
        out["prefill"] = self.prefill.as_dict()
        out["decode"] = self.decode.as_dict()
        return out


def _phase(*, cost: StepCost, wall_s: float, static_w: float, gpus: int) -> PhaseResult:
    static = static_w * gpus * wall_s
    dynamic = cost.compute_energy_j + cost.memory_energy_j + cost.communication_energy_j
    return PhaseResult(latency_s=wall_s, energy_j=float(dynamic + static),
                       compute_j=float(cost.compute_energy_j), memory_j=float(cost.memory_energy_j),
                       communication_j=float(cost.communication_energy_j), static_j=float(static))


def engine_cost(*, ctx: StepContext, sequences: float) -> StepCost:
    """Serving-engine time of one step on a replica: a fixed part (scheduling, input
    preparation: CPU work the GPUs idle through, static power only) and a part per running
    sequence (sampling and logits processing, KV block bookkeeping), during which the GPUs
    are busy and draw busy power."""
    constants = ctx.constants
    per_sequence_s = constants.engine_per_sequence_overhead_s * sequences
    busy_j = constants.busy_power_w * per_sequence_s * ctx.replica_gpus
    return StepCost(latency_s=constants.engine_step_overhead_s + per_sequence_s,
                    compute_energy_j=busy_j, memory_energy_j=0.0, communication_energy_j=0.0,
                    communication_s=0.0)


def _totals(cost: StepCost, weights: np.ndarray | float, scale: float) -> StepCost:
    return StepCost(**{k: float(np.sum(np.asarray(v) * weights)) * scale
                       for k, v in cost.__dict__.items()})


def _resolve(model: str | ModelConfig, gpu: str | GPU) -> tuple[ModelConfig, GPU]:
    return (get_model(model) if isinstance(model, str) else model,
            load_gpu(gpu) if isinstance(gpu, str) else gpu)


def predict(*, model: str | ModelConfig, gpu: str | GPU, deployment: Deployment | None = None,
            workload: Workload | None = None,
            calibration: Calibration | str | Path | None = None) -> Prediction:
    """Predict one deployment. Raises :class:`ConfigError` for impossible configurations
    (and UnknownModelError/UnknownGPUError for unknown names); a valid configuration that
    does not fit in memory comes back with ``feasible=False`` and the reason."""
    model_cfg, gpu_spec = _resolve(model, gpu)
    deployment = deployment or Deployment()
    workload = workload or Workload()
    cal = default_calibration() if calibration is None else (
        calibration if isinstance(calibration, Calibration) else _load_calibration(calibration))
    check_deployment(deployment=deployment, model=model_cfg, gpu_name=gpu_spec.name,
                     gpu_clock_range=(gpu_spec.min_clock_mhz, gpu_spec.boost_clock_mhz))
    return _predict(model_cfg, gpu_spec, deployment, workload, cal)


def _load_calibration(path: str | Path) -> Calibration:
    from energylens.calibration.file import load_calibration

    return load_calibration(path)


def _predict(model: ModelConfig, gpu: GPU, deployment: Deployment, workload: Workload,
             cal: Calibration) -> Prediction:
    weight_dtype = deployment.weight_dtype or model.weight_dtype
    constants = cal.kernel(gpu.name)
    degrees = deployment.degrees(model)
    ctx = StepContext(
        graph=build_graph(model), gpu=gpu, calibration=cal,
        degrees=tuple(sorted(degrees.items())), fusion=frozenset(deployment.fusion),
        weight_dtype=weight_dtype, overlap_sms=deployment.overlap_sms,
        clock=ClockState.at(gpu=gpu, freq_mhz=deployment.freq_mhz, constants=constants),
        routing=deployment.routing, pp=deployment.pp,
    )
    replicas = deployment.replicas
    gpus = deployment.total_gpus
    batch = workload.batch / replicas  # sequences per replica
    s_in, s_out = workload.input_tokens, workload.output_tokens
    if workload.kind == "serving":
        # Running sequences are spread over their lifetimes: mean context in + out / 2,
        # and a step holds the decodes plus the prompts admitted in it.
        context, step_tokens = s_in + s_out / 2, batch + batch / s_out * s_in
    else:
        context, step_tokens = s_in + s_out, np.ceil(batch) * s_in
    memory = memory_use(graph=ctx.graph, gpu=gpu, degrees=degrees, pp=deployment.pp,
                        weight_dtype=weight_dtype, sequences=np.ceil(batch),
                        context_tokens=context,
                        step_tokens=min(step_tokens, PREFILL_CHUNK_TOKENS))
    reason = None if memory.fits else (
        f"needs {memory.total_bytes / 1e9:.1f} GB per GPU (weights "
        f"{memory.weights_bytes / 1e9:.1f}, KV {memory.kv_cache_bytes / 1e9:.1f}, activations "
        f"{memory.activation_bytes / 1e9:.1f}, reserve {memory.reserve_bytes / 1e9:.1f}) but "
        f"{gpu.name} has {memory.capacity_bytes / 1e9:.0f} GB, of which "
        f"{memory.capacity_bytes * 0.9 / 1e9:.0f} GB usable")
    if workload.kind == "serving":
        return _serving(ctx=ctx, model=model, gpu=gpu, gpus=gpus, replicas=replicas, batch=batch,
                        s_in=s_in, s_out=s_out, memory_gb=float(memory.total_bytes / 1e9), reason=reason)
    engine = engine_cost(ctx=ctx, sequences=batch)
    prefill_cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=batch, new_tokens=s_in,
                                                          context=s_in)]) + engine
    prefill_wall = float(prefill_cost.latency_s)
    steps = max(int(round(s_out)) - 1, 0)  # the first token comes out of the prefill
    edges = np.linspace(s_in + 1, s_in + max(steps, 1), DECODE_SEGMENTS + 1)
    contexts = (edges[:-1] + edges[1:]) / 2
    decode_cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=batch, new_tokens=1.0,
                                                         context=contexts)])
    per_step = _totals(decode_cost, 1.0 / DECODE_SEGMENTS, 1.0) + engine
    tpot = float(per_step.latency_s)
    decode_total = per_step.scaled(float(steps))
    static_w = constants.static_power_w
    prefill = _phase(cost=prefill_cost.scaled(float(replicas)), wall_s=prefill_wall,
                     static_w=static_w, gpus=gpus)
    decode = _phase(cost=decode_total.scaled(float(replicas)), wall_s=tpot * steps,
                    static_w=static_w, gpus=gpus)
    total_energy = prefill.energy_j + decode.energy_j
    wall = prefill.latency_s + decode.latency_s
    output_tokens = workload.batch * s_out
    return Prediction(
        model=model.name, gpu=gpu.name, num_gpus=gpus, workload="batch",
        feasible=reason is None, infeasible_reason=reason,
        memory_per_gpu_gb=float(memory.total_bytes / 1e9), ttft_s=prefill_wall, tpot_s=tpot,
        energy_per_output_token_j=total_energy / output_tokens,
        energy_per_request_j=total_energy / workload.batch,
        avg_power_w=total_energy / wall, output_tokens_per_s=output_tokens / wall,
        prefill=prefill, decode=decode,
    )


def arrival_mixture(mean: float) -> list[tuple[float, float]]:
    """(prompt count, probability) points standing in for Poisson(``mean``) arrivals per
    step: counts 0 .. EXACT_ARRIVAL_COUNTS - 1 exactly, the tail at its conditional mean.
    Probabilities sum to 1 and the points' mean is ``mean``."""
    points: list[tuple[float, float]] = []
    prob = float(np.exp(-mean))
    head_mass = head_mean = 0.0
    for count in range(EXACT_ARRIVAL_COUNTS):
        points.append((float(count), prob))
        head_mass += prob
        head_mean += count * prob
        prob *= mean / (count + 1)
    tail = 1.0 - head_mass
    if tail > 1e-12:
        points.append(((mean - head_mean) / tail, tail))
    return points


def _serving(*, ctx: StepContext, model: ModelConfig, gpu: GPU, gpus: int, replicas: int,
             batch: float, s_in: float, s_out: float, memory_gb: float,
             reason: str | None) -> Prediction:
    """Steady state: each step decodes ``batch`` sequences and admits k prompts, k ~
    Poisson(``batch / s_out``). A prompt is prefilled whole in the step that admits it, so
    the mean step is the Poisson mixture of step costs (not the cost of the mean: a step
    with one whole prompt wakes far more experts, and is far less memory-bound, than
    every step carrying a sliver of one). Throughput and energy per token follow the MEAN
    step; the inter-token latency is the MEDIAN step, the step with the median prompt
    count (0 while the mean is below ln 2, ~mean - ln 2 beyond: a smooth stand-in for the
    integer median, interpolated between priced counts)."""
    constants = ctx.constants
    decode_seqs = SequenceGroup(sequences=batch, new_tokens=1.0, context=s_in + s_out / 2)
    arrivals = batch / s_out
    engine = engine_cost(ctx=ctx, sequences=batch)
    decode_only = step_cost(ctx=ctx, seqs=[decode_seqs]) + engine
    points = arrival_mixture(arrivals)
    counts = [count for count, _ in points]
    costs = [decode_only if count == 0 else step_cost(
        ctx=ctx, seqs=[decode_seqs, SequenceGroup(sequences=count, new_tokens=s_in,
                                                  context=s_in)]) + engine for count in counts]
    mean = sum((cost.scaled(prob) for cost, (_, prob) in zip(costs, points, strict=True)), ZERO)
    step_s = float(mean.latency_s)
    decode_s = float(decode_only.latency_s)
    times = [float(c.latency_s) for c in costs]
    median_itl_s = float(np.interp(max(arrivals - MEDIAN_POISSON_OFFSET, 0.0), counts, times))
    static_w = constants.static_power_w
    decode = _phase(cost=decode_only.scaled(float(replicas)), wall_s=decode_s,
                    static_w=static_w, gpus=gpus)
    whole = _phase(cost=mean.scaled(float(replicas)), wall_s=step_s, static_w=static_w, gpus=gpus)
    prefill = PhaseResult(**{k: getattr(whole, k) - getattr(decode, k)
                             for k in whole.__dict__})
    tokens_per_step = batch * replicas
    per_token = whole.energy_j / tokens_per_step
    return Prediction(
        model=model.name, gpu=gpu.name, num_gpus=gpus, workload="serving",
        feasible=reason is None, infeasible_reason=reason, memory_per_gpu_gb=memory_gb,
        ttft_s=float(np.interp(1.0, counts, times)), tpot_s=median_itl_s,
        energy_per_output_token_j=per_token,
        energy_per_request_j=per_token * s_out, avg_power_w=whole.energy_j / step_s,
        output_tokens_per_s=tokens_per_step / step_s,
        prefill=replace(prefill, latency_s=step_s), decode=replace(decode, latency_s=step_s),
    )
