"""Gated DeltaNet mixers (Qwen3.5): the recurrence as einsums, the kernels each engine
release runs, the state a sequence holds, and release names that are not releases.

Qwen3.5-397B-A17B (the zoo's copy of its config): 45 mixers of 16 key heads x 128 and 64
value heads x 128 (4 per key head), convolution width 4, state kept in fp32.
"""

from __future__ import annotations

import pytest

from energylens.cost.kernels import compile_layer
from energylens.cost.memory import memory_use
from energylens.cost.work import ACTIVATION_BYTES, op_flops, weight_dtype_of
from energylens.errors import EnergyLensError
from energylens.hardware import load_gpu
from energylens.measurements.user_csv import _release
from energylens.model import build_graph
from energylens.model.spec import TensorRef
from energylens.model.zoo import get_model
from energylens.runtime import get_runtime
from energylens.runtime.profile import release_key

QWEN = "qwen3.5-397b-a17b"


def _mixer(name: str):
    return next(g for g in build_graph(get_model(name)).groups if g.name == "mamba")


def _kernels(name: str, fusion: frozenset[str], tp: int = 8) -> list[str]:
    group = _mixer(name)
    compiled = compile_layer(layer=group.layer, sizes={**group.sizes, "b": 4, "m": 1},
                             degrees={"tp": tp}, fusion=fusion)
    return ["+".join(op.name for op in kernel.ops) for kernel in compiled.kernels]


def test_sglang_merges_the_projections_from_0_5_10() -> None:
    """SGLang 0.5.9 runs in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; 0.5.10.post1
    in_proj_qkvz and in_proj_ba (read in both releases' qwen3_5.py)."""
    sglang = get_runtime("sglang")
    old = _kernels(QWEN, sglang.fusions_at(version="0.5.9"))
    new = _kernels(QWEN, sglang.fusions_at(version="0.5.10.post1"))
    assert [k for k in old if k.startswith("in_")] == ["in_q+in_k+in_v", "in_z", "in_beta",
                                                       "in_a"]
    assert [k for k in new if k.startswith("in_")] == ["in_q+in_k+in_v+in_z", "in_beta+in_a"]
    assert len(old) - len(new) == 2
    # a build without a release number takes the profile's (0.5.3): unmerged
    assert sglang.fusions_at() == sglang.default_fusions


def test_the_causal_convolution_is_one_kernel_in_every_engine() -> None:
    for runtime in ("vllm", "sglang", "trtllm", "llama.cpp"):
        convs = [k for k in _kernels(QWEN, get_runtime(runtime).fusions_at(), tp=1)
                 if "conv" in k]
        assert len(convs) == 1, (runtime, convs)
        assert convs[0].count("conv_") == 3 and convs[0].count("keep_") == 3


def test_the_recurrence_is_three_state_sized_products_per_token() -> None:
    """Per token and value head: recall S k, write beta (v - S k) k^T, read S q, each
    2 x 128 x 128 FLOPs; 64 value heads; 8 tokens."""
    group = _mixer(QWEN)
    sizes = {**group.sizes, "b": 1, "m": 8}
    products = {op.name: op_flops(op=op, sizes=sizes, window=None)
                for op in group.layer.ops if op.name in ("recall", "state", "out")}
    assert products == dict.fromkeys(("recall", "state", "out"), 2 * 8 * 64 * 128 * 128)


def test_b_and_a_stay_16_bit_in_a_quantised_checkpoint() -> None:
    group = _mixer(QWEN)
    weights = {t.name.split("__")[0]: t for op in group.layer.ops for t in op.inputs
               if t.name.startswith("W")}
    assert weight_dtype_of(weights["WGB"], "fp8") == weight_dtype_of(weights["WGA"], "fp8") \
        == "bf16"
    assert weight_dtype_of(weights["WZ"], "fp8") == "fp8"
    assert weight_dtype_of(TensorRef(name="WGB", ranks=("d",)), "nvfp4") == "bf16"


def test_a_sequence_holds_the_fp32_state_and_three_convolution_inputs() -> None:
    """45 mixers x (64 x 128 x 128 fp32 state + the last 3 inputs of the 2 x 2048 + 8192
    convolved channels in 16 bits); halved by TP 2."""
    graph = build_graph(get_model(QWEN))

    def state(tp: int) -> float:
        return memory_use(graph=graph, gpu=load_gpu("h200"), runtime=get_runtime("sglang"),
                          degrees={"tp": tp, "etp": tp, "ep": 1}, pp=1, weight_dtype="bf16",
                          kv_dtype="bf16", sequences=1, context_tokens=1).state_bytes

    by_hand = 45 * (64 * 128 * 128 * 4 + 3 * (2 * 2048 + 8192) * ACTIVATION_BYTES)
    assert state(1) == by_hand
    assert state(2) == by_hand / 2


@pytest.mark.parametrize("name", ["nightly-dev-20260216-d3bae71e", "glm5-hopper",
                                  "nightly-5b8c30d62b754b57"])
def test_a_build_without_a_release_number_is_not_one(name: str) -> None:
    """A nightly's date or a model's name in a build tag is not a release: measurement rows
    naming one take the profile's release."""
    with pytest.raises(EnergyLensError, match="not a release number"):
        release_key(name)
    assert _release(name) is None
    assert release_key("v0.5.10.post1") == (0, 5, 10) and _release("0.5.9") == "0.5.9"
