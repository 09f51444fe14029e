"""The load simulator under data-parallel attention (one scheduler per attention rank, the
ranks stepping together) and the engine's cap on running requests (``max_num_seqs``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.cost.step import SequenceGroup, step_cost
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context
from energylens.runtime.launch import launch_command
from energylens.workloads import Placement, Workload
from energylens.workloads.load.arrivals import replica_requests
from energylens.workloads.load.costs import StepTable
from energylens.workloads.load.kind import (
    LoadPrediction,
    kv_pool_tokens,
    rank_limits,
    simulate_replica,
)
from energylens.workloads.load.simulator import Lockstep, SchedulerLimits, simulate

MOE, GPU, RANKS = "qwen3-30b-a3b", "H100", 4


def _adp(runtime: str = "trtllm", **fields: object) -> Deployment:
    return Deployment(tp=1, attention_dp=RANKS, ep=RANKS, runtime=runtime, **fields)


def _ctx(deployment: Deployment):  # type: ignore[no-untyped-def]
    gpu, model = load_gpu(GPU), get_model(MOE)
    cal = require_constants(calibration=default_calibration(), gpu=gpu)
    return step_context(model=model, gpu=gpu, deployment=deployment, calibration=cal)


def test_a_rank_table_prices_every_rank_running_the_batch() -> None:
    """A table of 4 ranks: a step of d decodes takes the time of 4 d sequences spread
    over the 4 ranks, and each rank's energy is a quarter of theirs."""
    ctx = _ctx(_adp())
    table = StepTable.build(ctx=ctx, max_decode=8, max_context=512, budget=256, ranks=RANKS)
    full = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=8 * RANKS, new_tokens=1.0,
                                                  context=1.0)])
    assert table.decode[8, 0, 0] == pytest.approx(float(full.latency_s), rel=1e-9)
    assert table.decode[8, 0, 1] == pytest.approx(float(full.compute_energy_j) / RANKS,
                                                  rel=1e-9)


