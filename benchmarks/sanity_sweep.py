"""Physical invariants over every configuration the database can form, measured or not.

Usage: python benchmarks/sanity_sweep.py [--models NAME ...] [--gpus NAME ...]
       [--runtimes NAME ...] [--batches 1 8 64]
       [--kind batch|serving|load|open|clock|precision|length|fusion|trace|gpus] [--limit 40]

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

With ``--kind load`` the batches are closed loops of as many clients (the request-level
simulator, lengths of CV 0.05; up to a second each, so sweep a slice), and each run also
checks: its
percentiles ordered (p50 <= p90 <= p99 of TTFT, TPOT, ITL and end-to-end latency); Little's
law (clients = requests/s x mean end-to-end latency, 10 %); output tokens/s = requests/s x
output length (5 %); average power = energy per token x tokens/s (2 %); no more running
sequences than clients; and one client's TTFT and TPOT (lengths fixed) those of a static
batch of one (5 %).
With more clients TTFT and TPOT must not fall, nor throughput (2 % slack).

With ``--kind open`` each configuration's capacity is the requests/s of a closed loop of
the largest ``--batches`` clients, and open loops (Poisson arrivals, lengths of CV 0.05)
run at 5, 20, 40, 60 and 80 % of it: each serves what it is offered (10 %), keeps Little's
law on the requests in the system (running and queued, 10 %) and the throughput and power
identities above; with a higher rate TTFT and TPOT must not fall, nor energy per token rise
(2 % slack).

With ``--kind clock`` each static batch is predicted at ``CLOCK_POINTS`` SM clocks from the
GPU's lowest to its boost clock: a higher clock must not lengthen TTFT or TPOT nor lower
the average power, and at the boost clock the prediction is the default one (no clock
given) to the last digit.

With ``--kind precision`` each static batch is predicted with the weights in each of
``PRECISIONS`` the runtime runs (narrowest last): narrower weights must take less memory
per GPU for a batch held whole, and at a batch of one no longer TPOT nor more energy per
token (2 % slack) where both are weight-bound: reading the active weights at the HBM peak
is at least half the wider precision's TPOT (elsewhere fixed kernel times decide, and
block-scaled FP8 experts' are longer on Blackwell, as AIConfigurator's kernel tables
measure) and no shorter than the narrower one's smallest tensor-core tile of FLOPs.

With ``--kind length`` each static batch is predicted at ``PROMPT_LENGTHS`` prompt tokens
(128 output tokens) and at ``OUTPUT_LENGTHS`` output tokens (1,024-token prompts): a
longer prompt must not shorten TTFT or TPOT (every decode step reads more context), a
longer output must not shorten TPOT (the context grows as it decodes), and neither may
lower the energy per request (2 % slack). A batch that no longer fits in memory, or runs
in waves of fewer sequences (its KV cache holds only part of it: a smaller batch's TPOT),
at a length ends its series.

With ``--kind fusion`` each static batch is predicted with every fusion the model can
use and then with each one left out: a fusion reads and writes no more than the kernels it
replaces, so dropping one must not shorten TTFT or TPOT nor lower the energy per output
token (0.1 % slack), except ``norm_residual`` (:data:`FUSION_EXCEPTIONS`): the fused
residual add + RMSNorm is priced at the norm class's share of HBM peak, which H100's and
A100's constants put at 35-38 % (vLLM's 2024 RMSNorm, timed eagerly by Vidur) against the
add's 91 %, so the fused kernel's four passes take longer than the add's three and the
norm's two apart (0.2-2 % of a prompt). H200's own measured kernels put both near 92 %
(docs/kernels-h200.md), where fusing them is faster; the borrowed constants stay until H100's
small kernels are timed in CUDA graphs.

With ``--kind trace`` each configuration's capacity is the requests/s of a closed loop of
the largest ``--batches`` clients with the conversation trace's lengths, and open loops
replay the Splitwise conversation and code traces (their rows and clocks, rescaled) at
``TRACE_SHARES`` of it: percentiles in order, the rate served that at which the measured
requests arrive (``offered_requests_per_s``; a trace's clock is not its mean rate
everywhere) and Little's law on the requests in the system (15 %: heavy-tailed lengths
over 800 requests), average power = energy per token x tokens/s (2 %), and the headline
figures finite and positive with the power between idle and TDP.

With ``--kind gpus`` every pair of ``--gpus`` where one dominates the other (the same vendor
and interconnect layout, at least as good in every datasheet figure the model reads and
better in one: :func:`dominates`) predicts each static batch on both: where both hold the
whole batch at once, the better must not take a longer TTFT or TPOT (2 % slack); where only
the better holds it (the other runs in KV waves), it must not serve fewer tokens per second;
where the better holds fewer sequences, that is flagged too. Calibrated constants differ per
GPU (fitted, or borrowed from different relatives), so a hit is a place to look: the first
run found the bridged cards' groups beyond a pair priced over another host's PCIe
(docs/gpus.md).
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from energylens.deployment import FUSIONS, Deployment, Workload
from energylens.errors import EnergyLensError
from energylens.hardware import GPU, list_gpus, load_gpu
from energylens.model import ModelConfig, get_model, list_models, parameter_count
from energylens.predict import predict
from energylens.runtime import runtime_names
from energylens.workloads import Prediction
from energylens.workloads.load.kind import LoadPrediction

TP_DEGREES = (1, 2, 4, 8)
INPUT_TOKENS, OUTPUT_TOKENS = 1024, 128
HEADLINE = ("ttft_s", "tpot_s", "energy_per_output_token_j", "avg_power_w")
POWER_SLACK = 1.05
MONOTONE_SLACK = 0.02
#: Closed-loop identities hold up to the run's ends (warm-up windows, the last requests).
LITTLE_SLACK, THROUGHPUT_SLACK, POWER_IDENTITY_SLACK, ALONE_SLACK = 0.10, 0.05, 0.02, 0.05
LOAD_LATENCIES = ("ttft", "tpot", "itl", "e2e")
#: Load runs draw lengths of this CV: with lengths all equal, clients that start together
#: stay in phase when their prompts fill a step exactly (eight 1,024-token prompts, an
#: 8,192-token budget) and break apart with twice as many, so TTFT falls with the clients
#: (docs/load.md, "A cohort that fits one step exactly"): a property of identical
#: requests, not of the physics this sweep checks.
LOAD_LENGTH_CV = 0.05
#: Open loops at these shares of a configuration's closed-loop capacity (below 1: a queue
#: that settles, so Little's law holds), of this many requests each.
OPEN_SHARES, OPEN_REQUESTS = (0.05, 0.2, 0.4, 0.6, 0.8), 400
OFFERED_SLACK = 0.10
#: SM clocks per configuration in ``--kind clock``, evenly from the lowest to the boost.
CLOCK_POINTS = 6
#: Relative tolerance of "must not" under a clock change (the interpolated kernel curves
#: are exact functions of the clock: no slack is needed beyond rounding).
CLOCK_TOLERANCE = 1e-9
#: Weight precisions of ``--kind precision``, widest first, with their bytes per weight.
PRECISIONS = ("bf16", "fp8", "int4")
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}
#: Share of TPOT the weights' read at peak must reach for narrower weights to be faster.
WEIGHT_BOUND_SHARE = 0.5
#: Rows of the smallest tensor-core tile one token's GEMM pads to (mma m16n8k16).
TILE_ROWS = 16
#: Fusions ``--kind fusion`` does not hold to "never slower" (module docstring).
FUSION_EXCEPTIONS = frozenset({"norm_residual"})
#: Relative slack of "dropping a fusion must not speed a step up".
FUSION_SLACK = 1e-3
#: Traces, shares of capacity, requests and slack of ``--kind trace``.
TRACES = ("data/measurements/traces/splitwise_conv.csv",
          "data/measurements/traces/splitwise_code.csv")
TRACE_SHARES, TRACE_REQUESTS, TRACE_SLACK = (0.3, 0.7), 800, 0.15
#: Datasheet figures ``--kind gpus`` compares (GPU attributes; each dense rate apart).
DOMINANCE_FIGURES = ("hbm_bandwidth_bytes_per_s", "hbm_capacity_bytes", "sm_count", "l2_bytes",
                     "tdp_w", "boost_clock_mhz")
#: Prompt and output lengths of ``--kind length``.
PROMPT_LENGTHS, OUTPUT_LENGTHS = (128, 1024, 8192), (32, 128, 1024)


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
    batch, or what its KV cache holds); under steady-state serving or load, its own."""
    if kind in ("serving", "load"):
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


