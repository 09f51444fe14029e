"""Physical invariants over every configuration the database can form, measured or not.

Usage: python benchmarks/sanity_sweep.py [--models NAME ...] [--gpus NAME ...]
       [--runtimes NAME ...] [--batches 1 8 64] [--kind batch|serving] [--limit 40]

The accuracy pages judge the model where measurements exist; a user asks about the rest.
This sweep predicts every zoo model on every GPU under every runtime profile at TP 1, 2, 4
and 8 and a few batch sizes (1,024-token prompts, 128 output tokens: static batches, or with
``--kind serving`` as many running sequences at steady state), and checks what
must hold whatever the constants: every headline figure finite and positive; the average
power at most the boards' TDP (5 % slack) and at least their idle power; the memory per GPU
within the board's; TTFT no shorter than half the active parameters' prompt FLOPs at the
GPUs' fastest dense rate, TPOT no shorter than reading a quarter byte per active parameter
at their HBM bandwidth (loose floors: a unit slip or a lost factor breaks them); with a
larger batch, TTFT and TPOT no shorter and energy per output token no larger (2 % slack). A
configuration the deployment checks refuse (a precision the runtime lacks, heads that do not
split) or that does not fit in memory is skipped. It prints the predictions made and each
violation, at most ``--limit`` of them. A violation is a place to look, not always a bug: a
static batch that the KV cache runs in waves (a last wave of one) can lower the mean TPOT.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass

from energylens.deployment import Deployment, Workload
from energylens.errors import EnergyLensError
from energylens.hardware import GPU, list_gpus, load_gpu
from energylens.model import ModelConfig, get_model, list_models, parameter_count
from energylens.predict import predict
from energylens.runtime import runtime_names
from energylens.workloads import Prediction

TP_DEGREES = (1, 2, 4, 8)
INPUT_TOKENS, OUTPUT_TOKENS = 1024, 128
HEADLINE = ("ttft_s", "tpot_s", "energy_per_output_token_j", "avg_power_w")
POWER_SLACK = 1.05
MONOTONE_SLACK = 0.02


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """How many predictions were made and the invariants they broke."""

    predictions: int
    violations: tuple[str, ...]


def point_violations(*, label: str, result: Prediction, gpu: GPU, model: ModelConfig,
                     prompts: int) -> list[str]:
    """What one feasible prediction of 1,024 / 128-token sequences breaks: a headline figure
    not finite and positive, an average power outside [idle, TDP x slack] per board, memory
    beyond the board's, TTFT or TPOT under its loose roofline floor (TTFT computes at least
    ``prompts`` prompts: a static batch's first wave, a steady state's one admitted)."""
    out = [f"{label}: {name} = {getattr(result, name)!r}" for name in HEADLINE
           if not (math.isfinite(getattr(result, name)) and getattr(result, name) > 0)]
    boards = result.num_gpus
    if result.memory_per_gpu_gb * 1e9 > gpu.hbm_capacity_bytes:
        out.append(f"{label}: {result.memory_per_gpu_gb:.1f} GB per GPU on a "
                   f"{gpu.hbm_capacity_bytes / 1e9:.1f} GB board")
    active = parameter_count(model)[1]
    prompt_floor = (0.5 * 2 * active * INPUT_TOKENS * prompts
                    / (max(gpu.dense_flops_per_s.values()) * boards))
    if result.ttft_s < prompt_floor:
        out.append(f"{label}: TTFT {result.ttft_s:.3g} s under its FLOP floor {prompt_floor:.3g} s")
    step_floor = 0.25 * active / (gpu.hbm_bandwidth_bytes_per_s * boards)
    if result.tpot_s < step_floor:
        out.append(f"{label}: TPOT {result.tpot_s:.3g} s under its weight-read floor "
                   f"{step_floor:.3g} s")
    if result.avg_power_w > POWER_SLACK * gpu.tdp_w * boards:
        out.append(f"{label}: {result.avg_power_w:.0f} W over {boards} x TDP {gpu.tdp_w:.0f} W")
    if result.avg_power_w < gpu.idle_power_w * boards:
        out.append(f"{label}: {result.avg_power_w:.0f} W under {boards} x idle "
                   f"{gpu.idle_power_w:.0f} W")
    return out


def first_prompts(*, kind: str, batch: int, result: Prediction) -> int:
    """Prompts a prediction's TTFT computes at least: a static batch's first wave (the
    batch, or what its KV cache holds); under steady-state serving, the one it admits."""
    if kind == "serving":
        return 1
    return int(min(batch, result.running_batch or batch))


def batch_violations(*, label: str, by_batch: dict[int, Prediction]) -> list[str]:
    """What a larger batch must not do: shorten TTFT or TPOT, or raise energy per token."""
    out = []
    batches = sorted(by_batch)
    for small, large in zip(batches, batches[1:], strict=False):
        a, b = by_batch[small], by_batch[large]
        step = f"{label} batch {small} -> {large}"
        if b.ttft_s < a.ttft_s * (1 - MONOTONE_SLACK):
            out.append(f"{step}: TTFT falls {a.ttft_s:.4g} -> {b.ttft_s:.4g} s")
        if b.tpot_s < a.tpot_s * (1 - MONOTONE_SLACK):
            out.append(f"{step}: TPOT falls {a.tpot_s:.4g} -> {b.tpot_s:.4g} s")
        if b.energy_per_output_token_j > a.energy_per_output_token_j * (1 + MONOTONE_SLACK):
            out.append(f"{step}: energy per token rises {a.energy_per_output_token_j:.4g} -> "
                       f"{b.energy_per_output_token_j:.4g} J")
    return out


def sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU], runtimes: Sequence[str],
          batches: Sequence[int], kind: str = "batch") -> Sweep:
    """Predict every (model, GPU, runtime, TP, batch) and collect the violations."""
    made, found = 0, []
    for model in models:
        for gpu in gpus:
            for runtime in runtimes:
                for tp in TP_DEGREES:
                    label = f"{model.name} {gpu.name} {runtime} tp{tp}"
                    by_batch: dict[int, Prediction] = {}
                    for batch in batches:
                        try:
                            result = predict(model=model, gpu=gpu,
                                             deployment=Deployment(tp=tp, runtime=runtime),
                                             workload=Workload(kind=kind, batch=batch,
                                                               input_tokens=INPUT_TOKENS,
                                                               output_tokens=OUTPUT_TOKENS))
                        except EnergyLensError:  # refused by the deployment checks
                            break
                        if not result.feasible:
                            break
                        made += 1
                        by_batch[batch] = result
                        found += point_violations(label=f"{label} batch {batch}",
                                                  result=result, gpu=gpu, model=model,
                                                  prompts=first_prompts(kind=kind, batch=batch,
                                                                        result=result))
                    found += batch_violations(label=label, by_batch=by_batch)
    return Sweep(predictions=made, violations=tuple(found))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="zoo names (default: every model)")
    parser.add_argument("--gpus", nargs="*", help="database names (default: every GPU)")
    parser.add_argument("--runtimes", nargs="*", help="runtime profiles (default: every one)")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8, 64])
    parser.add_argument("--kind", choices=("batch", "serving"), default="batch",
                        help="workload kind: static batches or steady-state serving")
    parser.add_argument("--limit", type=int, default=40, help="violations printed at most")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # names resolve as everywhere else (aliases too; an unknown one is a one-line error)
    models = [get_model(n) for n in args.models] if args.models else list_models()
    gpus = [load_gpu(n) for n in args.gpus] if args.gpus else list_gpus()
    result = sweep(models=models, gpus=gpus,
                   runtimes=args.runtimes or list(runtime_names()), batches=sorted(args.batches),
                   kind=args.kind)
    print(f"{result.predictions} predictions, {len(result.violations)} violations, "
          f"{time.perf_counter() - started:.0f} s on {platform.machine()} "
          f"({platform.python_version()})")
    for line in result.violations[:args.limit]:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
