"""LLM-Inference-Bench coverage: one framework -> runtime reading shared by validate and
calibrate, the bench's GPUs in the database, refusals that say why, and dataset labels
that say whether the rows were fitted."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from energylens.calibration.fit_runtime import bench_rows
from energylens.hardware import load_gpu
from energylens.measurements.formats import bench_gpu
from energylens.measurements.inference_bench import (
    RUNTIMES,
    UnmodelledRow,
    bench_setup,
)
from energylens.predict import predict
from energylens.runtime import runtime_names
from energylens.validation.accuracy import _bench_label
from energylens.validation.predictors import validate
from energylens.workloads.workload import Workload

BENCH = Path(__file__).resolve().parents[1] / "data" / "measurements" / "llm-inference-bench"


def _rows() -> list[dict[str, str]]:
    with (BENCH / "All_results.csv").open() as f:
        return list(csv.DictReader(f))


def test_every_framework_maps_to_a_runtime_and_an_unknown_one_says_why_not() -> None:
    assert set(RUNTIMES.values()) <= set(runtime_names())
    frameworks = {r["Framework"] for r in _rows()}
    assert frameworks == set(RUNTIMES)
    with pytest.raises(UnmodelledRow, match="framework MLC-LLM has no runtime profile"):
        bench_setup({"Framework": "MLC-LLM", "Num of Hardware": 1,
                     "Input Output Length": 128, "Batch Size": 1})


def test_llama_cpp_rows_are_one_sequence_in_prompt_passes_the_others_a_tp_batch() -> None:
    row = {"Num of Hardware": 4, "Input Output Length": 1024, "Batch Size": 64}
    llama = bench_setup({**row, "Framework": "llama.cpp"})
    assert (llama.sequences, llama.prompt_passes, llama.deployment.pp, llama.deployment.tp) == \
        (1, 16, 4, 1)
    trt = bench_setup({**row, "Framework": "TensorRT-LLM"})
    assert (trt.runtime, trt.sequences, trt.prompt_passes, trt.deployment.tp) == \
        ("trtllm", 64, 1, 4)


def test_the_bench_tensorrt_llm_rows_ran_a_release_before_the_overlap_scheduler() -> None:
    """The bench's TensorRT-LLM (2024, TensorRT engines) is read as a 0.x release, before
    the profile's overlap_scheduler_since: its rows keep the overheads they are fitted to."""
    from energylens.runtime import get_runtime
    from energylens.runtime.profile import release_key

    trt = bench_setup({"Num of Hardware": 1, "Input Output Length": 128, "Batch Size": 8,
                       "Framework": "TensorRT-LLM"})
    since = get_runtime("trtllm").overlap_scheduler_since
    assert trt.deployment.runtime_version is not None and since is not None
    assert release_key(trt.deployment.runtime_version) < release_key(since)


@pytest.mark.parametrize(("hardware", "name"), [
    ("Nvidia GH200 GPU", "GH200"), ("AMD MI250 GPU", "MI250"), ("Intel PVC GPU", "Max-1550"),
    ("Intel Max 1550", "Max-1550"), ("Habana Gaudi2", "Gaudi2"), ("SambaNova SN40L", "SN40L"),
    ("Nvidia A100 GPU", "A100-40GB-SXM")])
def test_the_bench_gpu_names_resolve(hardware: str, name: str) -> None:
    gpu = load_gpu(bench_gpu(hardware))
    assert gpu.name == name
    assert gpu.borrows_from is not None  # every bench GPU borrows from a measured relative


def test_the_bench_a100_rows_run_out_of_kv_cache_where_a_40_gb_card_does() -> None:
    """Llama-2-7B on one bench A100, 16 sequences of 2,048 + 2,048 tokens: 16 x 4,096 x
    512 KiB = 34 GB of KV cache does not fit beside 13.5 GB of weights on a 40 GB card
    (it would on an 80 GB one), so the batch runs in waves, as the measured row says:
    3.8x the time of the same batch at half the length, where about 2x is expected."""
    rows, _ = bench_rows([BENCH / "All_results.csv"])
    trt = {(r.model, r.deployment.tp, r.sequences, r.tokens): r
           for r in rows[("trtllm", "A100-40GB-SXM")]}
    row = trt[("meta-llama/Llama-2-7b-hf", 1, 16, 2048)]
    shorter = trt[("meta-llama/Llama-2-7b-hf", 1, 16, 1024)]
    assert row.latency_s > 3 * shorter.latency_s  # the measured cliff
    run = predict(model=row.model, gpu=row.gpu, deployment=row.deployment,
                  workload=Workload(kind="batch", batch=16, input_tokens=2048,
                                    output_tokens=2048))
    assert run.feasible and run.running_batch < 16


def test_mii_gives_its_kv_cache_what_the_weights_leave_but_a_reserve() -> None:
    """DeepSpeed-MII's Llama-2-70B on four 40 GB A100s: 34.5 GB of weights per GPU leave
    42.95 - 34.5 - 3 (reserve) = about 5.3 GB, 82 KB a token (80 layers x 2 x 2 KV heads x
    128 x 2 B), about 65,000 tokens: 32 sequences of 512 + 512 tokens fit (the bench ran
    them at 2.1x the time of 256 + 256, as a batch that fits), 64 of 1,024 + 1,024 do not
    (measured 2.1x the 32-sequence batch). Under a 0.9 share of the board (the earlier
    reading) 2.3 GB were left and the 32 sequences ran in waves."""
    setup = bench_setup({"Framework": "Deepspeed-MII", "Num of Hardware": 4,
                         "Input Output Length": 512, "Batch Size": 32})

    def running(batch: int, tokens: int) -> float:
        return predict(model="meta-llama/Llama-2-70b-hf", gpu="A100-40GB-SXM",
                       deployment=setup.deployment,
                       workload=Workload(kind="batch", batch=batch, input_tokens=tokens,
                                         output_tokens=tokens)).running_batch

    assert running(32, 512) == 32
    assert running(64, 1024) < 64


