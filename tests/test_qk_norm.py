"""Query/key RMSNorm before the rotary embedding (Qwen3, Gemma 3: over each head;
MiniMax-M2: over all heads, its statistics all-reduced across tensor-parallel ranks)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.kernels import compile_layer
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.model.families import build_graph
from energylens.model.hf import load_hf_config
from energylens.model.spec import parse_einsum
from energylens.predict import calibration_for_gpu, predict

MINIMAX = get_model("minimax-m2.5")
FUSED = frozenset({"attention", "qkv", "gate_up", "norm_residual", "qk_norm_rope"})


def _compiled(model, *, tp: int, fusion: frozenset[str] = FUSED):
    group = build_graph(model).groups[0]
    return compile_layer(layer=group.layer, sizes=dict(group.sizes),
                         degrees={"tp": tp, "ep": 1, "etp": tp}, fusion=fusion)


def test_a_norm_may_reduce_over_several_ranks_and_names_with_underscores_stay_functions():
    norm = parse_einsum(name="n", text="QN[b,m,g,r,e] = rmsnorm_gre(Q[b,m,g,r,e], K[b,m,g,e])")
    assert (norm.function, norm.reduced_ranks, norm.kind) == ("rmsnorm", ("g", "r", "e"),
                                                             "reduction")
    act = parse_einsum(name="a", text="Y[b,m,f] = silu_mul(G[b,m,f], U[b,m,f])")
    assert (act.function, act.reduced_ranks) == ("silu_mul", ())


def test_a_model_without_the_norm_has_no_op_and_its_rotary_op_reads_the_queries():
    ops = {op.name: op for op in build_graph(get_model("llama-3.1-8b")).groups[0].layer.ops}
    assert "qk_norm" not in ops
    assert ops["rope"].inputs[0].name == "Q"
    qwen = {op.name: op for op in build_graph(get_model("qwen3-32b")).groups[0].layer.ops}
    assert qwen["qk_norm"].reduced_ranks == ("e",)
    assert qwen["rope"].inputs[0].name == "QN"


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_per_head_norm_needs_no_collective_and_fuses_into_the_rotary_kernel(tp: int):
    per_head = dataclasses.replace(MINIMAX, qk_norm="head")
    compiled = _compiled(per_head, tp=tp)
    assert "qk_norm+rope" in [k.name for k in compiled.kernels]
    assert not [c for c in compiled.collectives if c.after_op == "qk_norm"]


def test_a_norm_over_all_heads_all_reduces_one_value_per_token_under_tensor_parallelism():
    alone = _compiled(MINIMAX, tp=1)
    assert "qk_norm+rope" in [k.name for k in alone.kernels]
    assert not [c for c in alone.collectives if c.after_op == "qk_norm"]
    split = _compiled(MINIMAX, tp=4)
    names = [k.name for k in split.kernels]
    assert "qk_norm" in names and "rope" in names  # the all-reduce ends the norm's kernel
    stats = [c for c in split.collectives if c.after_op == "qk_norm"]
    assert len(stats) == 1
    assert stats[0].kind == "all_reduce" and stats[0].dim == "tp"
    assert stats[0].tensor.ranks == ("b", "m")


def test_the_statistics_all_reduce_costs_each_decode_step_at_least_its_latency_per_layer():
    """MiniMax-M2.5 on 4 B200 under vLLM, batch 1: against the same model without the
    norm's all-reduce (a per-head norm), every decode step pays 62 all-reduces of a few
    bytes, each at least the runtime's fitted latency (latency + per-hop x log2 4)."""
    deployment = Deployment(num_gpus=4, tp=4)
    with_stats = predict(model=MINIMAX, gpu="b200", deployment=deployment)
    per_head = predict(model=dataclasses.replace(MINIMAX, qk_norm="head"), gpu="b200",
                       deployment=deployment)
    gpu = load_gpu("b200")
    constants = calibration_for_gpu(default_calibration(), gpu).runtime(runtime="vllm",
                                                                       gpu=gpu.name)
    floor = constants.allreduce_latency_s + constants.allreduce_latency_per_hop_s * math.log2(4)
    assert floor > 0
    extra = with_stats.as_dict()["tpot_s"] - per_head.as_dict()["tpot_s"]
    assert extra >= MINIMAX.num_layers * floor


def test_the_loader_reads_the_norm_from_the_family_or_from_use_qk_norm(tmp_path: Path):
    def load(name: str, fields: dict[str, object]):
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        base = {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
                "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 2048,
                "vocab_size": 1000}
        path.write_text(json.dumps(base | fields))
        return load_hf_config(path).qk_norm

    assert load("qwen3", {"model_type": "qwen3"}) == "head"
    assert load("llama", {"model_type": "llama"}) is None
    assert load("llama-norm", {"model_type": "llama", "use_qk_norm": True}) == "head"
    assert load("per-layer", {"model_type": "llama", "use_qk_norm": True,
                              "qk_norm_type": "per_layer"}) == "all_heads"
    assert load("off", {"model_type": "llama", "use_qk_norm": False,
                        "qk_norm_type": "per_layer"}) is None


def test_an_attention_output_gate_adds_its_projection_to_qkv_and_a_product_before_o():
    """Qwen3.5: the gate's weights (hidden x query width) are read in the fused q/k/v
    kernel, and a sigmoid product of the attention output feeds the output projection;
    a model without the gate has neither op."""
    qwen = get_model("qwen3.5-397b-a17b")
    assert qwen.attention_output_gate
    group = next(g for g in build_graph(qwen).groups if g.name == "attention")
    ops = {op.name: op for op in group.layer.ops}
    assert ops["o"].inputs[0].name == "OG" and ops["aout"].function == "sigmoid_mul"
    compiled = compile_layer(layer=group.layer, sizes=dict(group.sizes),
                             degrees={"tp": 1, "ep": 1, "etp": 1}, fusion=FUSED)
    qkv = next(k for k in compiled.kernels if k.name == "q+k+v+agate")
    assert {t.name.split("__")[0] for t in qkv.reads} >= {"WQ", "WAG"}
    plain = dataclasses.replace(qwen, attention_output_gate=False)
    group = next(g for g in build_graph(plain).groups if g.name == "attention")
    names = {op.name for op in group.layer.ops}
    assert not names & {"agate", "aout"}
    assert next(op for op in group.layer.ops if op.name == "o").inputs[0].name == "O"
