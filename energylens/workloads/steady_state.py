"""Steady-state continuous batching (``serving``).

Every step decodes one token for each of ``batch`` running sequences at the mean context
and admits a Poisson number of new prompts (mean ``batch / output_tokens``), prefilled
whole in the same forward pass (chunked prefill with prompts shorter than the token
budget). Where the KV cache the runtime allocates cannot hold ``batch`` sequences, the
running batch is capped at what it holds (as vLLM's scheduler admits only sequences whose
blocks fit); the deployment is infeasible only when not even one sequence fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from energylens.cost.memory import MemoryUse
from energylens.cost.step import (
    ZERO,
    SequenceGroup,
    decode_step_cost,
    engine_cost,
    step_cost,
    with_engine,
)
from energylens.cost.work import Size
from energylens.workloads.capacity import kv_capped
from energylens.workloads.registry import MemoryDemand, Placement, register, sequence_replicas
from energylens.workloads.result import (
    Columns,
    Prediction,
    feasibility,
    marginal_phase,
    phase_columns,
    prediction,
    value,
)
from energylens.workloads.workload import Workload

#: Median of Poisson(lambda) ~ max(lambda - ln 2, 0) (exact at the threshold lambda = ln 2).
MEDIAN_POISSON_OFFSET = float(np.log(2.0))
#: Prompt counts priced exactly (0, 1, ...); larger counts are priced at their conditional mean.
EXACT_ARRIVAL_COUNTS = 2


def arrival_mixture(mean: Size) -> list[tuple[Size, Size]]:
    """(prompt count, probability) points standing in for Poisson(``mean``) arrivals per
    step: counts 0 .. EXACT_ARRIVAL_COUNTS - 1 exactly, the tail at its conditional mean.
    Probabilities sum to 1 and the points' mean is ``mean``. With an array of means the
    tail point is always there, with probability 0 where the tail is negligible (one
    number drops it)."""
    points: list[tuple[Size, Size]] = []
    prob = value(np.exp(-mean))
    head_mass: Size = 0.0
    head_mean: Size = 0.0
    for count in range(EXACT_ARRIVAL_COUNTS):
        points.append((float(count), prob))
        head_mass = head_mass + prob  # never in place: ``prob`` may be an array in points
        head_mean = head_mean + count * prob
        prob = prob * (mean / (count + 1))
    tail = 1.0 - head_mass
    kept = tail > 1e-12
    if np.ndim(mean) == 0 and not kept:
        return points
    conditional = (mean - head_mean) / np.where(kept, tail, 1.0)
    points.append((value(np.where(kept, conditional, float(EXACT_ARRIVAL_COUNTS))),
                   value(np.where(kept, tail, 0.0))))
    return points


def _interp(x: Size, xs: list[Size], ys: list[Size]) -> Size:
    """``np.interp(x, xs, ys)`` with the points' abscissae and ordinates per configuration
    (numbers or arrays; ``xs`` increasing), by numpy's own formula."""
    result = ys[-1]
    for j in range(len(xs) - 2, -1, -1):
        slope = (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j])
        inside = slope * (x - xs[j]) + ys[j]
        result = np.where(x < xs[j + 1], np.where(x == xs[j], ys[j], inside), result)
    return value(np.where(x < xs[0], ys[0], result))