def run_identity_violations(*, label: str, result: LoadPrediction,
                            little_slack: float) -> list[str]:
    """What any load run breaks: percentiles out of order, Little's law on the requests
    running or queued (``little_slack``), average power = energy per token x tokens/s."""
    load, out = result.load, []
    for name in LOAD_LATENCIES:
        p50, p90, p99 = (load[f"{name}_{q}_s"] for q in ("p50", "p90", "p99"))
        if not p50 <= p90 * (1 + 1e-9) or not p90 <= p99 * (1 + 1e-9):
            out.append(f"{label}: {name} percentiles out of order {p50:.4g} / {p90:.4g} / "
                       f"{p99:.4g} s")
    in_flight = load["requests_per_s"] * load["e2e_mean_s"]
    in_system = load["mean_running"] + load["mean_queue_length"]
    if abs(in_flight - in_system) > little_slack * in_system:
        out.append(f"{label}: Little's law: {in_flight:.3g} requests in flight, "
                   f"{in_system:.3g} running or queued on average")
    power = result.energy_per_output_token_j * result.output_tokens_per_s
    if abs(power - result.avg_power_w) > POWER_IDENTITY_SLACK * result.avg_power_w:
        out.append(f"{label}: energy per token x tokens/s = {power:.4g} W, average power "
                   f"{result.avg_power_w:.4g} W")
    return out


