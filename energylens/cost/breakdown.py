"""Where one forward step's time and energy go: its kernels by class, the collectives, the
pipeline, the engine's own time and the GPUs' static power (``predict --breakdown``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from energylens.cost.kernel_plan import vector_class
from energylens.cost.kernels import Kernel
from energylens.cost.step import (
    STEP_RECORDER,
    SequenceGroup,
    StepContext,
    engine_cost,
    join_engine_s,
    micro_batches,
    step_cost,
)
from energylens.cost.work import Size
from energylens.model.families import LayerGroup

#: Classes in the order a table lists them. Times on the critical GPU sum to the step's
#: wall time; energies over the replica's GPUs to its energy (``static``: the static power
#: of every GPU over the wall time, which has no time of its own).
CLASSES = ("GEMM", "MoE experts", "attention", "norm, rope, activation", "quantisation",
           "other vector ops", "communication", "expert-parallel layer", "pipeline", "engine",
           "static")


def kernel_class(kernel: Kernel) -> str:
    """The class of one kernel: the experts' GEMMs, attention (a contraction over the
    context), other GEMMs, activation quantisation, or a vector op by kind."""
    if kernel.is_expert and any(op.kind == "contraction" for op in kernel.ops):
        return "MoE experts"
    if any(op.kind == "contraction" for op in kernel.ops):
        return "attention" if kernel.touches_context else "GEMM"
    if all(op.function == "quant" for op in kernel.ops):
        return "quantisation"
    klass = vector_class(kernel)
    return "norm, rope, activation" if klass in ("norm", "rope", "activation") \
        else "other vector ops"


@dataclass(frozen=True, kw_only=True)
class StepBreakdown:
    """Seconds on the critical GPU and joules over the replica's GPUs per class (classes
    with neither left out)."""

    seconds: dict[str, float]
    joules: dict[str, float]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{"seconds": {...}, "joules": {...}}``."""
        return {"seconds": dict(self.seconds), "joules": dict(self.joules)}


def step_breakdown(*, ctx: StepContext, seqs: list[SequenceGroup],
                   pipelined: bool = True) -> StepBreakdown:
    """One step of ``seqs`` per class (:data:`CLASSES`). The engine's time is joined as the
    runtime joins it (beside the GPUs under an overlap scheduler: only what outlasts them);
    ``pipeline`` is what pipeline stages add (bubbles, sends, other micro-batches; the
    sends' energy)."""
    seconds = dict.fromkeys(CLASSES, 0.0)
    # per group (by identity) and pass (critical GPU, mean rank): joules per GPU by class;
    # a group priced by both passes takes its energy from the mean rank's
    per_gpu_j: dict[tuple[int, bool], dict[str, float]] = {}

    def record(group: LayerGroup, item: Kernel | str, latency: Size, energy: Size,
               critical: bool) -> None:
        label = item if isinstance(item, str) else kernel_class(item)
        if critical:
            seconds[label] += float(np.max(latency))
        by_class = per_gpu_j.setdefault((id(group), critical), {})
        by_class[label] = by_class.get(label, 0.0) + float(np.max(energy))

    token = STEP_RECORDER.set(record)
    try:
        step = step_cost(ctx=ctx, seqs=seqs, pipelined=pipelined)
    finally:
        STEP_RECORDER.reset(token)
    gpu_s = float(np.max(step.latency_s))
    priced = sum(seconds.values())
    seconds["pipeline"] = gpu_s - priced if gpu_s - priced > 1e-9 * gpu_s else 0.0
    sequences = sum(float(np.max(s.sequences)) for s in seqs)
    engine = engine_cost(ctx=ctx, sequences=sequences)
    wall = float(np.max(join_engine_s(ctx=ctx, gpu_s=gpu_s, engine_s=engine.latency_s)))
    seconds["engine"] = wall - gpu_s
    joules = dict.fromkeys(CLASSES, 0.0)
    # one micro-batch's layers were recorded, on one GPU of each stage's tp x adp
    ranks = dict(ctx.degrees)["tp"] * ctx.attention_ranks
    micro = float(np.max(micro_batches(ctx=ctx, seqs=seqs)))
    for (group_id, critical), by_class in per_gpu_j.items():
        if critical and (group_id, False) in per_gpu_j:
            continue  # the mean rank's pass prices this group's energy
        for label, energy in by_class.items():
            joules[label] += energy * ranks * micro
    # the stage-to-stage sends' transfer energy, which no group records
    dynamic = float(np.max(step.compute_energy_j + step.memory_energy_j
                           + step.communication_energy_j))
    sends = dynamic - sum(joules.values())
    joules["pipeline"] = sends if sends > 1e-9 * dynamic else 0.0
    joules["engine"] = 0.0 if ctx.cpu_overlapped else float(np.max(engine.compute_energy_j))
    joules["static"] = ctx.constants.static_power_w * ctx.replica_gpus * wall
    return StepBreakdown(seconds={k: v for k, v in seconds.items() if v > 0.0},
                         joules={k: v for k, v in joules.items() if v > 0.0})


def representative_breakdown(*, ctx: StepContext, sequences: float, input_tokens: float,
                             output_tokens: float) -> dict[str, StepBreakdown]:
    """:func:`step_breakdown` of a decode step of ``sequences`` running sequences halfway
    through their outputs, and of one prompt's prefill."""
    decode = SequenceGroup(sequences=max(sequences, 1.0), new_tokens=1.0,
                           context=input_tokens + output_tokens / 2)
    prefill = SequenceGroup(sequences=1.0, new_tokens=input_tokens, context=input_tokens)
    return {"decode": step_breakdown(ctx=ctx, seqs=[decode]),
            "prefill": step_breakdown(ctx=ctx, seqs=[prefill], pipelined=False)}
