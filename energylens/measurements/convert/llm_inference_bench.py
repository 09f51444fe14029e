"""Argonne LLM-Inference-Bench ``All_results.csv`` / ``power_results.csv`` -> ``batch`` rows.

A row is one static batch of ``Batch Size`` requests with ``Input Output Length`` tokens
in and out on ``Num of Hardware`` GPUs (tensor parallel): ``Latency`` is the whole batch
end to end (``e2e_s``), ``Throughput`` input + output tokens per second
(``total_tokens_per_s``), ``avg_power`` (mW in the file) the board power (``power_w``).
"""

from __future__ import annotations

from pathlib import Path

from energylens.measurements.convert import Converted, Options
from energylens.measurements.formats import load_measurements


def convert(path: Path, options: Options) -> Converted:
    """One row per measured batch, the framework as ``framework``."""
    out = Converted(rows=[])
    for row in load_measurements(format="llm-inference-bench", path=path, gpu=options.gpu).rows:
        v, m = row.input, row.measured
        n, tokens = int(v["Num of Hardware"]), int(v["Input Output Length"])
        converted = {"model": v["Model"], "gpu": row.context["gpu"], "num_gpus": n, "tp": n,
                     "framework": v["Framework"], "workload": "batch",
                     "batch": int(v["Batch Size"]), "input_tokens": tokens,
                     "output_tokens": tokens, "e2e_s": m["latency_s"],
                     "total_tokens_per_s": m["throughput_tokens_per_s"]}
        if "avg_power_w" in m:
            converted["power_w"] = m["avg_power_w"]
        out.rows.append(converted)
    return out