def load_violations(*, label: str, result: LoadPrediction, clients: int | None) -> list[str]:
    """What a load run breaks (module docstring): a closed loop of ``clients``, or an open
    loop (``clients`` None)."""
    load = result.load
    out = run_identity_violations(label=label, result=result, little_slack=LITTLE_SLACK)
    in_flight = load["requests_per_s"] * load["e2e_mean_s"]
    if clients is not None and abs(in_flight - clients) > LITTLE_SLACK * clients:
        out.append(f"{label}: Little's law: {in_flight:.3g} requests in flight, {clients} clients")
    tokens = load["requests_per_s"] * OUTPUT_TOKENS
    if abs(result.output_tokens_per_s - tokens) > THROUGHPUT_SLACK * tokens:
        out.append(f"{label}: {result.output_tokens_per_s:.4g} tokens/s where "
                   f"{load['requests_per_s']:.4g} requests/s make {tokens:.4g}")
    if clients is not None and load["mean_running"] > clients * (1 + 1e-9):
        out.append(f"{label}: {load['mean_running']:.3g} running with {clients} clients")
    return out


def rate_violations(*, label: str, by_rate: dict[float, LoadPrediction]) -> list[str]:
    """What an open loop offered more requests must not do: serve other than offered
    (10 %), shorten TTFT or TPOT, or raise energy per token (2 %)."""
    out = []
    rates = sorted(by_rate)
    for rate in rates:
        served = by_rate[rate].load["requests_per_s"]
        if abs(served - rate) > OFFERED_SLACK * rate:
            out.append(f"{label} rate {rate:.4g}/s: served {served:.4g}/s")
    for low, high in zip(rates, rates[1:], strict=False):
        a, b = by_rate[low], by_rate[high]
        step = f"{label} rate {low:.4g} -> {high:.4g}/s"
        for name in ("ttft_s", "tpot_s"):
            if getattr(b, name) < getattr(a, name) * (1 - MONOTONE_SLACK):
                out.append(f"{step}: {name} falls {getattr(a, name):.4g} -> "
                           f"{getattr(b, name):.4g} s")
        if b.energy_per_output_token_j > a.energy_per_output_token_j * (1 + MONOTONE_SLACK):
            out.append(f"{step}: energy per token rises {a.energy_per_output_token_j:.4g} -> "
                       f"{b.energy_per_output_token_j:.4g} J")
    return out


def alone_violations(*, label: str, loop: Prediction, batch: Prediction) -> list[str]:
    """One client (``loop``, lengths fixed: nobody to fall in phase with) must see the
    TTFT and TPOT of a static batch of one (``batch``) on the same deployment."""
    out = []
    for name in ("ttft_s", "tpot_s"):
        mine, single = getattr(loop, name), getattr(batch, name)
        if abs(mine - single) > ALONE_SLACK * single:
            out.append(f"{label}: one client's {name} {mine:.4g} s, a batch of one's "
                       f"{single:.4g} s")
    return out


def throughput_violations(*, label: str, by_clients: dict[int, Prediction]) -> list[str]:
    """More clients must not lower the output throughput (a closed loop's)."""
    levels = sorted(by_clients)
    return [f"{label} clients {a} -> {b}: throughput falls "
            f"{by_clients[a].output_tokens_per_s:.4g} -> {by_clients[b].output_tokens_per_s:.4g}"
            f" tokens/s"
            for a, b in zip(levels, levels[1:], strict=False)
            if by_clients[b].output_tokens_per_s
            < by_clients[a].output_tokens_per_s * (1 - MONOTONE_SLACK)]


