"""Cross-checks of the request-level simulator (``--workload load``) against the other
kinds and against identities any queue must satisfy (issue 12, item 3)."""

from __future__ import annotations

import numpy as np
import pytest

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.cost.step import SequenceGroup, decode_step_cost, engine_cost, step_cost
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context
from energylens.workloads import Placement, Workload
from energylens.workloads.load.arrivals import Requests
from energylens.workloads.load.costs import StepTable
from energylens.workloads.load.kind import LoadPrediction, simulate_replica
from energylens.workloads.load.simulator import SchedulerLimits, SimRun, simulate

MODEL, GPU = "llama-3.1-8b", "H100"


def _load(**fields: object) -> LoadPrediction:
    result = predict(model=MODEL, gpu=GPU, workload=Workload(kind="load", **fields))
    assert isinstance(result, LoadPrediction)
    return result


def _placement() -> Placement:
    gpu = load_gpu(GPU)
    model = get_model(MODEL)
    cal = require_constants(calibration=default_calibration(), gpu=gpu)
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(), calibration=cal)
    return Placement(ctx=ctx, model=model, replicas=1, gpus=1, sequences=1.0)


def test_vanishing_load_is_one_prefill_then_batch_one_decode_steps() -> None:
    """Requests 100 s apart never meet: TTFT is one prefill step of one prompt and TPOT
    the mean batch-1 decode step, as the static-batch kind prices them."""
    alone = predict(model=MODEL, gpu=GPU, workload=Workload(kind="batch", batch=1,
                                                            input_tokens=512, output_tokens=128))
    load = _load(request_rate=0.01, num_requests=30, input_tokens=512, output_tokens=128)
    assert load.load["ttft_p50_s"] == pytest.approx(alone.ttft_s, rel=1e-3)
    assert load.load["tpot_p50_s"] == pytest.approx(alone.tpot_s, rel=5e-3)
    assert load.load["mean_queue_length"] == pytest.approx(0.0, abs=1e-3)
    assert load.load["idle_energy_j"] > 0.5 * load.load["total_energy_j"]  # GPUs mostly wait


@pytest.mark.parametrize("clients", [16, 128])
def test_saturated_closed_loop_matches_the_steady_state_at_its_running_batch(
        clients: int) -> None:
    load = _load(concurrency=clients, input_tokens=512, output_tokens=256)
    assert load.load["mean_running"] == pytest.approx(clients, rel=0.02)
    steady = predict(model=MODEL, gpu=GPU, workload=Workload(
        kind="serving", batch=float(load.load["mean_running"]), input_tokens=512,
        output_tokens=256))
    assert load.output_tokens_per_s == pytest.approx(steady.output_tokens_per_s, rel=0.05)


@pytest.mark.parametrize("rate", [5.0, 20.0])
def test_littles_law_holds_on_the_simulated_queue(rate: float) -> None:
    """Requests in the system (time average of the iterations' queue and running counts)
    = arrival rate x mean time in the system (from the requests' own times)."""
    load = _load(request_rate=rate, num_requests=2000, input_tokens=512, output_tokens=256)
    in_system = float(load.load["mean_running"]) + float(load.load["mean_queue_length"])
    little = float(load.load["requests_per_s"]) * float(load.load["e2e_mean_s"])
    assert in_system == pytest.approx(little, rel=0.03)


def _run(rate: float | None, count: int = 300) -> tuple[object, StepTable]:
    workload = Workload(kind="load", request_rate=rate, num_requests=count,
                        input_tokens=700, output_tokens=90, length_cv=0.5)
    result = simulate_replica(placement=_placement(), workload=workload)
    return result.sim, result.table


@pytest.mark.parametrize("rate", [0.2, 8.0, 200.0])
def test_time_and_energy_are_conserved(rate: float) -> None:
    """Iterations and idle gaps tile the makespan; the scheduler's step times (scalar
    lookups) are the price tables' (vectorised); total energy = iteration energy + idle."""
    from energylens.workloads.load.metrics import summarise

    sim, table = _run(rate)
    busy = float(np.sum(sim.wall_s))
    assert busy + sim.idle_s == pytest.approx(sim.makespan_s, rel=1e-9)
    ends = sim.start_s + sim.wall_s
    assert np.all(sim.start_s[1:] >= ends[:-1] - 1e-9)  # one iteration at a time
    priced = sim._price(table)
    np.testing.assert_allclose(priced[:, 0], sim.wall_s, rtol=1e-9)
    static_w = 100.0
    metrics = summarise(run=sim, table=table, slos=(), static_w=static_w, gpus=1,
                        warmup_fraction=0.1)
    dynamic = float(np.sum(priced[:, 1:]))
    assert metrics.iteration_energy_j == pytest.approx(dynamic + static_w * busy, rel=1e-9)
    assert metrics.idle_energy_j == pytest.approx(static_w * sim.idle_s, rel=1e-9)
    assert metrics.energy_j == pytest.approx(dynamic + static_w * sim.makespan_s, rel=1e-9)
    # every request ran to its last token, after its first
    assert np.all(sim.first_token_s >= sim.arrival_s)
    assert np.all(sim.finish_s >= sim.first_token_s)
    assert int(np.sum(sim.tokens_out)) == int(np.sum(sim.output_tokens))


