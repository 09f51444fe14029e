"""The physical screen of LLM-Inference-Bench rows (energylens/measurements/bench_screen.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_runtime import RuntimeFits, fit_bench
from energylens.measurements.bench_screen import SCREEN, decode_floor_s, impossible, row_floor_s
from energylens.validation.predictors import RowResult, metric_errors

ROW = {"Hardware": "Nvidia H100 GPU", "Num of Hardware": 1, "Framework": "vLLM",
       "Model": "meta-llama/Llama-2-7b-hf", "Input Output Length": 2048, "Batch Size": 1}


def test_floor_by_hand() -> None:
    # 14 GB of weights read 2,048 times at 3.35 TB/s: 2048 x 14e9 / 3.35e12 = 8.559 s.
    assert decode_floor_s(output_tokens=2048, weight_bytes_per_gpu=14e9,
                          hbm_bandwidth_bytes_per_s=3.35e12) == pytest.approx(8.5588, rel=1e-4)


def test_llama2_7b_on_h100_floor_is_seconds_not_tenths() -> None:
    floor = row_floor_s(ROW)
    assert floor is not None
    # Llama-2-7B: 6.74e9 parameters in BF16 = 13.5 GB; H100 SXM 3.35 TB/s; 2,048 passes:
    # about 8.2 s, and half of it on two GPUs.
    assert floor == pytest.approx(2048 * 6.74e9 * 2 / 3.35e12, rel=0.03)
    assert row_floor_s({**ROW, "Num of Hardware": 2}) == pytest.approx(floor / 2)
    assert impossible(ROW, latency_s=0.5 * floor) is not None
    assert impossible(ROW, latency_s=1.01 * floor) is None


def test_unknown_model_is_never_screened() -> None:
    assert impossible({**ROW, "Model": "nobody/no-such-model"}, latency_s=1e-9) is None


def test_screened_rows_leave_the_headline_and_are_reported_beside_it() -> None:
    rows = [RowResult(input={}, measured={"latency_s": 1.0}, predicted={"latency_s": 1.1}),
            RowResult(input={}, measured={"latency_s": 1.0}, predicted={"latency_s": 10.0},
                      screened=f"{SCREEN}: test")]
    summary = metric_errors(rows)
    assert summary["latency_s"].mape == pytest.approx(0.1)
    assert summary["latency_s"].n == 1
    assert summary[f"latency_s[{SCREEN}]"].mape == pytest.approx(9.0)
    assert summary[f"latency_s[with {SCREEN}]"].mape == pytest.approx(4.55)
    assert summary[f"latency_s[with {SCREEN}]"].n == 2


def test_fit_bench_leaves_impossible_rows_out(tmp_path: Path) -> None:
    path = tmp_path / "bench.csv"
    path.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,"
                    "Latency,Throughput\n"
                    "Nvidia H100 GPU,1,TensorRT-LLM,meta-llama/Llama-2-7b-hf,2048,1,0.05,81920\n"
                    "Nvidia H100 GPU,1,TensorRT-LLM,meta-llama/Llama-2-7b-hf,128,1,2.0,128\n")
    logged: list[str] = []
    fit_bench(files=[path], base=default_calibration(), fits=RuntimeFits(), log=logged.append)
    assert any(f"1 rows skipped ({SCREEN} on trtllm/H100-SXM" in line for line in logged)


def test_a_per_token_percentile_faster_than_reading_the_weights_is_screened() -> None:
    """A p90 or p99 ITL/TPOT is no shorter than the fastest per-token time, so one below
    reading Llama-3.1-70B's 141 GB of BF16 weights over 4 H100s (10.5 ms) is impossible;
    one above it is not screened."""
    from energylens.measurements.bench_screen import user_row_impossible
    from energylens.model.zoo import get_model

    config = get_model("llama-3.1-70b")
    for metric in ("itl_p90_s", "itl_p99_s", "tpot_p90_s", "tpot_p99_s"):
        def reason(seconds: float, metric: str = metric) -> str | None:
            return user_row_impossible(config=config, gpu="H100", num_gpus=4, weight_dtype=None,
                                       output_tokens=100, speculative_tokens=0,
                                       measured={metric: seconds})
        assert reason(1e-6) is not None and metric in (reason(1e-6) or "")
        assert reason(0.02) is None


def test_a_gguf_mix_is_screened_at_its_base_formats_bytes() -> None:
    """A K-quant mix (Q4_K_M: Q4_K, 144 bytes per 256 weights, with some tensors in Q6_K)
    is floored at its least format's bytes, where the screen had no bytes for the mix's
    name and raised (a k-shot validation of llama.cpp rows stopped with a traceback)."""
    from energylens.measurements.bench_screen import user_row_impossible
    from energylens.model import get_model, parameter_count

    model = get_model("llama-3.1-8b")
    _, active = parameter_count(model)
    floor = active * 144 / 256 / 1.008e12  # one read at the RTX 4090's 1,008 GB/s
    args = {"config": model, "gpu": "rtx-4090", "num_gpus": 1, "weight_dtype": "q4_k_m",
            "output_tokens": 128, "speculative_tokens": 0}
    assert user_row_impossible(**args, measured={"tpot_s": 0.99 * floor}) is not None
    assert user_row_impossible(**args, measured={"tpot_s": 1.01 * floor}) is None
