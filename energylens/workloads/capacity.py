"""The largest running batch the KV space holds: engines admit what fits and keep the
rest waiting (vLLM's and TensorRT-LLM's schedulers cap the running batch, llama.cpp has
fixed slots) instead of refusing the deployment."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

from energylens.cost.memory import MemoryUse, memory_use, startup_tokens
from energylens.cost.work import Size
from energylens.workloads.registry import MemoryDemand, Placement
from energylens.workloads.result import Prediction, value

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.workloads.workload import Workload


def kv_capped(*, placement: Placement, memory: MemoryUse, demand: Callable[[Size], MemoryDemand],
              whole: bool = False) -> tuple[Size, MemoryUse]:
    """The running batch per replica and its memory: the placement's sequences if they
    fit, else as many sequences as the KV space left after weights, activations and the
    reserve holds (``whole``: a whole number of them), with the memory they use. Where
    not even one sequence fits, the placement's sequences come back, to be priced as if
    they fit, with the memory of one sequence (its shortfall is why the deployment is
    infeasible). ``demand(n)`` is what ``n`` sequences need; per
    configuration when the placement holds arrays. The activations are the engine's
    start-up workspace (:func:`memory_use`), the same for any batch, so the KV space is
    too and asking for more sequences never runs fewer."""
    batch = placement.sequences
    per_sequence = (memory.kv_cache_bytes + memory.state_bytes) / demand(batch).sequences
    free = (memory.usable_bytes - memory.weights_bytes - memory.activation_bytes
            - memory.reserve_bytes)
    spread = per_sequence > 0
    held = np.where(spread, free / np.where(spread, per_sequence, 1.0), 0.0)
    held = np.maximum(np.floor(held) if whole else held, 1.0)
    done = np.asarray(memory.fits)
    if done.all():
        return batch, memory
    ctx = placement.ctx
    capped_batch: Size = batch
    capped = memory
    budget = startup_tokens(runtime=ctx.runtime, gpu=ctx.gpu, attention_ranks=ctx.attention_ranks,
                            budget=placement.prefill_chunk_tokens, offline=demand(batch).offline)
    # rounding can leave the KV space a hair short of ``held``: one fewer until it fits
    while not done.all():
        need = demand(value(held))
        trial = memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                           degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                           kv_dtype=ctx.kv_dtype, sequences=need.sequences,
                           context_tokens=need.context_tokens, token_budget=budget,
                           draft_layers=ctx.draft_layers)
        fits = np.asarray(trial.fits)
        take = ~done & (fits | (held <= 1.0))  # one sequence that does not fit: its memory
        # and the batch as asked, priced as if it fit (one-sequence waves would price a
        # batch of one: 15x shorter TTFT than the deployment that fits)
        capped_batch = value(np.where(take, np.where(fits, held, batch), capped_batch))
        kept: dict[str, Any] = {f.name: value(np.where(take, getattr(trial, f.name),
                                                       getattr(capped, f.name)))
                                for f in fields(MemoryUse)}
        capped = MemoryUse(**kept)
        done = done | fits | (held <= 1.0)
        # a fractional count first drops to its whole part (which may fit: 8.4 -> 8),
        # a whole one by one
        below = np.where(held > np.floor(held), np.floor(held), held - 1.0)
        held = np.where(done, held, np.maximum(below, 1.0))
    return capped_batch, capped


def kv_cache_limit(*, result: Prediction, workload: Workload,
                   deployment: Deployment) -> str | None:
    """What the KV cache, rather than the workload, decided in ``result``: a serving batch
    capped below the one asked per replica, a static batch run in waves, or a load run
    that preempted requests; None when it decided nothing (or the deployment does not
    fit)."""
    if not result.feasible:
        return None
    if result.workload in ("serving", "batch") and result.running_batch is not None:
        asked = workload.batch / deployment.replicas
        running = result.running_batch
        if running < asked - 0.5:
            if result.workload == "batch":
                return (f"KV cache full: the {asked:,.0f} sequences per replica run in "
                        f"{math.ceil(asked / running - 1e-9)} waves of at most {running:,.0f}")
            return (f"KV cache full: {running:,.0f} of the {asked:,.0f} "
                    "sequences per replica run at once")
    load = getattr(result, "load", None)
    if isinstance(load, Mapping) and int(load.get("preemptions", 0)) > 0:
        return (f"KV cache full: {int(load['preemptions']):,} preemptions, mean queue "
                f"{float(load['mean_queue_length']):,.1f} requests")
    return None
