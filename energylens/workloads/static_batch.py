"""One static batch: prefill of ``batch x input_tokens``, then ``output_tokens`` decode
steps with a growing context.

Decode is integrated with the midpoint rule over a few context segments (per-op costs are
piecewise linear in the context, so a handful of points is exact up to the roofline kink)
instead of a per-token loop. Array-polymorphic: the batch (and the placement's clock and
overlap SMs) may be arrays over configurations; the context points then lie on a leading
axis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from energylens.cost.memory import MemoryUse
from energylens.cost.step import (
    SequenceGroup,
    StepContext,
    StepCost,
    decode_step_cost,
    engine_cost,
    join_engine_s,
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
    phase_columns,
    prediction,
    value,
)
from energylens.workloads.workload import Workload

#: Context segments of the decode integral.
DECODE_SEGMENTS = 4


def _mean_over_points(cost: StepCost, *, points_ndim: int) -> StepCost:
    """The cost per step averaged over the context points it was priced at (the leading
    axis of fields with ``points_ndim`` dimensions); a field that does not vary with the
    context (a collective's energy) is the same at every point, so it is its own mean."""
    return StepCost(**{k: np.sum(np.asarray(v) * (1.0 / DECODE_SEGMENTS), axis=0)
                       if np.ndim(v) == points_ndim else v
                       for k, v in cost.__dict__.items()})


@dataclass(frozen=True)
class StaticBatch:
    """Prefill the whole batch, then decode it to the last token."""

    name: str = "batch"

    def memory_demand(self, *, workload: Workload, sequences: Size) -> MemoryDemand:
        """Every sequence at its final context, run by the engine's offline API."""
        return MemoryDemand(sequences=value(np.ceil(sequences)),
                            context_tokens=workload.input_tokens + workload.output_tokens,
                            offline=True)

    def busy_replicas(self, *, workload: Workload, batch: Size, replicas: Size) -> Size:
        """Replicas with a sequence (:func:`sequence_replicas`)."""
        return sequence_replicas(batch=batch, replicas=replicas)

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """TTFT = the prefill step; TPOT = the mean decode step (over the sequences, where
        the batch runs in waves: :meth:`columns`)."""
        columns = self.columns(placement=placement, workload=workload, memory=memory,
                               batch=workload.batch)
        return prediction(columns=columns, model=placement.model.name,
                          gpu=placement.ctx.gpu.name, workload=self.name)

    def columns(self, *, placement: Placement, workload: Workload, memory: MemoryUse,
                batch: Size) -> Columns:
        """:meth:`run` as columns; ``batch`` is the workload's batch (an array for many).

        A batch whose KV cache does not fit runs in waves of the largest batch that fits
        (the engine admits what fits and runs the rest as slots free): each wave a whole
        prefill and decode, latency and energy summed; ``running_batch`` is that cap. TPOT
        is then the mean over the sequences of their wave's decode step (a last wave of one
        sequence runs fast, but for one sequence only); TTFT is the first wave's.
        Infeasible only when the weights plus one sequence do not fit, and then priced
        whole, as if it fit (:func:`kv_capped`)."""
        ctx, sequences = placement.ctx, placement.sequences
        cap, memory = kv_capped(placement=placement, memory=memory, whole=True,
                                demand=lambda n: self.memory_demand(workload=workload,
                                                                    sequences=n))
        full = np.floor(sequences / cap)  # 1 when the batch fits
        rest = value(sequences - full * cap)
        prefill, decode, ttft, tpot = self._wave(placement=placement, workload=workload,
                                                 sequences=cap)
        prefill = {k: v * full for k, v in prefill.items()}
        decode = {k: v * full for k, v in decode.items()}
        tpot_sum = tpot * full * cap  # each sequence's step time, summed
        if np.any(rest > 0):  # a last, smaller wave
            last = rest > 0
            tail = self._wave(placement=placement, workload=workload,
                              sequences=value(np.where(last, rest, cap)))
            prefill = {k: v + last * tail[0][k] for k, v in prefill.items()}
            decode = {k: v + last * tail[1][k] for k, v in decode.items()}
            tpot_sum = tpot_sum + last * rest * tail[3]
        s_out = workload.output_tokens
        total_energy = prefill["energy_j"] + decode["energy_j"]
        wall = prefill["latency_s"] + decode["latency_s"]
        output_tokens = batch * s_out
        feasible, reason = feasibility(memory=memory, gpu_name=ctx.gpu.name,
                                       model=placement.model, workload=workload)
        return {
            "feasible": feasible, "infeasible_reason": reason, "num_gpus": placement.gpus,
            "memory_per_gpu_gb": value(memory.total_bytes / 1e9), "ttft_s": ttft,
            "tpot_s": value(tpot_sum / sequences), "energy_per_output_token_j": total_energy / output_tokens,
            "energy_per_request_j": total_energy / batch, "avg_power_w": total_energy / wall,
            "output_tokens_per_s": output_tokens / wall, "running_batch": cap,
            **{f"prefill_{k}": value(v) for k, v in prefill.items()},
            **{f"decode_{k}": value(v) for k, v in decode.items()},
        }

    def _wave(self, *, placement: Placement, workload: Workload,
              sequences: Size) -> tuple[dict[str, Size], dict[str, Size], Size, Size]:
        """One wave of ``sequences`` per replica: (prefill phase, decode phase, its
        prefill time, its mean decode step)."""
        ctx = placement.ctx
        s_in, s_out = workload.input_tokens, workload.output_tokens
        engine = engine_cost(ctx=ctx, sequences=sequences)
        prefill_cost = _prefill_cost(ctx=ctx, sequences=sequences, input_tokens=s_in,
                                     chunk=placement.prefill_chunk_tokens
                                     or ctx.runtime.static_chunk_on(gpu=ctx.gpu),
                                     engine=engine)
        prefill_wall = value(prefill_cost.latency_s)
        # the first token comes out of the prefill; a mean length's fraction of a step too
        steps = max(s_out - 1.0, 0.0)
        edges = np.linspace(s_in + 1, s_in + max(steps, 1), DECODE_SEGMENTS + 1)
        contexts = ((edges[:-1] + edges[1:]) / 2).reshape((-1,) + (1,) * np.ndim(sequences))
        # per token a sequence gains (a speculative step yields several)
        decode_cost = decode_step_cost(ctx=ctx, seqs=[SequenceGroup(
            sequences=sequences, new_tokens=1.0, context=contexts)], pipelined=True)
        per_step = with_engine(ctx=ctx, cost=_mean_over_points(decode_cost,
                                                               points_ndim=contexts.ndim),
                               engine=engine.scaled(1.0 / ctx.tokens_per_decode_step))
        tpot = value(per_step.latency_s)
        static_w = ctx.constants.static_power_w
        replicas, gpus = placement.replicas * 1.0, placement.gpus
        prefill = phase_columns(cost=prefill_cost.scaled(replicas), wall_s=prefill_wall,
                                static_w=static_w, gpus=gpus)
        decode = phase_columns(cost=per_step.scaled(float(steps)).scaled(replicas),
                               wall_s=tpot * steps, static_w=static_w, gpus=gpus)
        return prefill, decode, prefill_wall, tpot


def _prefill_cost(*, ctx: StepContext, sequences: Size, input_tokens: float,
                  chunk: int | None, engine: StepCost) -> StepCost:
    """The prompts of ``sequences`` sequences in one forward pass (``engine``: the
    runtime's cost of a step of them), or with a ``chunk`` (prompt tokens per pass: the
    deployment's, else the engine's) in passes of equal size: whole prompts where one
    fits a pass, else a part of one prompt per pass (llama.cpp's ubatch). A part of a
    prompt attends to the parts before it: the passes are priced at their mean context,
    halfway between the part and the whole prompt (attention is linear in the context, so
    the sum is exact for equal parts); over an array of batches the passes share the
    smallest batch's tokens per prompt."""
    if chunk is None:
        return with_engine(ctx=ctx, cost=step_cost(ctx=ctx, seqs=[SequenceGroup(
            sequences=sequences, new_tokens=input_tokens, context=input_tokens)]), engine=engine)
    tokens = sequences * input_tokens
    passes = np.maximum(np.ceil(tokens / chunk), 1.0)
    per_pass = tokens / passes
    new_tokens = float(np.min(np.minimum(input_tokens, per_pass)))
    group = SequenceGroup(sequences=value(per_pass / new_tokens), new_tokens=new_tokens,
                          context=(input_tokens + new_tokens) / 2)
    one = step_cost(ctx=ctx, seqs=[group])
    engine = engine_cost(ctx=ctx, sequences=group.sequences)
    total = with_engine(ctx=ctx, cost=one, engine=engine).scaled(value(passes))
    if ctx.pp > 1 and ctx.runtime.pipelines_prompt_passes:
        # a pass enters the first stage as the one before leaves it: the passes take
        # passes + pp - 1 stage times instead of pp each (same work, same energy)
        stages = value((passes + ctx.pp - 1.0) / (passes * ctx.pp))
        total = replace(total, latency_s=join_engine_s(
            ctx=ctx, gpu_s=one.latency_s * value(passes) * stages,
            engine_s=engine.latency_s * value(passes)))
    return total


register(StaticBatch())