def test_the_price_tables_match_step_cost_on_mixed_steps() -> None:
    """Decode batch + prefill chunks priced from the grid vs step_cost on the same step."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=256, max_context=4096, budget=8192)
    rng = np.random.default_rng(1)
    for _ in range(20):
        d, c = int(rng.integers(1, 256)), float(rng.integers(100, 4000))
        chunks = [(int(rng.integers(16, 2000)), int(rng.integers(0, 2000))) for _ in range(2)]
        exact = step_cost(ctx=ctx, seqs=[
            SequenceGroup(sequences=d, new_tokens=1.0, context=c),
            *(SequenceGroup(sequences=1.0, new_tokens=n, context=n + k) for n, k in chunks)])
        exact = exact + engine_cost(ctx=ctx, sequences=d + len(chunks))
        sim = _single_step(table, d=d, context=c, chunks=chunks)
        assert sim == pytest.approx(float(exact.latency_s), rel=0.03)


@pytest.mark.parametrize(("model", "gpu", "deployment"), [
    (MODEL, GPU, Deployment()),
    ("deepseek-v3", "B200", Deployment(tp=8, runtime="trtllm", speculative_tokens=3,
                                       draft_acceptance=0.67)),
])
def test_the_grids_hold_each_points_own_step_price(model: str, gpu: str,
                                                   deployment: Deployment) -> None:
    """The grids are priced in one vectorised call each; at their own points they equal
    one step_cost call per step (a one-token chunk decodes, a longer one prefills; MLA's
    prompt form and the draft head's prompt pass included)."""
    gpu_spec = load_gpu(gpu)
    cal = require_constants(calibration=default_calibration(), gpu=gpu_spec)
    ctx = step_context(model=get_model(model), gpu=gpu_spec, deployment=deployment,
                       calibration=cal)
    table = StepTable.build(ctx=ctx, max_decode=16, max_context=2048, budget=512)

    def one(*, sequences: float, new_tokens: float, context: float, decode: bool = False) -> float:
        price = decode_step_cost if decode else step_cost
        return float(price(ctx=ctx, seqs=[SequenceGroup(
            sequences=sequences, new_tokens=new_tokens, context=context)]).latency_s)

    for d in (1, 3, 8, 16):
        for i in (0, 5, len(table.contexts) - 1):
            assert table.decode[d, i, 0] == pytest.approx(one(
                sequences=d, new_tokens=1.0, context=table.contexts[i], decode=True), rel=1e-12)
    for t in (1, 6, 528):
        assert table.merged[t, 0] == pytest.approx(one(sequences=t, new_tokens=1.0,
                                                       context=1.0), rel=1e-12)
    for n in (1, 2, 96, 512):
        for j in (0, len(table.cached) - 1):
            chunk = one(sequences=1.0, new_tokens=n, context=n + table.cached[j]) \
                - table.merged[n, 0]
            assert table.chunk[n, j, 0] == pytest.approx(chunk, rel=1e-12, abs=1e-15)


def _single_step(table: StepTable, *, d: int, context: float,
                 chunks: list[tuple[int, int]]) -> float:
    from energylens.workloads.load.costs import interpolate

    dl, fl, cl = table.latency_lists()
    tokens = sum(n for n, _ in chunks)
    wall = interpolate(table.contexts, dl[d], context) + fl[d + tokens] - fl[d]
    wall += sum(interpolate(table.cached, cl[n], k) for n, k in chunks)
    return wall + table.engine_idle_s + table.engine_busy_s_per_sequence * (d + len(chunks))


@pytest.mark.parametrize("policy", ["mixed-chunked", "mixed-whole", "prefill-first"])
def test_a_small_kv_pool_preempts_and_still_finishes_every_request(policy: str) -> None:
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=1024, budget=2048)
    count = 200
    requests = Requests(input_tokens=np.full(count, 400), output_tokens=np.full(count, 400),
                        arrival_s=None, clients=64)
    roomy = simulate(requests=requests, table=table,
                     limits=SchedulerLimits(token_budget=2048, max_sequences=64,
                                            kv_tokens=10**7, prefill_scheduling=policy))
    tight = simulate(requests=requests, table=table,
                     limits=SchedulerLimits(token_budget=2048, max_sequences=64,
                                            kv_tokens=8000, prefill_scheduling=policy))
    assert roomy.preemptions.sum() == 0 and tight.preemptions.sum() > 0
    assert tight.peak_kv_tokens <= 8000 < roomy.peak_kv_tokens
    for run in (roomy, tight):
        assert int(np.sum(run.tokens_out)) == count * 400  # no token generated twice
        assert np.all(np.isfinite(run.finish_s))
    assert tight.makespan_s > roomy.makespan_s  # recomputing costs time


