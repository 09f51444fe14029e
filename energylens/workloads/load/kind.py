"""The ``load`` workload kind: requests arriving over time, simulated request by request.

Binds a deployment's replica to the simulator: the scheduler limits (the runtime's token
budget, vLLM's cap on running requests, the KV pool left by the memory model), the step
price tables, the requests one replica receives; then scales one replica's run to the
deployment (replicas serve independent shares of the traffic behind a round-robin
balancer). Under pipeline parallelism a replica is ``pp`` virtual engines (vLLM's
pipeline-parallel scheduling: ``pp`` micro-batches in flight, each engine's own running
requests, the KV blocks split evenly between them; ``vllm/core/scheduler.py``, the
``num_gpu_blocks //= pipeline_parallel_size`` of V0, recalled: kind engine code); requests
reach them as they reach replicas, so one engine is simulated and scaled like a replica.
Under data-parallel attention each attention rank is a scheduler of its own (TensorRT-LLM's
attention DP, SGLang's DP attention, vLLM's DP engines), with the runtime's limits per rank
(``attention_dp_limits``) and ``1/attention_dp`` of the KV pool; the ranks step together
(the MoE layers join them), so one rank is simulated with every rank running its batch
(:class:`~energylens.workloads.load.costs.StepTable` ``ranks``) and scaled like a replica;
where the ranks prefill on their own (``attention_dp_prompts``), it is simulated again with
its decode steps waiting for the other ranks' prompt chunks
(:class:`~energylens.workloads.load.simulator.Lockstep`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from energylens.cost.memory import MemoryUse, memory_use, startup_tokens
from energylens.cost.step import StepContext
from energylens.cost.work import Size
from energylens.errors import ConfigError
from energylens.model.config import ModelConfig
from energylens.model.context import context_shortfall
from energylens.runtime.profile import SERVER_MAX_SEQUENCES
from energylens.workloads.load.arrivals import (
    Requests,
    closed_loop_clients,
    default_count,
    replica_requests,
    request_lengths,
    split_clients,
)
from energylens.workloads.load.costs import StepTable
from energylens.workloads.load.metrics import (
    SLO,
    LoadMetrics,
    StreamSamples,
    not_simulated,
    pool,
    stream_samples,
    summarise,
    warmup_share,
)
from energylens.workloads.load.simulator import (
    BLOCK_TOKENS,
    Lockstep,
    SchedulerLimits,
    SimRun,
    simulate,
)
from energylens.workloads.registry import MemoryDemand, Placement, register
from energylens.workloads.result import PhaseResult, Prediction
from energylens.workloads.workload import Workload


@dataclass(frozen=True, kw_only=True)
class LoadPrediction(Prediction):
    """A :class:`Prediction` with the load metrics of the whole deployment (``load``: the
    flat keys of :meth:`LoadMetrics.as_dict`, rates scaled to every replica)."""

    load: dict[str, float | int | bool]

    def as_dict(self) -> dict[str, object]:
        """JSON form: the prediction's keys, then the load metrics at the top level."""
        out = super().as_dict()
        load = out.pop("load")
        assert isinstance(load, dict)
        return {**out, **load}


