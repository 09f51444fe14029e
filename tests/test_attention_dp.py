"""Data-parallel attention with an expert-parallel MoE layer (``Deployment(attention_dp=...,
moe_tp=...)``): layout, memory, collectives, stragglers, launch commands, refusals."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from energylens.calibration.file import default_calibration
from energylens.cli import main
from energylens.cost.comm import collective_cost, link_for_group
from energylens.cost.memory import MemoryUse, memory_use
from energylens.cost.moe import expert_load_at
from energylens.cost.step import SequenceGroup, StepContext, _group_cost, _phase_sizes, step_cost
from energylens.cost.work import ACTIVATION_BYTES, DTYPE_BYTES
from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import calibration_for_gpu, predict, predict_many, step_context
from energylens.runtime.launch import launch_command

MOE = "qwen3-30b-a3b"  # 48 MoE layers of 128 experts (top 8), 4 KV heads of 128, d = 2048
GPU = "B200"
SERVING = Workload(kind="serving", batch=256, input_tokens=1024, output_tokens=256)


def _ctx(deployment: Deployment) -> StepContext:
    gpu = load_gpu(GPU)
    return step_context(model=get_model(MOE), gpu=gpu, deployment=deployment,
                        calibration=calibration_for_gpu(default_calibration(), gpu))


def _memory(deployment: Deployment, *, sequences: float, context: float) -> MemoryUse:
    ctx = _ctx(deployment)
    return memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                      degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                      kv_dtype=ctx.kv_dtype, sequences=sequences, context_tokens=context)


# --- layout and its checks ------------------------------------------------------------------

def test_degrees_and_gpus_of_the_explicit_layout() -> None:
    d = Deployment(tp=2, attention_dp=4, ep=4, num_gpus=8)
    assert (d.attention_tp, d.expert_tp, d.gpus_per_replica, d.replicas) == (2, 2, 8, 1)
    assert d.degrees(get_model(MOE)) == {"tp": 2, "etp": 2, "ep": 4, "adp": 4}
    # the legacy layout is unchanged: attention over tp x ep, each expert split tp ways
    legacy = Deployment(tp=2, ep=4, num_gpus=8)
    assert (legacy.attention_tp, legacy.expert_tp, legacy.gpus_per_replica) == (8, 2, 8)


@pytest.mark.parametrize(("fields", "message"), [
    ({"tp": 1, "attention_dp": 4, "ep": 2, "moe_tp": 1}, "ep x moe_tp = 2 != tp x attention_dp = 4"),
    ({"tp": 1, "attention_dp": 4, "ep": 3}, "ep = 3 does not divide tp x attention_dp = 4"),
    ({"attention_dp": 0}, "attention_dp must be >= 1"),
    ({"moe_tp": 0}, "moe_tp must be >= 1"),
])
def test_inconsistent_degrees_are_one_line_errors(fields: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        Deployment(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_a_dense_model_and_engines_without_the_layout_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="dense model"):
        predict(model="llama-3.1-8b", gpu=GPU, deployment=Deployment(attention_dp=2))
    with pytest.raises(ConfigError, match="no data-parallel attention parallelism"):
        predict(model=MOE, gpu=GPU, deployment=Deployment(attention_dp=2, runtime="lmdeploy"))
    # vLLM's experts are never tensor-split under DP + EP; SGLang's may be
    split = Deployment(tp=1, attention_dp=4, ep=2, num_gpus=4)
    with pytest.raises(ConfigError, match="no expert tensor parallelism .moe_tp = 2"):
        predict(model=MOE, gpu=GPU, deployment=split)
    assert predict(model=MOE, gpu=GPU, deployment=Deployment(
        tp=1, attention_dp=4, ep=2, num_gpus=4, runtime="sglang")).ttft_s > 0
    with pytest.raises(ConfigError, match="one GPU per attention rank"):
        predict(model=MOE, gpu=GPU, deployment=Deployment(tp=2, attention_dp=2, ep=4,
                                                          runtime="trtllm"))


def test_the_explicit_spelling_of_the_legacy_layout_predicts_the_same() -> None:
    """tp = 4 attention with ep = 2 x moe_tp = 2 is the tp x ep spelling tp = 2, ep = 2 (4
    GPUs; a layout SGLang runs, vLLM has no flag for)."""
    legacy = predict(model=MOE, gpu=GPU, workload=SERVING,
                     deployment=Deployment(tp=2, ep=2, num_gpus=4, runtime="sglang"))
    explicit = predict(model=MOE, gpu=GPU, workload=SERVING,
                       deployment=Deployment(tp=4, ep=2, moe_tp=2, num_gpus=4, runtime="sglang"))
    assert explicit.as_dict() == legacy.as_dict()


# --- memory -------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
def test_kv_per_gpu_is_one_nth_of_a_single_replica_s(n: int) -> None:
    model = get_model(MOE)
    one = _memory(Deployment(num_gpus=1), sequences=256, context=2000)
    dp = _memory(Deployment(attention_dp=n, ep=n, num_gpus=n), sequences=256, context=2000)
    # hand: K and V of 4 heads x 128 in bf16 per token and layer, 256 x 2000 tokens
    by_hand = model.num_layers * 2 * 4 * 128 * DTYPE_BYTES["bf16"] * 256 * 2000
    assert one.kv_cache_bytes == pytest.approx(by_hand)
    assert dp.kv_cache_bytes == pytest.approx(by_hand / n)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_weights_per_gpu_are_the_attention_weights_plus_experts_over_ep(n: int) -> None:
    model = get_model(MOE)
    assert model.moe is not None
    one = _memory(Deployment(num_gpus=1), sequences=1, context=1)
    dp = _memory(Deployment(attention_dp=n, ep=n, num_gpus=n), sequences=1, context=1)
    # hand: gate, up and down of every expert, d x f each, in bf16
    experts = (model.moe.num_moe_layers * model.moe.num_experts * 3 * model.hidden_size
               * model.moe.expert_ffn * DTYPE_BYTES["bf16"])
    assert dp.weights_bytes == pytest.approx(one.weights_bytes - experts * (1 - 1 / n))


# --- collectives and stragglers ------------------------------------------------------------

def test_dispatch_and_combine_bytes_are_the_routed_tokens_hidden_states() -> None:
    """tp = 1 attention ranks: the only collectives are the MoE layer's all-to-alls, each
    moving the most-loaded rank's routed tokens x d in bf16."""
    ep, batch = 8, 64
    model = get_model(MOE)
    assert model.moe is not None
    ctx = _ctx(Deployment(attention_dp=ep, ep=ep, num_gpus=ep))
    cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=batch, new_tokens=1.0,
                                                  context=1000.0)])
    load = expert_load_at(routing=ctx.routing, num_experts=128, top_k=8, ep=ep, tokens=batch)
    assert load.tokens_max_rank >= batch * 8 / ep
    message = load.tokens_max_rank * model.hidden_size * ACTIVATION_BYTES
    kind, bandwidth = link_for_group(gpu=ctx.gpu, group_size=ep)
    one = collective_cost(kind="all_to_all", message_bytes=message, group_size=ep,
                          bandwidth=bandwidth, constants=ctx.calibration.link(gpu=GPU, kind=kind))
    assert cost.communication_s == pytest.approx(model.num_layers * 2 * one.latency_s)


