"""Disaggregated prefill and decode: two GPU pools, the KV cache of each prompt shipped
from the prefill pool to the decode pool (DistServe, Splitwise; vLLM's P/D connectors).

Requests arrive at the prefill pool (round robin over its replicas), each prefill
replica runs the runtime's scheduler on prompts only (a prompt's last chunk yields the
first token). The prompt's cache then crosses to a decode replica: one send/receive per
tensor-parallel rank pair, over the scale-up link when both pools fit in one node of the
same GPU type (each prefill replica sends to every decode replica), otherwise over the
scale-out network (time and energy per byte from the link constants of the calibration,
:func:`energylens.cost.comm.collective_cost`).
The decode pool admits the request with its cache and decodes the remaining tokens. TTFT
is measured to the cache's arrival at the decode pool (where the first token is streamed
from), TPOT from there. Open loops only: a closed loop's arrivals depend on completions
across both pools.
"""

from __future__ import annotations

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
from energylens.workloads.load.metrics import SLO, LoadMetrics, summarise, warmup_share
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
    (one longest request) and scheduler limits."""

    placement: Placement
    memory: MemoryUse
    limits: SchedulerLimits


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
    # a pool that holds not even one request is priced as if it fit (reported infeasible)
    kv_tokens = kv_pool_tokens(ctx, budget=budget) if memory.fits else UNBOUNDED_KV_TOKENS
    budget, cap = rank_limits(ctx, max_num_seqs=d.max_num_seqs,
                              prefill_chunk_tokens=d.prefill_chunk_tokens,
                              kv_tokens=kv_tokens, context_tokens=int(longest))
    limits = SchedulerLimits(token_budget=budget, max_sequences=cap,
                             kv_tokens=max(kv_tokens, longest + 2 * BLOCK_TOKENS),
                             prefill_scheduling=ctx.runtime.prefill_scheduling)
    return BoundPool(placement=Placement(ctx=ctx, model=model, replicas=d.replicas,
                                      gpus=d.total_gpus, sequences=1.0,
                                      max_num_seqs=d.max_num_seqs,
                                      prefill_chunk_tokens=d.prefill_chunk_tokens),
                  memory=memory, limits=limits)


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


def _pool_phase(*, metrics: LoadMetrics, static_w: float, gpus: int, replicas: int) -> PhaseResult:
    """A pool's window: its iterations' energy and static power over its busy time."""
    wall = metrics.prefill_window[0] + metrics.decode_only_window[0]
    joules = [(metrics.prefill_window[i] + metrics.decode_only_window[i]) * replicas
              for i in (1, 2, 3)]
    static = static_w * gpus * wall * replicas
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
            decode: SimRun, decode_table: StepTable, decode_w: float, decode_replicas: int,
            transfer_j: float, span_s: float) -> dict[str, float | int]:
    """Whole-run energy and preemptions of the deployment: every prefill replica's run,
    ``decode_replicas`` times the simulated decode replica's, each over ``span_s`` (the
    first arrival to the last completion), and the cache transfers:
    iteration + idle + transfer = total."""
    parts = [_run_energy(run=run, table=prefill_table, static_w=prefill_w, span_s=span_s)
             for run in prefill]
    iteration, idle = _run_energy(run=decode, table=decode_table, static_w=decode_w,
                                  span_s=span_s)
    parts.append((iteration * decode_replicas, idle * decode_replicas))
    iteration, idle = sum(p[0] for p in parts), sum(p[1] for p in parts)
    preempted = sum(int(run.preemptions.sum()) for run in prefill) \
        + int(decode.preemptions.sum()) * decode_replicas
    return {"iteration_energy_j": iteration, "idle_energy_j": idle,
            "kv_transfer_energy_j": transfer_j,
            "total_energy_j": iteration + idle + transfer_j, "preemptions": preempted}


def predict_disaggregated(*, model: str | ModelConfig, workload: Workload, prefill: Pool,
                          decode: Pool, calibration: Calibration | None = None) -> LoadPrediction:
    """Serve an open-loop ``load`` workload on a prefill pool and a decode pool."""
    if workload.kind != "load" or closed_loop_clients(workload) > 0:
        raise ConfigError("disaggregated pools serve an open-loop load workload (a request "
                          "rate or a trace's clock), not a closed loop")
    model_cfg = get_model(model) if isinstance(model, str) else model
    cal = calibration or default_calibration()
    n_decode = decode.deployment.replicas
    count = workload.num_requests or default_count(clients=0) * n_decode
    stream = replica_requests(workload=workload, replicas=1, count=count)
    assert stream.arrival_s is not None
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
    first = np.empty(count)
    pre_runs = []
    n_prefill = prefill.deployment.replicas
    for k in range(n_prefill):
        mine = slice(k, count, n_prefill)
        run = simulate(requests=Requests(
            input_tokens=stream.input_tokens[mine], output_tokens=np.ones_like(
                stream.output_tokens[mine]), arrival_s=stream.arrival_s[mine], clients=0,
            shared_prefix=stream.shared_prefix),
            table=pre_table, limits=pre.limits)
        first[mine] = run.first_token_s
        pre_runs.append(run)
    moved_s, moved_j = transfer_cost(prefill=pre.placement, decode=dec.placement,
                                     tokens=stream.input_tokens)
    ready = first + moved_s
    order = np.argsort(ready, kind="stable")[::n_decode]  # decode replica 0's requests
    dec_table = StepTable.build(ctx=dec.placement.ctx, max_decode=dec.limits.max_sequences,
                                max_context=longest, budget=dec.limits.token_budget)
    dec_run = simulate(requests=Requests(
        input_tokens=stream.input_tokens[order], output_tokens=stream.output_tokens[order],
        arrival_s=ready[order], clients=0, prefilled=True, shared_prefix=stream.shared_prefix),
        table=dec_table, limits=dec.limits)
    # the user's clock: from arrival at the prefill pool; first token when the cache lands
    seen = replace(dec_run, arrival_s=stream.arrival_s[order], first_token_s=ready[order])
    warmup = warmup_share(workload)
    metrics = summarise(run=seen, table=dec_table, slos=slos, static_w=d_ctx.constants.static_power_w,
                        gpus=d_ctx.replica_gpus, warmup_fraction=warmup)
    pre_metrics = summarise(run=pre_runs[0], table=pre_table, slos=(),
                            static_w=p_ctx.constants.static_power_w, gpus=p_ctx.replica_gpus,
                            warmup_fraction=warmup)
    span = float(stream.arrival_s[-1] - stream.arrival_s[0]) or 1.0
    power = (metrics.window_energy_j / metrics.window_s * n_decode
             + pre_metrics.window_energy_j / pre_metrics.window_s * n_prefill
             + float(moved_j.sum()) / span)
    # decode replicas stream every token but the first, which the prefill pool computed
    tokens_per_s = (metrics.output_tokens_per_s + metrics.requests_per_s) * n_decode
    per_token = power / tokens_per_s
    load: dict[str, float | int | bool] = {**metrics.as_dict()}
    for key in ("requests_per_s", "offered_requests_per_s", "goodput_requests_per_s"):
        load[key] = float(load[key]) * n_decode
    load["goodput_per_gpu"] = float(load["goodput_requests_per_s"]) / gpus
    load["kv_transfer_mean_s"] = float(moved_s.mean())
    load["kv_transfer_j_per_request"] = float(moved_j.mean())
    run_s = float(max(dec_run.finish_s.max(), ready.max()) - stream.arrival_s.min())
    load |= _totals(prefill=pre_runs, prefill_table=pre_table,
                    prefill_w=p_ctx.constants.static_power_w * p_ctx.replica_gpus,
                    decode=dec_run, decode_table=dec_table, decode_replicas=n_decode,
                    decode_w=d_ctx.constants.static_power_w * d_ctx.replica_gpus,
                    transfer_j=float(moved_j.sum()), span_s=run_s)
    load["prefill_pool_gpus"], load["decode_pool_gpus"] = pre.placement.gpus, dec.placement.gpus
    if workload.capacity_attainment is not None:
        from energylens.workloads.load.capacity import Probe, bisect_capacity

        short = (workload.num_requests or 0) < default_count(clients=0) * n_decode
        probe_count = None if short else workload.num_requests  # never below the default

        def probe_at(rate: float) -> Probe:
            found = predict_disaggregated(
                model=model_cfg, prefill=prefill, decode=decode, calibration=cal,
                workload=replace(workload, request_rate=rate, capacity_attainment=None,
                                 num_requests=probe_count)).load
            return Probe(float(found["slo_attainment"]), float(found["requests_per_s"]),
                         bool(found["keeps_up"]))

        rate = bisect_capacity(run=probe_at, target=workload.capacity_attainment)
        load.update(capacity_requests_per_s=rate, capacity_per_gpu=rate / gpus)
    held = [_held(pool=pre, peak_tokens=max(run.peak_kv_tokens for run in pre_runs)),
            _held(pool=dec, peak_tokens=dec_run.peak_kv_tokens)]
    memory_gb = max(held) / 1e9  # the KV cache each pool held at its peak
    lat = metrics.latency_s
    return LoadPrediction(
        model=model_cfg.name, gpu=where, num_gpus=gpus, workload="load", feasible=not reasons,
        infeasible_reason="; ".join(reasons) or None, memory_per_gpu_gb=memory_gb,
        ttft_s=lat["ttft_mean_s"], tpot_s=lat["tpot_mean_s"], energy_per_output_token_j=per_token,
        energy_per_request_j=per_token * metrics.mean_output_tokens, avg_power_w=power,
        output_tokens_per_s=tokens_per_s,
        prefill=_pool_phase(metrics=pre_metrics, static_w=p_ctx.constants.static_power_w,
                            gpus=p_ctx.replica_gpus, replicas=n_prefill),
        decode=_pool_phase(metrics=metrics, static_w=d_ctx.constants.static_power_w,
                           gpus=d_ctx.replica_gpus, replicas=n_decode),
        running_batch=metrics.mean_running, load=load)
