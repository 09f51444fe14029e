"""Predict latency per call, and a fresh process's first prediction (issue 14 item 2:
<= 1 ms per call for every zoo model, <= 0.4 s for ``energylens predict`` from a shell).

Usage: python benchmarks/bench_predict.py [--repeats N] [--cli N]
Prints the median (and p10/p90) wall time of one ``predict`` per configuration, with
cold caches excluded (the first call compiles the model's einsum graph once). "warm
batches" cycles through 7 batch sizes (a search revisits them: MoE expert loads are
cached per token count); "new batches" gives every call a batch never seen before.
``--cli N``: median wall time of N fresh ``energylens predict --json`` processes.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

from energylens.cost.moe import Routing
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
    ("qwen3-30b-a3b EP8 skew 1.2 serving", "qwen3-30b-a3b",
     Deployment(ep=8, num_gpus=8, routing=Routing(kind="zipf", skew=1.2)),
     Workload(kind="serving", batch=64, input_tokens=1024, output_tokens=256)),
    ("llama-4-maverick EP8 serving", "llama-4-maverick-17b-128e", Deployment(ep=8),
     Workload(kind="serving", batch=64, input_tokens=1024, output_tokens=256)),
    ("llama-4-maverick EP8 skew 1.2 batch", "llama-4-maverick-17b-128e",
     Deployment(ep=8, routing=Routing(kind="zipf", skew=1.2)),
     Workload(batch=64, input_tokens=1024, output_tokens=256)),
]
CLI = ["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--json"]


def _timed(label: str, model: str, deployment: Deployment, workload: Workload, *,
           repeats: int, new: bool) -> None:
    times, cpu = [], []
    for i in range(repeats):
        # vary the batch: 7 sizes revisited, or one never seen (a 1e-6 step per call)
        batch = workload.batch + (i * 1e-6 if new else i % 7)
        w = Workload(kind=workload.kind, batch=batch, input_tokens=workload.input_tokens,
                     output_tokens=workload.output_tokens)
        start, start_cpu = time.perf_counter(), time.process_time()
        predict(model=model, gpu="h100", deployment=deployment, workload=w)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    q = statistics.quantiles(times, n=10)
    print(f"{label:38s} {'new' if new else 'warm'} batches  median "
          f"{statistics.median(times) * 1e3:6.2f} ms  p10 {q[0] * 1e3:6.2f}  p90 {q[-1] * 1e3:6.2f}"
          f"  CPU median {statistics.median(cpu) * 1e3:6.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--cli", type=int, default=0, metavar="N",
                        help="also time N fresh energylens predict processes")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for label, model, deployment, workload in CASES:
        predict(model=model, gpu="h100", deployment=deployment, workload=workload)  # warm
        for new in (False, True):
            _timed(label, model, deployment, workload, repeats=args.repeats, new=new)
    if args.cli:
        walls, cpus = [], []
        for _ in range(args.cli):
            start, before = time.perf_counter(), os.times()
            subprocess.run([sys.executable, "-m", "energylens.cli", *CLI], check=True,
                           stdout=subprocess.DEVNULL)
            walls.append(time.perf_counter() - start)
            after = os.times()
            cpus.append(after.children_user + after.children_system
                        - before.children_user - before.children_system)
        print(f"fresh process: energylens {' '.join(CLI)}  median "
              f"{statistics.median(walls):.3f} s  min {min(walls):.3f} s  "
              f"CPU median {statistics.median(cpus):.3f} s")


if __name__ == "__main__":
    main()
