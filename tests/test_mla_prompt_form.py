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
