"""Request-level simulator speed (target: 10,000 requests of the Azure conversation trace
through Llama-3.1-70B TP4 on H100 in under 2 s on one core).

Usage: python benchmarks/bench_load_sim.py [--repeats N] [--requests N]
Times whole ``predict`` calls (price tables built, trace replayed on its own clock,
metrics summarised; the trace file is read once, before timing) and the simulation alone,
and prints medians and requests simulated per second.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context
from energylens.workloads import Placement, Workload
from energylens.workloads.load.arrivals import load_trace
from energylens.workloads.load.kind import simulate_replica
from energylens.workloads.load.simulator import simulate

TRACE = Path(__file__).resolve().parents[1] / "data" / "measurements" / "traces" / "splitwise_conv.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}")
    load_trace(str(TRACE))
    workload = Workload(kind="load", trace=str(TRACE), num_requests=args.requests)
    whole: list[float] = []
    sim_only: list[float] = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = predict(model="llama-3.1-70b", gpu="h100", deployment=Deployment(tp=4),
                         workload=workload)
        whole.append(time.perf_counter() - start)
    run = simulate_replica(placement=_placement(), workload=workload)
    for _ in range(args.repeats):
        start = time.perf_counter()
        simulate(requests=run.requests, table=run.table, limits=run.limits)
        sim_only.append(time.perf_counter() - start)
    median = statistics.median(whole)
    print(f"predict --workload load, {args.requests:,} requests: median {median:.3f} s "
          f"({args.requests / median:,.0f} requests/s); scheduler loop alone: median "
          f"{statistics.median(sim_only):.3f} s ({args.requests / statistics.median(sim_only):,.0f}"
          f" requests/s); {len(run.sim.wall_s):,} records for "
          f"{int(run.sim.count.sum()):,} iterations")
    print(f"  TTFT p90 {result.load['ttft_p90_s']:.3f} s, TPOT p90 "
          f"{result.load['tpot_p90_s'] * 1e3:.1f} ms, {result.output_tokens_per_s:,.0f} "
          f"output tokens/s, {result.energy_per_request_j:,.0f} J/request")


def _placement() -> Placement:
    """The placement ``predict`` hands the load kind for Llama-3.1-70B TP4 on H100."""
    gpu, model = load_gpu("h100"), get_model("llama-3.1-70b")
    calibration = require_constants(calibration=default_calibration(), gpu=gpu)
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(tp=4),
                       calibration=calibration)
    return Placement(ctx=ctx, model=model, replicas=1, gpus=4, sequences=1.0)


if __name__ == "__main__":
    main()