def test_runs_are_deterministic_per_seed() -> None:
    first = _load(request_rate=4.0, num_requests=300, length_cv=0.8, seed=3).as_dict()
    again = _load(request_rate=4.0, num_requests=300, length_cv=0.8, seed=3).as_dict()
    other = _load(request_rate=4.0, num_requests=300, length_cv=0.8, seed=4).as_dict()
    assert first == again
    assert first["ttft_p90_s"] != other["ttft_p90_s"]


def test_slo_attainment_and_goodput() -> None:
    loose = _load(request_rate=5.0, num_requests=500, slo=("ttft_p90_s<=10", "tpot_p90_s<=1"))
    tight = _load(request_rate=5.0, num_requests=500, slo=("ttft_p90_s<=1e-4",))
    assert loose.load["slo_attainment"] == 1.0 and loose.load["slo_met"] is True
    assert loose.load["goodput_requests_per_s"] == pytest.approx(loose.load["requests_per_s"])
    assert tight.load["slo_attainment"] == 0.0 and tight.load["slo_met"] is False
    assert tight.load["goodput_requests_per_s"] == 0.0
    # the p90 bound at the p90 itself: about 90 % of the requests meet it
    p90 = float(loose.load["ttft_p90_s"])
    at = _load(request_rate=5.0, num_requests=500, slo=(f"ttft_p90_s<={p90}",))
    assert at.load["slo_met"] is True
    assert 0.88 <= float(at.load["slo_attainment"]) <= 0.93


def test_more_load_never_shortens_the_queue_or_the_latency() -> None:
    rates = [1.0, 10.0, 30.0, 60.0]
    runs = [_load(request_rate=r, num_requests=1000) for r in rates]
    for key in ("ttft_p90_s", "e2e_mean_s", "mean_running"):
        values = [float(run.load[key]) for run in runs]
        assert values == sorted(values), key
    throughput = [run.output_tokens_per_s for run in runs]
    assert throughput == sorted(throughput)


def test_capacity_is_the_highest_rate_meeting_the_attainment_target() -> None:
    # a TPOT bound that binds before the engine stops keeping up (about 33 requests/s
    # in the probes' 1,000 requests), so that the looser bounds below can raise it
    slos = ("ttft_p90_s<=0.2", "tpot_p90_s<=0.012")
    found = _load(request_rate=1.0, num_requests=400, slo=slos, capacity_attainment=0.9)
    capacity = float(found.load["capacity_requests_per_s"])
    assert capacity > 1.0
    assert found.load["capacity_per_gpu"] == pytest.approx(capacity)  # one GPU
    at = _load(request_rate=capacity, num_requests=400, slo=slos)
    beyond = _load(request_rate=1.5 * capacity, num_requests=400, slo=slos)
    assert float(at.load["slo_attainment"]) >= 0.9 > float(beyond.load["slo_attainment"])
    looser = _load(request_rate=1.0, num_requests=400, slo=("ttft_p90_s<=1", "tpot_p90_s<=0.05"),
                   capacity_attainment=0.9)
    assert float(looser.load["capacity_requests_per_s"]) > capacity


def test_capacity_bisection_widens_a_flood_underestimate() -> None:
    from energylens.workloads.load.capacity import STEPS, Probe, bisect_capacity

    def run(rate: float) -> Probe:  # attains below 10/s; a flood serves 3/s
        return Probe(1.0 if rate < 10.0 else 0.0, 3.0 if rate > 1e5 else rate, True)

    found = bisect_capacity(run=run, target=0.9)
    assert 10.0 - 12.0 / 2**STEPS <= found < 10.0  # bracket [6, 12] halved STEPS times


def test_capacity_never_exceeds_what_the_deployment_serves() -> None:
    """A loose SLO met at every rate (a finite run's TTFT stays low while its running batch
    grows) does not make a rate past the service rate sustained: the run must also complete
    what is offered."""
    from energylens.workloads.load.capacity import Probe, bisect_capacity
    from energylens.workloads.load.metrics import KEEPS_UP_SHARE

    def run(rate: float) -> Probe:  # attains everywhere; completes at most 5/s
        return Probe(1.0, min(rate, 5.0), 5.0 / rate >= KEEPS_UP_SHARE)

    assert 5.0 <= bisect_capacity(run=run, target=0.9) <= 5.0 / KEEPS_UP_SHARE
    slo = ("ttft_p90_s<=10",)
    found = _load(request_rate=1.0, num_requests=400, slo=slo, capacity_attainment=0.9)
    capacity = float(found.load["capacity_requests_per_s"])
    assert _load(request_rate=capacity, slo=slo).load["keeps_up"]  # the probes' length
    flooded = _load(request_rate=1e6, num_requests=400, slo=slo)
    assert capacity <= float(flooded.load["requests_per_s"]) / KEEPS_UP_SHARE