def clock_violations(*, label: str, by_clock: dict[float, Prediction],
                     default: Prediction, boost_mhz: float) -> list[str]:
    """What a higher SM clock must not do: lengthen TTFT or TPOT, or lower the average
    power; and the boost clock's prediction must be the default (no clock given)."""
    out = []
    clocks = sorted(by_clock)
    for low, high in zip(clocks, clocks[1:], strict=False):
        a, b = by_clock[low], by_clock[high]
        step = f"{label} {low:.0f} -> {high:.0f} MHz"
        for name in ("ttft_s", "tpot_s"):
            if getattr(b, name) > getattr(a, name) * (1 + CLOCK_TOLERANCE):
                out.append(f"{step}: {name} rises {getattr(a, name):.6g} -> "
                           f"{getattr(b, name):.6g} s")
        if b.avg_power_w < a.avg_power_w * (1 - CLOCK_TOLERANCE):
            out.append(f"{step}: average power falls {a.avg_power_w:.6g} -> "
                       f"{b.avg_power_w:.6g} W")
    at_boost = by_clock.get(boost_mhz)
    if at_boost is not None:
        for name in HEADLINE:
            mine, plain = getattr(at_boost, name), getattr(default, name)
            if abs(mine - plain) > CLOCK_TOLERANCE * abs(plain):
                out.append(f"{label} at the boost clock {boost_mhz:.0f} MHz: {name} {mine:.9g}, "
                           f"{plain:.9g} with no clock given")
    return out


def precision_violations(*, label: str, by_dtype: dict[str, Prediction], batch: int,
                         read_s: dict[str, float], tile_s: dict[str, float]) -> list[str]:
    """What narrower weights (``by_dtype`` in :data:`PRECISIONS` order) must not do: take
    more memory per GPU for the same whole batch (not one its KV cache runs in waves, whose
    sequences in memory grow with the room the weights leave); at a batch of one, lengthen
    TPOT or spend more per token where both precisions are weight-bound: the wider one's
    weights take (``read_s``: the active weights at the HBM peak) at least
    :data:`WEIGHT_BOUND_SHARE` of its TPOT, and the narrower one's read is no shorter than
    its smallest tensor-core tile's FLOPs (``tile_s``; a compute-poor GPU such as H20 runs
    weight-only INT4 on 16-bit tensor cores, 16 rows a tile, slower than it reads FP8)."""
    out = []
    names = [d for d in PRECISIONS if d in by_dtype]
    for wide, narrow in zip(names, names[1:], strict=False):
        a, b = by_dtype[wide], by_dtype[narrow]
        step = f"{label} batch {batch} {wide} -> {narrow}"
        whole = min(a.running_batch or batch, b.running_batch or batch) >= batch
        if whole and b.memory_per_gpu_gb >= a.memory_per_gpu_gb:
            out.append(f"{step}: memory per GPU {a.memory_per_gpu_gb:.2f} -> "
                       f"{b.memory_per_gpu_gb:.2f} GB")
        if batch == 1 and read_s[wide] >= WEIGHT_BOUND_SHARE * a.tpot_s \
                and read_s[narrow] >= tile_s[narrow]:
            if b.tpot_s > a.tpot_s * (1 + MONOTONE_SLACK):
                out.append(f"{step}: TPOT rises {a.tpot_s:.4g} -> {b.tpot_s:.4g} s")
            if b.energy_per_output_token_j > a.energy_per_output_token_j * (1 + MONOTONE_SLACK):
                out.append(f"{step}: energy per token rises {a.energy_per_output_token_j:.4g}"
                           f" -> {b.energy_per_output_token_j:.4g} J")
    return out


def decode_floors(*, model: ModelConfig, gpu: GPU, tp: int) -> tuple[dict[str, float],
                                                                        dict[str, float]]:
    """Per weight precision, a batch of one's active weights read at the GPUs' HBM peak
    and the FLOPs of one tensor-core tile of :data:`TILE_ROWS` rows at the peak of the
    precision it multiplies in (FP8 where the GPU has FP8 units, 16 bits otherwise and for
    weight-only INT4)."""
    active = parameter_count(model)[1]
    sixteen = max(gpu.dense_flops_per_s.get("bf16", 0.0), gpu.dense_flops_per_s.get("fp16", 0.0))
    peak = {"bf16": sixteen, "fp8": gpu.dense_flops_per_s.get("fp8", sixteen), "int4": sixteen}
    read = {d: active * WEIGHT_BYTES[d] / (gpu.hbm_bandwidth_bytes_per_s * tp)
            for d in PRECISIONS}
    tile = {d: 2 * active * TILE_ROWS / (peak[d] * tp) for d in PRECISIONS}
    return read, tile


