"""The chat task's mean prompt length, read from the ML.ENERGY rows whose KV cache was full.

ML.ENERGY does not record input lengths. It does record, per run, the mean number of
running sequences (``avg_batch_size``) next to the cap the engine was given
(``max_num_seqs``). A run whose running batch stays clearly below its cap was limited by
the KV cache: the engine admitted only as many sequences as its KV space holds. With
the memory model's KV space (vLLM's ``gpu_memory_utilization`` share of the board minus
weights, activations and reserve) and its steady-state context per running sequence
(prompt + output / 2), each such run gives the one prompt length at which the model's
running batch equals the measured one. The median over the transformer chat runs is the
task's prompt length: identified by the running batch alone, never by the energy or
latency errors the fits judge.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from energylens.measurements.mlenergy import UnsupportedRow, serving_case
from energylens.predict import predict

#: A run averaging fewer running sequences than this share of its cap was KV-limited
#: (runs that reach their cap average 0.97-1.0 of it: the queue drains at the end).
KV_LIMITED_SHARE = 0.97
#: Bisection bounds on the prompt length (tokens) and steps (relative precision ~1e-4).
PROMPT_RANGE = (1.0, 65536.0)
BISECTIONS = 40


def kv_limited(values: Mapping[str, Any]) -> bool:
    """Did this run's running batch stay clearly below its cap?"""
    return float(values["avg_batch_size"]) < KV_LIMITED_SHARE * float(values["max_num_seqs"])


def _running_batch(values: Mapping[str, Any], *, prompt_tokens: float) -> float:
    """The memory model's running batch for this run at ``prompt_tokens``, offered the cap."""
    offered = {**values, "avg_batch_size": float(values["max_num_seqs"])}
    case = serving_case(offered, input_tokens={str(values["task"]): prompt_tokens})
    result = predict(model=case.model, gpu=case.gpu, deployment=case.deployment,
                     workload=case.workload)
    if not result.feasible or result.running_batch is None:
        return 0.0
    return float(result.running_batch)


def prompt_tokens_of_run(values: Mapping[str, Any]) -> float | None:
    """The prompt length at which the model's running batch equals the measured one, or
    None when no length in :data:`PROMPT_RANGE` does (the run is not KV-limited in the
    model, or not predictable)."""
    target = float(values["avg_batch_size"])
    low, high = PROMPT_RANGE
    try:
        if _running_batch(values, prompt_tokens=low) < target or \
                _running_batch(values, prompt_tokens=high) >= target:
            return None
        for _ in range(BISECTIONS):  # the running batch falls as the prompt grows
            mid = (low * high) ** 0.5
            low, high = (mid, high) if _running_batch(values, prompt_tokens=mid) >= target \
                else (low, mid)
    except UnsupportedRow:
        return None
    return low


def task_prompt_tokens(rows: Iterable[Mapping[str, Any]], *, task: str) -> tuple[float, list[float]]:
    """Median prompt length over the KV-limited transformer runs of ``task``, and each
    run's estimate. Raises ValueError when no run identifies it."""
    from energylens.model.zoo import get_model

    estimates = []
    seen: set[tuple] = set()
    for values in rows:
        key = tuple(sorted((k, str(v)) for k, v in values.items()))
        if values["task"] != task or key in seen or not kv_limited(values):
            continue
        seen.add(key)
        model = get_model(str(values["model_id"]))
        if model.hybrid is not None or int(values.get("data_parallel", 1)) > 1:
            continue  # the memory model of these layouts is not what the data checks here
        estimate = prompt_tokens_of_run(values)
        if estimate is not None:
            estimates.append(estimate)
    if not estimates:
        raise ValueError(f"no KV-limited run of task {task!r} identifies its prompt length")
    return statistics.median(estimates), estimates