@dataclass(frozen=True)
class SteadyState:
    """Each step decodes ``batch`` sequences and admits k prompts, k ~ Poisson(batch / out)."""

    name: str = "serving"

    def memory_demand(self, *, workload: Workload, sequences: Size) -> MemoryDemand:
        """Running sequences spread over their lifetimes (mean context in + out / 2)."""
        s_in, s_out = workload.input_tokens, workload.output_tokens
        return MemoryDemand(sequences=value(np.ceil(sequences)), context_tokens=s_in + s_out / 2)

    def busy_replicas(self, *, workload: Workload, batch: Size, replicas: Size) -> Size:
        """Replicas with a sequence (:func:`sequence_replicas`)."""
        return sequence_replicas(batch=batch, replicas=replicas)

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """A prompt is prefilled whole in the step that admits it, so the mean step is the
        Poisson mixture of step costs (not the cost of the mean: a step with one whole
        prompt wakes far more experts, and is far less memory-bound, than every step
        carrying a sliver of one). Throughput and energy per token follow the MEAN step;
        the inter-token latency is the MEDIAN step, the step with the median prompt count
        (0 while the mean is below ln 2, ~mean - ln 2 beyond: a smooth stand-in for the
        integer median, interpolated between priced counts)."""
        columns = self.columns(placement=placement, workload=workload, memory=memory,
                               batch=workload.batch)
        return prediction(columns=columns, model=placement.model.name,
                          gpu=placement.ctx.gpu.name, workload=self.name)

    def columns(self, *, placement: Placement, workload: Workload, memory: MemoryUse,
                batch: Size) -> Columns:
        """:meth:`run` as columns (arrays over configurations for many; ``batch``, the
        workload's batch, is not read: the placement's sequences are the batch here)."""
        del batch
        ctx = placement.ctx
        s_in, s_out = workload.input_tokens, workload.output_tokens
        batch, memory = self._capped(placement=placement, workload=workload, memory=memory)
        decode_seqs = SequenceGroup(sequences=batch, new_tokens=1.0, context=s_in + s_out / 2)
        arrivals = batch / s_out
        engine = engine_cost(ctx=ctx, sequences=batch)
        plain = with_engine(ctx=ctx, cost=step_cost(ctx=ctx, seqs=[decode_seqs], pipelined=True),
                            engine=engine)
        # A speculative step yields several tokens per sequence: a step here is the share
        # of one that yields one token each, and a prompt's admission adds its whole work.
        decode_only = plain if ctx.speculation is None else with_engine(
            ctx=ctx, cost=decode_step_cost(ctx=ctx, seqs=[decode_seqs], pipelined=True),
            engine=engine.scaled(1.0 / ctx.tokens_per_decode_step))
        speculative = decode_only + plain.scaled(-1.0)  # zero without speculation
        points = arrival_mixture(arrivals)
        counts = [count for count, _ in points]
        costs = [decode_only if np.ndim(count) == 0 and count == 0 else with_engine(
            ctx=ctx, cost=step_cost(ctx=ctx, seqs=[decode_seqs, SequenceGroup(
                sequences=count, new_tokens=s_in, context=s_in)], pipelined=True),
            engine=engine) + speculative for count in counts]
        mean = sum((cost.scaled(prob) for cost, (_, prob) in zip(costs, points, strict=True)),
                   ZERO)
        step_s = value(mean.latency_s)
        decode_s = value(decode_only.latency_s)
        times = [value(c.latency_s) for c in costs]
        median_itl_s = _interp(np.maximum(arrivals - MEDIAN_POISSON_OFFSET, 0.0), counts, times)
        static_w = ctx.constants.static_power_w
        replicas, gpus = placement.replicas * 1.0, placement.gpus
        decode = phase_columns(cost=decode_only.scaled(replicas), wall_s=decode_s,
                               static_w=static_w, gpus=gpus)
        whole = phase_columns(cost=mean.scaled(replicas), wall_s=step_s, static_w=static_w,
                              gpus=gpus)
        prefill = marginal_phase(whole=whole, rest=decode)
        tokens_per_step = batch * replicas
        per_token = whole["energy_j"] / tokens_per_step
        feasible, reason = feasibility(memory=memory, gpu_name=ctx.gpu.name,
                                       model=placement.model, workload=workload)
        return {
            "feasible": feasible, "infeasible_reason": reason, "num_gpus": gpus,
            "memory_per_gpu_gb": value(memory.total_bytes / 1e9),
            "ttft_s": _interp(1.0, counts, times), "tpot_s": median_itl_s,
            "energy_per_output_token_j": per_token, "energy_per_request_j": per_token * s_out,
            "avg_power_w": whole["energy_j"] / step_s,
            "output_tokens_per_s": tokens_per_step / step_s, "running_batch": batch,
            # the phases split one mean step: its decode-only time and what prompts add
            **{f"prefill_{k}": v
               for k, v in {**prefill, "latency_s": np.maximum(step_s - decode_s, 0.0)}.items()},
            **{f"decode_{k}": v for k, v in {**decode, "latency_s": decode_s}.items()},
        }

    def _capped(self, *, placement: Placement, workload: Workload,
                memory: MemoryUse) -> tuple[Size, MemoryUse]:
        """The running batch per replica and its memory (:func:`kv_capped`)."""
        return kv_capped(placement=placement, memory=memory,
                         demand=lambda n: self.memory_demand(workload=workload, sequences=n))


register(SteadyState())