def length_violations(*, label: str, by_length: dict[int, Prediction],
                      varied: str) -> list[str]:
    """What a longer prompt (``varied`` "input") or output ("output") must not do: shorten
    TTFT (a prompt) or TPOT, or lower the energy per request."""
    out = []
    names = ("ttft_s", "tpot_s") if varied == "input" else ("tpot_s",)
    lengths = sorted(by_length)
    for short, long in zip(lengths, lengths[1:], strict=False):
        a, b = by_length[short], by_length[long]
        step = f"{label} {varied} {short} -> {long} tokens"
        for name in names:
            if getattr(b, name) < getattr(a, name) * (1 - MONOTONE_SLACK):
                out.append(f"{step}: {name} falls {getattr(a, name):.4g} -> "
                           f"{getattr(b, name):.4g} s")
        if b.energy_per_request_j < a.energy_per_request_j * (1 - MONOTONE_SLACK):
            out.append(f"{step}: energy per request falls {a.energy_per_request_j:.4g} -> "
                       f"{b.energy_per_request_j:.4g} J")
    return out


def fusion_violations(*, label: str, fused: Prediction,
                      without: dict[str, Prediction]) -> list[str]:
    """What dropping one fusion (``without``, by the fusion left out) must not do: shorten
    TTFT or TPOT, or lower the energy per output token."""
    out = []
    for name, result in without.items():
        for metric in ("ttft_s", "tpot_s", "energy_per_output_token_j"):
            kept, dropped = getattr(fused, metric), getattr(result, metric)
            if dropped < kept * (1 - FUSION_SLACK):
                out.append(f"{label} without {name}: {metric} {kept:.6g} -> {dropped:.6g}")
    return out


def trace_violations(*, label: str, result: LoadPrediction, gpu: GPU) -> list[str]:
    """What a trace-driven open loop breaks (module docstring, ``--kind trace``)."""
    load, out = result.load, []
    for name in HEADLINE:
        value = getattr(result, name)
        if not (math.isfinite(value) and value > 0):
            out.append(f"{label}: {name} = {value!r}")
    boards = result.num_gpus
    if not gpu.idle_power_w * boards <= result.avg_power_w <= POWER_SLACK * gpu.tdp_w * boards:
        out.append(f"{label}: {result.avg_power_w:.0f} W outside {boards} x "
                   f"[{gpu.idle_power_w:.0f}, {gpu.tdp_w:.0f}] W")
    served, offered = load["requests_per_s"], load["offered_requests_per_s"]
    if abs(served - offered) > TRACE_SLACK * offered:
        out.append(f"{label}: served {served:.4g}/s of {offered:.4g}/s arriving in the window")
    return out + run_identity_violations(label=label, result=result, little_slack=TRACE_SLACK)


def _workload(*, kind: str, level: int, length_cv: float = LOAD_LENGTH_CV) -> Workload:
    if kind == "load":
        return Workload(kind="load", concurrency=level, input_tokens=INPUT_TOKENS,
                        output_tokens=OUTPUT_TOKENS, length_cv=length_cv)
    return Workload(kind=kind, batch=level, input_tokens=INPUT_TOKENS,
                    output_tokens=OUTPUT_TOKENS)


def _configurations(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                    runtimes: Sequence[str]) -> Iterator[tuple[ModelConfig, GPU, str, Deployment]]:
    """Every (model, GPU, runtime, TP degree) with its label and deployment."""
    for model in models:
        for gpu in gpus:
            for runtime in runtimes:
                for tp in TP_DEGREES:
                    yield (model, gpu, f"{model.name} {gpu.name} {runtime} tp{tp}",
                           Deployment(tp=tp, runtime=runtime))


def sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU], runtimes: Sequence[str],
          batches: Sequence[int], kind: str = "batch") -> Sweep:
    """Predict every (model, GPU, runtime, TP, batch) and collect the violations
    (``kind="load"``: batches are closed loops of as many clients)."""
    made, found = 0, []
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        by_batch: dict[int, Prediction] = {}
        pair: tuple[Prediction, Prediction] | None = None
        for batch in batches:
            try:
                result = predict(model=model, gpu=gpu, deployment=deployment,
                                 workload=_workload(kind=kind, level=batch))
                if kind == "load" and batch == 1:
                    pair = (predict(model=model, gpu=gpu, deployment=deployment,
                                    workload=_workload(kind="load", level=1,
                                                       length_cv=0.0)),
                            predict(model=model, gpu=gpu, deployment=deployment,
                                    workload=_workload(kind="batch", level=1)))
            except EnergyLensError:  # refused by the deployment checks
                break
            if not result.feasible:
                break
            made += 1
            by_batch[batch] = result
            point = f"{label} {'clients' if kind == 'load' else 'batch'} {batch}"
            found += point_violations(label=point,
                                      result=result, gpu=gpu, model=model,
                                      prompts=first_prompts(kind=kind, batch=batch,
                                                            result=result))
            if isinstance(result, LoadPrediction):
                found += load_violations(label=point, result=result, clients=batch)
            if pair is not None and batch == 1:
                found += alone_violations(label=point, loop=pair[0], batch=pair[1])
        found += batch_violations(label=label, by_batch=by_batch)
        if kind == "load":
            found += throughput_violations(label=label, by_clients=by_batch)
    return Sweep(predictions=made, violations=tuple(found))