def _policy_run(policy: str, *, clients: int = 32, count: int = 256,
                prompt: int = 700) -> object:
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=clients, max_context=prompt + 200, budget=2048)
    requests = Requests(input_tokens=np.full(count, prompt), output_tokens=np.full(count, 200),
                        arrival_s=None, clients=clients)
    return simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=clients, kv_tokens=10**7, prefill_scheduling=policy))


@pytest.mark.parametrize("policy", ["mixed-chunked", "mixed-whole", "prefill-first"])
def test_every_policy_generates_each_token_once_and_finishes(policy: str) -> None:
    run = _policy_run(policy)
    assert int(np.sum(run.tokens_out)) == 256 * 200
    assert np.all(run.first_token_s >= run.arrival_s) and np.all(run.finish_s > run.first_token_s)


def test_prefill_first_never_mixes_prompts_with_decodes() -> None:
    """SGLang's default: a step with prompts to prefill runs them alone; the decodes in
    flight wait through it (stalled) and take no token."""
    run = _policy_run("prefill-first")
    prompt_steps = run.prefill_tokens > 0
    assert np.all(run.decode[prompt_steps] == 0)
    assert np.any(run.stalled[prompt_steps] > 0)
    mixed = _policy_run("mixed-chunked")
    assert np.any(mixed.decode[mixed.prefill_tokens > 0] > 0)
    assert np.all(mixed.stalled == 0)


def test_mixed_whole_never_splits_a_prompt_that_fits_the_budget() -> None:
    """TensorRT-LLM with chunked context off: 700-token prompts in a 2048-token budget are
    always scheduled whole; vLLM's chunked prefill splits some of them under load."""
    whole = _policy_run("mixed-whole")
    chunked = _policy_run("mixed-chunked")
    assert np.all(whole.chunk_new == 700)
    assert np.any(chunked.chunk_new < 700)


def test_at_vanishing_load_every_policy_is_one_prefill_then_decode_steps() -> None:
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=4, max_context=1024, budget=2048)
    requests = Requests(input_tokens=np.full(5, 512), output_tokens=np.full(5, 64),
                        arrival_s=np.arange(5) * 100.0, clients=0)
    runs = {p: simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=8, kv_tokens=10**7, prefill_scheduling=p))
        for p in ("mixed-chunked", "mixed-whole", "prefill-first")}
    ref = runs["mixed-chunked"]
    for run in runs.values():
        np.testing.assert_allclose(run.first_token_s - run.arrival_s,
                                   ref.first_token_s - ref.arrival_s, rtol=1e-12)
        np.testing.assert_allclose(run.finish_s, ref.finish_s, rtol=1e-12)


def test_prefill_first_stalls_count_in_the_inter_token_latency() -> None:
    """Mean ITL over every gap = mean TPOT when all requests have one length: the prompt
    steps the decodes wait through must lengthen the gaps they interrupt."""
    from energylens.workloads.load.metrics import summarise

    ctx = _placement().ctx
    run = _policy_run("prefill-first", clients=64, count=640)
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=900, budget=2048)
    metrics = summarise(run=run, table=table, slos=(), static_w=100.0, gpus=1,
                        warmup_fraction=0.1)
    assert float(np.sum(run.stalled)) > 0
    assert metrics.latency_s["itl_mean_s"] == pytest.approx(metrics.latency_s["tpot_mean_s"],
                                                            rel=0.03)


def test_no_warmup_averages_over_every_request() -> None:
    """warmup_fraction=0 (a benchmark's means over all its requests) keeps the closed
    loop's first wave, whose prompts all queue at once: the mean TTFT grows, and equals
    the mean over the simulated requests' own times."""
    steady = _load(concurrency=32, num_requests=320, input_tokens=2048, output_tokens=64)
    every = _load(concurrency=32, num_requests=320, input_tokens=2048, output_tokens=64,
                  warmup_fraction=0.0)
    assert int(every.load["measured_requests"]) == 320
    assert int(steady.load["measured_requests"]) == 256
    assert float(every.load["ttft_mean_s"]) > float(steady.load["ttft_mean_s"])
    run = simulate_replica(placement=_placement(), workload=Workload(
        kind="load", concurrency=32, num_requests=320, input_tokens=2048, output_tokens=64,
        warmup_fraction=0.0)).sim
    assert float(every.load["ttft_mean_s"]) == pytest.approx(
        float(np.mean(run.first_token_s - run.arrival_s)), rel=1e-9)


