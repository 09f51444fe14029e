"""The largest running batch the KV space holds: engines admit what fits and keep the
rest waiting (vLLM's and TensorRT-LLM's schedulers cap the running batch, llama.cpp has
fixed slots) instead of refusing the deployment."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np

from energylens.cost.memory import MemoryUse, memory_use
from energylens.cost.work import Size
from energylens.workloads.registry import MemoryDemand, Placement
from energylens.workloads.result import Prediction, value

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.workloads.workload import Workload


#: How close the largest fractional running batch is found (sequences; ``whole=False``).
FRACTION_TOLERANCE = 0.01


def kv_capped(*, placement: Placement, memory: MemoryUse, demand: Callable[[Size], MemoryDemand],
              whole: bool = False) -> tuple[Size, MemoryUse]:
    """The running batch per replica and its memory: the placement's sequences if they
    fit, else the largest number of sequences (``whole``: a whole number) whose KV cache,
    beside the weights, their own activations and the reserve, fits, with the memory
    they use. Where not even one sequence fits, the memory of one sequence comes back
    (its shortfall is why the deployment is infeasible). ``demand(n)`` is what ``n``
    sequences need; per configuration when the placement holds arrays.

    More sequences asked never run fewer: the activations of the asked batch, which a
    smaller running batch does not hold, only bound the search from below."""
    batch = placement.sequences
    done = _fits(memory)
    if done.all():
        return batch, memory
    ctx = placement.ctx
    per_sequence = (memory.kv_cache_bytes + memory.state_bytes) / demand(batch).sequences

    def use(sequences: np.ndarray) -> MemoryUse:
        need = demand(value(sequences))
        return memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                          degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                          kv_dtype=ctx.kv_dtype, sequences=need.sequences,
                          context_tokens=need.context_tokens, step_tokens=need.step_tokens,
                          draft_layers=ctx.draft_layers)

    def held_beside(activations: MemoryUse) -> np.ndarray:
        """Sequences the KV space holds beside ``activations``' weights, activations and
        reserve."""
        free = (activations.usable_bytes - activations.weights_bytes
                - activations.activation_bytes - activations.reserve_bytes)
        spread = per_sequence > 0
        held = np.where(spread, free / np.where(spread, per_sequence, 1.0), 0.0)
        return np.floor(held) if whole else held

    top = np.broadcast_to(np.asarray(batch, dtype=float), done.shape)
    # from below: the asked batch's activations are the most a smaller batch needs
    low = np.clip(held_beside(memory), 1.0, top)
    low_use = use(low)
    shrinking = ~done & ~_fits(low_use) & (low > 1.0)
    while shrinking.any():  # what the estimate leaves out (a reserve, states) does not fit
        low = np.where(shrinking, np.maximum(np.floor(low) - 1.0, 1.0), low)
        low_use = _pick(shrinking, use(low), low_use)
        shrinking = shrinking & ~_fits(low_use) & (low > 1.0)
    # from above: beside the activations of the bound below, the KV space holds at most
    high = np.clip(held_beside(low_use), low, top)
    searching = ~done & _fits(low_use) & (high > low)
    if searching.any():
        high_use = use(high)
        at_top = searching & _fits(high_use)
        low, low_use = np.where(at_top, high, low), _pick(at_top, high_use, low_use)
        searching = searching & ~at_top
    step = 1.0 if whole else FRACTION_TOLERANCE
    while (searching := searching & (high - low > step)).any():
        middle = np.floor((low + high) / 2) if whole else (low + high) / 2
        middle_use = use(np.where(searching, middle, low))
        fit = searching & _fits(middle_use)
        low, low_use = np.where(fit, middle, low), _pick(fit, middle_use, low_use)
        high = np.where(searching & ~fit, middle, high)
    return value(np.where(done, batch, low)), _pick(done, memory, low_use)


def _pick(mask: np.ndarray, chosen: MemoryUse, other: MemoryUse) -> MemoryUse:
    """Per configuration, ``chosen``'s memory where ``mask`` holds, else ``other``'s."""
    if np.ndim(mask) == 0:
        return chosen if bool(mask) else other
    kept: dict[str, Any] = {f.name: value(np.where(mask, getattr(chosen, f.name),
                                                   getattr(other, f.name)))
                            for f in fields(MemoryUse)}
    return MemoryUse(**kept)


def _fits(memory: MemoryUse) -> np.ndarray:
    """Per configuration, whether ``memory`` fits (a picked one holds it as 0/1)."""
    return np.asarray(memory.fits, dtype=bool)


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