def open_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
               runtimes: Sequence[str], clients: int) -> Sweep:
    """Open loops at :data:`OPEN_SHARES` of each configuration's capacity (the requests/s
    of a closed loop of ``clients``), and the violations."""
    made, found = 0, []
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        try:
            closed = predict(model=model, gpu=gpu, deployment=deployment,
                             workload=_workload(kind="load", level=clients))
        except EnergyLensError:  # refused by the deployment checks
            continue
        if not isinstance(closed, LoadPrediction) or not closed.feasible:
            continue
        capacity = closed.load["requests_per_s"]
        by_rate: dict[float, LoadPrediction] = {}
        for share in OPEN_SHARES:
            rate = share * capacity
            result = predict(model=model, gpu=gpu, deployment=deployment,
                             workload=Workload(
                                 kind="load", request_rate=rate,
                                 input_tokens=INPUT_TOKENS,
                                 output_tokens=OUTPUT_TOKENS,
                                 length_cv=LOAD_LENGTH_CV,
                                 num_requests=OPEN_REQUESTS))
            assert isinstance(result, LoadPrediction)
            made += 1
            by_rate[rate] = result
            point = f"{label} rate {rate:.4g}/s"
            found += point_violations(label=point, result=result, gpu=gpu,
                                      model=model, prompts=1)
            found += load_violations(label=point, result=result, clients=None)
        found += rate_violations(label=label, by_rate=by_rate)
    return Sweep(predictions=made, violations=tuple(found))


def clock_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                runtimes: Sequence[str], batches: Sequence[int]) -> Sweep:
    """Static batches at :data:`CLOCK_POINTS` SM clocks of every configuration, and the
    violations of :func:`clock_violations`."""
    made, found = 0, []
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        step = (gpu.boost_clock_mhz - gpu.min_clock_mhz) / (CLOCK_POINTS - 1)
        clocks = [gpu.min_clock_mhz + i * step for i in range(CLOCK_POINTS - 1)]
        clocks.append(gpu.boost_clock_mhz)
        for batch in batches:
            workload = _workload(kind="batch", level=batch)
            try:
                default = predict(model=model, gpu=gpu, deployment=deployment,
                                  workload=workload)
                if not default.feasible:
                    break
                by_clock = {clock: predict(model=model, gpu=gpu,
                                           deployment=replace(deployment, freq_mhz=clock),
                                           workload=workload) for clock in clocks}
            except EnergyLensError:  # refused by the deployment checks
                break
            made += 1 + len(by_clock)
            found += clock_violations(label=f"{label} batch {batch}", by_clock=by_clock,
                                      default=default, boost_mhz=gpu.boost_clock_mhz)
    return Sweep(predictions=made, violations=tuple(found))


def precision_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                    runtimes: Sequence[str], batches: Sequence[int]) -> Sweep:
    """Static batches with the weights in each of :data:`PRECISIONS` the runtime runs, and
    the violations of :func:`precision_violations`."""
    made, found = 0, []
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        for batch in batches:
            by_dtype: dict[str, Prediction] = {}
            for dtype in PRECISIONS:
                try:
                    result = predict(model=model, gpu=gpu,
                                     deployment=replace(deployment, weight_dtype=dtype),
                                     workload=_workload(kind="batch", level=batch))
                except EnergyLensError:  # a precision the runtime or GPU lacks
                    continue
                if result.feasible:
                    by_dtype[dtype] = result
            made += len(by_dtype)
            read, tile = decode_floors(model=model, gpu=gpu, tp=deployment.tp)
            found += precision_violations(label=label, by_dtype=by_dtype, batch=batch,
                                          read_s=read, tile_s=tile)
    return Sweep(predictions=made, violations=tuple(found))