def test_prefill_first_keeps_room_for_the_decodes_next_tokens() -> None:
    """A prompt step must not take the KV space the waiting decodes need for their next
    token: if it does, the decodes preempt it at once and the same chunk is recomputed for
    ever (found on an 8-client, 2,048-token closed loop with an 8,500-token pool)."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=4096, budget=2048)
    requests = Requests(input_tokens=np.full(48, 2048), output_tokens=np.full(48, 256),
                        arrival_s=None, clients=8)
    run = simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=64, kv_tokens=8500, prefill_scheduling="prefill-first"))
    assert int(np.sum(run.tokens_out)) == 48 * 256
    assert run.peak_kv_tokens <= 8500


def test_a_closed_loop_whose_clients_do_not_all_fit_runs_on_what_the_pool_holds() -> None:
    """512 clients of 4,096 + 512 tokens would cache 2.4 M tokens (about 300 GB at
    128 KiB per Llama-3.1-8B token); an H100 holds a fraction. Engines admit what fits and
    queue the rest, so the deployment predicts, with fewer running than clients and the
    peak KV it held within the GPU's usable memory; only a model whose weights do not fit
    is infeasible."""
    load = _load(concurrency=512, num_requests=1024, input_tokens=4096, output_tokens=512)
    assert load.feasible
    assert float(load.load["mean_running"]) < 0.5 * 512
    assert float(load.load["mean_queue_length"]) > 100
    assert 60 < load.memory_per_gpu_gb <= 0.9 * 80.0 * 2**30 / 1e9 * 1.001
    too_big = predict(model="llama-3.1-70b", gpu=GPU, workload=Workload(
        kind="load", concurrency=8, input_tokens=512, output_tokens=64))
    assert not too_big.feasible and "weights" in (too_big.infeasible_reason or "")
    assert isinstance(too_big, LoadPrediction)  # serves nothing, so meets no SLO
    assert too_big.load["goodput_requests_per_s"] == 0.0 and too_big.load["goodput_per_gpu"] == 0.0
    assert too_big.load["slo_attainment"] == 0.0 and too_big.load["slo_met"] is False


def test_a_shared_prefix_is_cached_once_and_never_computed() -> None:
    """At vanishing load a prompt of 4,000 tokens whose first 3,000 every request shares
    costs one chunk of its other 1,000 tokens over the 3,000 cached (step_cost's price of
    that chunk): a prefix-cache hit. Decode steps are unchanged (attention still reads
    the whole context)."""
    ctx = _placement().ctx
    both = dict(request_rate=0.01, num_requests=20, input_tokens=4000, output_tokens=64)
    cold = _load(**both)
    warm = _load(**both, shared_prefix_tokens=3000)
    chunk = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=1000.0,
                                                    context=4000.0)])
    chunk = chunk + engine_cost(ctx=ctx, sequences=1)
    assert warm.load["ttft_p50_s"] == pytest.approx(float(chunk.latency_s), rel=0.03)
    assert warm.load["ttft_p50_s"] < 0.5 * cold.load["ttft_p50_s"]
    assert warm.load["tpot_p50_s"] == pytest.approx(cold.load["tpot_p50_s"], rel=1e-3)


def test_a_shared_prefix_is_held_once_in_the_kv_pool() -> None:
    """48 requests of 2,048 + 256 tokens sharing 1,536: the pool of 8,500 tokens holds the
    prefix once and each request's own 512 + 256 beside it, so many more run at once than
    without sharing, every token is generated once, and the peak held stays in the pool."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=2304, budget=2048)
    limits = SchedulerLimits(token_budget=2048, max_sequences=64, kv_tokens=8500,
                             prefill_scheduling="mixed-chunked")
    runs = {}
    for prefix in (0, 1536):
        requests = Requests(input_tokens=np.full(48, 2048), output_tokens=np.full(48, 256),
                            arrival_s=None, clients=16, shared_prefix=prefix)
        runs[prefix] = simulate(requests=requests, table=table, limits=limits)
        assert int(np.sum(runs[prefix].tokens_out)) == 48 * 256
        assert runs[prefix].peak_kv_tokens <= 8500
    assert np.mean(runs[1536].running) > 2 * np.mean(runs[0].running)
    assert int(np.sum(runs[1536].preemptions)) <= int(np.sum(runs[0].preemptions))
    assert runs[1536].makespan_s < runs[0].makespan_s


def test_a_shared_prefix_keeps_littles_law() -> None:
    """At 10 requests/s (below the replica's capacity, a stationary queue)."""
    load = _load(request_rate=10.0, num_requests=2000, input_tokens=2048, output_tokens=128,
                 shared_prefix_tokens=1024)
    in_system = float(load.load["mean_running"]) + float(load.load["mean_queue_length"])
    little = float(load.load["requests_per_s"]) * float(load.load["e2e_mean_s"])
    assert in_system == pytest.approx(little, rel=0.03)


def test_a_shared_prefix_longer_than_the_prompts_leaves_each_its_last_token() -> None:
    """A prefix of 100,000 tokens on 2,000-token prompts: each prompt computes its last
    token only (one token over 1,999 cached), and the pool holds 1,999 shared tokens."""
    ctx = _placement().ctx
    load = _load(request_rate=0.01, num_requests=10, input_tokens=2000, output_tokens=16,
                 shared_prefix_tokens=100_000)
    one = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=1.0,
                                                  context=2000.0)])
    one = one + engine_cost(ctx=ctx, sequences=1)
    assert load.load["ttft_p50_s"] == pytest.approx(float(one.latency_s), rel=0.03)


