"""ML.ENERGY runs whose decode steps the host paced, not the GPU: screened from every fit.

A GPU cost model prices what the GPU does. Some runs of the data waited on something
else: on B200 the reasoning task (``gpqa``) of Qwen3-8B/14B/32B and Nemotron-Nano-9B/12B
took 2.4-6.5 times the chat task's inter-token latency at the same running batch (8 or 16
sequences) while the GPU drew *less* power (290-530 W against 510-860 W): the GPU idled
between steps. On H100 the same models' reasoning ITL is 1.04-1.34 times their chat ITL (the
longer contexts), at equal or higher power, as physics says it should be; DeepSeek-V3.1 on
B200 is 1.11-1.17. Reasoning rows are longer-context, never lighter, so a run that is more
than :data:`ITL_RATIO` times slower *and* cooler than the same model's chat run at the same
batch is host-bound (the gap between 1.34 and 2.38 leaves the threshold unambiguous).

Screened runs are predicted and reported (``validate`` groups them) but no fit and no
regime fold uses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A run this many times slower than the same model's chat run, and cooler, is host-bound.
ITL_RATIO = 2.0
CHAT_TASK = "lm-arena-chat"
#: Batches (max_num_seqs) at which runs of two tasks are compared: the smallest shared one.
ITL = "median_itl_ms"
POWER = "avg_power_watts"

RunKey = tuple[str, str, int, str]


def run_key(values: Mapping[str, Any]) -> RunKey:
    """(model, GPU, GPU count, task): one benchmark run series."""
    return (str(values["model_id"]), str(values["gpu_model"]), int(values["num_gpus"]),
            str(values["task"]))


def host_bound_runs(rows: Iterable[tuple[Mapping[str, Any], Mapping[str, float]]]
                    ) -> frozenset[RunKey]:
    """Run series (of ``(inputs, measured)`` rows) screened as host-bound."""
    at: dict[RunKey, dict[int, Mapping[str, float]]] = {}
    for values, measured in rows:
        if ITL in measured and POWER in measured:
            at.setdefault(run_key(values), {})[int(values["max_num_seqs"])] = measured
    flagged = set()
    for key, by_batch in at.items():
        model, gpu, gpus, task = key
        chat = at.get((model, gpu, gpus, CHAT_TASK))
        if task == CHAT_TASK or chat is None:
            continue
        shared = sorted(by_batch.keys() & chat.keys())
        if not shared:
            continue
        mine, theirs = by_batch[shared[0]], chat[shared[0]]
        if mine[ITL] > ITL_RATIO * theirs[ITL] and mine[POWER] < theirs[POWER]:
            flagged.add(key)
    return frozenset(flagged)
