"""The physical-invariant sweep (benchmarks/sanity_sweep.py) finds what it is for and
passes the model on a small slice (the whole sweep, 118,200 predictions, is a benchmark:
docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from benchmark_scripts import load_benchmark

from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.predict import predict

sweep = load_benchmark("sanity_sweep")
MODEL = get_model("llama-3.1-8b")


def _point(batch: int):
    return predict(model="llama-3.1-8b", gpu="L4", deployment=Deployment(),
                   workload=Workload(batch=batch, input_tokens=1024, output_tokens=128))


def test_a_slice_of_the_sweep_breaks_no_invariant() -> None:
    result = sweep.sweep(models=[get_model("llama-3.1-8b"), get_model("qwen3-30b-a3b")],
                         gpus=[load_gpu("L4"), load_gpu("H200")], runtimes=["vllm", "trtllm"],
                         batches=[1, 8, 64])
    assert result.predictions > 20
    assert result.violations == ()


def test_it_flags_power_over_tdp_and_a_figure_not_finite() -> None:
    gpu, good = load_gpu("L4"), _point(8)
    assert sweep.point_violations(label="x", result=good, gpu=gpu, model=MODEL, prompts=8) == []
    hot = replace(good, avg_power_w=2 * gpu.tdp_w * good.num_gpus)
    assert any("over" in v for v in sweep.point_violations(label="x", result=hot, gpu=gpu,
                                                           model=MODEL, prompts=8))
    fast = replace(good, ttft_s=1e-6, tpot_s=1e-7)  # a unit slip: micro- for milliseconds
    found = sweep.point_violations(label="x", result=fast, gpu=gpu, model=MODEL, prompts=8)
    assert any("FLOP floor" in v for v in found) and any("weight-read floor" in v for v in found)
    big = replace(good, memory_per_gpu_gb=2 * gpu.hbm_capacity_bytes / 1e9)
    assert any("board" in v for v in sweep.point_violations(label="x", result=big, gpu=gpu,
                                                            model=MODEL, prompts=8))
    broken = replace(good, tpot_s=float("nan"))
    assert any("tpot_s" in v for v in sweep.point_violations(label="x", result=broken, gpu=gpu, model=MODEL,
                                                                prompts=8))


def test_it_flags_a_larger_batch_that_decodes_faster_or_spends_more() -> None:
    small, large = _point(1), _point(8)
    assert sweep.batch_violations(label="x", by_batch={1: small, 8: large}) == []
    faster = replace(large, tpot_s=0.5 * small.tpot_s)
    assert any("TPOT falls" in v for v in sweep.batch_violations(label="x",
                                                                 by_batch={1: small, 8: faster}))
    costlier = replace(large, energy_per_output_token_j=2 * small.energy_per_output_token_j)
    assert any("energy per token rises" in v
               for v in sweep.batch_violations(label="x", by_batch={1: small, 8: costlier}))


def _loop(clients: int):
    return predict(model="llama-3.1-8b", gpu="L4", deployment=Deployment(),
                   workload=Workload(kind="load", concurrency=clients, input_tokens=1024,
                                     output_tokens=128, length_cv=sweep.LOAD_LENGTH_CV))


def test_a_slice_of_the_load_sweep_breaks_no_invariant() -> None:
    result = sweep.sweep(models=[MODEL], gpus=[load_gpu("H100")], runtimes=["vllm", "sglang"],
                         batches=[1, 8, 32], kind="load")
    assert result.predictions >= 12
    assert result.violations == ()


def test_a_slice_of_the_open_loop_sweep_breaks_no_invariant() -> None:
    result = sweep.open_sweep(models=[MODEL], gpus=[load_gpu("H100")],
                              runtimes=["vllm", "sglang"], clients=32)
    assert result.predictions == 2 * len(sweep.TP_DEGREES) * len(sweep.OPEN_SHARES)
    assert result.violations == ()


def _open(rate: float):
    return predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(),
                   workload=Workload(kind="load", request_rate=rate, input_tokens=1024,
                                     output_tokens=128, num_requests=200, length_cv=0.05))


def test_it_flags_an_open_loop_that_breaks_its_identities() -> None:
    light, heavy = _open(2.0), _open(8.0)
    assert sweep.load_violations(label="x", result=heavy, clients=None) == []
    assert sweep.rate_violations(label="x", by_rate={2.0: light, 8.0: heavy}) == []
    # twice the queue it had: Little's law no longer holds on the requests in the system
    queued = replace(heavy, load={**heavy.load, "mean_queue_length":
                                  heavy.load["mean_queue_length"] + heavy.load["mean_running"]})
    assert any("running or queued" in v
               for v in sweep.load_violations(label="x", result=queued, clients=None))
    # read as offered twice the rate it served
    assert any("served" in v for v in sweep.rate_violations(label="x", by_rate={16.0: heavy}))
    faster = replace(heavy, ttft_s=0.5 * light.ttft_s)
    assert any("ttft_s falls" in v
               for v in sweep.rate_violations(label="x", by_rate={2.0: light, 8.0: faster}))


def test_it_flags_a_closed_loop_that_breaks_its_identities() -> None:
    one = _loop(1)
    assert sweep.load_violations(label="x", result=one, clients=1) == []
    # the same run read as twice the clients: twice the requests in flight than it had
    assert any("Little's law" in v
               for v in sweep.load_violations(label="x", result=one, clients=2))
    flipped = replace(one, load={**one.load, "ttft_p90_s": 2 * one.load["ttft_p99_s"]})
    assert any("ttft percentiles" in v
               for v in sweep.load_violations(label="x", result=flipped, clients=1))
    lossy = replace(one, output_tokens_per_s=0.5 * one.output_tokens_per_s)
    found = sweep.load_violations(label="x", result=lossy, clients=1)
    assert any("tokens/s where" in v for v in found) and any("average power" in v for v in found)


@pytest.mark.parametrize("runtime", ["vllm", "llama.cpp", "deepspeed-mii"])
def test_one_client_sees_a_batch_of_one(runtime: str) -> None:
    """The server splits a 1,024-token prompt by its per-pass limit (llama.cpp's 512-token
    ubatch, FastGen's 768-token ragged batch); a static batch must too."""
    deployment = Deployment(runtime=runtime)
    loop = predict(model="llama-3.1-8b", gpu="H100", deployment=deployment,
                   workload=Workload(kind="load", concurrency=1, input_tokens=1024,
                                     output_tokens=128))
    alone = predict(model="llama-3.1-8b", gpu="H100", deployment=deployment,
                    workload=Workload(kind="batch", batch=1, input_tokens=1024,
                                      output_tokens=128))
    assert sweep.alone_violations(label="x", loop=loop, batch=alone) == []
    slow = replace(loop, ttft_s=2 * alone.ttft_s)  # one client waiting on nobody
    assert any("one client's ttft_s" in v
               for v in sweep.alone_violations(label="x", loop=slow, batch=alone))


def test_it_flags_more_clients_that_serve_less() -> None:
    few, many = _loop(1), _loop(8)
    assert sweep.throughput_violations(label="x", by_clients={1: few, 8: many}) == []
    starved = replace(many, output_tokens_per_s=0.5 * few.output_tokens_per_s)
    assert sweep.throughput_violations(label="x", by_clients={1: few, 8: starved}) != []


def test_a_slice_of_the_clock_sweep_breaks_no_invariant() -> None:
    result = sweep.clock_sweep(models=[MODEL, get_model("qwen3-30b-a3b")],
                               gpus=[load_gpu("L4"), load_gpu("H100")],
                               runtimes=["vllm", "trtllm"], batches=[1, 64])
    assert result.predictions >= 8 * (1 + sweep.CLOCK_POINTS)
    assert result.violations == ()


def _clocked(freq_mhz: float | None):
    return predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(freq_mhz=freq_mhz),
                   workload=Workload(batch=64, input_tokens=1024, output_tokens=128))


