"""Fitting serving-runtime constants (energylens.calibration.fit_runtime) on small inputs:
kernel scales from synthetic AIConfigurator-shaped tables with a known ratio, overheads
and effective scales recovered from rows the model itself generated, priors, and the
``energylens calibrate`` hook."""

from __future__ import annotations

import csv
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from energylens.calibration.file import default_calibration, parse_calibration
from energylens.calibration.fit_runtime import (
    BenchRow,
    RuntimeFits,
    _priced,
    aic_tables,
    bench_rows,
    fill_priors,
    fit_aic_scales,
    fit_bench,
)
from energylens.calibration.run import CalibrationData, calibrate, to_yaml
from energylens.cost.constants import Calibration, RuntimeConstants
from energylens.runtime import get_runtime, runtime_names

ROOT = Path(__file__).resolve().parents[1]
PHI2 = ROOT / "data" / "measurements" / "vidur" / "compute" / "h100" / "microsoft" / "phi-2" / "mlp.csv"
HEADER = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length",
          "Batch Size", "Latency", "Throughput"]


def _write_tables(root: Path, *, ratios: dict[str, float]) -> list[Path]:
    """h100_sxm tables of both engines; trtllm's time = vLLM's / ratio in each regime."""
    rng = np.random.default_rng(0)
    out = []
    gemm = pd.DataFrame([{"gemm_dtype": "bfloat16", "m": m, "n": n, "k": k}
                         for m, n, k in itertools.product([1, 4, 8, 16, 2048, 4096, 8192],
                                                          [4096, 8192, 16384], [4096, 8192])])
    gemm["latency"] = rng.uniform(0.01, 1.0, len(gemm))
    big = gemm.m >= 1024
    own = gemm.copy()
    own["latency"] = gemm.latency / np.where(big, ratios["gemm_efficiency_scale"],
                                             ratios["memory_efficiency_scale"])
    attention_keys = {"num_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                      "window_size": 0, "kv_cache_dtype": "bfloat16", "attn_dtype": "bfloat16"}
    context = pd.DataFrame([{**attention_keys, "batch_size": b, "isl": s, "step": 0}
                            for b, s in itertools.product([1, 4, 16], [1024, 2048, 4096, 8192])])
    # decode attention of grouped query heads (32 / 8) and of one per KV head (32 / 32)
    generation = pd.DataFrame([{**attention_keys, "num_key_value_heads": kv, "batch_size": b,
                                "isl": 1, "step": s}
                               for kv, b, s in itertools.product([8, 32], [8, 16, 64],
                                                                 [2047, 4095, 8191])])
    generation["latency"] = rng.uniform(0.01, 1.0, len(generation))
    mha = generation.num_heads == generation.num_key_value_heads
    own_generation = generation.assign(latency=generation.latency / np.where(
        mha, ratios["mha_kv_bandwidth_scale"], ratios["kv_bandwidth_scale"]))
    tables = {("gemm", "gemm_perf.parquet"): (gemm, own, None),
              ("attention", "context_attention_perf.parquet"): (context, None,
                                                                "attention_efficiency_scale"),
              ("attention", "generation_attention_perf.parquet"): (generation, own_generation,
                                                                   None)}
    for (folder, name), (ref, mine, scale) in tables.items():
        if mine is None:
            ref = ref.assign(latency=rng.uniform(0.01, 1.0, len(ref)))
            mine = ref.assign(latency=ref.latency / ratios[str(scale)])
        for engine, table, version in (("vllm", ref, "0.24.0"), ("trtllm", mine, "1.3.0")):
            path = root / "h100_sxm" / folder / engine / version / name
            path.parent.mkdir(parents=True, exist_ok=True)
            table.to_parquet(path, index=False)
            out.append(path)
    return sorted(out)


RATIOS = {"gemm_efficiency_scale": 0.8, "memory_efficiency_scale": 0.9,
          "attention_efficiency_scale": 0.7, "kv_bandwidth_scale": 1.1,
          "mha_kv_bandwidth_scale": 1.3}


def test_kernel_scales_are_the_median_time_ratio_on_shared_shapes(tmp_path: Path) -> None:
    files = _write_tables(tmp_path, ratios=RATIOS)
    assert aic_tables(tmp_path) == files
    fits = RuntimeFits()
    fit_aic_scales(files=files, fits=fits)
    assert set(fits.values) == {"trtllm/H100-SXM"}  # the reference engine gets nothing
    for name, ratio in RATIOS.items():
        assert fits.values["trtllm/H100-SXM"][name] == pytest.approx(ratio, rel=1e-9)
    entry = fits.provenance["runtimes/trtllm/H100-SXM"]["gemm_efficiency_scale"]
    assert entry["kind"] == "fitted" and entry["fit"] == "aiconfigurator-kernels/trtllm/H100-SXM"
    assert fits.fits[entry["fit"]]["rms_log_residual"] == pytest.approx(0.0, abs=1e-9)


def _bench_csv(path: Path, rows: list[tuple[BenchRow, float]], framework: str,
               hardware: str = "Nvidia H100 GPU") -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        for row, latency in rows:
            batch = row.sequences if framework != "llama.cpp" else row.tokens // row.prompt_passes
            gpus = row.deployment.tp * row.deployment.pp
            writer.writerow([hardware, gpus, framework, row.model, row.tokens, batch,
                             latency, 2 * row.tokens * row.sequences / latency])
    return path


def _generated(tmp_path: Path, *, framework: str, runtime: str, truth: Calibration,
               grid: list[tuple[str, int, int, int]],
               hardware: tuple[str, str] = ("Nvidia H100 GPU", "H100-SXM")) -> Path:
    """LLM-Inference-Bench rows whose latencies the model computes under ``truth``, on
    ``hardware`` (the bench's name, the GPU database's)."""
    with (tmp_path / "draft.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        for model, gpus, batch, tokens in grid:
            writer.writerow([hardware[0], gpus, framework, model, tokens, batch, 1.0, 1.0])
    rows = bench_rows([tmp_path / "draft.csv"])[0][(runtime, hardware[1])]
    priced = [(r, _priced(r, truth, counts=False)) for r in rows]
    return _bench_csv(tmp_path / "bench.csv", [(r, p[0] + p[1]) for r, p in priced if p],
                      framework, hardware[0])


def _refit(tmp_path: Path, *, framework: str, runtime: str, truth: Calibration,
           grid: list[tuple[str, int, int, int]]) -> RuntimeFits:
    """The bench fit on rows the model generated under ``truth``, from the shipped base."""
    path = _generated(tmp_path, framework=framework, runtime=runtime, truth=truth, grid=grid)
    fits = RuntimeFits()
    fit_bench(files=[path], base=default_calibration(), fits=fits)
    return fits


def test_overheads_are_recovered_from_rows_the_model_generated(tmp_path: Path) -> None:
    truth = default_calibration().with_runtime(runtime="trtllm", gpu="H100-SXM",
                                               step_overhead_s=2.0e-3,
                                               per_sequence_overhead_s=5.0e-5)
    grid = [(m, g, b, t) for m in ("llama-2-7b", "llama-3-8b") for g in (1, 2)
            for b in (1, 16, 64) for t in (128, 512)]
    fits = _refit(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                  grid=grid)
    values = fits.values["trtllm/H100-SXM"]
    assert values["step_overhead_s"] == pytest.approx(2.0e-3, rel=0.02)
    assert values["per_sequence_overhead_s"] == pytest.approx(5.0e-5, rel=0.05)
    report = fits.fits["llm-inference-bench/trtllm/H100-SXM"]
    assert report["in_sample"]["latency_s"]["mape"] < 0.01
    assert report["leave_one_model_out"]["latency_s"]["mape"] < 0.02


def test_a_gpu_without_kernel_tables_is_fitted_at_the_kernel_scales_its_relative_lends(
        tmp_path: Path) -> None:
    """GH200 has no AIConfigurator tables: its TensorRT-LLM kernels are predicted at H100's
    fitted scales (lent after the fits). Rows the model generated at those scales give the
    overheads back only if the bench fit prices them at the same scales, not at 1."""
    lent = {"kv_bandwidth_scale": 0.6, "memory_efficiency_scale": 0.7,
            "gemm_efficiency_scale": 0.8}
    base = default_calibration().with_runtime(runtime="trtllm", gpu="GH200",
                                              **{name: 1.0 for name in lent})
    truth = base.with_runtime(runtime="trtllm", gpu="GH200", step_overhead_s=1.0e-3,
                              per_sequence_overhead_s=4.0e-5, **lent)
    grid = [(m, 1, b, t) for m in ("llama-2-7b", "llama-3-8b") for b in (1, 16, 64)
            for t in (128, 512)]
    path = _generated(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                      grid=grid, hardware=("Nvidia GH200 GPU", "GH200"))
    fits = RuntimeFits()
    fits.values["trtllm/H100-SXM"] = dict(lent)  # as fit_aic_scales leaves them
    fit_bench(files=[path], base=base, fits=fits)
    values = fits.values["trtllm/GH200"]
    assert values["step_overhead_s"] == pytest.approx(1.0e-3, rel=0.05)
    assert values["per_sequence_overhead_s"] == pytest.approx(4.0e-5, rel=0.05)
    assert not set(lent) & set(values)  # the scales stay H100's, lent, not fitted here


def test_the_all_reduce_arrival_time_is_recovered_where_rows_span_one_and_several_gpus(
        tmp_path: Path) -> None:
    """Rows the model generated with 15 us added to every all-reduce of a real step give it
    back beside the two overheads; rows on one GPU only make no all-reduce and leave it
    out (not fitted, rather than fitted to zero)."""
    truth = default_calibration().with_runtime(runtime="trtllm", gpu="H100-SXM",
                                               step_overhead_s=1.5e-3,
                                               per_sequence_overhead_s=3.0e-5,
                                               collective_sync_s=1.5e-5)
    grid = [(m, g, b, t) for m in ("llama-2-7b", "llama-3-8b") for g in (1, 2, 4)
            for b in (1, 16, 64) for t in (128, 512)]
    fits = _refit(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                  grid=grid)
    values = fits.values["trtllm/H100-SXM"]
    assert values["collective_sync_s"] == pytest.approx(1.5e-5, rel=0.05)
    assert values["step_overhead_s"] == pytest.approx(1.5e-3, rel=0.05)
    assert values["per_sequence_overhead_s"] == pytest.approx(3.0e-5, rel=0.05)
    one = _refit(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                 grid=[row for row in grid if row[1] == 1])
    assert "collective_sync_s" not in one.values["trtllm/H100-SXM"]


def test_rows_that_all_reduce_everywhere_hold_the_arrival_time_at_zero(tmp_path: Path) -> None:
    """Rows on two and four GPUs only (MI250's: two dies per package) cannot tell the
    all-reduce arrival time from the step overhead: the fit holds it at 0 and records that
    0, so that no relative's value is added after the fit, and the fitted constants
    reproduce the rows (generated with 15 us per all-reduce) as the fit's report says."""
    truth = default_calibration().with_runtime(runtime="trtllm", gpu="H100-SXM",
                                               step_overhead_s=1.5e-3,
                                               per_sequence_overhead_s=3.0e-5,
                                               collective_sync_s=1.5e-5)
    grid = [(m, g, b, t) for m in ("llama-2-7b", "llama-3-8b") for g in (2, 4)
            for b in (1, 16, 64) for t in (128, 512)]
    fits = _refit(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                  grid=grid)
    values = fits.values["trtllm/H100-SXM"]
    assert values["collective_sync_s"] == 0.0
    assert values["step_overhead_s"] > 1.5e-3  # it carries the arrival times
    report = fits.fits["llm-inference-bench/trtllm/H100-SXM"]
    assert any("collective_sync_s held at 0" in note for note in report["notes"])
    assert report["in_sample"]["latency_s"]["mape"] < 0.03


def test_llama_cpp_memory_scale_and_step_are_recovered(tmp_path: Path) -> None:
    truth = default_calibration().with_runtime(runtime="llama.cpp", gpu="H100-SXM",
                                               step_overhead_s=1.5e-3, memory_efficiency_scale=0.6,
                                               kv_bandwidth_scale=0.6)
    # the 7B model on 1 and 2 GPUs too: its hand-offs are identified apart from the
    # 70B model's decode
    grid = [(m, g, b, t) for m, g in (("llama-2-7b", 1), ("llama-2-7b", 2), ("llama-2-70b", 4))
            for b in (16, 64) for t in (128, 512)]
    fits = _refit(tmp_path, framework="llama.cpp", runtime="llama.cpp", truth=truth,
                  grid=grid)
    values = fits.values["llama.cpp/H100-SXM"]
    assert values["memory_efficiency_scale"] == pytest.approx(0.6, rel=0.05)
    assert values["step_overhead_s"] == pytest.approx(1.5e-3, rel=0.15)
    assert "per_sequence_overhead_s" not in values  # one sequence per row: not identified
    assert fits.fits["llm-inference-bench/llama.cpp/H100-SXM"]["in_sample"]["latency_s"][
        "mape"] < 0.03


def test_llama_cpps_stage_handoff_is_recovered_from_rows_on_one_to_four_gpus(
        tmp_path: Path) -> None:
    """llama.cpp splits the layers over the GPUs: a row on pp GPUs hands each decode step
    through pp stages and pipelines its prompt passes (``-b`` 1: one per prompt token).
    Rows the model generated with 2 ms per hand-off give it back, beside the step time and
    memory scale; a fit on one GPU's rows alone leaves it out (nothing identifies it)."""
    truth = default_calibration().with_runtime(runtime="llama.cpp", gpu="H100-SXM",
                                               step_overhead_s=1.0e-3, stage_handoff_s=2.0e-3,
                                               memory_efficiency_scale=0.6,
                                               kv_bandwidth_scale=0.6)
    # a 7B and a 70B model (the step time and the memory scale separate by model size;
    # the 70B one fits on 2 and 4 GPUs only)
    grid = [(m, g, b, t) for m in ("llama-2-7b", "llama-2-70b") for g in (1, 2, 4)
            for b in (1, 64) for t in (128, 512)]
    fits = _refit(tmp_path, framework="llama.cpp", runtime="llama.cpp", truth=truth,
                  grid=grid)
    values = fits.values["llama.cpp/H100-SXM"]
    assert values["stage_handoff_s"] == pytest.approx(2.0e-3, rel=0.05)
    assert values["step_overhead_s"] == pytest.approx(1.0e-3, rel=0.15)
    assert values["memory_efficiency_scale"] == pytest.approx(0.6, rel=0.05)
    fits = _refit(tmp_path, framework="llama.cpp", runtime="llama.cpp", truth=truth,
                  grid=[(m, 1, b, t) for m in ("llama-2-7b", "llama-3-8b")
                        for b in (1, 16, 64) for t in (128, 512)])
    assert "stage_handoff_s" not in fits.values["llama.cpp/H100-SXM"]


def test_vllm_bench_overheads_go_to_its_legacy_sections_which_only_early_releases_read(
        tmp_path: Path) -> None:
    """vLLM's bench rows (its 2024 V0 engine, read as release 0.6) fit the step and
    per-sequence overheads of ``vllm@legacy``: recovered from rows the model generated with
    known ones, while the ``vllm`` section (ML.ENERGY's vLLM 0.11.1) stays as it was and a
    release from 0.8.0 on is priced as before."""
    shipped = default_calibration()  # without the legacy sections it may hold already
    base = replace(shipped, runtimes={k: v for k, v in shipped.runtimes.items()
                                      if "@legacy/" not in k})
    step, per_sequence = 2.5e-3, 6e-5
    truth = base.with_runtime(runtime="vllm@legacy", gpu="H100-SXM", step_overhead_s=step,
                              per_sequence_overhead_s=per_sequence)
    grid = [(m, 1, b, t) for m in ("llama-2-7b", "llama-3-8b")
            for b in (1, 16, 64) for t in (128, 512)]
    path = _generated(tmp_path, framework="vLLM", runtime="vllm", truth=truth, grid=grid)
    fits = RuntimeFits()
    fit_bench(files=[path], base=base, fits=fits)
    assert set(fits.values) == {"vllm@legacy/H100-SXM"}
    values = fits.values["vllm@legacy/H100-SXM"]
    assert values["step_overhead_s"] == pytest.approx(step, rel=0.02)
    assert values["per_sequence_overhead_s"] == pytest.approx(per_sequence, rel=0.02)
    entry = fits.provenance["runtimes/vllm@legacy/H100-SXM"]["step_overhead_s"]
    assert entry["fit"] == "llm-inference-bench/vllm/H100-SXM" and "0.8.0" in entry["note"]
    profile = get_runtime("vllm")
    now = base.runtime(runtime="vllm", gpu="H100-SXM")
    for version, expected in (("0.6", (step, per_sequence)), ("0.7.3", (step, per_sequence)),
                              ("0.8.0", (now.step_overhead_s, now.per_sequence_overhead_s)),
                              (None, (now.step_overhead_s, now.per_sequence_overhead_s))):
        priced = profile.calibration_for(calibration=truth, gpu="H100-SXM",
                                         version=version).runtime(runtime="vllm", gpu="H100-SXM")
        assert (priced.step_overhead_s, priced.per_sequence_overhead_s) == expected, version
    # a GPU without a legacy section keeps the runtime's own overheads in every release
    other = profile.calibration_for(calibration=truth, gpu="B200", version="0.6")
    assert other.runtime(runtime="vllm", gpu="B200") == base.runtime(runtime="vllm", gpu="B200")


def test_vllm_v0s_unsplit_attention_share_is_recovered_and_none_where_rows_show_none(
        tmp_path: Path) -> None:
    """Rows the model generated with V0's v1 paged attention at 0.3 of HBM peak (MI300X,
    one GPU, 16-64 sequences: 32-64 of them exceed 512 sequences x query heads) give back
    0.3 from the grid and the overheads; rows generated without it keep none."""
    shipped = default_calibration()
    base = replace(shipped, runtimes={k: v for k, v in shipped.runtimes.items()
                                      if "@legacy/" not in k})
    grid = [(m, 1, b, t) for m in ("llama-2-7b", "llama-3-8b")
            for b in (1, 16, 32, 64) for t in (256, 1024)]
    for share in (0.3, 0.0):
        truth = base.with_runtime(runtime="vllm@legacy", gpu="MI300X", step_overhead_s=4e-3,
                                  per_sequence_overhead_s=1e-4, v1_kv_bandwidth_share=share)
        path = _generated(tmp_path, framework="vLLM", runtime="vllm", truth=truth, grid=grid,
                          hardware=("AMD MI300X GPU", "MI300X"))
        fits = RuntimeFits()
        fit_bench(files=[path], base=base, fits=fits)
        values = fits.values["vllm@legacy/MI300X"]
        # none is recorded too (the rows tell it), so that no relative's share fills it in
        assert values["v1_kv_bandwidth_share"] == share
        assert values["step_overhead_s"] == pytest.approx(4e-3, rel=0.05)
        assert values["per_sequence_overhead_s"] == pytest.approx(1e-4, rel=0.05)
    # rows that never pass the switch (at most 16 sequences x 32 heads) cannot tell a share:
    # none recorded, a relative's may be borrowed
    path = _generated(tmp_path, framework="vLLM", runtime="vllm", truth=truth,
                      grid=[row for row in grid if row[2] <= 16],
                      hardware=("AMD MI300X GPU", "MI300X"))
    fits = RuntimeFits()
    fit_bench(files=[path], base=base, fits=fits)
    assert "v1_kv_bandwidth_share" not in fits.values["vllm@legacy/MI300X"]


def test_an_unsplit_decode_kernel_is_priced_only_above_its_switch_and_only_in_v0() -> None:
    """vLLM V0 switches to its v1 kernel above 512 sequences x query heads per GPU:
    Llama-3-8B (32 query heads) on one GPU at 16 sequences runs v2 and is priced as
    before; at 32 and 64, v1 at its share is slower; release 0.8.0 on never runs it."""
    from energylens.deployment import Deployment, Workload
    from energylens.predict import predict

    cal = default_calibration().with_runtime(runtime="vllm@legacy", gpu="MI300X",
                                             v1_kv_bandwidth_share=0.0)  # none priced
    v1 = cal.with_runtime(runtime="vllm@legacy", gpu="MI300X", v1_kv_bandwidth_share=0.28)

    def tpot(calibration, batch: int, version: str) -> float:
        return predict(model="llama-3-8b", gpu="MI300X",
                       deployment=Deployment(runtime="vllm", runtime_version=version),
                       workload=Workload(kind="batch", batch=batch, input_tokens=1024,
                                         output_tokens=1024),
                       calibration=calibration).tpot_s

    assert tpot(v1, 16, "0.6") == pytest.approx(tpot(cal, 16, "0.6"))
    assert tpot(v1, 32, "0.6") > 1.5 * tpot(cal, 32, "0.6")
    assert tpot(v1, 64, "0.6") > tpot(v1, 32, "0.6")
    assert tpot(v1, 64, "0.8.0") == pytest.approx(tpot(cal, 64, "0.8.0"))


def test_v0_on_nvidia_runs_its_paged_attention_only_for_a_sliding_window_model() -> None:
    """On NVIDIA, V0 decodes with FlashAttention (no v1 switch) unless the model has a
    sliding window, whose backend falls back to the paged-attention kernel: an H100 v1
    share slows Mistral-7B-v0.1 (4,096-token window) at 32 sequences, not Llama-3-8B of
    the same KV size; on ROCm both switch."""
    from energylens.deployment import Deployment, Workload
    from energylens.predict import predict

    vllm = get_runtime("vllm")
    assert not vllm.decodes_paged(gpu_vendor="nvidia", sliding_window=False)
    assert vllm.decodes_paged(gpu_vendor="nvidia", sliding_window=True)
    assert vllm.decodes_paged(gpu_vendor="amd", sliding_window=False)

    cal = default_calibration()
    for gpu in ("H100-SXM", "MI300X"):
        cal = cal.with_runtime(runtime="vllm@legacy", gpu=gpu, v1_kv_bandwidth_share=0.0)
    shared = cal
    for gpu in ("H100-SXM", "MI300X"):
        shared = shared.with_runtime(runtime="vllm@legacy", gpu=gpu, v1_kv_bandwidth_share=0.3)

    def tpot(calibration, model: str, gpu: str) -> float:
        return predict(model=model, gpu=gpu,
                       deployment=Deployment(runtime="vllm", runtime_version="0.6"),
                       workload=Workload(kind="batch", batch=32, input_tokens=1024,
                                         output_tokens=1024),
                       calibration=calibration).tpot_s

    assert tpot(shared, "llama-3-8b", "H100-SXM") == pytest.approx(
        tpot(cal, "llama-3-8b", "H100-SXM"))
    assert tpot(shared, "mistral-7b-v0.1", "H100-SXM") > 1.5 * tpot(cal, "mistral-7b-v0.1",
                                                                      "H100-SXM")
    for model in ("llama-3-8b", "mistral-7b-v0.1"):
        assert tpot(shared, model, "MI300X") > 1.5 * tpot(cal, model, "MI300X")


def test_priors_fill_what_nothing_identified_and_leave_vllm_alone() -> None:
    vllm = RuntimeConstants(step_overhead_s=1e-3)
    fitted = RuntimeConstants(step_overhead_s=7e-3)
    runtimes = {"vllm/H100-SXM": vllm, "trtllm/H100-SXM": fitted}
    prov = {"runtimes/vllm/H100-SXM": {"step_overhead_s": {"value": 1e-3, "kind": "fitted"}},
            "runtimes/trtllm/H100-SXM": {"step_overhead_s": {"value": 7e-3, "kind": "fitted"}}}
    fill_priors(runtimes=runtimes, prov=prov)
    assert runtimes["vllm/H100-SXM"] is vllm
    assert runtimes["trtllm/H100-SXM"].step_overhead_s == 7e-3  # fitted stays
    trt = get_runtime("trtllm")
    assert runtimes["trtllm/H100-SXM"].per_sequence_overhead_s == trt.prior_per_sequence_overhead_s
    # SGLang's priors are vLLM's on the same GPU (prior_overheads_from), not its own floats
    assert get_runtime("sglang").prior_overheads_from == "vllm"
    sglang = runtimes["sglang/H100-SXM"]
    assert (sglang.step_overhead_s, sglang.per_sequence_overhead_s) == (1e-3, 0.0)
    assert "vllm's on H100-SXM" in prov["runtimes/sglang/H100-SXM"]["step_overhead_s"]["note"]
    on_nvidia = {n for n in runtime_names() if "nvidia" in get_runtime(n).gpu_vendors}
    for name in on_nvidia - {"vllm"}:
        entry = prov[f"runtimes/{name}/H100-SXM"]["per_sequence_overhead_s"]
        assert entry["kind"] == "assumed" and f"runtimes/{name}.yaml" in entry["note"]
    # only vLLM's GPUs, and only runtimes that run on them (Habana's DeepSpeed does not)
    assert set(runtimes) == {f"{n}/H100-SXM" for n in on_nvidia}


def test_calibrate_runs_the_runtime_fits_and_writes_their_sections(tmp_path: Path) -> None:
    tables = _write_tables(tmp_path / "kernels", ratios=RATIOS)
    truth = default_calibration().with_runtime(runtime="trtllm", gpu="H100-SXM",
                                               step_overhead_s=2.0e-3)
    bench = _generated(tmp_path, framework="TensorRT-LLM", runtime="trtllm", truth=truth,
                       grid=[("llama-2-7b", 1, b, t) for b in (1, 16, 64) for t in (128, 512)]
                       + [("llama-3-8b", 2, b, 256) for b in (1, 32)])
    outcome = calibrate(data=CalibrationData(vidur_mlp=[PHI2], runtime_kernels=tables,
                                             llm_inference_bench=[bench]), leave_out=False)
    doc = yaml.safe_load(to_yaml(outcome))
    section = doc["runtimes"]["trtllm"]["H100-SXM"]
    assert section["gemm_efficiency_scale"]["kind"] == "fitted"
    assert section["gemm_efficiency_scale"]["value"] == pytest.approx(0.8)
    assert section["step_overhead_s"]["kind"] == "fitted"
    assert section["step_overhead_s"]["fit"] in doc["fits"]
    assert "vllm" not in doc["runtimes"]  # no ML.ENERGY rows here: vLLM untouched
    parse_calibration(data=doc, source="test")