@pytest.mark.parametrize(("release", "overlapped"), [("0.13.0", False), ("0.19.0", True)])
def test_an_overlapped_engines_cpu_work_runs_beside_each_step(release: str,
                                                              overlapped: bool) -> None:
    """vLLM 0.19 (async scheduling) prepares each step on the CPU while the GPUs run the
    one before: every decode-only iteration of a closed loop of 256 clients lasts the
    longer of the GPUs' step and the CPU's work, where 0.13 takes their sum; the price
    tables agree with the scheduler's steps, and at this batch the CPU's work (0.67 ms +
    256 x 39 us) outlasts Llama-3.2-1B's step on an H100 (the host sets the pace)."""
    from energylens.workloads.load.costs import interpolate

    gpu, model = load_gpu(GPU), get_model("llama-3.2-1b")
    cal = require_constants(calibration=default_calibration(), gpu=gpu)
    ctx = step_context(model=model, gpu=gpu, calibration=cal,
                       deployment=Deployment(runtime_version=release))
    assert ctx.cpu_overlapped is overlapped
    placement = Placement(ctx=ctx, model=model, replicas=1, gpus=1, sequences=1.0)
    result = simulate_replica(placement=placement, workload=Workload(
        kind="load", concurrency=256, num_requests=1024, input_tokens=128, output_tokens=32))
    sim, table = result.sim, result.table
    assert table.engine_overlapped is overlapped
    np.testing.assert_allclose(sim._price(table)[:, 0], sim.wall_s, rtol=1e-9)
    dl, _, _ = table.latency_lists()
    host_bound = 0
    for i in np.flatnonzero((sim.prefill_tokens == 0) & (sim.decode > 0)):
        d = int(sim.decode[i])
        gpu_s = interpolate(table.contexts, dl[d], float(sim.context[i]))
        cpu_s = table.engine_idle_s + table.engine_busy_s_per_sequence * d
        expected = max(gpu_s, cpu_s) if overlapped else gpu_s + cpu_s
        assert sim.wall_s[i] / sim.count[i] == pytest.approx(expected, rel=1e-9)
        host_bound += d == 256 and cpu_s > gpu_s
    assert host_bound > 0


def test_a_prompt_cached_elsewhere_waits_until_its_cache_fits() -> None:
    """A decode pool of 2,000 tokens and three prefilled requests of 1,000 + 50 tokens at
    once: one cache fits at a time (1,000 tokens, its 49 new ones and half a block each
    leave no room for a second), so they run one after another, each admitted when the
    one before finishes. (They were all admitted at once through a 0-token chunk.)"""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=8, max_context=1100, budget=2048)
    requests = Requests(input_tokens=np.full(3, 1000), output_tokens=np.full(3, 50),
                        arrival_s=np.zeros(3), clients=0, prefilled=True)
    run = simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=8, kv_tokens=2000))
    assert np.all(run.running <= 1) and np.all(run.chunks == 0)
    np.testing.assert_allclose(run.admitted_s[1:], run.finish_s[:-1], rtol=1e-12)
    assert int(np.sum(run.tokens_out)) == 3 * 49  # the first token came with the cache


