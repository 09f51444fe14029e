"""A static batch of one prompt repeated: a MoE step reads one sequence's experts, every
expert it reads computes all the batch's tokens; dense models do not notice; the
measurement CSV and LLM-Inference-Bench's TensorRT-LLM rows carry it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.cli.main import main
from energylens.cost.moe import Routing, expert_load
from energylens.deployment import Deployment
from energylens.measurements.inference_bench import bench_setup
from energylens.measurements.user_csv import UnsupportedRow, load_user_csv, row_case
from energylens.predict import predict
from energylens.workloads.workload import Workload

SAME = Routing(identical_sequences=True)


def _tpot(model: str, *, batch: int, routing: Routing, ep: int = 1, tp: int = 4) -> float:
    run = predict(model=model, gpu="H100-SXM", workload=Workload(
        kind="batch", batch=batch, input_tokens=128, output_tokens=128),
        deployment=Deployment(tp=tp, ep=ep, num_gpus=tp * ep, routing=routing))
    return run.tpot_s


def test_a_batch_of_one_prompt_reads_the_experts_of_one_sequence() -> None:
    """Mixtral (8 experts, top-2) at 16 sequences: distinct prompts read 7.9 of 8 experts
    per layer (8 x (1 - 0.75^16)), one prompt repeated 2, as one sequence does; so its
    step lies between batch 1's and the distinct batch's, nearer batch 1's."""
    distinct = expert_load(routing=Routing(), num_experts=8, top_k=2, ep=1, tokens=16.0)
    assert distinct.active_experts_mean_rank == pytest.approx(8 * (1 - 0.75 ** 16))
    assert expert_load(routing=Routing(), num_experts=8, top_k=2, ep=1,
                       tokens=1.0).active_experts_mean_rank == pytest.approx(2.0)
    one = _tpot("mixtral-8x7b", batch=1, routing=Routing())
    same = _tpot("mixtral-8x7b", batch=16, routing=SAME)
    apart = _tpot("mixtral-8x7b", batch=16, routing=Routing())
    assert one < same < apart
    assert same - one < 0.25 * (apart - one)
    assert _tpot("mixtral-8x7b", batch=1, routing=SAME) == pytest.approx(one, rel=1e-12)


def test_under_expert_parallelism_one_rank_holds_every_copy() -> None:
    """EP 8 over 8 experts: each expert on its own rank. Repeated prompts send all 64
    sequences' tokens to the same 2 experts, so the slowest rank computes 64 tokens per
    step; distinct prompts spread 128 picks over 8 ranks (about 16 each, plus the
    imbalance); the repeated batch's step is then not faster than distinct's by the
    experts' reads alone."""
    same = _tpot("mixtral-8x7b", batch=64, routing=SAME, ep=8, tp=1)
    apart = _tpot("mixtral-8x7b", batch=64, routing=Routing(), ep=8, tp=1)
    one = _tpot("mixtral-8x7b", batch=1, routing=Routing(), ep=8, tp=1)
    assert same > one
    assert same > 0.9 * apart  # each rank reads one expert either way; the hot one waits


def test_dense_models_do_not_notice() -> None:
    assert _tpot("llama-3.1-8b", batch=16, routing=SAME, tp=1) == \
        _tpot("llama-3.1-8b", batch=16, routing=Routing(), tp=1)


def test_the_measurement_csv_reads_the_column_and_refuses_it_off_static_batches(
        tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("model,gpu,num_gpus,workload,batch,input_tokens,output_tokens,"
                    "identical_prompts,tpot_s\n"
                    "mixtral-8x7b,H100,4,batch,16,128,128,true,0.006\n"
                    "mixtral-8x7b,H100,4,batch,16,128,128,,0.006\n"
                    "mixtral-8x7b,H100,4,serving,16,128,128,yes,0.006\n")
    rows = load_user_csv(path).rows
    assert row_case(rows[0]).deployment.routing.identical_sequences
    assert not row_case(rows[1]).deployment.routing.identical_sequences
    with pytest.raises(UnsupportedRow, match="static batch"):
        row_case(rows[2])
    path.write_text("model,gpu,num_gpus,identical_prompts,tpot_s\nmixtral-8x7b,H100,4,maybe,1\n")
    assert main(["validate", "measurements", str(path), "--json"]) == 2


def test_the_bench_reads_tensorrt_llm_and_mii_batches_as_one_prompt_repeated() -> None:
    row = {"Num of Hardware": 4, "Input Output Length": 128, "Batch Size": 16}
    assert bench_setup({**row, "Framework": "TensorRT-LLM"}).deployment.routing == SAME
    assert bench_setup({**row, "Framework": "Deepspeed-MII"}).deployment.routing == SAME
    assert bench_setup({**row, "Framework": "vLLM"}).deployment.routing == Routing()


def test_predict_takes_the_flag_for_static_batches_only(capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    common = ["predict", "--model", "mixtral-8x7b", "--gpu", "H100", "--tp", "4", "--batch",
              "16", "--input-tokens", "128", "--output-tokens", "128", "--json"]
    assert main(common) == 0
    apart = json.loads(capsys.readouterr().out)["tpot_s"]
    assert main([*common, "--identical-prompts"]) == 0
    assert json.loads(capsys.readouterr().out)["tpot_s"] < apart
    assert main([*common, "--identical-prompts", "--workload", "serving"]) == 2
    assert "static batch" in capsys.readouterr().err
