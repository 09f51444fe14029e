"""ML.ENERGY leaderboard files -> steady-state ``serving`` rows.

The input length is not in the data: each task's assumed value
(:data:`energylens.measurements.mlenergy.TASK_INPUT_TOKENS`) is written, and the task is
carried in a ``task`` column. ``median_itl_ms`` is the median inter-token latency
(``itl_p50_s``). Runs the host paced (:mod:`energylens.measurements.mlenergy_screen`)
carry a ``screened`` reason: predicted, never fitted on. The screen compares a model's
reasoning run with its chat run, which a task file of another task never holds, so it runs
over the file's rows together with those of the other ML.ENERGY files of its folder (the
leaderboard's ``tasks/`` or ``models/``; :attr:`Options.screen_with` names them instead),
as the fits screen every task file together.
Layouts as vLLM launched them: ``expert_parallel = n`` with ``tensor_parallel = 1`` is
``--tensor-parallel-size n --enable-expert-parallel`` (``tp = ep = n``); ``data_parallel =
expert_parallel = n`` is data-parallel attention, whose ``avg_batch_size`` counts every
rank's sequences (see :mod:`energylens.measurements.mlenergy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from energylens.errors import MeasurementError
from energylens.measurements.convert import Converted, Options
from energylens.measurements.formats import MeasurementRow, load_measurements
from energylens.measurements.mlenergy import RUNTIME, TASK_INPUT_TOKENS
from energylens.measurements.mlenergy_screen import host_bound_rows, row_key

#: The ``screened`` reason of a run the host paced (mlenergy_screen's rules).
HOST_BOUND = ("host-bound: the GPUs idled part of each step (cooler than a smaller batch of "
              "the same run series, or slower and cooler than the model's chat run; "
              "energylens/measurements/mlenergy_screen.py)")


def _layout(v: dict[str, Any]) -> dict[str, Any]:
    n, tp, ep, dp = (int(v[k]) for k in ("num_gpus", "tensor_parallel", "expert_parallel",
                                         "data_parallel"))
    if ep > 1 and dp > 1:
        return {"tp": tp, "ep": ep, "attention_dp": dp}
    if ep > 1:
        return {"tp": tp * ep, "ep": ep, "dp": n // (tp * ep)}
    return {"tp": tp, "dp": dp}


def screen_files(path: Path, options: Options) -> tuple[list[MeasurementRow], list[Path]]:
    """The rows the host-bound screen compares ``path``'s with, and their files:
    ``options.screen_with``, or every other ``*.json`` of ``path``'s folder that loads as an
    ML.ENERGY file (others are passed over)."""
    if options.screen_with is not None:
        files = [Path(f) for f in options.screen_with]
        return [r for f in files for r in load_measurements(format="mlenergy", path=f).rows], files
    rows: list[MeasurementRow] = []
    used = []
    for sibling in sorted(path.parent.glob("*.json")):
        if sibling.resolve() == path.resolve():
            continue
        try:
            rows += load_measurements(format="mlenergy", path=sibling).rows
        except MeasurementError:
            continue
        used.append(sibling)
    return rows, used


def convert(path: Path, options: Options) -> Converted:
    """One row per configuration of a task or model file."""
    out = Converted(rows=[])
    rows = load_measurements(format="mlenergy", path=path, gpu=options.gpu).rows
    others, files = screen_files(path, options)
    paced = host_bound_rows((row.input, row.measured) for row in [*rows, *others])
    for row in rows:
        v, m = row.input, row.measured
        task = str(v["task"])
        out.rows.append({
            "model": v["model_id"], "gpu": row.context["gpu"], "num_gpus": int(v["num_gpus"]),
            **_layout(v), "runtime": RUNTIME, "dtype": v["weight_precision"],
            "workload": "serving", "batch": float(v["avg_batch_size"]),
            "input_tokens": TASK_INPUT_TOKENS.get(task), "output_tokens": v["avg_output_len"],
            "itl_p50_s": m["median_itl_ms"] / 1e3, "output_tokens_per_s":
                m["output_throughput_tokens_per_sec"], "power_w": m["avg_power_watts"],
            "energy_per_output_token_j": m["energy_per_token_joules"], "task": task,
            "max_num_seqs": v["max_num_seqs"],
            "screened": HOST_BOUND if row_key(v) in paced else ""})
    out.notes.append(f"input_tokens: the assumed mean prompt of each task "
                     f"({', '.join(f'{k} {v:g}' for k, v in TASK_INPUT_TOKENS.items())}); "
                     "ML.ENERGY does not record it")
    screened = sum(1 for row in out.rows if row["screened"])
    out.notes.append(f"screened: {screened} of {len(out.rows)} rows host-bound, compared with "
                     f"the runs of {', '.join(f.name for f in files) or 'no other file'} "
                     "(a reasoning run is judged against the model's chat run)")
    return out