def test_it_flags_a_clock_that_slows_the_step_or_cools_the_board() -> None:
    gpu = load_gpu("H100")
    low, high = gpu.min_clock_mhz, gpu.boost_clock_mhz
    slow, fast, default = _clocked(low), _clocked(high), _clocked(None)
    assert slow.ttft_s > fast.ttft_s  # a compute-bound prompt of 64 x 1,024 tokens
    assert sweep.clock_violations(label="x", by_clock={low: slow, high: fast},
                                  default=default, boost_mhz=high) == []
    # the two clocks' predictions swapped: a higher clock that lengthens TTFT, cools the board
    found = sweep.clock_violations(label="x", by_clock={low: fast, high: slow},
                                   default=default, boost_mhz=high)
    assert any("ttft_s rises" in v for v in found)
    assert any("average power falls" in v for v in found)
    assert any("no clock given" in v for v in found)  # the boost clock is not the default


def test_a_slice_of_the_precision_sweep_breaks_no_invariant() -> None:
    result = sweep.precision_sweep(models=[MODEL, get_model("llama-3.1-70b")],
                                   gpus=[load_gpu("H100"), load_gpu("L4")],
                                   runtimes=["vllm", "trtllm"], batches=[1, 64])
    assert result.predictions >= 20
    assert result.violations == ()


