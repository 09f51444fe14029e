"""Disaggregated prefill and decode: two GPU pools, the KV cache of each prompt shipped
from the prefill pool to the decode pool (DistServe, Splitwise; vLLM's P/D connectors).

Requests arrive at the prefill pool (round robin over its replicas), each prefill
replica runs the runtime's scheduler on prompts only (a prompt's last chunk yields the
first token). The prompt's cache then crosses to a decode replica (after a fixed handoff,
``REQUEST_HANDOFF_S``: front end, router, handshake): one send/receive per
tensor-parallel rank pair, over the scale-up link when both pools fit in one node of the
same GPU type (each prefill replica sends to every decode replica), otherwise over the
scale-out network (time and energy per byte from the link constants of the calibration,
:func:`energylens.cost.comm.collective_cost`).
The decode pool admits the request with its cache once the runtime's admission rule lets
it (``decode_reserve_tokens``: vLLM once its prompt's cache fits, SGLang where 512 more
tokens for each running request fit too, TensorRT-LLM where every request's whole output
fits, so that it never evicts one), and decodes the remaining tokens. TTFT is measured to
that admission (the first token is streamed from the decode pool), TPOT from there. Under
attention DP each rank of a pool is a scheduler of its own (a stream), as in a colocated
replica; requests go round robin over a pool's streams.

A closed loop's clients send each next request when their last one ends, which the two
pools decide together: the arrivals are found as a fixed point, every request of
generation g + 1 (a client's (g + 1)-th) arriving at the completions of generation g. Each
round simulates both pools on the last round's arrivals and takes the completions, in
order, as the next arrivals, starting from every request at time 0. Requests that arrive
too early in one round crowd the steps of earlier ones, so a round settles less than a
generation (about two rounds a generation, five or more where early arrivals overflow
the decode pool's cache), and the rounds end when the arrivals no longer move.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.cost.comm import collective_cost, link_for_group, point_to_point_energy_j
from energylens.cost.constants import Calibration
from energylens.cost.memory import MemoryUse, memory_use
from energylens.deployment import Deployment, check_deployment, sharded_model
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.config import ModelConfig
from energylens.model.zoo import get_model
from energylens.predict import step_context
from energylens.workloads.load.arrivals import (
    Requests,
    closed_loop_clients,
    default_count,
    replica_requests,
)
from energylens.workloads.load.costs import StepTable
from energylens.workloads.load.kind import (
    UNBOUNDED_KV_TOKENS,
    LoadPrediction,
    kv_bytes_per_token,
    kv_pool_tokens,
    rank_limits,
    refused_prediction,
    request_context_shortfall,
)
from energylens.workloads.load.metrics import (
    SLO,
    LoadMetrics,
    stream_samples,
    summarise,
    warmup_share,
)
from energylens.workloads.load.metrics import pool as pool_streams
from energylens.workloads.load.simulator import BLOCK_TOKENS, SchedulerLimits, SimRun, simulate
from energylens.workloads.registry import Placement
from energylens.workloads.result import PhaseResult
from energylens.workloads.workload import Workload


@dataclass(frozen=True, kw_only=True)
class Pool:
    """One pool: its GPU type and deployment (``dp`` replicas of ``tp x pp`` GPUs)."""

    gpu: str
    deployment: Deployment


@dataclass(frozen=True, kw_only=True)
class BoundPool:
    """A pool bound to its model, GPU and calibration: one replica's placement, memory
    (one longest request on each attention rank), one stream's scheduler limits and the
    streams (schedulers: attention ranks x pipeline stages' virtual engines) of a
    replica."""

    placement: Placement
    memory: MemoryUse
    limits: SchedulerLimits
    engines: int = 1

    @property
    def streams(self) -> int:
        """Schedulers of the whole pool."""
        return self.placement.replicas * self.engines


def bind_pool(*, model: ModelConfig, pool: Pool, calibration: Calibration,
              longest: int) -> BoundPool:
    """Check ``pool``'s deployment and bind it (requests up to ``longest`` tokens)."""
    gpu = load_gpu(pool.gpu)
    cal = require_constants(calibration=calibration, gpu=gpu)
    d = pool.deployment
    model = sharded_model(deployment=d, model=model)
    check_deployment(deployment=d, model=model, gpu_name=gpu.name,
                     gpu_clock_range=(gpu.min_clock_mhz, gpu.boost_clock_mhz),
                     gpu_sm_count=gpu.sm_count)
    ctx = step_context(model=model, gpu=gpu, deployment=d, calibration=cal)
    budget, _ = rank_limits(ctx, prefill_chunk_tokens=d.prefill_chunk_tokens)
    memory = memory_use(graph=ctx.graph, gpu=gpu, runtime=ctx.runtime, degrees=dict(ctx.degrees),
                        pp=d.pp, weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype,
                        sequences=float(ctx.attention_ranks),  # one request on a rank
                        context_tokens=float(longest), token_budget=budget,
                        draft_layers=ctx.draft_layers)
    # a pool that holds not even one request is priced as if it fit (reported infeasible);
    # an attention rank's cache is its own, shared by the pipeline's virtual engines
    rank_tokens = kv_pool_tokens(ctx, budget=budget) // ctx.attention_ranks if memory.fits \
        else UNBOUNDED_KV_TOKENS
    budget, cap = rank_limits(ctx, max_num_seqs=d.max_num_seqs,
                              prefill_chunk_tokens=d.prefill_chunk_tokens,
                              kv_tokens=rank_tokens, context_tokens=int(longest))
    limits = SchedulerLimits(token_budget=budget, max_sequences=cap,
                             kv_tokens=max(rank_tokens // ctx.pp, longest + 2 * BLOCK_TOKENS),
                             prefill_scheduling=ctx.runtime.prefill_scheduling,
                             decode_reserve_tokens=ctx.runtime.decode_reserve_tokens)
    return BoundPool(placement=Placement(ctx=ctx, model=model, replicas=d.replicas,
                                      gpus=d.total_gpus, sequences=1.0,
                                      max_num_seqs=d.max_num_seqs,
                                      prefill_chunk_tokens=d.prefill_chunk_tokens),
                  memory=memory, limits=limits, engines=ctx.attention_ranks * ctx.pp)


def transfer_cost(*, prefill: Placement, decode: Placement, tokens: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, joules) to ship the cache of prompts of ``tokens`` tokens from a prefill
    replica to a decode replica: each prefill rank sends its shard to one decode rank, over
    the scale-up link where both pools (``gpus``: every replica) fit in one node of one GPU
    type, otherwise over the scale-out network."""
    ctx = prefill.ctx
    per_gpu = memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                         degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                         kv_dtype=ctx.kv_dtype, sequences=1.0, context_tokens=1.0,
                         draft_layers=ctx.draft_layers).kv_cache_bytes
    ranks = ctx.replica_gpus
    # round robin pairs every prefill replica with every decode replica: all of them share
    # one node only when both pools fit in it
    together = prefill.gpus + decode.gpus
    same_node = ctx.gpu.name == decode.ctx.gpu.name and together <= ctx.gpu.gpus_per_node
    kind, bandwidth = link_for_group(gpu=ctx.gpu, group_size=together if same_node else
                                     ctx.gpu.gpus_per_node + 1)
    link = ctx.calibration.link(gpu=ctx.gpu.name, kind=kind)
    cost = collective_cost(kind="send_recv", message_bytes=per_gpu * tokens.astype(float),
                           group_size=2, bandwidth=bandwidth, constants=link)
    energy = point_to_point_energy_j(cost=cost, constants=link)
    return np.asarray(cost.latency_s, dtype=float), np.asarray(energy, dtype=float) * ranks


def _pool_phase(*, metrics: LoadMetrics, static_w: float, streams: int) -> PhaseResult:
    """A pool's window: its iterations' energy and static power (``static_w`` a stream's
    GPUs) over its busy time, over its ``streams``."""
    wall = metrics.prefill_window[0] + metrics.decode_only_window[0]
    joules = [(metrics.prefill_window[i] + metrics.decode_only_window[i]) * streams
              for i in (1, 2, 3)]
    static = static_w * wall * streams
    return PhaseResult(latency_s=wall, energy_j=sum(joules) + static, compute_j=joules[0],
                       memory_j=joules[1], communication_j=joules[2], static_j=static)


def _held(*, pool: BoundPool, peak_tokens: float) -> float:
    """Bytes a GPU of ``pool`` holds: weights, activations, reserve, and the KV cache of
    one longest request or, where more, the cache the pool's run held at its peak."""
    peak = peak_tokens * kv_bytes_per_token(pool.placement.ctx)
    return float(replace(pool.memory, kv_cache_bytes=max(float(pool.memory.kv_cache_bytes),
                                                         peak)).total_bytes)


def _run_energy(*, run: SimRun, table: StepTable, static_w: float,
                span_s: float) -> tuple[float, float]:
    """(iteration, idle) joules of one replica's run over the deployment's ``span_s``:
    its iterations' dynamic energy and the static power (``static_w``, the replica's GPUs)
    while they run, the static power for the rest of the span."""
    busy = float(np.sum(run.wall_s))
    iteration = float(np.sum(run.dynamic_energy(table))) + static_w * busy
    return iteration, static_w * max(span_s - busy, 0.0)


def _totals(*, prefill: list[SimRun], prefill_table: StepTable, prefill_w: float,
            decode: list[SimRun], decode_table: StepTable, decode_w: float, decode_streams: int,
            transfer_j: float, span_s: float) -> dict[str, float | int]:
    """Whole-run energy and preemptions of the deployment: every prefill stream's run, the
    simulated decode streams' runs standing for all ``decode_streams`` (each the mean of
    them), each over ``span_s`` (the first arrival to the last completion), and the cache
    transfers: iteration + idle + transfer = total. ``*_w``: a stream's static power."""
    parts = [_run_energy(run=run, table=prefill_table, static_w=prefill_w, span_s=span_s)
             for run in prefill]
    stand_for = decode_streams / len(decode)
    for run in decode:
        iteration, idle = _run_energy(run=run, table=decode_table, static_w=decode_w,
                                      span_s=span_s)
        parts.append((iteration * stand_for, idle * stand_for))
    iteration, idle = sum(p[0] for p in parts), sum(p[1] for p in parts)
    preempted = sum(int(run.preemptions.sum()) for run in prefill) \
        + round(sum(int(run.preemptions.sum()) for run in decode) * stand_for)
    return {"iteration_energy_j": iteration, "idle_energy_j": idle,
            "kv_transfer_energy_j": transfer_j,
            "total_energy_j": iteration + idle + transfer_j, "preemptions": preempted}


@dataclass(frozen=True, kw_only=True)
class _Served:
    """Both pools' runs on one set of arrivals: every prefill stream's run, when each
    request's cache lands at the decode pool, the simulated decode streams' runs with the
    requests each served (indices into the deployment's stream), and every request's
    completion (NaN where its decode stream was not simulated)."""

    prefill_runs: list[SimRun]
    ready_s: np.ndarray
    decode_runs: list[tuple[SimRun, np.ndarray]]
    finish_s: np.ndarray


def _serve(*, stream: Requests, arrival_s: np.ndarray, pre: BoundPool, dec: BoundPool,
           pre_table: StepTable, dec_table: StepTable, moved_s: np.ndarray,
           decode_streams: int) -> _Served:
    """Serve ``stream``'s requests arriving at ``arrival_s`` (ascending): round robin over
    the prefill streams, then, in the order their caches land, over the decode streams, of
    which the first ``decode_streams`` are simulated."""
    count = stream.count
    first = np.empty(count)
    pre_runs = []
    for k in range(pre.streams):
        mine = slice(k, count, pre.streams)
        run = simulate(requests=Requests(
            input_tokens=stream.input_tokens[mine], output_tokens=np.ones_like(
                stream.output_tokens[mine]), arrival_s=arrival_s[mine], clients=0,
            shared_prefix=stream.shared_prefix),
            table=pre_table, limits=pre.limits)
        first[mine] = run.first_token_s
        pre_runs.append(run)
    ready = first + moved_s
    landed = np.argsort(ready, kind="stable")
    finish = np.full(count, np.nan)
    dec_runs = []
    for k in range(min(decode_streams, dec.streams)):
        order = landed[k::dec.streams]
        run = simulate(requests=Requests(
            input_tokens=stream.input_tokens[order], output_tokens=stream.output_tokens[order],
            arrival_s=ready[order], clients=0, prefilled=True,
            shared_prefix=stream.shared_prefix), table=dec_table, limits=dec.limits)
        finish[order] = run.finish_s
        dec_runs.append((run, order))
    return _Served(prefill_runs=pre_runs, ready_s=ready, decode_runs=dec_runs, finish_s=finish)


#: The fixed latency a disaggregated request's path adds between the prefill pool's last
#: token and the decode pool [s]: the front end and router, the KV transfer's handshake and
#: the first token's delivery, which no link constant prices. Fitted: the median of
#: measured minus predicted TTFT over AIConfigurator's 46 disaggregated rows of 8 clients
#: or fewer (silicon_sample_disagg.csv; NVIDIA Dynamo with TensorRT-LLM and vLLM, SGLang's
#: router; B200, GB200, GB300, H100, H200), where neither pool queues; refitted without
#: each engine 0.132-0.158 s and without each GPU 0.135-0.139 s
#: (``benchmarks/fit_disagg_handoff.py``, docs/load.md "Disaggregated rows").
REQUEST_HANDOFF_S = 0.137

#: Rounds of the closed loop's fixed point, per generation of requests (a client's k-th
#: request is of generation k), beyond ``SETTLE_ROUNDS``: requests that arrive too early
#: in one round crowd the steps of earlier ones, so a round fixes less than a generation
#: (Llama-3.1-70B, 256 clients of 1,024 / 1,024 tokens, 10 generations: 20 rounds; where
#: too many arrivals overflow the decode pool's cache, rounds alternate between preempting
#: and idle decode steps: DeepSeek-V3 NVFP4, SGLang, 7 x 4 prefill and 2 x 8 decode
#: attention ranks of B200, 2,048 clients of 8,192 / 1,024 tokens: 57 rounds).
ROUNDS_PER_GENERATION = 10
SETTLE_ROUNDS = 50
#: Arrivals that move less than this between rounds [s] have settled.
SETTLED_S = 1e-9


def _closed_loop(*, clients: int, serve: Callable[[np.ndarray], _Served],
                 count: int) -> tuple[np.ndarray, _Served]:
    """(arrivals, both pools' runs on them) of ``clients`` clients that send their first
    requests at time 0 and each next one when one of theirs ends: the fixed point of
    arrivals = completions (module docstring), every decode stream simulated."""
    first_wave = min(clients, count)
    arrival = np.zeros(count)
    generations = math.ceil(count / max(first_wave, 1))
    for _ in range(ROUNDS_PER_GENERATION * generations + SETTLE_ROUNDS):
        served = serve(arrival)
        following = np.concatenate((np.zeros(first_wave),
                                    np.sort(served.finish_s)[:count - first_wave]))
        if np.max(np.abs(following - arrival), initial=0.0) <= SETTLED_S:
            return following, served
        arrival = following
    raise ConfigError(f"the closed loop of {clients} clients over two pools did not settle "
                      "(a bug: report it with the command)")


def predict_disaggregated(*, model: str | ModelConfig, workload: Workload, prefill: Pool,
                          decode: Pool, calibration: Calibration | None = None) -> LoadPrediction:
    """Serve a ``load`` workload, an open or a closed loop, on a prefill pool and a decode
    pool."""
    if workload.kind != "load":
        raise ConfigError("disaggregated pools serve a load workload (--workload load)")
    model_cfg = get_model(model) if isinstance(model, str) else model
    cal = calibration or default_calibration()
    clients = closed_loop_clients(workload)
    # requests of the whole deployment (its lengths; arrivals below): an open loop's
    # default, a thousand a decode replica; a closed loop's, twenty a client
    count = workload.num_requests or default_count(clients=clients) * (
        1 if clients > 0 else decode.deployment.replicas)
    stream = replica_requests(workload=workload, replicas=1, count=count)
    longest = int((stream.input_tokens + stream.output_tokens).max())
    pre = bind_pool(model=model_cfg, pool=prefill, calibration=cal, longest=longest)
    dec = bind_pool(model=model_cfg, pool=decode, calibration=cal, longest=longest)
    d_ctx, p_ctx = dec.placement.ctx, pre.placement.ctx
    where = (f"{pre.placement.gpus} x {p_ctx.gpu.name} (prefill) + "
             f"{dec.placement.gpus} x {d_ctx.gpu.name} (decode)")
    gpus = pre.placement.gpus + dec.placement.gpus
    memory_gb = float(max(pre.memory.total_bytes, dec.memory.total_bytes)) / 1e9
    context = request_context_shortfall(model_cfg, workload)
    reasons = [r for r in (context, pre.memory.shortfall(gpu_name=p_ctx.gpu.name),
                           dec.memory.shortfall(gpu_name=d_ctx.gpu.name)) if r]
    if context is not None:  # engines refuse the requests: nothing to simulate
        return refused_prediction(model=model_cfg.name, gpu=where, num_gpus=gpus,
                                  memory_per_gpu_gb=memory_gb, workload=workload,
                                  reason="; ".join(reasons), name="load")
    slos = tuple(SLO.parse(text) for text in workload.slo)

    pre_table = StepTable.build(ctx=pre.placement.ctx, max_decode=1,
                                max_context=int(stream.input_tokens.max()),
                                budget=pre.limits.token_budget)
    moved_s, moved_j = transfer_cost(prefill=pre.placement, decode=dec.placement,
                                     tokens=stream.input_tokens)
    handed_s = moved_s + REQUEST_HANDOFF_S  # from the prefill's end to the decode pool
    # a closed loop's fullest decode replica keeps that many ranks busy
    ranks = d_ctx.attention_ranks if clients <= 0 else max(1, min(
        d_ctx.attention_ranks, math.ceil(clients / decode.deployment.replicas)))
    dec_table = StepTable.build(ctx=d_ctx, max_decode=dec.limits.max_sequences,
                                max_context=longest, budget=dec.limits.token_budget, ranks=ranks)

    def serve(arrival_s: np.ndarray, decode_streams: int) -> _Served:
        return _serve(stream=stream, arrival_s=arrival_s, pre=pre, dec=dec, pre_table=pre_table,
                      dec_table=dec_table, moved_s=handed_s, decode_streams=decode_streams)

    if clients > 0:
        arrival, served = _closed_loop(
            clients=max(1, math.floor(clients + 0.5)), count=count,
            serve=lambda a: serve(a, dec.streams))
    else:
        assert stream.arrival_s is not None
        arrival = stream.arrival_s
        served = serve(arrival, 1)  # decode streams alike: the first stands for them all
    pre_runs, ready = served.prefill_runs, served.ready_s
    # the user's clock: from arrival at the prefill pool; the first token when the decode
    # pool admits the request (its cache landed and fits)
    warmup = warmup_share(workload)
    d_static = d_ctx.constants.static_power_w * d_ctx.replica_gpus / dec.engines  # a stream's
    p_static = p_ctx.constants.static_power_w * p_ctx.replica_gpus / pre.engines
    metrics = pool_streams(streams=[(stream_samples(
        run=replace(run, arrival_s=arrival[order]),
        table=dec_table, static_w=d_static, gpus=1.0, warmup_fraction=warmup), 1)
        for run, order in served.decode_runs], slos=slos, static_per_s=d_static)
    pre_metrics = summarise(run=pre_runs[0], table=pre_table, slos=(), static_w=p_static,
                            gpus=1.0, warmup_fraction=warmup)
    span = float(arrival[-1] - arrival[0]) or 1.0
    power = (metrics.window_energy_j / metrics.window_s * dec.streams
             + pre_metrics.window_energy_j / pre_metrics.window_s * pre.streams
             + float(moved_j.sum()) / span)
    # decode streams stream every token but the first, which the prefill pool computed
    tokens_per_s = (metrics.output_tokens_per_s + metrics.requests_per_s) * dec.streams
    per_token = power / tokens_per_s
    load: dict[str, float | int | bool] = {**metrics.as_dict()}
    for key in ("requests_per_s", "offered_requests_per_s", "goodput_requests_per_s"):
        load[key] = float(load[key]) * dec.streams
    load["goodput_per_gpu"] = float(load["goodput_requests_per_s"]) / gpus
    load["kv_transfer_mean_s"] = float(moved_s.mean())
    load["request_handoff_s"] = REQUEST_HANDOFF_S
    load["kv_transfer_j_per_request"] = float(moved_j.mean())
    dec_runs = [run for run, _ in served.decode_runs]
    run_s = float(max(max(run.finish_s.max() for run in dec_runs), ready.max())
                  - arrival.min())
    load |= _totals(prefill=pre_runs, prefill_table=pre_table, prefill_w=p_static,
                    decode=dec_runs, decode_table=dec_table, decode_streams=dec.streams,
                    decode_w=d_static, transfer_j=float(moved_j.sum()), span_s=run_s)
    load["prefill_pool_gpus"], load["decode_pool_gpus"] = pre.placement.gpus, dec.placement.gpus
    if workload.capacity_attainment is not None:
        from energylens.workloads.load.capacity import Probe, bisect_capacity

        short = (workload.num_requests or 0) < default_count(clients=0) * decode.deployment.replicas
        probe_count = None if short else workload.num_requests  # never below the default

        def probe_at(rate: float) -> Probe:
            found = predict_disaggregated(
                model=model_cfg, prefill=prefill, decode=decode, calibration=cal,
                workload=replace(workload, request_rate=rate, concurrency=None,
                                 capacity_attainment=None, num_requests=probe_count)).load
            return Probe(float(found["slo_attainment"]), float(found["requests_per_s"]),
                         bool(found["keeps_up"]))

        rate = bisect_capacity(run=probe_at, target=workload.capacity_attainment)
        load.update(capacity_requests_per_s=rate, capacity_per_gpu=rate / gpus)
    held = [_held(pool=pre, peak_tokens=max(run.peak_kv_tokens for run in pre_runs)),
            _held(pool=dec, peak_tokens=max(run.peak_kv_tokens for run in dec_runs))]
    memory_gb = max(held) / 1e9  # the KV cache each pool held at its peak
    lat = metrics.latency_s
    return LoadPrediction(
        model=model_cfg.name, gpu=where, num_gpus=gpus, workload="load", feasible=not reasons,
        infeasible_reason="; ".join(reasons) or None, memory_per_gpu_gb=memory_gb,
        ttft_s=lat["ttft_mean_s"], tpot_s=lat["tpot_mean_s"], energy_per_output_token_j=per_token,
        energy_per_request_j=per_token * metrics.mean_output_tokens, avg_power_w=power,
        output_tokens_per_s=tokens_per_s,
        prefill=_pool_phase(metrics=pre_metrics, static_w=p_static, streams=pre.streams),
        decode=_pool_phase(metrics=metrics, static_w=d_static, streams=dec.streams),
        running_batch=metrics.mean_running, load=load)