def rank_limits(ctx: StepContext, *, max_num_seqs: int | None = None,
                prefill_chunk_tokens: int | None = None, kv_tokens: int | None = None,
                context_tokens: int | None = None) -> tuple[int, int]:
    """(token budget, max running requests) of one attention rank's scheduler: the
    server's token budget, divided among the ranks where the runtime splits it (SGLang's
    chunked-prefill size), and the default cap of one scheduler, or ``max_num_seqs`` (the
    deployment's, per rank: SGLang divides a given --max-running-requests among its ranks,
    its default, half the KV pool's tokens, is each rank's own). ``prefill_chunk_tokens``: the
    deployment's token budget in place of the server's. Given the rank's KV pool
    (``kv_tokens``) and the server's context length (``context_tokens``), the default cap
    is the one the runtime derives from them (``RuntimeProfile.running_cap_on``: SGLang's)."""
    budget, cap = ctx.runtime.server_limits_on(gpu=ctx.gpu)
    budget = startup_tokens(runtime=ctx.runtime, gpu=ctx.gpu, attention_ranks=ctx.attention_ranks,
                            budget=budget if prefill_chunk_tokens is None else prefill_chunk_tokens)
    if max_num_seqs is not None:
        return budget, max_num_seqs
    if kv_tokens is not None and context_tokens is not None:
        cap = ctx.runtime.running_cap_on(gpu=ctx.gpu, kv_tokens=kv_tokens,
                                         context_tokens=context_tokens,
                                         attention_dp=ctx.attention_ranks, pp=ctx.pp,
                                         speculative=ctx.draft_layers > 0)
    return budget, cap


#: KV tokens of a cache that caps nothing: a recurrent model's, and a deployment's whose
#: memory holds not even one request, priced as if it fit (it is reported infeasible).
UNBOUNDED_KV_TOKENS = 2**40


def kv_pool_tokens(ctx: StepContext, *, budget: int) -> int:
    """Tokens the KV cache of one replica holds: the runtime's usable memory less weights,
    the activations of a pass of ``budget`` tokens per attention rank and its reserve, over
    the cache bytes per token."""
    fixed = _memory(ctx, sequences=0.0, context_tokens=1.0, token_budget=budget)
    per_token = kv_bytes_per_token(ctx)
    if per_token <= 0:  # no attention cache (a recurrent model): sequences cap the batch
        return UNBOUNDED_KV_TOKENS
    return int(max(fixed.usable_bytes - fixed.total_bytes, 0.0) // per_token)


def _memory(ctx: StepContext, *, sequences: float, context_tokens: float,
            token_budget: float | None = None) -> MemoryUse:
    return memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                      degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                      kv_dtype=ctx.kv_dtype, sequences=sequences,
                      context_tokens=context_tokens, token_budget=token_budget,
                      draft_layers=ctx.draft_layers)


def kv_bytes_per_token(ctx: StepContext) -> float:
    """KV-cache bytes one cached token takes on a GPU of the most loaded stage."""
    return float(_memory(ctx, sequences=1.0, context_tokens=1.0).kv_cache_bytes)


def _clients_per_replica(workload: Workload, sequences: float) -> float:
    # ``sequences`` is batch / replicas: the same share of a closed loop's clients
    return closed_loop_clients(workload) * sequences / workload.batch


def minimal_memory(*, ctx: StepContext, workload: Workload, token_budget: int) -> MemoryUse:
    """Memory of the minimal working set: one request of the longest length beside the
    activations of the scheduler's ``token_budget`` (infeasible only when this does not
    fit). Under attention DP a request's cache is on its rank's GPUs alone: one request
    on every rank (the memory model spreads sequences over the ranks)."""
    _, _, longest = request_lengths(workload)
    return _memory(ctx, sequences=float(ctx.attention_ranks), context_tokens=longest,
                   token_budget=token_budget)


def busy_ranks(*, ctx: StepContext, workload: Workload, replicas: int) -> int:
    """Attention ranks of one replica that hold requests, which its steps are priced as
    running the same batch: every rank, or as many as a closed loop's fullest replica has
    clients (the other ranks stay empty)."""
    clients = closed_loop_clients(workload) / replicas
    if clients <= 0:
        return ctx.attention_ranks
    return max(1, min(ctx.attention_ranks, math.ceil(clients)))


