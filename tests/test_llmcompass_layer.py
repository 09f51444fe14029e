"""LLMCompass's GPT-3-175B layer ops (``llmcompass-layer``): the loader, the cost model's
price of each op against hand-computed bounds, and the CLI's one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.hardware import load_gpu
from energylens.measurements.formats import (
    LLMCOMPASS_LAYER_OPS,
    MeasurementError,
    load_measurements,
)
from energylens.validation.predictors import llmcompass_layer_prices, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements" / "llmcompass"
FILES = {phase: DATA / f"transformer_{phase}_A100.csv" for phase in ("prefill", "decode")}
# GPT-3-175B (Brown et al. 2020, Table 2.1) as LLMCompass ran it: batch 8, 2,048 tokens, TP 4
D_MODEL, HEADS, HEAD_DIM, FFN, BATCH, TOKENS, TP = 12288, 96, 128, 49152, 8, 2048, 4
A100_FP16_DENSE_FLOPS_PER_S = 312e12  # NVIDIA A100 datasheet, FP16 Tensor Core dense


@pytest.fixture(scope="module")
def prices() -> dict[str, dict]:
    gpu = load_gpu("A100-80GB-SXM")
    cal = default_calibration()
    return {phase: llmcompass_layer_prices(phase=phase, gpu=gpu, cal=cal)
            for phase in ("prefill", "decode")}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_loader_reads_twelve_ops_in_the_documented_order(phase: str) -> None:
    path = FILES[phase]
    values = [float(line) for line in path.read_text().splitlines() if line.strip()]
    result = load_measurements(format="llmcompass-layer", path=path)
    assert [r.input["op"] for r in result.rows] == list(LLMCOMPASS_LAYER_OPS)
    assert LLMCOMPASS_LAYER_OPS[:3] == ("qkv", "q_mul_k", "a_mul_v")
    assert LLMCOMPASS_LAYER_OPS[-2:] == ("allreduce_mha", "allreduce_ffn")
    assert [r.measured["time_s"] for r in result.rows] == values and len(values) == 12
    assert {r.input["phase"] for r in result.rows} == {phase}
    assert {r.context["gpu"] for r in result.rows} == {"A100-80GB-SXM"}


def test_decode_w1_reads_more_than_the_40gb_card_can_stream() -> None:
    """Why the file's A100 is the 80 GB card: W1's TP-4 shard in the measured time."""
    rows = load_measurements(format="llmcompass-layer", path=FILES["decode"]).rows
    w1 = next(r for r in rows if r.input["op"] == "w1").measured["time_s"]
    achieved = D_MODEL * (FFN // TP) * 2 / w1
    forty, eighty = (load_gpu(name).hbm_bandwidth_bytes_per_s
                     for name in ("A100-40GB-SXM", "A100-80GB-SXM"))
    assert forty < achieved < eighty


def test_a_file_without_a_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "transformer_decode_A100.csv"
    path.write_text("\n".join(["1e-4"] * 12))
    assert len(load_measurements(format="llmcompass-layer", path=path).rows) == 12


def test_decode_w1_is_no_faster_than_its_weights_over_hbm_peak(prices: dict) -> None:
    weight_bytes = D_MODEL * (FFN // TP) * 2  # fp16 shard of one TP rank
    w1 = prices["decode"]["w1"]
    assert w1.flops == 2 * BATCH * D_MODEL * (FFN // TP)
    assert w1.bytes >= weight_bytes
    assert w1.latency_s >= weight_bytes / load_gpu("A100-80GB-SXM").hbm_bandwidth_bytes_per_s


def test_prefill_qkv_is_no_faster_than_its_flops_over_tensor_peak(prices: dict) -> None:
    flops = 2 * BATCH * TOKENS * D_MODEL * (3 * D_MODEL // TP)
    qkv = prices["prefill"]["qkv"]
    assert qkv.flops == flops
    assert qkv.latency_s >= flops / A100_FP16_DENSE_FLOPS_PER_S


def test_prefill_attention_gemms_cover_the_full_square(prices: dict) -> None:
    """PyTorch eager computes Q·K^T and A·V over every query-key pair: no causal half."""
    flops = 2 * BATCH * (HEADS // TP) * TOKENS * TOKENS * HEAD_DIM
    assert prices["prefill"]["q_mul_k"].flops == flops
    assert prices["prefill"]["a_mul_v"].flops == flops
    assert prices["decode"]["q_mul_k"].flops == 2 * BATCH * (HEADS // TP) * TOKENS * HEAD_DIM


@pytest.mark.parametrize(("phase", "tokens"), [("prefill", TOKENS), ("decode", 1)])
def test_all_reduce_message_is_the_full_hidden_state(prices: dict, phase: str,
                                                     tokens: int) -> None:
    for op in ("allreduce_mha", "allreduce_ffn"):
        assert prices[phase][op].message_bytes == BATCH * tokens * D_MODEL * 2
    assert prices[phase]["allreduce_mha"].latency_s > 0


def test_every_row_is_predicted_and_prefill_is_slower_than_decode() -> None:
    reports = {phase: validate(format="llmcompass-layer", path=path)
               for phase, path in FILES.items()}
    for report in reports.values():
        assert len(report.rows) == 12 and all(r.error is None for r in report.rows)
    for pre, dec in zip(reports["prefill"].rows, reports["decode"].rows, strict=True):
        assert pre.predicted["time_s"] > dec.predicted["time_s"], pre.input["op"]


@pytest.mark.parametrize("text", ["1e-4\n" * 11, "1e-4\n" * 11 + "abc\n",
                                  "1e-4\n" * 11 + "1e-4,2e-4\n", "1e-4\n" * 11 + "17.4\n"])
def test_cli_on_a_malformed_file_is_one_line_exit_2(tmp_path: Path, capsys, text: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "transformer_prefill_A100.csv"
    path.write_text(text)
    assert main(["validate", "llmcompass-layer", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in captured.err


def test_phase_must_be_in_the_name(tmp_path: Path) -> None:
    path = tmp_path / "layer_A100.csv"
    path.write_text("1e-4\n" * 12)
    with pytest.raises(MeasurementError, match="cannot infer the phase"):
        load_measurements(format="llmcompass-layer", path=path)
