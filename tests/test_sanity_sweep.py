"""The physical-invariant sweep (benchmarks/sanity_sweep.py) finds what it is for and
passes the model on a small slice (the whole sweep, 118,200 predictions, is a benchmark:
docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import replace

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