@dataclass(frozen=True, kw_only=True)
class LoadRun:
    """One virtual engine's simulation (the whole replica without pipeline parallelism or
    attention DP; one attention rank's engine with it), what priced it, and how many such
    engines a replica runs (``engines``: attention ranks x virtual engines)."""

    requests: Requests
    table: StepTable
    limits: SchedulerLimits
    sim: SimRun
    engines: int
    warmup_fraction: float  # requests left out of the statistics at each end

    def summary(self, *, ctx: StepContext, slos: tuple[SLO, ...]) -> LoadMetrics:
        """Metrics of the simulated engine; it draws its share of the replica's static
        power (rates are one engine's: multiply by :attr:`engines` for the replica)."""
        return summarise(run=self.sim, table=self.table, slos=slos,
                         static_w=ctx.constants.static_power_w,
                         gpus=ctx.replica_gpus / self.engines,
                         warmup_fraction=self.warmup_fraction)

    def samples(self, *, ctx: StepContext) -> StreamSamples:
        """The run's samples and totals, to be pooled with other engines' (:func:`pool`)."""
        return stream_samples(run=self.sim, table=self.table,
                              static_w=ctx.constants.static_power_w,
                              gpus=ctx.replica_gpus / self.engines,
                              warmup_fraction=self.warmup_fraction)


def simulate_replica(*, placement: Placement, workload: Workload,
                     table: StepTable | None = None, at_least: int = 1,
                     clients: int | None = None) -> LoadRun:
    """Simulate the requests of one replica (of one of its virtual engines under pipeline
    parallelism or attention DP), ``at_least`` of them; in a closed loop, with ``clients``
    clients (by default the most an even split of the clients gives an engine); ``table``
    reuses a price grid of an earlier run on the same placement with lengths no longer
    than this one's. Engines of one deployment simulate the same requests."""
    ctx = placement.ctx
    engines = ctx.attention_ranks * ctx.pp
    streams = placement.replicas * engines
    split = split_clients(workload=workload, streams=streams)
    count = math.ceil(workload.num_requests / streams) if workload.num_requests else \
        default_count(clients=split[0][0] if split else 0)
    count = max(count, at_least)
    requests = replica_requests(workload=workload, replicas=streams, count=count,
                                clients=clients)
    longest = int((requests.input_tokens + requests.output_tokens).max())
    budget, _ = rank_limits(ctx, prefill_chunk_tokens=placement.prefill_chunk_tokens)
    rank_pool = kv_pool_tokens(ctx, budget=budget) // ctx.attention_ranks
    if not minimal_memory(ctx=ctx, workload=workload, token_budget=budget).fits:
        # not even one request fits: priced as if it fit (as the prediction says), not
        # one request at a time behind a cache of none (DeepSeek-V3 on 8 H100, 8 clients:
        # TTFT 9.2 s of queueing at the ITL of a batch of one)
        rank_pool = UNBOUNDED_KV_TOKENS
    # the server's context length is the launch command's (the workload's longest request
    # by rule, not this sample's, whose tail grows with the requests drawn)
    server_context = max(int(math.ceil(request_lengths(workload)[2])), 1)
    budget, cap = rank_limits(ctx, max_num_seqs=placement.max_num_seqs,
                              prefill_chunk_tokens=placement.prefill_chunk_tokens,
                              kv_tokens=rank_pool, context_tokens=server_context)
    pool = rank_pool // ctx.pp  # a virtual engine's share
    limits = SchedulerLimits(token_budget=budget, max_sequences=cap,
                             kv_tokens=max(pool, longest + 2 * BLOCK_TOKENS),
                             prefill_scheduling=ctx.runtime.prefill_scheduling)
    most = cap if requests.arrival_s is not None else min(cap, requests.clients)
    ranks = busy_ranks(ctx=ctx, workload=workload, replicas=placement.replicas)
    if table is None:
        table = StepTable.build(ctx=ctx, max_decode=most, max_context=longest,
                                budget=limits.token_budget, ranks=ranks)
    sim = simulate(requests=requests, table=table, limits=limits)
    if ranks > 1 and ctx.runtime.attention_dp_prompts == "independent":
        # the ranks prefill on their own: this rank's run alone gives how often a rank
        # has a prompt chunk in a step, which then lengthens its decode steps
        # (on the grids of ``table``, which an earlier run may have built larger)
        lockstep = Lockstep.of_run(run=sim, others=ranks - 1, table=StepTable.build(
            ctx=ctx, max_decode=len(table.decode) - 1, max_context=int(table.contexts[-1]),
            budget=len(table.chunk) - 1))
        sim = simulate(requests=requests, table=table, limits=limits, lockstep=lockstep)
    return LoadRun(requests=requests, table=table, limits=limits, sim=sim,
                   engines=engines, warmup_fraction=warmup_share(workload))


