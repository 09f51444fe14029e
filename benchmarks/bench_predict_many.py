"""predict_many throughput: configurations per second on one core (issue 14 item 1).

Usage: python benchmarks/bench_predict_many.py [--repeats N] [--quick]

Each case is a grid of deployments (the product of a shipped space's knob values, as the
exhaustive grid engine enumerates them), predicted in one ``predict_many`` call; the median over
repeats is reported, after one warm-up call (model graph, compiled kernels and the MoE
expected-maximum tables are built on first use and cached). Targets: >= 200,000 dense
and >= 50,000 MoE-with-skew configurations/s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import pandas as pd

from energylens.cost.moe import Routing
from energylens.deployment import Workload
from energylens.predict import predict_many


def _log_ints(low: int, high: int, count: int) -> list[int]:
    return sorted({int(round(v)) for v in np.geomspace(low, high, count)})


def quickstart_grid(*, batches: int) -> pd.DataFrame:
    """The quickstart space (spaces/llama70b_nodes.yaml) with ``batches`` log-spaced batch
    values instead of all 256, and one fusion setting (every family fusion on) instead of
    four: GPU x num_gpus x TP x PP x batch x overlap SMs x clock x dtype."""
    knobs = {"gpu": ["H100", "H200", "A100-80GB"], "num_gpus": [1, 2, 4, 8],
             "tp": [1, 2, 4, 8], "pp": [1, 2], "batch": _log_ints(1, 256, batches),
             "overlap_sms": list(range(0, 33, 4)),
             "clock": [round(0.5 + 0.05 * i, 2) for i in range(11)],
             "weight_dtype": ["bf16", "fp8"]}
    return _product(knobs)


def moe_grid(*, batches: int, skew: float) -> pd.DataFrame:
    """spaces/moe_parallelism.yaml (GPU x num_gpus x TP x EP x batch x dtype) with
    ``batches`` log-spaced batch values, plus the clock and overlap SMs of the quickstart
    space; Zipf routing of exponent ``skew`` (0: uniform)."""
    knobs = {"gpu": ["H100", "H200"], "num_gpus": [1, 2, 4, 8], "tp": [1, 2, 4, 8],
             "ep": [1, 2, 4, 8], "batch": _log_ints(1, 512, batches),
             "overlap_sms": [0, 8, 16, 32], "clock": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
             "weight_dtype": ["bf16", "fp8"]}
    table = _product(knobs)
    table["routing"] = [Routing(kind="zipf", skew=skew) if skew else Routing()] * len(table)
    return table


def _product(knobs: dict[str, list]) -> pd.DataFrame:
    from energylens.hardware import load_gpu

    index = pd.MultiIndex.from_product(list(knobs.values()), names=list(knobs))
    table = index.to_frame(index=False)
    boost = {name: load_gpu(name).boost_clock_mhz for name in knobs["gpu"]}
    table["freq_mhz"] = table["clock"] * table["gpu"].map(boost)
    table["batch"] = table["batch"].astype(float)
    return table.drop(columns="clock")


CASES = {
    "dense: quickstart space (Llama-3.1-70B)": ("llama-3.1-70b", lambda b: quickstart_grid(
        batches=b)),
    "MoE (Qwen3-30B-A3B)": ("qwen3-30b-a3b", lambda b: moe_grid(batches=b, skew=0.0)),
    "MoE, Zipf skew 1.2 (Qwen3-30B-A3B)": ("qwen3-30b-a3b",
                                           lambda b: moe_grid(batches=b, skew=1.2)),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=16, help="batch values per grid")
    parser.add_argument("--quick", action="store_true", help="1 repeat")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (pinned to one), "
          f"python {platform.python_version()}")
    for label, (model, make) in CASES.items():
        table = make(args.batches)
        for kind in ("batch", "serving"):
            workload = Workload(kind=kind, batch=1, input_tokens=1024, output_tokens=256)
            predict_many(model=model, workload=workload, table=table)  # warm caches
            times, cpu = [], []
            for _ in range(1 if args.quick else args.repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                result = predict_many(model=model, workload=workload, table=table)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            median, median_cpu = statistics.median(times), statistics.median(cpu)
            print(f"{label:40s} {kind:8s} {len(table):7,d} configs  wall {median:6.2f} s "
                  f"{len(table) / median:9,.0f}/s  CPU {median_cpu:6.2f} s "
                  f"{len(table) / median_cpu:9,.0f}/s  ({int(result['feasible'].sum()):,d} feasible)")


if __name__ == "__main__":
    main()
