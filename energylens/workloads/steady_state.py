"""Steady-state continuous batching (``serving``).

Every step decodes one token for each of ``batch`` running sequences at the mean context
and admits a Poisson number of new prompts (mean ``batch / output_tokens``), prefilled
whole in the same forward pass (chunked prefill with prompts shorter than the token
budget). Where the KV cache the runtime allocates cannot hold ``batch`` sequences, the
running batch is capped at what it holds (as vLLM's scheduler admits only sequences whose
blocks fit); the deployment is infeasible only when not even one sequence fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from energylens.cost.memory import MemoryUse, memory_use
from energylens.cost.step import ZERO, SequenceGroup, engine_cost, step_cost
from energylens.workloads.registry import MemoryDemand, Placement, register
from energylens.workloads.result import Prediction, marginal_phase, phase_result
from energylens.workloads.workload import Workload

#: Median of Poisson(lambda) ~ max(lambda - ln 2, 0) (exact at the threshold lambda = ln 2).
MEDIAN_POISSON_OFFSET = float(np.log(2.0))
#: Prompt counts priced exactly (0, 1, ...); larger counts are priced at their conditional mean.
EXACT_ARRIVAL_COUNTS = 2


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


@dataclass(frozen=True)
class SteadyState:
    """Each step decodes ``batch`` sequences and admits k prompts, k ~ Poisson(batch / out)."""

    name: str = "serving"

    def memory_demand(self, *, workload: Workload, sequences: float) -> MemoryDemand:
        """Running sequences spread over their lifetimes (mean context in + out / 2); a
        step holds the decodes plus the prompts admitted in it."""
        s_in, s_out = workload.input_tokens, workload.output_tokens
        return MemoryDemand(sequences=float(np.ceil(sequences)), context_tokens=s_in + s_out / 2,
                            step_tokens=sequences + sequences / s_out * s_in)

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """A prompt is prefilled whole in the step that admits it, so the mean step is the
        Poisson mixture of step costs (not the cost of the mean: a step with one whole
        prompt wakes far more experts, and is far less memory-bound, than every step
        carrying a sliver of one). Throughput and energy per token follow the MEAN step;
        the inter-token latency is the MEDIAN step, the step with the median prompt count
        (0 while the mean is below ln 2, ~mean - ln 2 beyond: a smooth stand-in for the
        integer median, interpolated between priced counts)."""
        ctx = placement.ctx
        s_in, s_out = workload.input_tokens, workload.output_tokens
        batch, memory = self._capped(placement=placement, workload=workload, memory=memory)
        decode_seqs = SequenceGroup(sequences=batch, new_tokens=1.0, context=s_in + s_out / 2)
        arrivals = batch / s_out
        engine = engine_cost(ctx=ctx, sequences=batch)
        decode_only = step_cost(ctx=ctx, seqs=[decode_seqs]) + engine
        points = arrival_mixture(arrivals)
        counts = [count for count, _ in points]
        costs = [decode_only if count == 0 else step_cost(
            ctx=ctx, seqs=[decode_seqs, SequenceGroup(sequences=count, new_tokens=s_in,
                                                      context=s_in)]) + engine
                 for count in counts]
        mean = sum((cost.scaled(prob) for cost, (_, prob) in zip(costs, points, strict=True)),
                   ZERO)
        step_s = float(mean.latency_s)
        decode_s = float(decode_only.latency_s)
        times = [float(c.latency_s) for c in costs]
        median_itl_s = float(np.interp(max(arrivals - MEDIAN_POISSON_OFFSET, 0.0), counts, times))
        static_w = ctx.constants.static_power_w
        replicas, gpus = float(placement.replicas), placement.gpus
        decode = phase_result(cost=decode_only.scaled(replicas), wall_s=decode_s,
                              static_w=static_w, gpus=gpus)
        whole = phase_result(cost=mean.scaled(replicas), wall_s=step_s, static_w=static_w,
                             gpus=gpus)
        prefill = marginal_phase(whole=whole, rest=decode)
        tokens_per_step = batch * replicas
        per_token = whole.energy_j / tokens_per_step
        reason = memory.shortfall(gpu_name=ctx.gpu.name)
        return Prediction(
            model=placement.model.name, gpu=ctx.gpu.name, num_gpus=gpus, workload=self.name,
            feasible=reason is None, infeasible_reason=reason,
            memory_per_gpu_gb=float(memory.total_bytes / 1e9),
            ttft_s=float(np.interp(1.0, counts, times)), tpot_s=median_itl_s,
            energy_per_output_token_j=per_token,
            energy_per_request_j=per_token * s_out, avg_power_w=whole.energy_j / step_s,
            output_tokens_per_s=tokens_per_step / step_s,
            prefill=replace(prefill, latency_s=step_s), decode=replace(decode, latency_s=step_s),
            running_batch=batch,
        )

    def _capped(self, *, placement: Placement, workload: Workload,
                memory: MemoryUse) -> tuple[float, MemoryUse]:
        """The running batch per replica and its memory: the requested one if it fits,
        else as many sequences as the KV space left after weights, activations and the
        reserve holds (at least one; with fewer the deployment stays infeasible)."""
        batch = placement.sequences
        if memory.fits:
            return batch, memory
        per_sequence = (memory.kv_cache_bytes + memory.state_bytes) / self.memory_demand(
            workload=workload, sequences=batch).sequences
        free = (memory.usable_bytes - memory.weights_bytes - memory.activation_bytes
                - memory.reserve_bytes)
        held = free / per_sequence if per_sequence > 0 else 0.0
        if held < 1.0:
            return batch, memory
        ctx = placement.ctx
        # the step holds fewer tokens too: shrink until the whole working set fits
        while True:
            demand = self.memory_demand(workload=workload, sequences=held)
            capped = memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                                degrees=dict(ctx.degrees), pp=ctx.pp,
                                weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype,
                                sequences=demand.sequences, context_tokens=demand.context_tokens,
                                step_tokens=demand.step_tokens)
            if capped.fits or held <= 1.0:
                return (held, capped) if capped.fits else (batch, memory)
            held = max(np.floor(held) - 1.0, 1.0)


register(SteadyState())