@dataclass(frozen=True, kw_only=True)
class LoadMix:
    """A deployment's engines by kind: each simulated kind and how many engines of the
    deployment are of it (a closed loop's clients split as evenly as whole clients go:
    some engines one client more), and the engines left without a client (idle, drawing
    their static power). ``engines``: engines per replica; ``busy_engines``: the ranks
    times the most engines (pp) of one rank that hold clients: a token's cache bytes per
    GPU (:func:`kv_bytes_per_token`, spread over the ranks) times them and an engine's
    peak is the fullest GPU's cache."""

    runs: tuple[tuple[LoadRun, int], ...]
    idle: int
    engines: int
    busy_engines: int

    def summary(self, *, ctx: StepContext, slos: tuple[SLO, ...]) -> LoadMetrics:
        """Metrics of the deployment's mean engine (multiply rates and totals by every
        engine, as for one :class:`LoadRun`); statistics over every engine's requests."""
        static = ctx.constants.static_power_w * ctx.replica_gpus / self.engines
        return pool(streams=[(run.samples(ctx=ctx), n) for run, n in self.runs], slos=slos,
                    static_per_s=static, idle_streams=self.idle)


def simulate_engines(*, placement: Placement, workload: Workload) -> LoadMix:
    """Simulate each kind of engine of the deployment once: an open loop's one kind; a
    closed loop's engines of ceil(C / S) and of floor(C / S) clients (C clients, S engines
    of the busy replicas), the fuller first, its price grid reused."""
    engines = placement.ctx.attention_ranks * placement.ctx.pp
    streams = placement.replicas * engines
    split = split_clients(workload=workload, streams=streams)
    if not split:  # an open loop: every engine alike
        run = simulate_replica(placement=placement, workload=workload)
        return LoadMix(runs=((run, streams),), idle=0, engines=engines, busy_engines=engines)
    runs: list[tuple[LoadRun, int]] = []
    table = None
    for clients, count in split:
        if clients > 0:
            run = simulate_replica(placement=placement, workload=workload, table=table,
                                   clients=clients)
            table = run.table
            runs.append((run, count))
    idle = sum(count for clients, count in split if clients == 0)
    ranks = placement.ctx.attention_ranks  # a rank's engines (pp) share its GPUs' memory
    busy = min(placement.ctx.pp, math.ceil((streams - idle) / placement.replicas / ranks))
    return LoadMix(runs=tuple(runs), idle=idle, engines=engines, busy_engines=ranks * busy)


def _phase(*, wall_s: float, joules: tuple[float, float, float], static_w: float,
           gpus: float, replicas: int) -> PhaseResult:
    compute, memory, comm = (j * replicas for j in joules)
    static = static_w * gpus * wall_s * replicas
    return PhaseResult(latency_s=wall_s, energy_j=compute + memory + comm + static,
                       compute_j=compute, memory_j=memory, communication_j=comm,
                       static_j=static)