def fusion_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                 runtimes: Sequence[str], batches: Sequence[int]) -> Sweep:
    """Static batches with every fusion and with each one left out (but
    :data:`FUSION_EXCEPTIONS`), and the violations of :func:`fusion_violations`."""
    made, found = 0, []
    every = frozenset(FUSIONS)
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        for batch in batches:
            workload = _workload(kind="batch", level=batch)
            try:
                fused = predict(model=model, gpu=gpu,
                                deployment=replace(deployment, fusion=every), workload=workload)
                if not fused.feasible:
                    break
                without = {name: predict(model=model, gpu=gpu,
                                         deployment=replace(deployment, fusion=every - {name}),
                                         workload=workload)
                           for name in sorted(every - FUSION_EXCEPTIONS)}
            except EnergyLensError:  # refused by the deployment checks
                break
            made += 1 + len(without)
            found += fusion_violations(label=f"{label} batch {batch}", fused=fused,
                                       without=without)
    return Sweep(predictions=made, violations=tuple(found))


def length_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                 runtimes: Sequence[str], batches: Sequence[int]) -> Sweep:
    """Static batches over :data:`PROMPT_LENGTHS` and :data:`OUTPUT_LENGTHS`, and the
    violations of :func:`length_violations`."""
    made, found = 0, []
    series = (("input", PROMPT_LENGTHS), ("output", OUTPUT_LENGTHS))
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        for batch in batches:
            for varied, lengths in series:
                by_length: dict[int, Prediction] = {}
                for length in lengths:
                    tokens = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                              f"{varied}_tokens": length}
                    try:
                        result = predict(model=model, gpu=gpu, deployment=deployment,
                                         workload=Workload(kind="batch", batch=batch,
                                                           **tokens))
                    except EnergyLensError:  # refused (a context the model lacks)
                        break
                    if not result.feasible or (result.running_batch or batch) < batch:
                        break
                    by_length[length] = result
                made += len(by_length)
                found += length_violations(label=f"{label} batch {batch}",
                                           by_length=by_length, varied=varied)
    return Sweep(predictions=made, violations=tuple(found))


def trace_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU],
                runtimes: Sequence[str], clients: int) -> Sweep:
    """Open loops replaying :data:`TRACES` at :data:`TRACE_SHARES` of each configuration's
    closed-loop rate (``clients`` clients, the first trace's lengths), and the violations
    of :func:`trace_violations`."""
    made, found = 0, []
    for model, gpu, label, deployment in _configurations(models=models, gpus=gpus,
                                                         runtimes=runtimes):
        try:
            closed = predict(model=model, gpu=gpu, deployment=deployment,
                             workload=Workload(kind="load", trace=TRACES[0],
                                               concurrency=clients,
                                               num_requests=TRACE_REQUESTS))
        except EnergyLensError:  # refused, or a row longer than the model's context
            continue
        if not isinstance(closed, LoadPrediction) or not closed.feasible:
            continue
        for trace in TRACES:
            for share in TRACE_SHARES:
                result = predict(model=model, gpu=gpu, deployment=deployment,
                                 workload=Workload(kind="load", trace=trace,
                                                   request_rate=share
                                                   * closed.load["requests_per_s"],
                                                   num_requests=TRACE_REQUESTS))
                assert isinstance(result, LoadPrediction)
                if not result.feasible:
                    continue
                made += 1
                found += trace_violations(label=f"{label} {trace.rsplit('/', 1)[-1]} "
                                                f"at {share:.0%}", result=result, gpu=gpu)
    return Sweep(predictions=made, violations=tuple(found))


def _layout(gpu: GPU) -> tuple[object, ...]:
    """What ties two GPUs' collectives to the same measured links: the vendor and the
    interconnect layout (scale-up kind and wiring, GPUs per node, scale-out kind)."""
    link = gpu.intra_node
    return (gpu.vendor, link.kind, link.topology, link.beyond_pair_kind, gpu.gpus_per_node,
            gpu.inter_node.kind)


def _figures(gpu: GPU) -> dict[str, float]:
    link = gpu.intra_node
    beyond = link.beyond_pair_bandwidth_bytes_per_s or link.bandwidth_bytes_per_s
    return {**{f"dense {dtype}": rate for dtype, rate in gpu.dense_flops_per_s.items()},
            **{name: float(getattr(gpu, name)) for name in DOMINANCE_FIGURES},
            "scale-up": link.bandwidth_bytes_per_s, "beyond a pair": beyond,
            "scale-out": gpu.inter_node.bandwidth_bytes_per_s}


def dominates(better: GPU, worse: GPU) -> bool:
    """Whether ``better`` has ``worse``'s vendor and interconnect layout, every figure of
    ``worse`` (each dense rate it has, :data:`DOMINANCE_FIGURES`, its link bandwidths) at
    least as high, and one higher."""
    if better is worse or _layout(better) != _layout(worse):
        return False
    mine, theirs = _figures(better), _figures(worse)
    return all(mine.get(k, -math.inf) >= v for k, v in theirs.items()) and \
        any(mine[k] > v for k, v in theirs.items())