def test_it_flags_narrower_weights_that_take_more_memory_or_decode_slower() -> None:
    def weights(dtype: str):
        return predict(model="llama-3.1-70b", gpu="H100",
                       deployment=Deployment(tp=2, weight_dtype=dtype),
                       workload=Workload(batch=1, input_tokens=1024, output_tokens=128))

    wide, narrow = weights("bf16"), weights("fp8")
    # 70 B weights over two H100s: reading them is most of a batch of one's TPOT
    read, tile = sweep.decode_floors(model=get_model("llama-3.1-70b"), gpu=load_gpu("H100"),
                                     tp=2)
    assert read["bf16"] == pytest.approx(2 * 70.6e9 / (2 * 3.35e12), rel=0.02)
    assert read["bf16"] >= sweep.WEIGHT_BOUND_SHARE * wide.tpot_s
    assert read["fp8"] >= tile["fp8"]
    assert sweep.precision_violations(label="x", by_dtype={"bf16": wide, "fp8": narrow},
                                      batch=1, read_s=read, tile_s=tile) == []
    swapped = sweep.precision_violations(label="x", by_dtype={"bf16": narrow, "fp8": wide},
                                         batch=1, read_s=read, tile_s=tile)
    assert any("memory per GPU" in v for v in swapped)
    assert any("TPOT rises" in v for v in swapped)
    assert any("energy per token rises" in v for v in swapped)
    # where fixed kernel times decide (a read of nothing), only the memory is checked
    nothing = dict.fromkeys(read, 0.0)
    assert not any("TPOT" in v for v in sweep.precision_violations(
        label="x", by_dtype={"bf16": narrow, "fp8": wide}, batch=1, read_s=nothing,
        tile_s=tile))


def test_a_compute_poor_gpu_multiplies_weight_only_int4_slower_than_it_reads_it() -> None:
    """H20 (148 TFLOPS in 16 bits, 4 TB/s): one token's 16-row tile of a 70 B model's
    weight-only INT4 GEMMs takes longer than their read, so INT4 need not beat FP8 there;
    on an H100 it must."""
    model = get_model("llama-3.1-70b")
    read, tile = sweep.decode_floors(model=model, gpu=load_gpu("H20"), tp=1)
    assert read["int4"] < tile["int4"] and read["fp8"] >= tile["fp8"]
    read, tile = sweep.decode_floors(model=model, gpu=load_gpu("H100"), tp=2)
    assert read["int4"] >= tile["int4"]


