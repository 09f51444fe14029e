"""DeepSeek Sparse Attention's indexer (GLM-5): priced beside MLA, cached, never sharded."""

from __future__ import annotations

import dataclasses

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.errors import ModelConfigError
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.model.config import check_model_config
from energylens.model.families import build_graph
from energylens.predict import calibration_for_gpu

GLM5 = get_model("glm-5")
H200 = load_gpu("H200-SXM")
INDEXER_OPS = {"idx_q", "idx_k", "idx_knorm", "idx_rope", "idx_w", "idx_fold", "idx_score",
               "idx_topk"}


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
    """Decode, one sequence at 4,096 cached tokens: the bf16 index keys (128 per token)
    are read once: 4,096 x 128 x 2 bytes, plus the query and the 4,096 scores written."""
    constants = calibration_for_gpu(default_calibration(), H200).kernel(H200.name)
    cost = kernel_cost(kernel=_score_kernel(1), phase={"b": 1.0, "m": 1.0, "p": 4096.0},
                       window=None, gpu=H200, constants=constants,
                       clock=ClockState(ratio=1.0, dynamic_scale=1.0), weight_dtype="bf16")
    assert float(cost.bytes) == pytest.approx(4096 * 128 * 2 + 128 * 2 + 4096 * 2)
    assert float(cost.flops) == pytest.approx(2 * 4096 * 128)


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
