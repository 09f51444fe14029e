"""MLA prompt tokens take the decompressed form (attention at head dim k, not the latent l);
decode keeps the absorbed form."""

from __future__ import annotations

from dataclasses import replace

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.kernels import compile_layer
from energylens.cost.step import SequenceGroup, step_cost
from energylens.cost.work import causal_pairs, op_flops
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.families import ModelGraph, build_graph
from energylens.model.zoo import get_model
from energylens.predict import calibration_for_gpu, step_context

TP = 8
DEGREES = {"tp": TP, "etp": TP, "ep": 1}


def _deepseek() -> ModelGraph:
    return build_graph(get_model("deepseek-v3"))


def test_only_mla_models_carry_a_prompt_form() -> None:
    assert all(g.prompt_attention is not None for g in _deepseek().groups)
    assert all(g.prompt_attention is None
               for g in build_graph(get_model("llama-3.1-8b")).groups)


def test_prompt_attention_flops_are_the_decompressed_forms() -> None:
    """DeepSeek-V3 at TP8, one 8,192-token prompt: per layer and GPU, q.k and a.v at head
    dims k = 192 and v = 128 over the causal pairs (2 FLOPs per multiply-add), and the
    expansion of the latent (l = 576) into keys and values for every context token."""
    group = _deepseek().groups[-1]
    assert group.prompt_attention is not None
    sizes = group.sizes
    heads = sizes["h"] // TP
    m = p = 8192.0
    phase = {"b": 1.0, "m": m, "p": p, "n": 1.0, "t": 1.0}
    compiled = compile_layer(layer=group.prompt_attention, sizes=sizes, degrees=DEGREES,
                             fusion=frozenset({"attention"}))
    flops = {op.name: float(op_flops(op=op, sizes={**local, **phase}, window=None))
             for kernel in compiled.kernels
             for op, local in zip(kernel.ops, kernel.op_sizes, strict=True)}
    pairs = causal_pairs(m=m, p=p, window=None)
    assert flops["qk"] == pytest.approx(2 * heads * pairs * sizes["k"])
    assert flops["av"] == pytest.approx(2 * heads * pairs * sizes["v"])
    assert flops["kv_b"] == pytest.approx(2 * p * sizes["l"] * heads * sizes["k"])
    assert flops["v_b"] == pytest.approx(2 * p * sizes["l"] * heads * sizes["v"])
    # the absorbed form runs both products at the latent width l: 3-4.5x the FLOPs
    assert sizes["l"] / sizes["k"] == pytest.approx(3.0)


def _step(graph: ModelGraph, seqs: list[SequenceGroup]) -> float:
    gpu = load_gpu("H200")
    cal = calibration_for_gpu(default_calibration(), gpu)
    ctx = step_context(model=graph.model, gpu=gpu, deployment=Deployment(tp=TP),
                       calibration=cal)
    return float(step_cost(ctx=replace(ctx, graph=graph), seqs=seqs).latency_s)


def test_decode_steps_keep_the_absorbed_form_and_prompts_get_cheaper() -> None:
    graph = _deepseek()
    absorbed_only = replace(graph, groups=tuple(replace(g, prompt_attention=None)
                                                for g in graph.groups))
    decode = [SequenceGroup(sequences=32.0, new_tokens=1.0, context=4096.0)]
    assert _step(graph, decode) == _step(absorbed_only, decode)
    prompt = [SequenceGroup(sequences=1.0, new_tokens=8192.0, context=8192.0)]
    assert _step(graph, prompt) < 0.9 * _step(absorbed_only, prompt)
    mixed = [*decode, *prompt]  # each sequence group takes its own form
    assert _step(absorbed_only, mixed) - _step(graph, mixed) == pytest.approx(
        _step(absorbed_only, prompt) - _step(graph, prompt), rel=0.02)


def _kernel_seconds(seqs: list[SequenceGroup]) -> dict[str, float]:
    """Seconds per kernel name over the MoE layers of one DeepSeek-V3 step (H200, TP 8)."""
    from energylens.cost.step import STEP_RECORDER

    gpu = load_gpu("H200")
    ctx = step_context(model=get_model("deepseek-v3"), gpu=gpu, deployment=Deployment(tp=TP),
                       calibration=calibration_for_gpu(default_calibration(), gpu))
    seconds: dict[str, float] = {}

    def record(group, item, latency, energy, critical):  # type: ignore[no-untyped-def]
        if critical and group.layer.name == "moe" and not isinstance(item, str):
            seconds[item.name] = seconds.get(item.name, 0.0) + float(latency)

    token = STEP_RECORDER.set(record)
    try:
        step_cost(ctx=ctx, seqs=seqs)
    finally:
        STEP_RECORDER.reset(token)
    return seconds


def test_absorb_and_value_up_projection_run_on_decode_tokens_only() -> None:
    """The prompt form has no absorb and no value up-projection (kv_b / v_b decompress the
    latent instead): a prompt-only step runs neither; in a step mixing 32 decodes with a
    prompt they run on the 32 decode tokens, as in a step of the decodes alone."""
    decode = [SequenceGroup(sequences=32.0, new_tokens=1.0, context=4096.0)]
    prompt = [SequenceGroup(sequences=1.0, new_tokens=4096.0, context=4096.0)]
    alone = _kernel_seconds(decode)
    assert alone["absorb"] > 0.0 and alone["uv"] > 0.0
    only_prompt = _kernel_seconds(prompt)
    assert only_prompt["absorb"] == 0.0 and only_prompt["uv"] == 0.0
    assert only_prompt["q_b"] > alone["q_b"]  # the prompt's other GEMMs do run
    mixed = _kernel_seconds([*decode, *prompt])
    for name in ("absorb", "uv"):
        assert mixed[name] == pytest.approx(alone[name], rel=1e-9)