def test_limits_are_per_rank_or_split_as_the_runtime_says() -> None:
    """TensorRT-LLM: every rank its own max_num_tokens (8,192) and cap; SGLang: the
    server's chunked-prefill size divided among the ranks, the default cap each rank's own
    (at most its largest request pool, 4,096, where the KV pool is not given); a
    deployment's max_num_seqs is per rank for both."""
    assert rank_limits(_ctx(_adp())) == (8192, 1024)
    assert rank_limits(_ctx(_adp("sglang"))) == (8192 // RANKS, 4096)
    assert rank_limits(_ctx(_adp("sglang")), max_num_seqs=7) == (8192 // RANKS, 7)


def test_one_client_per_rank_runs_as_a_static_batch_of_one_per_rank() -> None:
    """A closed loop of 4 clients over 4 attention ranks holds one request per rank in
    lock step: each request's TTFT, TPOT and energy per token are those of a static batch
    of 4 (one sequence per rank)."""
    lengths = {"input_tokens": 1024, "output_tokens": 64}
    load = predict(model=MOE, gpu=GPU, deployment=_adp(),
                   workload=Workload(kind="load", concurrency=RANKS, num_requests=40,
                                     warmup_fraction=0.0, **lengths))
    batch = predict(model=MOE, gpu=GPU, deployment=_adp(),
                    workload=Workload(kind="batch", batch=RANKS, **lengths))
    assert isinstance(load, LoadPrediction)
    assert load.load["ttft_p50_s"] == pytest.approx(batch.ttft_s, rel=0.01)
    assert load.load["tpot_p50_s"] == pytest.approx(batch.tpot_s, rel=0.01)
    assert load.energy_per_output_token_j == pytest.approx(batch.energy_per_output_token_j,
                                                           rel=0.03)


def test_attention_ranks_schedule_their_own_prompts() -> None:
    """64 clients of 8,192-token prompts over 4 ranks: each rank's scheduler holds 16
    clients and a quarter of the KV pool, and prefills its own prompt per step, so the
    first tokens come sooner than under one scheduler for the whole replica (one prompt
    per step within 8,192 tokens)."""
    deployment = _adp()
    work = Workload(kind="load", concurrency=64, num_requests=640, input_tokens=8192,
                    output_tokens=256)
    ctx = _ctx(deployment)
    placement = Placement(ctx=ctx, model=get_model(MOE), replicas=1, gpus=RANKS,
                          sequences=1.0)
    run = simulate_replica(placement=placement, workload=work)
    assert run.engines == RANKS and run.requests.clients == 64 // RANKS
    assert run.limits.kv_tokens == kv_pool_tokens(ctx, budget=8192) // RANKS
    whole = replica_requests(workload=work, replicas=1, count=640)
    table = StepTable.build(ctx=ctx, max_decode=64, max_context=8192 + 256, budget=8192)
    one = simulate(requests=whole, table=table, limits=SchedulerLimits(
        token_budget=8192, max_sequences=1024, kv_tokens=RANKS * run.limits.kv_tokens,
        prefill_scheduling="mixed-whole"))
    per_rank = np.mean(run.sim.first_token_s - run.sim.arrival_s)
    assert per_rank < 0.8 * np.mean(one.first_token_s - one.arrival_s)


def test_max_num_seqs_caps_the_running_batch_and_the_rest_queue() -> None:
    work = Workload(kind="load", concurrency=64, num_requests=640, input_tokens=512,
                    output_tokens=256)
    free = predict(model="llama-3.1-8b", gpu=GPU, workload=work)
    capped = predict(model="llama-3.1-8b", gpu=GPU, deployment=Deployment(max_num_seqs=16),
                     workload=work)
    assert isinstance(free, LoadPrediction) and isinstance(capped, LoadPrediction)
    assert float(capped.load["mean_running"]) <= 16 + 1e-9
    assert float(free.load["mean_running"]) > 32
    # the clients not running wait: 64 in the system, at most 16 of them running
    assert float(capped.load["mean_queue_length"]) == pytest.approx(
        64 - float(capped.load["mean_running"]), rel=0.05)
    assert capped.ttft_s > 2 * free.ttft_s
    # the memory reported is what the 16 running requests held, not all 64 clients'
    assert capped.memory_per_gpu_gb < free.memory_per_gpu_gb


def test_max_num_seqs_must_be_positive_and_reaches_the_launch_command() -> None:
    with pytest.raises(ConfigError, match="max_num_seqs"):
        Deployment(max_num_seqs=0)
    command = launch_command(model=get_model("llama-3.1-8b"),
                             deployment=Deployment(max_num_seqs=24), workload=Workload())
    argv = list(command.argv)
    assert argv[argv.index("--max-num-seqs") + 1] == "24"


def test_the_cli_refuses_a_cap_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--model", "llama-3.1-8b", "--gpu", GPU, "--max-num-seqs", "0"])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_measurement_row_carries_its_cap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from energylens.measurements.user_csv import load_user_csv, row_case

    path = tmp_path / "rows.csv"
    path.write_text("model,gpu,num_gpus,max_num_seqs,workload,concurrency,input_tokens,"
                    "output_tokens,ttft_s\nllama-3.1-8b,H100,1,16,load,64,512,256,0.5\n")
    case = row_case(load_user_csv(path).rows[0])
    assert case.deployment.max_num_seqs == 16


def test_a_load_launch_caps_what_the_simulator_ran() -> None:
    """A closed loop's launch command caps each scheduler at its clients (64 over 2
    replicas: 32), as the simulated engine never ran more; an open loop leaves the engine's
    own default, which the simulator assumed."""
    model = get_model("llama-3.1-8b")
    closed = launch_command(model=model, deployment=Deployment(num_gpus=2),
                            workload=Workload(kind="load", concurrency=64))
    argv = list(closed.argv)
    assert argv[argv.index("--max-num-seqs") + 1] == "32"
    opened = launch_command(model=model, deployment=Deployment(),
                            workload=Workload(kind="load", request_rate=5.0))
    assert "--max-num-seqs" not in opened.argv


def test_a_study_knob_sets_the_cap() -> None:
    from energylens.study.objective import PARAMS, deployment_from_params

    deployment = deployment_from_params(params={"max_num_seqs": 16}, boost_mhz=1980.0)
    assert deployment.max_num_seqs == 16
    assert PARAMS["max_num_seqs"](16) is None
    assert PARAMS["max_num_seqs"](0) is not None  # refused with its reason


def test_a_trace_launch_admits_the_traces_longest_request() -> None:
    from pathlib import Path

    from energylens.workloads.load.arrivals import load_trace

    trace = Path(__file__).resolve().parents[1] / "data/measurements/traces/splitwise_conv.csv"
    rows = load_trace(str(trace))
    longest = int((rows.input_tokens + rows.output_tokens).max())
    command = launch_command(model=get_model("llama-3.1-8b"), deployment=Deployment(),
                             workload=Workload(kind="load", trace=str(trace)))
    argv = list(command.argv)
    assert int(argv[argv.index("--max-model-len") + 1]) == longest > 2048


def test_sglang_sizes_its_prefill_chunk_from_the_gpu_memory() -> None:
    """SGLang's default --chunked-prefill-size follows the GPU's memory (4,096 on a 48 GB
    L40S, 8,192 on an 80 GB H100 and a 141 GB H200, 16,384 on a 192 GB B200), and the load
    simulator's token budget and the activation memory follow it; vLLM's offline budget
    is 16,384 on GPUs of 70 GiB or more other than the A100 and 8,192 on the others
    (EngineArgs' LLM-class default)."""
    from energylens.cost.memory import memory_use
    from energylens.model.families import build_graph
    from energylens.runtime import get_runtime

    sglang, vllm = get_runtime("sglang"), get_runtime("vllm")
    chunks = {g: sglang.prefill_chunk_on(gpu=load_gpu(g))
              for g in ("L40S", "H100-SXM", "H200-SXM", "B200")}
    assert chunks == {"L40S": 4096, "H100-SXM": 8192, "H200-SXM": 8192, "B200": 16384}
    assert {g: vllm.prefill_chunk_on(gpu=load_gpu(g)) for g in (*chunks, "A100-80GB-SXM")} == {
        "L40S": 8192, "H100-SXM": 16384, "H200-SXM": 16384, "B200": 16384,
        "A100-80GB-SXM": 8192}
    model, cal = get_model("llama-3.1-8b"), default_calibration()
    activations = {}
    for gpu, chunk in (("H100-SXM", 8192), ("B200", 16384)):
        spec = load_gpu(gpu)
        ctx = step_context(model=model, gpu=spec, deployment=Deployment(runtime="sglang"),
                           calibration=require_constants(calibration=cal, gpu=spec))
        assert rank_limits(ctx)[0] == chunk
        activations[gpu] = memory_use(
            graph=build_graph(model), gpu=spec, runtime=sglang, degrees={"tp": 1}, pp=1,
            weight_dtype="bf16", kv_dtype="bf16", sequences=1.0,
            context_tokens=1.0).activation_bytes
    # the start-up workspace holds one chunk's activations: twice as many on B200
    assert activations["B200"] == pytest.approx(2 * activations["H100-SXM"], rel=1e-12)


def test_the_minimal_working_set_holds_a_whole_request_on_one_rank() -> None:
    """A request's cache lives on its attention rank's GPU: the minimal working set of
    Qwen3-30B-A3B over 4 ranks holds one 1,024 + 64-token request's whole cache, 48 layers
    x 4 KV heads x 128 x (K, V) x 2 B = 98,304 B a token, on a GPU (it held a quarter,
    the memory model spreading one sequence over the ranks)."""
    from energylens.workloads.load.kind import minimal_memory

    work = Workload(kind="load", request_rate=1.0, input_tokens=1024, output_tokens=64)
    memory = minimal_memory(ctx=_ctx(_adp()), workload=work, token_budget=8192)
    assert float(memory.kv_cache_bytes) == pytest.approx(1088 * 98_304, rel=1e-12)


def _sglang_rank_run(prompts: str = "independent"):  # type: ignore[no-untyped-def]
    """One SGLang attention rank of 4 under a closed loop of 32 clients of 2,048-token
    prompts, its ranks prefilling on their own or (``balanced``) all at once."""
    ctx = _ctx(_adp("sglang"))
    ctx = replace(ctx, runtime=replace(ctx.runtime, attention_dp_prompts=prompts))
    placement = Placement(ctx=ctx, model=get_model(MOE), replicas=1, gpus=RANKS,
                          sequences=1.0)
    work = Workload(kind="load", concurrency=32, num_requests=320, input_tokens=2048,
                    output_tokens=128)
    return ctx, simulate_replica(placement=placement, workload=work)


def test_the_share_of_steps_with_a_prompt_and_the_chance_another_rank_has_one() -> None:
    """One request of 100 prompt tokens and 11 output tokens under prefill-first: one
    prompt step, then 10 decode steps, so a rank carries a chunk in 1 of its 11 steps;
    three other ranks alike carry one in a step with probability 1 - (10/11)^3."""
    ctx = _ctx(_adp("sglang"))
    table = StepTable.build(ctx=ctx, max_decode=1, max_context=111, budget=128)
    requests = replica_requests(workload=Workload(kind="load", concurrency=1, num_requests=1,
                                                  input_tokens=100, output_tokens=11),
                                replicas=1, count=1)
    run = simulate(requests=requests, table=table, limits=SchedulerLimits(
        token_budget=128, max_sequences=8, kv_tokens=10_000, prefill_scheduling="prefill-first"))
    lockstep = Lockstep.of_run(run=run, others=3, table=table)
    assert lockstep.share == pytest.approx(1 / 11)
    assert (lockstep.chunk_tokens, lockstep.chunk_cached) == (100, 0.0)
    assert lockstep.chance == pytest.approx(1 - (10 / 11) ** 3)
    assert Lockstep.of_run(run=run, others=0, table=table).chance == 0.0


def test_a_decode_step_lasts_as_long_as_another_ranks_chunk_makes_it_on_average() -> None:
    """Priced with a lockstep, each decode-only step of one request costs its own time plus
    the chance times what one rank's chunk (on the one-rank table) adds to it: the
    decode records' wall times, step by step, against that sum computed by hand."""
    ctx = _ctx(_adp("sglang"))
    table = StepTable.build(ctx=ctx, max_decode=1, max_context=600, budget=512, ranks=RANKS)
    rank = StepTable.build(ctx=ctx, max_decode=1, max_context=600, budget=512)
    requests = replica_requests(workload=Workload(kind="load", concurrency=1, num_requests=1,
                                                  input_tokens=300, output_tokens=40),
                                replicas=1, count=1)
    limits = SchedulerLimits(token_budget=512, max_sequences=8, kv_tokens=10_000,
                             prefill_scheduling="prefill-first")
    alone = simulate(requests=requests, table=table, limits=limits)
    lockstep = Lockstep(others=3, share=0.2, chunk_tokens=256, chunk_cached=128.0, table=rank)
    paced = simulate(requests=requests, table=table, limits=limits, lockstep=lockstep)
    decode = alone.chunks == 0
    assert np.array_equal(paced.count, alone.count)
    chance = 1 - 0.8**3
    _, fl, cl = rank.latency_lists()
    cached = rank.cached
    i = int(np.searchsorted(cached, 128.0, side="right"))
    chunk_s = cl[256][i - 1] + (cl[256][i] - cl[256][i - 1]) * (128.0 - cached[i - 1]) / (
        cached[i] - cached[i - 1])
    added = fl[1 + 256] - fl[1] + chunk_s  # one decode sequence beside the chunk
    engine = table.engine_idle_s + table.engine_busy_s_per_sequence
    own = alone.wall_s[decode] / alone.count[decode]
    gpu = own if table.engine_overlapped else own - engine
    mixed = np.maximum(np.maximum(gpu + added, engine + table.engine_busy_s_per_sequence)
                       if table.engine_overlapped else gpu + added + engine
                       + table.engine_busy_s_per_sequence, own)
    assert paced.wall_s[decode] / paced.count[decode] == pytest.approx(
        own + chance * (mixed - own), rel=1e-9)
    assert np.array_equal(paced.wall_s[~decode], alone.wall_s[~decode])  # the prompt step


def test_ranks_prefilling_on_their_own_slow_each_others_decodes() -> None:
    """SGLang's ranks prefill independently (any rank's prompt makes the step the ranks
    take together a prompt step): the same rank decodes slower than with balanced ranks,
    whose prompts run in the same steps; time and energy still add up."""
    ctx, independent = _sglang_rank_run()
    _, balanced = _sglang_rank_run("balanced")

    def tpot(run) -> float:  # type: ignore[no-untyped-def]
        sim = run.sim
        return float(np.mean((sim.finish_s - sim.first_token_s) / (sim.output_tokens - 1)))

    assert tpot(independent) > 1.05 * tpot(balanced)
    sim = independent.sim
    assert float(np.sum(sim.wall_s)) + sim.idle_s == pytest.approx(sim.makespan_s, rel=1e-9)
    metrics = independent.summary(ctx=ctx, slos=())
    busy = float(np.sum(sim.wall_s))
    static_w = ctx.constants.static_power_w * ctx.replica_gpus / independent.engines
    assert metrics.iteration_energy_j == pytest.approx(
        float(np.sum(sim.dynamic_energy(independent.table))) + static_w * busy, rel=1e-9)
