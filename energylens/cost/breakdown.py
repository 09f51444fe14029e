"""Where one forward step's time goes: its kernels by class, the collectives the GPUs wait
for, the pipeline and the engine's own time (``predict --breakdown``)."""

from __future__ import annotations

import numpy as np

from energylens.cost.kernel_plan import vector_class
from energylens.cost.kernels import Kernel
from energylens.cost.step import (
    STEP_RECORDER,
    SequenceGroup,
    StepContext,
    engine_cost,
    join_engine_s,
    step_cost,
)
from energylens.cost.work import Size

#: Classes in the order a table lists them; the shares of one step sum to its wall time.
CLASSES = ("GEMM", "MoE experts", "attention", "norm, rope, activation", "quantisation",
           "other vector ops", "communication", "expert-parallel layer", "pipeline", "engine")


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


def step_breakdown(*, ctx: StepContext, seqs: list[SequenceGroup],
                   pipelined: bool = True) -> dict[str, float]:
    """Seconds of one step of ``seqs`` per class (:data:`CLASSES`, zero ones left out) on
    the critical GPU; they sum to the step's wall time with the engine's time joined as the
    runtime joins it (beside the GPUs under an overlap scheduler: only what outlasts them).
    ``pipeline`` is what pipeline stages add (bubbles, sends, other micro-batches)."""
    seconds = dict.fromkeys(CLASSES, 0.0)

    def record(item: Kernel | str, latency: Size) -> None:
        label = item if isinstance(item, str) else kernel_class(item)
        seconds[label] += float(np.max(latency))

    token = STEP_RECORDER.set(record)
    try:
        gpu_s = float(np.max(step_cost(ctx=ctx, seqs=seqs, pipelined=pipelined).latency_s))
    finally:
        STEP_RECORDER.reset(token)
    priced = sum(seconds.values())
    seconds["pipeline"] = gpu_s - priced if gpu_s - priced > 1e-9 * gpu_s else 0.0
    sequences = sum(float(np.max(s.sequences)) for s in seqs)
    engine_s = float(np.max(engine_cost(ctx=ctx, sequences=sequences).latency_s))
    seconds["engine"] = float(np.max(join_engine_s(ctx=ctx, gpu_s=gpu_s, engine_s=engine_s))) \
        - gpu_s
    return {label: value for label, value in seconds.items() if value > 0.0}




def representative_breakdown(*, ctx: StepContext, sequences: float, input_tokens: float,
                             output_tokens: float) -> dict[str, dict[str, float]]:
    """:func:`step_breakdown` of a decode step of ``sequences`` running sequences halfway
    through their outputs, and of one prompt's prefill."""
    decode = SequenceGroup(sequences=max(sequences, 1.0), new_tokens=1.0,
                           context=input_tokens + output_tokens / 2)
    prefill = SequenceGroup(sequences=1.0, new_tokens=input_tokens, context=input_tokens)
    return {"decode": step_breakdown(ctx=ctx, seqs=[decode]),
            "prefill": step_breakdown(ctx=ctx, seqs=[prefill], pipelined=False)}
