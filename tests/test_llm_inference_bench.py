"""LLM-Inference-Bench rows: read in the units the file uses, predicted as static batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.errors import MeasurementError
from energylens.measurements.formats import load_measurements
from energylens.validation.predictors import validate

BENCH = Path(__file__).resolve().parents[1] / "data" / "measurements" / "llm-inference-bench"
POWER = BENCH / "Fig_16_a_b" / "power_results.csv"


def test_power_is_read_in_watts_from_milliwatts():
    """First data row of the published file: A100, Llama-2-7B, batch 1, 222,122 mW."""
    rows = load_measurements(format="llm-inference-bench", path=POWER).rows
    first = rows[0]
    assert first.input["Hardware"] == "Nvidia A100 GPU" and first.input["Batch Size"] == 1
    assert first.measured["avg_power_w"] == pytest.approx(222.1222711864407)
    assert all(60.0 < r.measured["avg_power_w"] < 1000.0 for r in rows)  # idle < board < TDP


def test_throughput_counts_input_and_output_tokens_of_the_whole_batch():
    """The reading the predictor relies on: throughput x latency = batch x (in + out)."""
    rows = load_measurements(format="llm-inference-bench", path=BENCH / "All_results.csv").rows
    vllm = [r for r in rows if r.input["Framework"] == "vLLM"]
    assert len(vllm) > 1000
    for r in vllm:
        tokens = r.input["Batch Size"] * 2 * r.input["Input Output Length"]
        product = r.measured["throughput_tokens_per_s"] * r.measured["latency_s"]
        assert product == pytest.approx(tokens, rel=0.01)


def test_every_power_row_is_predicted_under_its_framework_runtime():
    """vLLM, TensorRT-LLM and DeepSpeed-MII rows; batch 64 of 2,048 tokens, once refused as
    infeasible, runs in waves of what the KV space holds."""
    report = validate(format="llm-inference-bench", path=POWER)
    assert {r.input["Framework"] for r in report.rows} == {"vLLM", "TensorRT-LLM",
                                                            "Deepspeed-MII"}
    for r in report.rows:
        assert r.error is None, r.error
        tokens = r.input["Batch Size"] * 2 * r.input["Input Output Length"]
        assert r.predicted["throughput_tokens_per_s"] * r.predicted["latency_s"] == \
            pytest.approx(tokens)
        assert 0 < r.predicted["avg_power_w"] < 1000.0


def test_a_malformed_file_is_one_line(tmp_path):
    bad = tmp_path / "bench.csv"
    bad.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,"
                   "Latency,Throughput\nNvidia H100 GPU,one,vLLM,m,128,1,0.5,512\n")
    with pytest.raises(MeasurementError, match="Num of Hardware") as info:
        load_measurements(format="llm-inference-bench", path=bad)
    assert "\n" not in str(info.value)