def load_prediction(*, placement: Placement, workload: Workload, memory: MemoryUse,
                    metrics: LoadMetrics, name: str, engines: int = 1) -> LoadPrediction:
    """The deployment's prediction from the metrics of one replica (of one of its
    ``engines`` virtual engines)."""
    ctx, replicas = placement.ctx, placement.replicas * engines
    static_w = ctx.constants.static_power_w
    # replicas a closed loop leaves without a client draw static power all along
    idle_w = static_w * max(placement.gpus - placement.replicas * ctx.replica_gpus, 0)
    if metrics.window_output_tokens <= 0:
        raise ConfigError("the load run generated no output token in its measured window "
                          "(requests too far apart for their steps to register)")
    per_token = (metrics.window_energy_j + idle_w * metrics.window_s / replicas) \
        / metrics.window_output_tokens
    lat = metrics.latency_s
    load: dict[str, float | int | bool] = {**metrics.as_dict()}
    for key in ("requests_per_s", "offered_requests_per_s", "goodput_requests_per_s"):
        load[key] = float(load[key]) * replicas
    for key in ("idle_energy_j", "iteration_energy_j", "total_energy_j"):
        load[key] = load[key] * replicas
    load["preemptions"] = round(metrics.preemptions * replicas)
    for key in ("idle_energy_j", "total_energy_j"):  # replicas without a client, all along
        load[key] = float(load[key]) + idle_w * metrics.run_s
    for key in ("mean_running", "mean_queue_length"):  # per replica: all its engines
        load[key] = float(load[key]) * engines
    load["goodput_per_gpu"] = float(load["goodput_requests_per_s"]) / placement.gpus
    reason = request_context_shortfall(placement.model, workload) \
        or memory.shortfall(gpu_name=ctx.gpu.name)
    if reason is not None:  # a deployment that does not fit serves no request, let alone
        # one within its SLOs (the latencies stay those of the simulated run, as labelled)
        load |= {"goodput_requests_per_s": 0.0, "goodput_per_gpu": 0.0,
                 "slo_attainment": 0.0, "slo_met": False}
    return LoadPrediction(
        model=placement.model.name, gpu=ctx.gpu.name, num_gpus=placement.gpus, workload=name,
        feasible=reason is None, infeasible_reason=reason,
        memory_per_gpu_gb=float(memory.total_bytes / 1e9), ttft_s=lat["ttft_mean_s"],
        tpot_s=lat["tpot_mean_s"], energy_per_output_token_j=per_token,
        energy_per_request_j=per_token * metrics.mean_output_tokens,
        avg_power_w=metrics.window_energy_j / metrics.window_s * replicas + idle_w,
        output_tokens_per_s=metrics.output_tokens_per_s * replicas,
        prefill=_phase(wall_s=metrics.prefill_window[0], joules=metrics.prefill_window[1:],
                       static_w=static_w, gpus=ctx.replica_gpus / engines, replicas=replicas),
        decode=_phase(wall_s=metrics.decode_only_window[0],
                      joules=metrics.decode_only_window[1:], static_w=static_w,
                      gpus=ctx.replica_gpus / engines, replicas=replicas),
        running_batch=metrics.mean_running * engines, load=load)


def refused_prediction(*, model: str, gpu: str, num_gpus: int, memory_per_gpu_gb: float,
                       workload: Workload, reason: str, name: str) -> LoadPrediction:
    """The prediction of a load whose requests (a trace's longest) exceed the model's
    context (``reason``): engines refuse them, so the run is not simulated (no figures,
    NaN) and the deployment, infeasible, serves none within its SLOs."""
    nan = math.nan
    load: dict[str, float | int | bool] = {**not_simulated().as_dict(), "goodput_per_gpu": 0.0}
    if workload.capacity_attainment is not None:
        load |= {"capacity_requests_per_s": 0.0, "capacity_per_gpu": 0.0}
    phase = PhaseResult(latency_s=nan, energy_j=nan, compute_j=nan, memory_j=nan,
                        communication_j=nan, static_j=nan)
    return LoadPrediction(
        model=model, gpu=gpu, num_gpus=num_gpus, workload=name, feasible=False,
        infeasible_reason=reason, memory_per_gpu_gb=memory_per_gpu_gb,
        ttft_s=nan, tpot_s=nan, energy_per_output_token_j=nan, energy_per_request_j=nan,
        avg_power_w=nan, output_tokens_per_s=nan, prefill=phase, decode=phase,
        running_batch=nan, load=load)


