"""Physical invariants of predictions (not snapshots of today's numbers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import compile_layer
from energylens.cost.moe import Routing
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import tensor_bytes
from energylens.deployment import FUSIONS, Deployment, Workload
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context

CASES = [
    ("llama-3.1-8b", "H100", Deployment(tp=1)),
    ("llama-3.1-70b", "H100", Deployment(tp=4)),
    ("qwen3-30b-a3b", "H100", Deployment(ep=4, num_gpus=4)),
    ("bloom-176b", "A100-80GB", Deployment(tp=8)),
    ("gpt-oss-20b", "H200", Deployment()),
]


@pytest.mark.parametrize(("model", "gpu", "deployment"), CASES)
@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_more_tokens_never_cost_less_energy(model, gpu, deployment, kind):
    def energy(i, o, b):
        w = Workload(kind=kind, batch=b, input_tokens=i, output_tokens=o)
        p = predict(model=model, gpu=gpu, deployment=deployment, workload=w)
        # batch: energy of the whole batch; serving: energy per step-time of B sequences
        return p.energy_per_request_j * b if kind == "batch" else p.energy_per_output_token_j * b
    for i, o, b in [(128, 64, 4), (1024, 256, 16)]:
        assert energy(i * 2, o, b) >= energy(i, o, b)
        assert energy(i, o, b * 2) >= energy(i, o, b)
        if kind == "batch":
            assert energy(i, o * 2, b) >= energy(i, o, b)


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_tp1_has_no_communication(kind):
    p = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=1),
                workload=Workload(kind=kind, batch=8))
    assert p.prefill.communication_j == 0.0
    assert p.decode.communication_j == 0.0
    tp2 = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=2),
                  workload=Workload(kind=kind, batch=8))
    assert tp2.decode.communication_j > 0.0


@pytest.mark.parametrize("model", ["llama-3.1-8b", "bloom-176b", "qwen3-30b-a3b",
                                   "llama-4-maverick-17b-128e"])
@pytest.mark.parametrize("tokens", [(1, 1, 4096), (16, 1, 2048), (2, 512, 512)])
def test_fusion_never_adds_bytes(model, tokens):
    b, m, p = tokens
    phase = {"b": b, "m": m, "p": p, "n": 1, "t": 4}
    degrees = {"tp": 2, "etp": 2, "ep": 1}
    for group in build_graph(get_model(model)).groups:
        def total(fusion, group=group):
            compiled = compile_layer(layer=group.layer, sizes=group.sizes, degrees=degrees,
                                     fusion=frozenset(fusion))
            return sum(
                tensor_bytes(tensor=t, sizes={**k.io_sizes[t.name], **phase}, weight_dtype="bf16",
                             window=group.window)
                for k in compiled.kernels for t in (*k.reads, *k.writes))
        none = total(())
        for name in FUSIONS:
            assert total((name,)) <= none
        assert total(FUSIONS) <= min(total((n,)) for n in FUSIONS)


@pytest.mark.parametrize("skew", [0.5, 1.0, 1.5])
def test_skewed_routing_is_never_faster_than_uniform_under_ep(skew):
    """Under EP the layer waits for the most loaded rank. Holds whenever all experts are
    active (prefill, large decode batches); at tiny decode batches skew can activate fewer
    distinct experts and read fewer weights (METRO, arXiv 2512.09277), so not asserted there."""
    uniform = Deployment(ep=8, num_gpus=8)
    skewed = replace(uniform, routing=Routing(kind="zipf", skew=skew))
    prefill = Workload(batch=8, input_tokens=2048, output_tokens=1)
    a = predict(model="qwen3-30b-a3b", gpu="H100", deployment=uniform, workload=prefill)
    b = predict(model="qwen3-30b-a3b", gpu="H100", deployment=skewed, workload=prefill)
    assert b.ttft_s >= a.ttft_s
    assert b.prefill.energy_j >= a.prefill.energy_j
    busy = Workload(kind="serving", batch=256, input_tokens=1024, output_tokens=256)
    a = predict(model="qwen3-30b-a3b", gpu="H100", deployment=uniform, workload=busy)
    b = predict(model="qwen3-30b-a3b", gpu="H100", deployment=skewed, workload=busy)
    assert b.tpot_s >= a.tpot_s
    assert b.energy_per_output_token_j >= a.energy_per_output_token_j


@pytest.mark.parametrize(("model", "gpu", "deployment"), CASES)
@pytest.mark.parametrize("freq", [None, 1000.0])
def test_power_never_exceeds_board_limit(model, gpu, deployment, freq):
    dep = replace(deployment, freq_mhz=freq)
    for batch in (1, 64, 512):
        for kind in ("batch", "serving"):
            p = predict(model=model, gpu=gpu, deployment=dep,
                        workload=Workload(kind=kind, batch=batch, input_tokens=2048))
            tdp = load_gpu(gpu).tdp_w
            for phase in (p.prefill, p.decode):
                if phase.latency_s > 0 and phase.energy_j > 0:
                    assert phase.energy_j / phase.latency_s <= tdp * p.num_gpus * (1 + 1e-9)


def test_power_cap_lowers_the_clock_instead_of_exceeding_tdp():
    """A kernel that would draw far above 700 W at boost runs at the clock where it draws
    the limit (to the bisection's resolution): slower than at boost, never above the limit."""
    gpu = load_gpu("H100")
    hot = KernelConstants(energy_per_tensor_flop_j=5e-12)  # would draw far above 700 W
    graph = build_graph(get_model("llama-3.1-70b"))
    group = graph.groups[0]
    kernel = next(k for k in compile_layer(layer=group.layer, sizes=group.sizes,
                                           degrees={"tp": 1, "etp": 1, "ep": 1},
                                           fusion=frozenset()).kernels if k.name == "gate")
    phase = {"b": 1, "m": 8192, "p": 1, "n": 1, "t": 1}

    def cost_at(constants: KernelConstants, freq_mhz: float | None):
        clock = ClockState.at(gpu=gpu, freq_mhz=freq_mhz, constants=constants)
        return kernel_cost(kernel=kernel, phase=phase, window=None, gpu=gpu,
                           constants=constants, clock=clock, weight_dtype="bf16")

    capped = cost_at(hot, None)
    power = (capped.compute_energy_j + capped.memory_energy_j) / capped.latency_s + hot.static_power_w
    assert gpu.tdp_w * (1 - 1e-3) <= power <= gpu.tdp_w * (1 + 1e-9)
    assert capped.latency_s > cost_at(KernelConstants(), None).latency_s
    # Asking for a lower clock than the throttle clock is slower still; a higher one is not.
    assert cost_at(hot, gpu.min_clock_mhz).latency_s > capped.latency_s
    assert cost_at(hot, 0.99 * gpu.boost_clock_mhz).latency_s == pytest.approx(capped.latency_s,
                                                                               rel=1e-12)


def _overlapped_layer_powers(link_power_w: float | None) -> tuple[dict, dict, float]:
    """Per-layer (seconds, joules) and board power of o and down, each with one of the two
    all-reduces hidden under it: Llama-3.1-70B TP8 on B200, an 8,192-token prompt, overlap
    on 16 SMs, the B200 link's power while a collective runs as shipped or ``link_power_w``."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.step import STEP_RECORDER, SequenceGroup, step_cost
    from energylens.predict import checked_context

    calibration = default_calibration()
    if link_power_w is not None:
        calibration = calibration.with_link("B200:nvswitch", power_w=link_power_w)
    _, ctx = checked_context(model="llama-3.1-70b", gpu="B200", calibration=calibration,
                             deployment=Deployment(tp=8, overlap_sms=16))
    records: list[tuple[int, str, float, float]] = []
    token = STEP_RECORDER.set(lambda group, kernel, seconds, joules, critical: records.append(
        (group.count, getattr(kernel, "name", kernel), float(seconds), float(joules))))
    try:
        step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=8192.0, context=8192.0)])
    finally:
        STEP_RECORDER.reset(token)
    layers = {name: (seconds / count, joules / count) for count, name, seconds, joules in records
              if count > 1}
    assert layers["communication"][0] == 0.0  # both hidden
    per_collective_j = layers["communication"][1] / 2
    powers = {name: (layers[name][1] + per_collective_j) / layers[name][0]
              + ctx.constants.static_power_w for name in ("o", "down")}
    return layers, powers, ctx.gpu.tdp_w


def test_a_kernel_and_the_all_reduce_hidden_under_it_stay_under_the_board_limit():
    """A kernel and its hidden collective together draw at most the TDP: with the shipped
    link power they fit under it; with a link drawing 600 W while it runs (constructed, not
    fitted) down and its all-reduce would draw more, so the pair is stretched to the limit."""
    shipped_layers, shipped, tdp_w = _overlapped_layer_powers(None)
    assert max(shipped.values()) <= tdp_w * (1 + 1e-9), shipped
    layers, powers, _ = _overlapped_layer_powers(600.0)
    assert max(powers.values()) <= tdp_w * (1 + 1e-9), powers
    assert powers["down"] == pytest.approx(tdp_w, rel=1e-6)
    assert layers["down"][0] > shipped_layers["down"][0]  # stretched, not clipped


@pytest.mark.parametrize(("model", "gpu", "deployment"), CASES)
def test_static_energy_is_static_power_times_gpus_times_wall_time(model, gpu, deployment):
    p = predict(model=model, gpu=gpu, deployment=deployment, workload=Workload(batch=4))
    from energylens.calibration.file import default_calibration

    static_w = default_calibration().kernel(load_gpu(gpu).name).static_power_w
    for phase in (p.prefill, p.decode):
        assert phase.static_j == pytest.approx(static_w * p.num_gpus * phase.latency_s, rel=1e-9)


def test_hand_computed_roofline_for_one_gemm():
    """Pure roofline constants: a 4096 x 8192 x 8192 bf16 GEMM on H100 is compute-bound at
    2 M N K / 989.4 TFLOP/s; the same GEMM at M = 1 is bound by reading 8192 x 8192 x 2 B."""
    gpu = load_gpu("H100")
    pure = KernelConstants(gemm_efficiency_max=1.0, gemm_k_half=0.0, gemm_m_half=0.0,
                           wave_exponent=0.0, memory_efficiency_max=1.0, memory_half_bytes=0.0,
                           roofline_sharpness=200.0, kernel_overhead_s=0.0,
                           energy_per_tensor_flop_j=0.0, energy_per_hbm_byte_j=0.0, busy_power_w=0.0)
    graph = build_graph(get_model("llama-3.1-70b"))
    group = graph.groups[0]
    sizes = {**group.sizes, "f": 8192}
    kernel = next(k for k in compile_layer(layer=group.layer, sizes=sizes,
                                           degrees={"tp": 1, "etp": 1, "ep": 1},
                                           fusion=frozenset()).kernels if k.name == "gate")
    clock = ClockState.at(gpu=gpu, freq_mhz=None, constants=pure)
    big = kernel_cost(kernel=kernel, phase={"b": 4096, "m": 1}, window=None, gpu=gpu, constants=pure,
                      clock=clock, weight_dtype="bf16")
    flops = 2 * 4096 * 8192 * 8192
    assert big.flops == flops
    assert float(big.latency_s) == pytest.approx(flops / 989.4e12, rel=0.01)
    small = kernel_cost(kernel=kernel, phase={"b": 1, "m": 1}, window=None, gpu=gpu, constants=pure,
                        clock=clock, weight_dtype="bf16")
    nbytes = 8192 * 8192 * 2 + 8192 * 2 * 2
    assert float(small.latency_s) == pytest.approx(nbytes / 3.35e12, rel=0.01)


def test_overlap_energy_optimum_is_interior():
    """Few SMs starve the collective; many slow the GEMM: energy is lowest in between."""
    energies = {}
    for sms in (0, 2, 4, 8, 16, 24, 32, 48, 64, 96):
        p = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=8, overlap_sms=sms),
                    workload=Workload(batch=16, input_tokens=4096, output_tokens=1))
        energies[sms] = p.prefill.energy_j
    best = min(energies, key=energies.get)
    assert best not in (2, 96), energies
    assert energies[best] < energies[0]


def test_lower_clock_saves_decode_energy_at_small_latency_cost():
    base = predict(model="llama-3.1-8b", gpu="H100", workload=Workload(batch=8, output_tokens=512))
    slow = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(freq_mhz=1200),
                   workload=Workload(batch=8, output_tokens=512))
    assert slow.decode.energy_j < base.decode.energy_j
    assert slow.tpot_s / base.tpot_s < 1.25  # memory-bound: barely slower
    assert slow.ttft_s / base.ttft_s > 1.2  # compute-bound prefill: clearly slower


def test_the_engines_busy_time_draws_the_busy_power_of_the_steps_clock():
    """The runtime's per-sequence busy time is charged busy power as a kernel's busy time
    is: x f/f_boost x (V(f)/V(f_boost))^2, so a lower clock lowers it by that factor (it
    was the boost clock's whatever the clock)."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.step import engine_cost

    model = get_model("llama-3.1-8b")
    gpu = load_gpu("H100")
    cal = default_calibration()
    boost = step_context(model=model, gpu=gpu, deployment=Deployment(), calibration=cal)
    slow = step_context(model=model, gpu=gpu, deployment=Deployment(freq_mhz=800), calibration=cal)
    at_boost = engine_cost(ctx=boost, sequences=64.0)
    at_800 = engine_cost(ctx=slow, sequences=64.0)
    assert float(at_boost.compute_energy_j) > 0
    ratio = 800 / gpu.boost_clock_mhz
    assert slow.clock.ratio == pytest.approx(ratio)
    assert float(at_800.compute_energy_j) == pytest.approx(
        float(at_boost.compute_energy_j) * ratio * slow.clock.dynamic_scale, rel=1e-12)
    assert float(at_800.compute_energy_j) < 0.5 * float(at_boost.compute_energy_j)


def test_pipeline_sends_carry_their_transfer_energy():
    """Llama-3.1-8B over two pipeline stages of one GPU each (no collective inside a
    stage): a running engine's step sends each of its 2 micro-batches over both stage
    boundaries, 4 sends of 8 tokens x 4,096 x 2 B, each the bytes once plus the link's
    power at both ends; a one-shot pass (fill and drain) crosses the one boundary twice."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.comm import link_for_group
    from energylens.cost.step import SequenceGroup, pipeline_send, step_cost

    model, gpu, cal = get_model("llama-3.1-8b"), load_gpu("H100"), default_calibration()
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(pp=2), calibration=cal)
    seqs = [SequenceGroup(sequences=16.0, new_tokens=1.0, context=1000.0)]
    seconds, joules = pipeline_send(ctx=ctx, tokens=8.0)
    kind, _ = link_for_group(gpu=gpu, group_size=2)
    link = cal.link(gpu=gpu.name, kind=kind)
    wire_s = seconds - ctx.runtime_constants.stage_handoff_s
    by_hand = 8 * 4096 * 2 * link.energy_per_byte_j + 2 * link.power_w * wire_s
    assert float(joules) == pytest.approx(by_hand, rel=1e-9) and by_hand > 0
    running = step_cost(ctx=ctx, seqs=seqs, pipelined=True)
    one_shot = step_cost(ctx=ctx, seqs=seqs, pipelined=False)
    assert float(running.communication_energy_j) == pytest.approx(4 * by_hand, rel=1e-9)
    assert float(one_shot.communication_energy_j) == pytest.approx(2 * by_hand, rel=1e-9)


def test_decode_integration_matches_a_per_token_sum():
    from energylens.cost.step import SequenceGroup, step_cost

    model = get_model("llama-3.1-8b")
    gpu = load_gpu("H100")
    p = predict(model=model, gpu=gpu, workload=Workload(batch=4, input_tokens=100, output_tokens=201))
    from energylens.calibration.file import default_calibration

    cal = default_calibration()
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(), calibration=cal)
    constants = ctx.runtime_constants
    contexts = np.arange(101, 301, dtype=float)
    exact = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=4, new_tokens=1.0, context=contexts)])
    overhead = constants.step_overhead_s + constants.per_sequence_overhead_s * 4
    assert p.tpot_s == pytest.approx(float(np.mean(exact.latency_s)) + overhead, rel=0.01)


@pytest.mark.parametrize("mean", [0.01, 0.158, 0.69, 1.3, 4.0, 25.0])
def test_arrival_mixture_is_a_poisson_with_the_right_mean(mean):
    from math import exp

    from energylens.workloads.steady_state import arrival_mixture

    points = arrival_mixture(mean)
    counts = [c for c, _ in points]
    probs = [p for _, p in points]
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    assert sum(c * p for c, p in points) == pytest.approx(mean, rel=1e-9)
    assert probs[0] == pytest.approx(exp(-mean)) and probs[1] == pytest.approx(mean * exp(-mean))
    assert counts == sorted(counts) and min(probs) >= 0


def test_serving_mean_step_is_the_poisson_mixture_of_whole_prompt_steps():
    """MoE serving at a low admission rate: the mean step is mostly decode-only steps plus
    the odd step holding one whole prompt, hand-assembled from step costs here."""
    from math import exp

    from energylens.calibration.file import default_calibration
    from energylens.cost.step import SequenceGroup, engine_cost, step_cost

    model = get_model("qwen3-30b-a3b")
    gpu = load_gpu("H100")
    batch, s_in, s_out = 16.0, 400.0, 800.0
    p = predict(model=model, gpu=gpu,
                workload=Workload(kind="serving", batch=batch, input_tokens=s_in, output_tokens=s_out))
    cal = default_calibration()
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(), calibration=cal)
    decode = SequenceGroup(sequences=batch, new_tokens=1.0, context=s_in + s_out / 2)
    engine = float(engine_cost(ctx=ctx, sequences=batch).latency_s)

    def step_s(prompts):
        seqs = [decode] + ([SequenceGroup(sequences=prompts, new_tokens=s_in, context=s_in)]
                           if prompts else [])
        return float(step_cost(ctx=ctx, seqs=seqs).latency_s) + engine

    a = batch / s_out
    p0, p1 = exp(-a), a * exp(-a)
    tail = 1 - p0 - p1
    mean_step = p0 * step_s(0) + p1 * step_s(1) + tail * step_s((a - p1) / tail)
    assert p.output_tokens_per_s == pytest.approx(batch / mean_step, rel=1e-9)
    assert p.tpot_s == pytest.approx(step_s(0), rel=1e-9)  # median step admits no prompt
    # The phases split that mean step: decode-only time, and what the prompts add to it.
    assert p.decode.latency_s == pytest.approx(step_s(0), rel=1e-9)
    assert p.prefill.latency_s == pytest.approx(mean_step - step_s(0), rel=1e-9)
    # Pricing a sliver of a prompt in every step instead would wake more experts per step.
    assert batch / step_s(a) < p.output_tokens_per_s


def test_an_fp8_kv_cache_halves_the_kv_bytes_by_hand():
    """Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x (K, V) = 65,536 elements per token;
    8 sequences at 1,024 + 128 tokens hold 8 x 1,152 x 65,536 x 2 B in bf16, half in fp8."""
    work = Workload(batch=8, input_tokens=1024, output_tokens=128)
    bf16 = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(kv_dtype="bf16"),
                   workload=work)
    fp8 = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(kv_dtype="fp8"),
                  workload=work)
    auto = predict(model="llama-3.1-8b", gpu="H100", workload=work)
    kv_fp8_bytes = 8 * 1152 * 65536 * 1.0
    assert (bf16.memory_per_gpu_gb - fp8.memory_per_gpu_gb) * 1e9 == pytest.approx(kv_fp8_bytes)
    assert auto.memory_per_gpu_gb == bf16.memory_per_gpu_gb  # auto: vLLM stores bf16
    long = Workload(batch=24, input_tokens=32768, output_tokens=64)  # fits in bf16 too
    slow = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=2), workload=long)
    fast = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=2, kv_dtype="fp8"),
                   workload=long)
    assert slow.running_batch == fast.running_batch == 24  # one wave each
    assert fast.tpot_s < 0.8 * slow.tpot_s  # long-context decode streams the cache


def test_an_unknown_kv_dtype_is_one_line():
    with pytest.raises(ConfigError, match="KV-cache dtype"):
        Deployment(kv_dtype="int3")


def test_four_bit_weights_fit_where_bf16_does_not_and_decode_faster():
    """Llama-3.1-70B: ~141 GB of bf16 weights cannot fit one 80 GB H100; a 4-bit AWQ/GPTQ
    release (~0.54 B per weight with scales) fits, and its memory-bound decode reads
    about a quarter of the bytes."""
    work = Workload(batch=1, input_tokens=512, output_tokens=64)
    bf16 = predict(model="llama-3.1-70b", gpu="H100", workload=work)
    int4 = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(weight_dtype="int4"),
                   workload=work)
    assert not bf16.feasible and int4.feasible
    both = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=4), workload=work)
    four = predict(model="llama-3.1-70b", gpu="H100",
                   deployment=Deployment(tp=4, weight_dtype="int4"), workload=work)
    assert four.tpot_s < 0.6 * both.tpot_s


def test_nvfp4_computes_in_fp4_only_where_the_gpu_has_fp4_units():
    """A compute-bound prefill: B200 runs NVFP4 GEMMs on FP4 tensor cores (faster than its
    FP8), H100 has none and dequantises to bf16 (no faster than its bf16)."""
    work = Workload(batch=8, input_tokens=4096, output_tokens=2)

    def ttft(gpu, dtype):
        return predict(model="llama-3.1-8b", gpu=gpu, deployment=Deployment(weight_dtype=dtype),
                       workload=work).ttft_s

    assert ttft("B200", "nvfp4") < ttft("B200", "fp8")
    assert ttft("H100", "nvfp4") >= 0.95 * ttft("H100", "bf16")


def test_pipeline_parallel_serving_keeps_the_pipeline_full():
    """A running engine keeps pp micro-batches in flight: two stages over two GPUs serve
    about as well as two replicas (less the stage sends and the scheduler's per-sequence
    work over the whole batch), never better, and far better than filling and draining
    the pipeline every step (3,816 tokens/s here when every step filled and drained)."""
    from energylens.deployment import Deployment, Workload
    from energylens.predict import predict

    workload = Workload(kind="serving", batch=64, input_tokens=512, output_tokens=256)
    pipe, replicas = (predict(model="llama-3.1-8b", gpu="h100", deployment=d, workload=workload)
                      for d in (Deployment(pp=2), Deployment(dp=2, num_gpus=2)))
    assert 0.85 * replicas.output_tokens_per_s < pipe.output_tokens_per_s
    assert pipe.output_tokens_per_s <= replicas.output_tokens_per_s
    assert pipe.tpot_s >= replicas.tpot_s


def test_the_final_norm_runs_on_every_token_and_the_lm_head_on_the_logit_rows():
    """Llama-3.1-8B, one 2,048-token prompt: the final RMSNorm reads the step's 2,048 x
    4,096 hidden states in bf16 (engines prune to the last token after it), the LM head
    one row (it was priced on the one logit row, 8 KB)."""
    from energylens.cost.work import tensor_bytes

    head = build_graph(get_model("llama-3.1-8b")).head_group
    ops = {op.name: op for op in head.layer.ops}
    sizes = {**head.sizes, "b": 1, "m": 2048, "n": 1}
    norm_in = ops["normf"].inputs[0]
    assert tensor_bytes(tensor=norm_in, sizes=sizes, weight_dtype="bf16",
                        window=None) == 2048 * 4096 * 2
    rows = ops["lm_head"].inputs[0]
    assert tensor_bytes(tensor=rows, sizes=sizes, weight_dtype="bf16", window=None) == 4096 * 2


@pytest.mark.parametrize(("model", "gpu", "runtime", "kind"), [
    ("llama-3.1-70b", "H100", "vllm", "batch"),
    ("qwen3-30b-a3b", "B200", "sglang", "serving"),
    ("mixtral-8x7b", "A100-80GB", "trtllm", "batch"),
])
def test_data_parallel_replicas_are_independent_copies(model, gpu, runtime, kind):
    """Two replicas serving twice the sequences take each replica's latency, energy per
    token and memory, and twice its power and throughput, to rounding (nothing is shared
    between them)."""
    def run(dp: int, batch: int):
        return predict(model=model, gpu=gpu, deployment=Deployment(tp=2, dp=dp, runtime=runtime),
                       workload=Workload(kind=kind, batch=batch, input_tokens=1024,
                                         output_tokens=128))

    one, two = run(1, 8), run(2, 16)
    assert two.num_gpus == 2 * one.num_gpus
    for name in ("ttft_s", "tpot_s", "energy_per_output_token_j", "memory_per_gpu_gb"):
        assert getattr(two, name) == pytest.approx(getattr(one, name), rel=1e-9), name
    for name in ("avg_power_w", "output_tokens_per_s"):
        assert getattr(two, name) == pytest.approx(2 * getattr(one, name), rel=1e-9), name


@pytest.mark.parametrize(("model", "gpu", "tp"), [("llama-3.1-70b", "H100", 2),
                                                  ("qwen3-30b-a3b", "H200", 1),
                                                  ("llama-3.1-8b", "A100-80GB", 1)])
def test_a_second_pipeline_stage_never_speeds_up_one_sequence(model, gpu, tp):
    """One sequence passes the stages one after another: a second stage halves the weights
    per GPU but adds a send per step, so TTFT and TPOT do not fall, and the idle stage's
    power makes each token cost more energy, not less."""
    def run(pp: int):
        return predict(model=model, gpu=gpu, deployment=Deployment(tp=tp, pp=pp),
                       workload=Workload(kind="batch", batch=1, input_tokens=1024,
                                         output_tokens=128))

    one, two = run(1), run(2)
    assert two.memory_per_gpu_gb < one.memory_per_gpu_gb
    assert two.ttft_s >= one.ttft_s and two.tpot_s >= one.tpot_s
    assert two.energy_per_output_token_j > one.energy_per_output_token_j


@pytest.mark.parametrize(("model", "gpu", "tp"), [("llama-3.1-70b", "H100", 2),
                                                  ("qwen3-32b", "H200", 1)])
def test_an_fp8_kv_cache_holds_at_least_the_sequences_of_a_bf16_one(model, gpu, tp):
    """Half the bytes per cached token: a batch the 16-bit cache runs in waves is held in
    more sequences at once (and never fewer) by an FP8 one."""
    def run(kv: str):
        return predict(model=model, gpu=gpu, deployment=Deployment(tp=tp, kv_dtype=kv),
                       workload=Workload(kind="batch", batch=256, input_tokens=4096,
                                         output_tokens=128))

    wide, narrow = run("bf16"), run("fp8")
    assert wide.running_batch is not None and wide.running_batch < 256  # the cache binds
    assert narrow.running_batch is not None and narrow.running_batch > wide.running_batch