def test_gh200_is_the_h100_die_with_96_gb_at_4_tb_s() -> None:
    gh200, h100 = load_gpu("GH200"), load_gpu("H100-SXM")
    # 96 GB read as GiB, as nvidia-smi reports H100's 80 GB (docs/gpus.md)
    assert gh200.hbm_capacity_bytes == 96 * 2**30 and gh200.hbm_bandwidth_bytes_per_s == 4.0e12
    assert gh200.dense_flops_per_s == h100.dense_flops_per_s and gh200.sm_count == 132


def test_an_mi250_package_is_two_gpus() -> None:
    """The bench counts MI250 packages; ROCm shows each of a package's two dies as a GPU
    (the GPU file describes one die: half the package's 3.28 TB/s and 128 GB, read as GiB)."""
    gcd = load_gpu("MI250")
    assert gcd.hbm_bandwidth_bytes_per_s == pytest.approx(3.2768e12 / 2)
    assert gcd.hbm_capacity_bytes == pytest.approx(128 * 2**30 / 2)
    row = {"Hardware": "AMD MI250 GPU", "Num of Hardware": 2, "Input Output Length": 128,
           "Batch Size": 16}
    vllm, llama = (bench_setup({**row, "Framework": f}) for f in ("vLLM", "llama.cpp"))
    assert (vllm.deployment.tp, vllm.deployment.num_gpus) == (4, 4)
    assert (llama.deployment.pp, llama.deployment.num_gpus) == (4, 4)
    other = bench_setup({**row, "Hardware": "AMD MI300X GPU", "Framework": "vLLM"})
    assert other.deployment.tp == 2  # a single-die GPU counts as itself
    # The rows agree: vLLM decodes Llama-2-7B on one package faster than one die could read
    # its 13.5 GB of weights once per step.
    one = next(r for r in _rows() if r["Hardware"] == "AMD MI250 GPU" and r["Framework"] == "vLLM"
               and r["Model"] == "meta-llama/Llama-2-7b-hf" and r["Num of Hardware"] == "1"
               and r["Batch Size"] == "1" and r["Input Output Length"] == "1024")
    per_step_s = float(one["Latency"]) / (2 * 1024)
    assert per_step_s < 13.5e9 / gcd.hbm_bandwidth_bytes_per_s


def _sample(tmp_path: Path) -> Path:
    """Two rows of each (framework, hardware): the first and the largest batch."""
    rows = _rows()
    keep: list[dict[str, str]] = []
    for key in sorted({(r["Framework"], r["Hardware"]) for r in rows}):
        mine = [r for r in rows if (r["Framework"], r["Hardware"]) == key
                and r["Model"] in ("meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-8B",
                                   "mistralai/Mistral-7B-v0.1")]
        keep += mine[:1] + sorted(mine, key=lambda r: -int(r["Batch Size"]))[:1]
    path = tmp_path / "sample.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(keep)
    return path


def test_every_row_is_predicted(tmp_path: Path) -> None:
    report = validate(format="llm-inference-bench", path=_sample(tmp_path))
    assert len(report.rows) > 30
    for row in report.rows:
        assert row.error is None, (row.input, row.error)
        assert row.predicted["latency_s"] > 0


def test_calibrate_reads_the_rows_as_validate_does(tmp_path: Path) -> None:
    groups, skipped = bench_rows([_sample(tmp_path)])
    assert {runtime for runtime, _ in groups} == set(RUNTIMES.values())
    assert {gpu for _, gpu in groups} >= {"GH200", "MI250", "Max-1550"}
    assert not skipped  # every framework has a profile, every GPU a file
    assert {gpu for runtime, gpu in groups if runtime == "deepspeed-habana"} == {"Gaudi2"}


def test_rows_fitted_on_themselves_are_labelled_in_sample() -> None:
    fit = "llm-inference-bench/trtllm/H100-SXM"
    doc = {"runtimes": {"trtllm": {"H100-SXM": {"step_overhead_s": {"value": 1e-3, "fit": fit}}},
                        "vllm": {"H100-SXM": {"step_overhead_s": {"value": 1e-3,
                                                                  "fit": "mlenergy/H100-SXM"}}}},
           "fits": {fit: {"leave_one_model_out": {"latency_s": {"mape": 0.148}}}}}
    label = _bench_label(hardware="Nvidia H100 GPU", framework="TensorRT-LLM", doc=doc)
    assert label.startswith("in-sample: step_overhead_s") and "14.8 %" in label
    assert _bench_label(hardware="Nvidia H100 GPU", framework="vLLM", doc=doc) == "never fitted"
    assert _bench_label(hardware="Nvidia H100 GPU", framework="MLC-LLM", doc=doc) == \
        "no runtime profile"


def test_the_bench_a100_label_reads_the_fit_on_the_card_it_ran_on() -> None:
    fit = "llm-inference-bench/trtllm/A100-40GB-SXM"
    doc = {"runtimes": {"trtllm": {"A100-40GB-SXM": {"step_overhead_s": {"value": 1e-3,
                                                                          "fit": fit}}}}}
    assert _bench_label(hardware="Nvidia A100 GPU", framework="TensorRT-LLM",
                        doc=doc).startswith("in-sample: step_overhead_s")