def gpu_violations(*, label: str, better: Prediction, worse: Prediction) -> list[str]:
    """What a GPU that dominates another must not do on one static batch (module
    docstring, ``--kind gpus``): take longer where both hold the batch, serve fewer tokens
    per second where only it does, or hold fewer sequences."""
    held_b, held_w = better.running_batch or 0.0, worse.running_batch or 0.0
    if held_b < held_w:
        return [f"{label}: holds {held_b:g} sequences at once against {held_w:g}"]
    if held_b > held_w:
        if better.output_tokens_per_s < worse.output_tokens_per_s * (1 - MONOTONE_SLACK):
            return [f"{label}: {better.output_tokens_per_s:.4g} tokens/s against "
                    f"{worse.output_tokens_per_s:.4g} (it holds {held_b:g} sequences, the "
                    f"other {held_w:g})"]
        return []
    return [f"{label}: {metric} {getattr(better, metric):.4g} s against "
            f"{getattr(worse, metric):.4g} s" for metric in ("ttft_s", "tpot_s")
            if getattr(better, metric) > getattr(worse, metric) * (1 + MONOTONE_SLACK)]


def gpu_sweep(*, models: Sequence[ModelConfig], gpus: Sequence[GPU], runtimes: Sequence[str],
              batches: Sequence[int]) -> Sweep:
    """Static batches on both GPUs of every pair where one :func:`dominates` the other, and
    the violations of :func:`gpu_violations`."""
    made, found = 0, []
    pairs = [(a, b) for a in gpus for b in gpus if dominates(a, b)]
    for better, worse in pairs:
        for model, _, label, deployment in _configurations(models=models, gpus=[better],
                                                           runtimes=runtimes):
            for batch in batches:
                workload = _workload(kind="batch", level=batch)
                try:
                    on = [predict(model=model, gpu=gpu, deployment=deployment,
                                  workload=workload) for gpu in (better, worse)]
                except EnergyLensError:  # refused on either (a precision, a split)
                    break
                if not (on[0].feasible and on[1].feasible):
                    continue
                made += 2
                found += gpu_violations(label=f"{label} batch {batch} against {worse.name}",
                                        better=on[0], worse=on[1])
    return Sweep(predictions=made, violations=tuple(found))


LOOP_SWEEPS = {"open": open_sweep, "trace": trace_sweep}
SERIES_SWEEPS = {"clock": clock_sweep, "precision": precision_sweep, "length": length_sweep,
                 "fusion": fusion_sweep, "gpus": gpu_sweep}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="zoo names (default: every model)")
    parser.add_argument("--gpus", nargs="*", help="database names (default: every GPU)")
    parser.add_argument("--runtimes", nargs="*", help="runtime profiles (default: every one)")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8, 64])
    parser.add_argument("--kind", choices=("batch", "serving", "load", *LOOP_SWEEPS,
                                           *SERIES_SWEEPS),
                        default="batch",
                        help="workload kind: static batches, steady-state serving, closed "
                             "loops of --batches clients, open loops below the capacity "
                             "of the largest, static batches over the GPU's SM clocks, "
                             "weight precisions, prompt and output lengths or fusions, "
                             "open loops replaying the Splitwise traces, or the same static "
                             "batches on GPUs that dominate others")
    parser.add_argument("--limit", type=int, default=40, help="violations printed at most")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # names resolve as everywhere else (aliases too; an unknown one is a one-line error)
    models = [get_model(n) for n in args.models] if args.models else list_models()
    gpus = [load_gpu(n) for n in args.gpus] if args.gpus else list_gpus()
    runtimes = args.runtimes or list(runtime_names())
    if args.kind in LOOP_SWEEPS:  # open loops below a closed loop's rate
        result = LOOP_SWEEPS[args.kind](models=models, gpus=gpus, runtimes=runtimes,
                                        clients=max(args.batches))
    elif args.kind in SERIES_SWEEPS:  # static batches over one more axis
        result = SERIES_SWEEPS[args.kind](models=models, gpus=gpus, runtimes=runtimes,
                                          batches=sorted(args.batches))
    else:
        result = sweep(models=models, gpus=gpus, runtimes=runtimes,
                       batches=sorted(args.batches), kind=args.kind)
    print(f"{result.predictions} predictions, {len(result.violations)} violations, "
          f"{time.perf_counter() - started:.0f} s on {platform.machine()} "
          f"({platform.python_version()})")
    for line in result.violations[:args.limit]:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
