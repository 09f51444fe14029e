"""One static batch: prefill of ``batch x input_tokens``, then ``output_tokens`` decode
steps with a growing context.

Decode is integrated with the midpoint rule over a few context segments (per-op costs are
piecewise linear in the context, so a handful of points is exact up to the roofline kink)
instead of a per-token loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from energylens.cost.memory import MemoryUse
from energylens.cost.step import SequenceGroup, StepCost, engine_cost, step_cost
from energylens.workloads.registry import MemoryDemand, Placement, register
from energylens.workloads.result import Prediction, phase_result
from energylens.workloads.workload import Workload

#: Context segments of the decode integral.
DECODE_SEGMENTS = 4


def _mean_over_points(cost: StepCost) -> StepCost:
    """The cost per step averaged over the context points it was priced at."""
    return StepCost(**{k: float(np.sum(np.asarray(v) * (1.0 / DECODE_SEGMENTS)))
                       for k, v in cost.__dict__.items()})


@dataclass(frozen=True)
class StaticBatch:
    """Prefill the whole batch, then decode it to the last token."""

    name: str = "batch"

    def memory_demand(self, *, workload: Workload, sequences: float) -> MemoryDemand:
        """Every sequence at its final context; the whole batch's prompts in one pass."""
        return MemoryDemand(sequences=float(np.ceil(sequences)),
                            context_tokens=workload.input_tokens + workload.output_tokens,
                            step_tokens=float(np.ceil(sequences) * workload.input_tokens))

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """TTFT = the prefill step; TPOT = the mean decode step."""
        ctx, batch = placement.ctx, placement.sequences
        s_in, s_out = workload.input_tokens, workload.output_tokens
        engine = engine_cost(ctx=ctx, sequences=batch)
        prefill_cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=batch, new_tokens=s_in,
                                                              context=s_in)]) + engine
        prefill_wall = float(prefill_cost.latency_s)
        steps = max(int(round(s_out)) - 1, 0)  # the first token comes out of the prefill
        edges = np.linspace(s_in + 1, s_in + max(steps, 1), DECODE_SEGMENTS + 1)
        contexts = (edges[:-1] + edges[1:]) / 2
        decode_cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=batch, new_tokens=1.0,
                                                             context=contexts)])
        per_step = _mean_over_points(decode_cost) + engine
        tpot = float(per_step.latency_s)
        static_w = ctx.constants.static_power_w
        replicas, gpus = float(placement.replicas), placement.gpus
        prefill = phase_result(cost=prefill_cost.scaled(replicas), wall_s=prefill_wall,
                               static_w=static_w, gpus=gpus)
        decode = phase_result(cost=per_step.scaled(float(steps)).scaled(replicas),
                              wall_s=tpot * steps, static_w=static_w, gpus=gpus)
        total_energy = prefill.energy_j + decode.energy_j
        wall = prefill.latency_s + decode.latency_s
        output_tokens = workload.batch * s_out
        reason = memory.shortfall(gpu_name=ctx.gpu.name)
        return Prediction(
            model=placement.model.name, gpu=ctx.gpu.name, num_gpus=gpus, workload=self.name,
            feasible=reason is None, infeasible_reason=reason,
            memory_per_gpu_gb=float(memory.total_bytes / 1e9), ttft_s=prefill_wall, tpot_s=tpot,
            energy_per_output_token_j=total_energy / output_tokens,
            energy_per_request_j=total_energy / workload.batch,
            avg_power_w=total_energy / wall, output_tokens_per_s=output_tokens / wall,
            prefill=prefill, decode=decode, running_batch=placement.sequences,
        )


register(StaticBatch())
