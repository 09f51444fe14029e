"""``predict --breakdown``: a step's time and energy per class of work add up to the step."""

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
    # data-parallel attention: time from the critical rank, energy from the mean one
    ("deepseek-r1", "H200", Deployment(tp=1, ep=8, attention_dp=8, num_gpus=8,
                                       runtime="sglang")),
    # a draft head: its prompt pass prices the LM head a second time
    ("deepseek-r1", "H200", Deployment(tp=8, ep=8, moe_tp=1, num_gpus=8, speculative_tokens=2)),
])
def test_the_classes_sum_to_the_step_with_the_engine_joined(model: str, gpu: str,
                                                            deployment: Deployment) -> None:
    """Times sum to the wall (the engine joined as the runtime joins it); the kernels' and
    collectives' energies to the step's dynamic energy, static power over the wall apart."""
    ctx = _ctx(model, gpu, deployment)
    for seqs, pipelined in (([SequenceGroup(sequences=32, new_tokens=1, context=1024)], True),
                            ([SequenceGroup(sequences=1, new_tokens=2048, context=2048)], False)):
        parts = step_breakdown(ctx=ctx, seqs=seqs, pipelined=pipelined)
        assert set(parts.seconds) | set(parts.joules) <= set(CLASSES)
        assert all(v > 0 for v in [*parts.seconds.values(), *parts.joules.values()])
        step = step_cost(ctx=ctx, seqs=seqs, pipelined=pipelined)
        engine = engine_cost(ctx=ctx, sequences=seqs[0].sequences)
        wall = float(join_engine_s(ctx=ctx, gpu_s=step.latency_s, engine_s=engine.latency_s))
        assert sum(parts.seconds.values()) == pytest.approx(wall, rel=1e-9)
        dynamic = sum(v for k, v in parts.joules.items() if k not in ("static", "engine"))
        assert dynamic == pytest.approx(float(step.compute_energy_j + step.memory_energy_j
                                              + step.communication_energy_j), rel=1e-9)
        assert parts.joules["static"] == pytest.approx(
            ctx.constants.static_power_w * ctx.replica_gpus * wall, rel=1e-9)


def test_classes_follow_the_layout() -> None:
    """One GPU: no collective; four: the all-reduces; a dense model has no expert GEMMs,
    a MoE one spends its decode mostly reading experts."""
    one = step_breakdown(ctx=_ctx("llama-3.1-8b", "H100", Deployment()),
                         seqs=[SequenceGroup(sequences=8, new_tokens=1, context=512)])
    four = step_breakdown(ctx=_ctx("llama-3.1-8b", "H100", Deployment(tp=4)),
                          seqs=[SequenceGroup(sequences=8, new_tokens=1, context=512)])
    assert "communication" not in one.seconds and four.seconds["communication"] > 0
    assert four.joules["communication"] > 0
    assert "MoE experts" not in one.seconds and "GEMM" in one.seconds
    assert "attention" in one.seconds
    moe = step_breakdown(ctx=_ctx("qwen3-30b-a3b", "H100", Deployment()),
                         seqs=[SequenceGroup(sequences=64, new_tokens=1, context=512)])
    assert moe.seconds["MoE experts"] > moe.seconds["GEMM"]
    assert moe.joules["MoE experts"] > moe.joules["GEMM"]


def test_predict_breakdown_in_json(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "serving",
                 "--batch", "16", "--breakdown", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["breakdown"]
    assert out["decode_sequences"] == 16
    assert out["decode"]["seconds"]["GEMM"] > out["decode"]["seconds"]["attention"] > 0
    assert out["prefill"]["joules"]["GEMM"] > 0 and out["prefill"]["joules"]["static"] > 0


def test_the_breakdown_table_lists_the_classes_and_the_step(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--workload",
                 "serving", "--batch", "64", "--breakdown"]) == 0
    out = capsys.readouterr().out
    for label in ("MoE experts", "attention", "static", "decode step (64 sequences)",
                  "prefill (one prompt)"):
        assert label in out