def request_context_shortfall(model: ModelConfig, workload: Workload) -> str | None:
    """Whether the workload's requests outgrow the model's context: a trace's longest, or
    the fixed lengths (a length spread's tail is refused request by request by an engine,
    not the deployment, and is not checked)."""
    if workload.trace:
        _, _, longest = request_lengths(workload)
        return context_shortfall(model=model, input_tokens=longest, output_tokens=0.0)
    return context_shortfall(model=model, input_tokens=workload.input_tokens,
                             output_tokens=workload.output_tokens)


@dataclass(frozen=True)
class Load:
    """Requests arriving over time through the runtime's scheduler (``load``)."""

    name: str = "load"

    def memory_demand(self, *, workload: Workload, sequences: float) -> MemoryDemand:
        """A closed loop's clients (up to vLLM's cap) at the mean context of a running
        request (its prompt and half its output, as the ``serving`` kind holds them), or,
        in an open loop, one request of the longest length. What does not fit queues:
        :meth:`run` needs only :func:`minimal_memory` to fit."""
        mean_in, mean_out, longest = request_lengths(workload)
        clients = _clients_per_replica(workload, sequences)
        if clients > 0:
            held = float(min(math.ceil(clients), SERVER_MAX_SEQUENCES))
            return MemoryDemand(sequences=held, context_tokens=mean_in + mean_out / 2)
        return MemoryDemand(sequences=1.0, context_tokens=longest)

    def busy_replicas(self, *, workload: Workload, batch: Size, replicas: Size) -> Size:
        """Every replica in an open loop (the balancer spreads the arrivals); in a closed
        loop, no more replicas than clients (one client keeps one replica busy)."""
        del batch
        clients = closed_loop_clients(workload)
        return replicas if clients <= 0 else min(int(replicas), max(1, math.floor(clients)))

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """Simulate one replica's share and report the deployment (not simulated where a
        request is longer than the model's context)."""
        reason = request_context_shortfall(placement.model, workload)
        if reason is not None:
            return refused_prediction(model=placement.model.name, gpu=placement.ctx.gpu.name,
                                      num_gpus=placement.gpus,
                                      memory_per_gpu_gb=float(memory.total_bytes / 1e9),
                                      workload=workload, reason=reason, name=self.name)
        slos = tuple(SLO.parse(text) for text in workload.slo)
        result = simulate_engines(placement=placement, workload=workload)
        metrics = result.summary(ctx=placement.ctx, slos=slos)
        if not memory.fits or placement.max_num_seqs is not None \
                or closed_loop_clients(workload) <= 0:
            # engines queue what the KV pool or the running cap does not hold; an open
            # loop's demand is one request
            budget, _ = rank_limits(placement.ctx,
                                    prefill_chunk_tokens=placement.prefill_chunk_tokens)
            memory = minimal_memory(ctx=placement.ctx, workload=workload, token_budget=budget)
            if memory.fits:  # the KV cache the run held at its peak, on the fullest GPU
                peak = metrics.peak_kv_tokens * result.busy_engines \
                    * kv_bytes_per_token(placement.ctx)
                memory = replace(memory, kv_cache_bytes=max(float(memory.kv_cache_bytes), peak))
        out = load_prediction(placement=placement, workload=workload, memory=memory,
                              metrics=metrics, name=self.name, engines=result.engines)
        if workload.capacity_attainment is not None:
            from energylens.workloads.load.capacity import capacity_per_replica

            every = placement.gpus / placement.ctx.replica_gpus  # idle ones too
            rate = capacity_per_replica(placement=placement, workload=workload,
                                        target=workload.capacity_attainment) * every
            out.load.update(capacity_requests_per_s=rate,
                            capacity_per_gpu=rate / placement.gpus)
        return out


register(Load())