def test_the_slowest_attention_rank_sets_the_step() -> None:
    """9 sequences on 8 ranks: one rank holds 2, and every MoE layer waits for it."""
    ctx = _ctx(Deployment(attention_dp=8, ep=8, num_gpus=8, runtime="sglang"))
    group = ctx.graph.groups[0]
    seqs = [SequenceGroup(sequences=9.0, new_tokens=1.0, context=1000.0)]
    _, critical, attention = _phase_sizes(ctx=ctx, group=group, seqs=seqs, critical=True)
    merged, mean, _ = _phase_sizes(ctx=ctx, group=group, seqs=seqs, critical=False)
    assert (critical["b"], attention[0]["b"], mean["b"], merged["b"]) == (2.0, 2.0, 9 / 8, 9.0)
    assert merged["m"] == 1.0  # 9 routed tokens
    # vLLM pads every rank to the largest one's 2 tokens: the mean rank runs 2 through its
    # linear layers, 16 tokens are routed, attention still reads 9 / 8 sequences' KV
    vllm = _ctx(Deployment(attention_dp=8, ep=8, num_gpus=8))
    merged, mean, attention = _phase_sizes(ctx=vllm, group=group, seqs=seqs, critical=False)
    assert (mean["b"], merged["b"] * merged["m"], attention[0]["b"]) == (2.0, 16.0, 9 / 8)
    latency = [_group_cost(ctx=ctx, group=group, seqs=[SequenceGroup(
        sequences=b, new_tokens=1.0, context=1000.0)]).latency_s for b in (8.0, 9.0, 16.0)]
    # never faster than the slowest rank: 9 sequences take at least 8's; and 16 (2 a rank,
    # more routed tokens) at least 9's
    assert latency[0] < latency[1] <= latency[2]


