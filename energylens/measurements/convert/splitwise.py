"""Splitwise-style ``perf_model.csv`` (prompt and token times in ms) -> ``batch`` rows."""

from __future__ import annotations

from pathlib import Path

from energylens.measurements.convert import Converted, Options
from energylens.measurements.formats import load_measurements


def convert(path: Path, options: Options) -> Converted:
    """``prompt_time`` is the prefill of the batch (``ttft_s``), ``token_time`` one decode
    step (``tpot_s``)."""
    out = Converted(rows=[])
    for row in load_measurements(format="splitwise", path=path, gpu=options.gpu).rows:
        v, m = row.input, row.measured
        tp = int(v["tensor_parallel"])
        out.rows.append({"model": v["model"], "gpu": row.context["gpu"], "num_gpus": tp,
                         "tp": tp, "workload": "batch", "batch": int(v["batch_size"]),
                         "input_tokens": int(v["prompt_size"]),
                         "output_tokens": int(v["token_size"]),
                         "ttft_s": m["prompt_time"] / 1e3, "tpot_s": m["token_time"] / 1e3})
    return out
