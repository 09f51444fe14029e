"""ML.ENERGY rows whose decode steps the host paced, not the GPU: screened from every fit.

A GPU cost model prices what the GPU does. Some runs of the data waited on something
else: on B200 the reasoning task (``gpqa``) of Qwen3-8B/14B/32B and Nemotron-Nano-9B/12B
took 2.4-6.5 times the chat task's inter-token latency at the same running batch (8 or 16
sequences) while the GPU drew *less* power (290-530 W against 510-860 W): the GPU idled
between steps. On H100 the same models' reasoning ITL is 1.04-1.34 times their chat ITL (the
longer contexts), at equal or higher power, as physics says it should be; DeepSeek-V3.1 on
B200 is 1.11-1.17. Reasoning rows are longer-context, never lighter, so a run that is more
than :data:`ITL_RATIO` times slower *and* cooler than the same model's chat run at the same
batch is host-bound (the gap between 1.34 and 2.38 leaves the threshold unambiguous).

Within one run series (model, GPU, layout, precision, task), a larger running batch does
more work per step with the same kernels at higher efficiency, so a GPU-paced run draws at
least the power of a smaller batch (the power cap holds it flat, never lower). A row that
draws less than :data:`POWER_DROP` of the hottest smaller-batch row of its series idled
part of each step: host-bound too. On H100, whose runs behave, such drops stay within 5.3 %
(measurement noise) except gpt-oss-120b on 2 GPUs at 1,536-2,048 sequences (23-27 %, ITL up
1.6x for 1.5x the batch); on B200 they reach 33 % in 19 rows of 8 models (e.g. Llama-3.1-8B at
128 sequences: ITL 26.7 ms at 449 W against 9.0 ms at 617 W for 64).

Screened rows are predicted and reported (``validate`` groups them) but no fit and no
regime fold uses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A run this many times slower than the same model's chat run, and cooler, is host-bound.
ITL_RATIO = 2.0
#: A row drawing less than this share of a smaller batch's power in its series is host-bound
#: (twice the 5 % noise of H100 series).
POWER_DROP = 0.9
CHAT_TASK = "lm-arena-chat"
#: Batches (max_num_seqs) at which runs of two tasks are compared: the smallest shared one.
ITL = "median_itl_ms"
POWER = "avg_power_watts"

RunKey = tuple[str, str, int, str]
RowKey = tuple[str, str, int, str, int, int, int, str, int]


def run_key(values: Mapping[str, Any]) -> RunKey:
    """(model, GPU, GPU count, task): one benchmark run series."""
    return (str(values["model_id"]), str(values["gpu_model"]), int(values["num_gpus"]),
            str(values["task"]))


def row_key(values: Mapping[str, Any]) -> RowKey:
    """One row: its run, layout, precision and batch cap."""
    model, gpu, gpus, task = run_key(values)
    tp, ep, dp = (int(values.get(k, 1)) for k in
                  ("tensor_parallel", "expert_parallel", "data_parallel"))
    return (model, gpu, gpus, task, tp, ep, dp, str(values.get("weight_precision", "")),
            int(values["max_num_seqs"]))


def host_bound_rows(rows: Iterable[tuple[Mapping[str, Any], Mapping[str, float]]]
                    ) -> frozenset[RowKey]:
    """Rows (of ``(inputs, measured)`` pairs) screened as host-bound: every row of a run
    slower and cooler than its chat run, and each row cooler than a smaller batch of its
    series."""
    rows = list(rows)
    runs = _host_bound_runs(rows)
    power: dict[tuple, dict[int, float]] = {}
    for values, measured in rows:
        if POWER in measured:
            key = row_key(values)
            power.setdefault(key[:-1], {})[key[-1]] = measured[POWER]
    flagged = set()
    for values, _ in rows:
        key = row_key(values)
        series = power.get(key[:-1], {})
        hotter = [w for cap, w in series.items() if cap < key[-1]]
        if run_key(values) in runs or (hotter and key[-1] in series
                                       and series[key[-1]] < POWER_DROP * max(hotter)):
            flagged.add(key)
    return frozenset(flagged)


def _host_bound_runs(rows: Iterable[tuple[Mapping[str, Any], Mapping[str, float]]]
                     ) -> frozenset[RunKey]:
    """Run series slower and cooler than the same model's chat run at the same batch."""
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
