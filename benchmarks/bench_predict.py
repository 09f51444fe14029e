"""Predict latency per call (target: Llama-3.1-70B TP4 under 5 ms on one core).

Usage: python benchmarks/bench_predict.py [--repeats N]
Prints the median (and p10/p90) wall time of one ``predict`` per configuration, with
cold caches excluded (the first call compiles the model's einsum graph once).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from energylens.deployment import Deployment, Workload
from energylens.predict import predict

CASES = [
    ("llama-3.1-70b TP4 batch", "llama-3.1-70b", Deployment(tp=4),
     Workload(batch=16, input_tokens=1024, output_tokens=256)),
    ("llama-3.1-70b TP4 serving", "llama-3.1-70b", Deployment(tp=4),
     Workload(kind="serving", batch=64, input_tokens=1024, output_tokens=256)),
    ("qwen3-30b-a3b EP8 batch", "qwen3-30b-a3b", Deployment(ep=8, num_gpus=8),
     Workload(batch=64, input_tokens=1024, output_tokens=256)),
    ("llama-3.1-405b TP8 PP2 batch", "llama-3.1-405b", Deployment(tp=8, pp=2),
     Workload(batch=32, input_tokens=2048, output_tokens=512)),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for label, model, deployment, workload in CASES:
        predict(model=model, gpu="h100", deployment=deployment, workload=workload)  # warm
        times = []
        for i in range(args.repeats):
            # vary the batch so no result cache can answer
            w = Workload(kind=workload.kind, batch=workload.batch + i % 7,
                         input_tokens=workload.input_tokens, output_tokens=workload.output_tokens)
            start = time.perf_counter()
            predict(model=model, gpu="h100", deployment=deployment, workload=w)
            times.append(time.perf_counter() - start)
        q = statistics.quantiles(times, n=10)
        print(f"{label:32s} median {statistics.median(times) * 1e3:6.2f} ms  "
              f"p10 {q[0] * 1e3:6.2f}  p90 {q[-1] * 1e3:6.2f}")


if __name__ == "__main__":
    main()
