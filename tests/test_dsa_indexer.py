"""DeepSeek Sparse Attention's indexer (GLM-5): priced beside MLA, cached, never sharded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import energylens.cost.step as step_module
from energylens.calibration.file import default_calibration
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.step import kernel_window
from energylens.deployment import Deployment
from energylens.errors import ModelConfigError
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.model.config import check_model_config
from energylens.model.families import build_graph
from energylens.predict import calibration_for_gpu, step_context

GLM5 = get_model("glm-5")
H200 = load_gpu("H200-SXM")
INDEXER_OPS = {"idx_q", "idx_k", "idx_knorm", "idx_rope", "idx_qrot", "idx_krot", "idx_qquant",
               "idx_kquant", "idx_w", "idx_wscale", "idx_score", "idx_topk"}


def _score_kernel(tp: int):
    group = next(g for g in build_graph(GLM5).groups if g.is_moe)
    compiled = compile_layer(layer=group.layer, sizes=dict(group.sizes),
                             degrees={"tp": tp, "ep": 1, "etp": 1}, fusion=frozenset())
    return next(k for k in compiled.kernels if k.name == "idx_score")


def test_every_glm5_layer_has_the_indexer_and_deepseek_v3_none():
    for group in build_graph(GLM5).groups:
        assert {op.name for op in group.layer.ops} >= INDEXER_OPS
    for group in build_graph(get_model("deepseek-v3")).groups:
        assert not INDEXER_OPS & {op.name for op in group.layer.ops}


def test_the_score_kernel_reads_every_cached_index_key_once_per_query():
    """Decode, one sequence at 4,096 cached tokens: the FP8 index keys (128 per token and
    a 4-byte block scale) are read once: 4,096 x 132 bytes, plus the query's 32 FP8 heads
    of 128 (132 bytes each) and the 4,096 scores written; every head scores every key (2 x
    32 x 128 FLOPs a pair)."""
    constants = calibration_for_gpu(default_calibration(), H200).kernel(H200.name)
    cost = kernel_cost(kernel=_score_kernel(1), phase={"b": 1.0, "m": 1.0, "p": 4096.0},
                       window=None, gpu=H200, constants=constants,
                       clock=ClockState(ratio=1.0, dynamic_scale=1.0), weight_dtype="bf16")
    assert float(cost.bytes) == pytest.approx(4096 * 132 + 32 * 132 + 4096 * 2)
    assert float(cost.flops) == pytest.approx(2 * 4096 * 32 * 128)


def test_tensor_parallelism_does_not_split_the_indexer():
    """One key head: every rank scores the whole context (the same kernel at TP 8)."""
    one, eight = _score_kernel(1), _score_kernel(8)
    assert dict(one.io_sizes["IC"]) == dict(eight.io_sizes["IC"])


def test_an_indexer_needs_all_three_sizes_and_a_query_latent():
    assert GLM5.mla is not None
    partial = dataclasses.replace(GLM5, mla=dataclasses.replace(GLM5.mla, index_topk=0))
    with pytest.raises(ModelConfigError, match="all 0"):
        check_model_config(partial, where="test")
    direct_q = dataclasses.replace(GLM5, mla=dataclasses.replace(GLM5.mla, q_lora_rank=0))
    with pytest.raises(ModelConfigError, match="q_lora_rank"):
        check_model_config(direct_q, where="test")


def _moe_group(model_name: str):
    return next(g for g in build_graph(get_model(model_name)).groups if g.is_moe)


def test_mla_reads_the_picked_keys_and_the_indexer_every_key():
    """GLM-5 keeps 2,048 keys per query: MLA's context kernels read at most that many, the
    score and top-k scan the whole cache; DeepSeek-V3 (no indexer) reads every key."""
    group = _moe_group("glm-5")
    compiled = compile_layer(layer=group.layer, sizes=dict(group.sizes),
                             degrees={"tp": 8, "ep": 1, "etp": 1}, fusion=frozenset())
    context = [k for k in compiled.kernels if k.touches_context]
    windows = {k.name: kernel_window(group, k) for k in context}
    assert windows.pop("idx_score") is None and windows.pop("idx_topk") is None
    assert windows and set(windows.values()) == {2048}
    deepseek = _moe_group("deepseek-v3")
    assert deepseek.sparse_keys is None
    assert {kernel_window(deepseek, k) for k in compile_layer(
        layer=deepseek.layer, sizes=dict(deepseek.sizes), degrees={"tp": 8, "ep": 1, "etp": 1},
        fusion=frozenset()).kernels} == {None}


def test_past_the_picked_keys_a_decode_step_grows_by_the_indexer_alone(monkeypatch):
    """From 4,096 to 16,384 cached tokens, MLA's attention kernel costs the same (2,048 keys
    either way) while the score kernel's reads grow with the cache."""
    seen: dict[tuple[str, float], float] = {}
    original = step_module.kernel_cost

    def recording(**kwargs):
        cost = original(**kwargs)
        context = float(np.max(kwargs["phase"].get("p", 0.0)))
        seen[(kwargs["kernel"].name, context)] = float(np.sum(cost.bytes))
        return cost

    monkeypatch.setattr(step_module, "kernel_cost", recording)
    ctx = step_context(model=GLM5, gpu=H200, deployment=Deployment(tp=8, num_gpus=8),
                       calibration=default_calibration())
    for context in (4096.0, 16384.0):
        step_module.step_cost(ctx=ctx, seqs=[step_module.SequenceGroup(
            sequences=1, new_tokens=1, context=context)])
    attention = next(name for name, _ in seen if name.startswith("qk"))
    assert seen[(attention, 16384.0)] == pytest.approx(seen[(attention, 4096.0)])
    assert seen[("idx_score", 16384.0)] > 3.5 * seen[("idx_score", 4096.0)]


def test_a_prompt_step_prices_the_indexer_scan(monkeypatch):
    """Prompt tokens take MLA's decompressed form, but the indexer still scores every
    earlier token of each prompt: the step is slower with its score kernel than with that
    kernel free (the absorbed form's replacement once dropped it)."""
    ctx = step_context(model=GLM5, gpu=H200, deployment=Deployment(tp=8, num_gpus=8),
                       calibration=default_calibration())
    prompt = [step_module.SequenceGroup(sequences=1, new_tokens=4096, context=4096)]
    priced = float(step_module.step_cost(ctx=ctx, seqs=prompt).latency_s)
    original = step_module.kernel_cost

    def score_free(**kwargs):
        cost = original(**kwargs)
        if kwargs["kernel"].name != "idx_score":
            return cost
        return dataclasses.replace(cost, **{f.name: 0.0 for f in dataclasses.fields(cost)})

    monkeypatch.setattr(step_module, "kernel_cost", score_free)
    free = float(step_module.step_cost(ctx=ctx, seqs=prompt).latency_s)
    assert priced > free