def test_a_slice_of_the_trace_sweep_breaks_no_invariant() -> None:
    result = sweep.trace_sweep(models=[MODEL], gpus=[load_gpu("H100")], runtimes=["vllm"],
                               clients=32)
    assert result.predictions == len(sweep.TP_DEGREES) * len(sweep.TRACES) \
        * len(sweep.TRACE_SHARES)
    assert result.violations == ()


def test_it_flags_a_trace_run_that_serves_other_than_arrives() -> None:
    run = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(),
                  workload=Workload(kind="load", trace=sweep.TRACES[0], request_rate=2.0,
                                    num_requests=400))
    gpu = load_gpu("H100")
    assert sweep.trace_violations(label="x", result=run, gpu=gpu) == []
    lagging = replace(run, load={**run.load, "requests_per_s": 0.5 * run.load["requests_per_s"]})
    found = sweep.trace_violations(label="x", result=lagging, gpu=gpu)
    assert any("arriving in the window" in v for v in found)
    assert any("Little's law" in v for v in found)


def test_a_slice_of_the_fusion_sweep_breaks_no_invariant() -> None:
    result = sweep.fusion_sweep(models=[get_model("llama-2-7b"), get_model("qwen3-30b-a3b")],
                                gpus=[load_gpu("H100"), load_gpu("MI300X")],
                                runtimes=["vllm", "sglang"], batches=[1, 32])
    assert result.predictions >= 16 * 2
    assert result.violations == ()


def test_it_flags_a_fusion_whose_kernels_run_faster_apart() -> None:
    """Llama-2-7B (32 KV heads) decoding 32 sequences on H100: the unfused attention took
    3-4 % off TPOT until its kernels read the cache as the fused one does."""
    deployment = Deployment(fusion=frozenset({"attention", "qkv", "gate_up"}))
    workload = Workload(batch=32, input_tokens=1024, output_tokens=128)
    fused = predict(model="llama-2-7b", gpu="H100", deployment=deployment, workload=workload)
    apart = predict(model="llama-2-7b", gpu="H100", workload=workload,
                    deployment=replace(deployment, fusion=frozenset({"qkv", "gate_up"})))
    assert apart.tpot_s > fused.tpot_s
    assert sweep.fusion_violations(label="x", fused=fused, without={"attention": apart}) == []
    found = sweep.fusion_violations(label="x", fused=apart, without={"attention": fused})
    assert any("without attention: tpot_s" in v for v in found)


def test_a_gpu_dominates_another_of_its_layout_only() -> None:
    h200, h100 = load_gpu("H200"), load_gpu("H100")
    assert sweep.dominates(h200, h100) and not sweep.dominates(h100, h200)
    assert not sweep.dominates(h100, h100)
    # more of everything, but a PCIe card's collectives run on other (measured) links
    assert not sweep.dominates(h100, load_gpu("H100-PCIe"))
    assert not sweep.dominates(load_gpu("A40"), load_gpu("A10"))


def test_a_slice_of_the_gpu_sweep_breaks_no_invariant() -> None:
    result = sweep.gpu_sweep(models=[get_model("llama-3.1-8b"), get_model("qwen3-30b-a3b")],
                             gpus=[load_gpu(n) for n in ("H200", "H100", "A100-80GB",
                                                         "A100-40GB")],
                             runtimes=["vllm"], batches=[1, 64])
    assert result.predictions > 40
    assert result.violations == ()


def test_it_flags_a_gpu_slower_than_one_it_dominates() -> None:
    workload = Workload(batch=8, input_tokens=1024, output_tokens=128)
    h200, h100 = (predict(model="llama-3.1-8b", gpu=g, deployment=Deployment(),
                          workload=workload) for g in ("H200", "H100"))
    assert sweep.gpu_violations(label="x", better=h200, worse=h100) == []
    assert any("tpot_s" in v for v in sweep.gpu_violations(label="x", better=h100, worse=h200))
    fewer = replace(h200, running_batch=4.0)
    assert any("holds 4" in v for v in sweep.gpu_violations(label="x", better=fewer, worse=h100))
