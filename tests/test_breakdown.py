"""``predict --breakdown``: a step's time per class of work adds up to the step."""

from __future__ import annotations

import json

import pytest

from energylens.cli.main import main
from energylens.cost.breakdown import CLASSES, step_breakdown
from energylens.cost.step import SequenceGroup, engine_cost, join_engine_s, step_cost
from energylens.deployment import Deployment
from energylens.predict import checked_context


def _ctx(model: str, gpu: str, deployment: Deployment):  # type: ignore[no-untyped-def]
    return checked_context(model=model, gpu=gpu, deployment=deployment)[1]


@pytest.mark.parametrize(("model", "gpu", "deployment"), [
    ("llama-3.1-8b", "H100", Deployment()),                                  # engine after
    ("llama-3.1-70b", "H100", Deployment(tp=4, pp=2)),                        # pipeline
    ("qwen3-30b-a3b", "H100", Deployment(tp=4, ep=4, moe_tp=1, num_gpus=4, runtime="sglang")),
])
def test_the_classes_sum_to_the_step_with_the_engine_joined(model: str, gpu: str,
                                                            deployment: Deployment) -> None:
    ctx = _ctx(model, gpu, deployment)
    for seqs, pipelined in (([SequenceGroup(sequences=32, new_tokens=1, context=1024)], True),
                            ([SequenceGroup(sequences=1, new_tokens=2048, context=2048)], False)):
        parts = step_breakdown(ctx=ctx, seqs=seqs, pipelined=pipelined)
        assert set(parts) <= set(CLASSES) and all(v > 0 for v in parts.values())
        gpu_s = float(step_cost(ctx=ctx, seqs=seqs, pipelined=pipelined).latency_s)
        engine_s = float(engine_cost(ctx=ctx, sequences=seqs[0].sequences).latency_s)
        wall = float(join_engine_s(ctx=ctx, gpu_s=gpu_s, engine_s=engine_s))
        assert sum(parts.values()) == pytest.approx(wall, rel=1e-9)


def test_classes_follow_the_layout() -> None:
    """One GPU: no collective; four: the all-reduces; a dense model has no expert GEMMs,
    a MoE one spends its decode mostly reading experts."""
    one = step_breakdown(ctx=_ctx("llama-3.1-8b", "H100", Deployment()),
                         seqs=[SequenceGroup(sequences=8, new_tokens=1, context=512)])
    four = step_breakdown(ctx=_ctx("llama-3.1-8b", "H100", Deployment(tp=4)),
                          seqs=[SequenceGroup(sequences=8, new_tokens=1, context=512)])
    assert "communication" not in one and four["communication"] > 0
    assert "MoE experts" not in one and "GEMM" in one and "attention" in one
    moe = step_breakdown(ctx=_ctx("qwen3-30b-a3b", "H100", Deployment()),
                         seqs=[SequenceGroup(sequences=64, new_tokens=1, context=512)])
    assert moe["MoE experts"] > moe["GEMM"]


def test_predict_breakdown_in_json(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "serving",
                 "--batch", "16", "--breakdown", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["breakdown"]
    assert out["decode_sequences"] == 16
    assert out["decode"]["GEMM"] > out["decode"]["attention"] > 0
    assert out["prefill"]["GEMM"] > 0