@pytest.mark.parametrize(("clients", "prompt", "output"), [(1, 512, 128), (4, 128, 256)])
def test_the_peak_kv_is_what_the_requests_hold_at_their_last_token(
        clients: int, prompt: int, output: int) -> None:
    """A closed loop of fixed lengths holds, just before its requests finish, each one's
    prompt and every output token but the last (whose KV is never written), plus the half
    block the pool counts per running request: one 512 + 128 request peaks at 647 tokens
    (it reported 512, sampled after the finished requests had left)."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=clients, max_context=prompt + output,
                            budget=2048)
    requests = Requests(input_tokens=np.full(3 * clients, prompt),
                        output_tokens=np.full(3 * clients, output), arrival_s=None,
                        clients=clients)
    run = simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=64, kv_tokens=10**6))
    assert run.peak_kv_tokens == clients * (prompt + output - 1 + 8)


def test_the_memory_reported_under_a_running_cap_grows_with_the_outputs_held() -> None:
    """8 clients under --max-num-seqs 8: the memory reported is the KV the run held at its
    peak, so 2,048 output tokens instead of 16 add 8 x 2,032 tokens of 131,072 B (Llama-3.1-8B)
    to it (it reported the same memory for both, the prompts' alone)."""
    memory = []
    for output in (16, 2048):
        found = predict(model=MODEL, gpu=GPU, deployment=Deployment(max_num_seqs=8),
                        workload=Workload(kind="load", concurrency=8, num_requests=80,
                                          input_tokens=128, output_tokens=output))
        memory.append(found.memory_per_gpu_gb)
    assert memory[1] - memory[0] == pytest.approx(8 * 2032 * 131_072 / 1e9, rel=1e-9)


def test_a_decode_record_ends_within_one_of_its_steps_past_the_next_arrival() -> None:
    """Long outputs at low load: a decode-only record runs up to the next arrival and at
    most one of its own steps past it, so an arrival waits at most that step before its
    prompt joins a step. A request arriving 100 s into another's 16,000-token output has
    a TTFT within two decode steps (the wait and the decode sharing its prompt's step) of
    a prompt alone; the record was counted at its first step's price and priced at its
    mid context, and the arrival waited 5.3 s."""
    from energylens.workloads.load.costs import interpolate

    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=8, max_context=16_600, budget=8192)
    limits = SchedulerLimits(token_budget=8192, max_sequences=8, kv_tokens=10**6)
    pair = simulate(requests=Requests(
        input_tokens=np.full(2, 512), output_tokens=np.full(2, 16_000),
        arrival_s=np.array([0.0, 100.0]), clients=0), table=table, limits=limits)
    ttft = pair.first_token_s - pair.arrival_s
    longest = interpolate(table.contexts, table.latency_lists()[0][1], 16_512.0) \
        + table.engine_idle_s + table.engine_busy_s_per_sequence
    assert ttft[0] < ttft[1] <= ttft[0] + 2 * longest
    stream = simulate(requests=Requests(
        input_tokens=np.full(40, 512), output_tokens=np.full(40, 16_000),
        arrival_s=np.random.default_rng(0).exponential(20.0, 40).cumsum(), clients=0),
        table=table, limits=limits)
    decode_only = np.flatnonzero(stream.prefill_tokens == 0)
    start, end = stream.start_s[decode_only], stream.start_s[decode_only] + stream.wall_s[
        decode_only]
    step = stream.wall_s[decode_only] / stream.count[decode_only]
    for arrival in stream.arrival_s:
        inside = (start < arrival) & (arrival < end)
        assert np.all(end[inside] - arrival <= step[inside] * (1 + 1e-9))


@pytest.mark.parametrize("policy", ["mixed-chunked", "mixed-whole", "prefill-first"])
def test_a_preemption_stall_is_an_inter_token_gap(policy: str) -> None:
    """Every token after a request's first closes one inter-token gap, so over a whole run
    the mean ITL x (tokens - first tokens) is the sum of every request's first-to-last
    span, preemptions included: a preempted request's next token comes from its recompute
    chunk, that gap the wait in the queue and the recompute. Two 500 + 400-token requests
    in a 1,400-token pool: one is preempted for 1.4 s; ITL mean was 6.8 ms against a TPOT of
    8.6 ms, the gap left out."""
    from energylens.workloads.load.metrics import summarise

    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=1024, budget=2048)
    for count, clients, kv_tokens in ((2, 2, 1400), (200, 64, 8000)):
        requests = Requests(input_tokens=np.full(count, 500), output_tokens=np.full(count, 400),
                            arrival_s=None, clients=clients)
        run = simulate(requests=requests, table=table, limits=SchedulerLimits(
            token_budget=2048, max_sequences=64, kv_tokens=kv_tokens,
            prefill_scheduling=policy))
        metrics = summarise(run=run, table=table, slos=(), static_w=100.0, gpus=1,
                            warmup_fraction=0.0)
        assert int(np.sum(run.preemptions)) > 0
        spans = float(np.sum(run.finish_s - run.first_token_s))
        assert metrics.latency_s["itl_mean_s"] * count * 399 == pytest.approx(spans, rel=1e-9)
        assert metrics.latency_s["itl_mean_s"] == pytest.approx(
            metrics.latency_s["tpot_mean_s"], rel=1e-9)  # one length: the same mean