def test_an_even_spread_has_no_straggler() -> None:
    """16 sequences on 8 ranks (2 each): critical = mean on the attention side."""
    ctx = _ctx(Deployment(attention_dp=8, ep=8, num_gpus=8))
    seqs = [SequenceGroup(sequences=16.0, new_tokens=1.0, context=1000.0)]
    _, critical, _ = _phase_sizes(ctx=ctx, group=ctx.graph.groups[0], seqs=seqs, critical=True)
    _, mean, _ = _phase_sizes(ctx=ctx, group=ctx.graph.groups[0], seqs=seqs, critical=False)
    assert critical["b"] == mean["b"] == 2.0


# --- launch, CLI, many ----------------------------------------------------------------------

def test_launch_commands_of_each_engine() -> None:
    model, work = get_model(MOE), Workload(batch=64)
    d = Deployment(attention_dp=8, ep=8, num_gpus=8)
    vllm = launch_command(model=model, deployment=d, workload=work).argv
    assert "--enable-expert-parallel" in vllm
    assert vllm[vllm.index("--tensor-parallel-size") + 1] == "1"
    assert vllm[vllm.index("--data-parallel-size") + 1] == "8"
    assert vllm[vllm.index("--max-num-seqs") + 1] == "8"  # 64 sequences / 8 DP ranks
    sglang = launch_command(model=model, deployment=Deployment(
        attention_dp=8, ep=8, num_gpus=8, runtime="sglang"), workload=work).argv
    for flag, value in (("--tp-size", "8"), ("--dp-size", "8"), ("--ep-size", "8")):
        assert sglang[sglang.index(flag) + 1] == value
    assert "--enable-dp-attention" in sglang
    trt = launch_command(model=model, deployment=Deployment(
        attention_dp=8, ep=8, num_gpus=8, runtime="trtllm"), workload=work)
    assert trt.argv[trt.argv.index("--tp_size") + 1] == "8"
    assert trt.argv[trt.argv.index("--ep_size") + 1] == "8"
    assert any("enable_attention_dp: true" in text for _, text in trt.files)
    two = launch_command(model=model, deployment=Deployment(attention_dp=4, ep=4, num_gpus=8),
                         workload=work)
    assert (two.replicas, two.gpus_per_server) == (2, 4)  # one server per DP + EP group


def test_cli_predict_options(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", MOE, "--gpu", GPU, "--num-gpus", "8", "--ep", "8",
            "--workload", "serving", "--batch", "64", "--json"]
    assert main([*args, "--attention-dp", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = predict(model=MOE, gpu=GPU, deployment=Deployment(
        attention_dp=8, ep=8, num_gpus=8), workload=Workload(
        kind="serving", batch=64, input_tokens=512, output_tokens=128))
    assert math.isclose(out["tpot_s"], expected.tpot_s)
    assert main([*args, "--attention-dp", "8", "--moe-tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ep x moe_tp = 16 != tp x attention_dp = 8" in err[0]


def test_predict_many_reads_the_layout_columns() -> None:
    table = pd.DataFrame({"gpu": [GPU] * 3, "batch": [64, 64, 9], "num_gpus": [8, 8, 8],
                          "ep": [8, 8, 8], "attention_dp": [1, 8, 8], "moe_tp": [None, 1, 1]})
    many = predict_many(model=MOE, workload=SERVING, table=table)
    for row, got in zip(table.itertuples(), many.itertuples(), strict=True):
        one = predict(model=MOE, gpu=GPU, workload=Workload(
            kind="serving", batch=row.batch, input_tokens=1024, output_tokens=256),
            deployment=Deployment(num_gpus=8, ep=8, attention_dp=row.attention_dp,
                                  moe_tp=None if pd.isna(row.moe_tp) else int(row.moe_tp)))
        assert got.tpot_s == pytest.approx(one.tpot_s, rel=1e-9)
        assert got.energy_per_output_token_j == pytest.approx(one.energy_per_output_token_j,
                                                              rel=1e-9)


def test_study_knobs_reach_the_deployment_and_bad_combinations_are_infeasible() -> None:
    from energylens.study.objective import PARAMS, DeploymentProblem

    assert PARAMS["attention_dp"](0) is not None and PARAMS["moe_tp"](2) is None
    problem = DeploymentProblem(model=get_model(MOE), workload=SERVING)
    knobs = {"gpu": GPU, "num_gpus": 8, "ep": 8, "attention_dp": 8, "moe_tp": 1}
    good = problem.evaluate(knobs)
    expected = predict(model=MOE, gpu=GPU, workload=SERVING,
                       deployment=Deployment(num_gpus=8, ep=8, attention_dp=8, moe_tp=1))
    assert good.infeasible_reason is None
    assert good.metrics["tpot_s"] == pytest.approx(expected.tpot_s)
    bad = problem.evaluate({**knobs, "moe_tp": 2})
    assert bad.infeasible_reason == "ep x moe_tp = 16 != tp x attention_dp = 8 (the MoE layer " \
                                    "spans the attention ranks' GPUs)"