def test_mixed_whole_splits_a_steps_first_prompt_into_the_budget_the_decodes_leave() -> None:
    """TensorRT-LLM (chunked context, as its runs with 8,192-token prompts beside hundreds
    of decodes must have had): a 2,048-token prompt arriving while one request decodes, in
    a 2,048-token budget, is the step's first prompt and takes the 2,047 tokens the decode
    leaves, then its last token; a second prompt joins a step only whole. Waiting for a
    step it fits whole (the forty-first session tried it) starved prompts behind running
    decodes: AIConfigurator's TensorRT-LLM B200 TTFT 43 -> 7,639 % MAPE."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=8, max_context=3500, budget=2048)
    limits = SchedulerLimits(token_budget=2048, max_sequences=8, kv_tokens=10**6,
                             prefill_scheduling="mixed-whole")
    run = simulate(requests=Requests(
        input_tokens=np.array([100, 2048]), output_tokens=np.array([400, 10]),
        arrival_s=np.array([0.0, 0.5]), clients=0), table=table, limits=limits)
    assert run.chunk_new.tolist() == [100, 2047, 1]
    both = simulate(requests=Requests(
        input_tokens=np.array([1500, 1000]), output_tokens=np.array([10, 10]),
        arrival_s=np.array([0.0, 0.0]), clients=0), table=table, limits=limits)
    assert both.chunk_new.tolist()[:2] == [1500, 1000]  # the second waits, whole


def test_a_closed_loops_clients_split_as_evenly_as_whole_clients_go() -> None:
    """C clients over S engines: C mod S engines of ceil(C / S) clients, the others of
    floor(C / S). 3 clients over 2 replicas are a 1-client and a 2-client replica: the
    deployment's throughput and power are those two replicas' sums, its mean TTFT their
    requests' mean; throughput grows with every client (the split was rounded half to
    even: 3 and 5 clients over 2 replicas ran as 4, 571 output tokens/s for 3, 4 and 5);
    3 clients on pp = 2 keep 3 running (they ran 4)."""
    def at(clients: int, **deployment: int) -> LoadPrediction:
        found = predict(model=MODEL, gpu=GPU, deployment=Deployment(**deployment),
                        workload=Workload(kind="load", concurrency=clients))
        assert isinstance(found, LoadPrediction)
        return found

    one, two, mix = at(1), at(2), at(3, dp=2)
    assert mix.output_tokens_per_s == pytest.approx(
        one.output_tokens_per_s + two.output_tokens_per_s, rel=1e-9)
    assert mix.avg_power_w == pytest.approx(one.avg_power_w + two.avg_power_w, rel=1e-9)
    rates = [float(p.load["requests_per_s"]) for p in (one, two)]
    assert float(mix.load["ttft_mean_s"]) == pytest.approx(
        (rates[0] * one.ttft_s + rates[1] * two.ttft_s) / sum(rates), rel=1e-9)
    throughput = [at(c, dp=2).output_tokens_per_s for c in (2, 3, 4, 5, 6)]
    assert all(b > 1.1 * a for a, b in zip(throughput, throughput[1:], strict=False))
    assert float(at(3, pp=2).load["mean_running"]) == pytest.approx(3.0, rel=1e-6)


def test_an_open_loops_memory_is_the_kv_it_held_at_its_peak() -> None:
    """The memory reported under load is the cache the run held at its peak, in an open
    loop too (it reported one request's working set at any rate): 20 requests/s hold more
    than 0.5, by their peaks' difference at 131,072 B a Llama-3.1-8B token."""
    slow, fast = (_load(request_rate=rate, num_requests=400, input_tokens=2048,
                        output_tokens=512) for rate in (0.5, 20.0))
    held = (float(fast.load["peak_kv_tokens"]) - float(slow.load["peak_kv_tokens"])) \
        * 131_072 / 1e9
    assert held > 10.0
    assert fast.memory_per_gpu_gb - slow.memory_per_gpu_gb == pytest.approx(held, rel=1e-9)


def _arrived_caches(*, kv_tokens: int, reserve: int | None) -> SimRun:
    """Three requests of 1,000 + 500 tokens whose caches arrive at once at a decode pool
    of ``kv_tokens`` whose runtime reserves ``reserve`` tokens of output (None: all)."""
    ctx = _placement().ctx
    table = StepTable.build(ctx=ctx, max_decode=8, max_context=1600, budget=2048)
    requests = Requests(input_tokens=np.full(3, 1000), output_tokens=np.full(3, 500),
                        arrival_s=np.zeros(3), clients=0, prefilled=True)
    return simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=2048, max_sequences=8, kv_tokens=kv_tokens,
        decode_reserve_tokens=reserve))


def test_a_decode_pool_that_reserves_whole_outputs_never_preempts() -> None:
    """A pool of 2,700 tokens: two caches of 1,000 fit (vLLM admits both: 684 tokens stay
    free), but their 499 new tokens each do not, so vLLM's rule preempts one and
    recomputes it; TensorRT-LLM's (every request's whole output reserved: 1,499 + 8 each)
    admits the second only when the first has finished, and never preempts."""
    greedy = _arrived_caches(kv_tokens=2700, reserve=0)
    assert int(greedy.preemptions.sum()) > 0
    whole = _arrived_caches(kv_tokens=2700, reserve=None)
    assert int(whole.preemptions.sum()) == 0 and np.all(whole.running <= 1)
    np.testing.assert_allclose(whole.admitted_s[1:], whole.finish_s[:-1], rtol=1e-12)
    assert whole.peak_kv_tokens <= 2700
    assert int(np.sum(whole.tokens_out)) == 3 * 499  # no token computed twice


@pytest.mark.parametrize(("reserve", "together"), [(600, 2), (1100, 1)])
def test_a_decode_pool_reserves_tokens_for_each_running_request(reserve: int,
                                                                together: int) -> None:
    """SGLang's rule: a cache joins while the free pool, less ``reserve`` for each running
    request, holds it. A pool of 3,100 tokens with one request running (1,008 held)
    leaves 2,092 - 1,008 = 1,084 beside a second cache: enough for a reserve of 600, not
    of 1,100; the third never fits beside two (76 left)."""
    run = _arrived_caches(kv_tokens=3100, reserve=reserve)
    assert int(run.running.max()) == together
    assert int(run.preemptions.sum()) == 0
