"""Weights a published low-bit checkpoint keeps in 16 bits (``ModelConfig.held_16bit``):
NVIDIA's NVFP4 releases of the large MoE models quantise the routed experts and leave the
attention (and, for Qwen3.5, the linear attention and the shared expert) in 16 bits, as
their ``hf_quant_config.json`` exclude lists say."""

from __future__ import annotations

import dataclasses

import pytest

from energylens.cost.kernels import compile_layer
from energylens.cost.memory import memory_use
from energylens.cost.work import DTYPE_BYTES, weight_dtype_of
from energylens.errors import ModelConfigError
from energylens.hardware import load_gpu
from energylens.model import build_graph
from energylens.model.config import check_model_config
from energylens.model.zoo import get_model, list_models
from energylens.runtime import get_runtime


def _weights(group) -> dict[str, object]:
    return {t.name.split("__")[0]: t for op in group.layer.ops for t in op.inputs
            if t.name.startswith("W")}


def test_glm5_keeps_its_attention_16_bit_in_nvfp4_only() -> None:
    moe = next(g for g in build_graph(get_model("glm-5")).groups if g.name.startswith("moe"))
    weights = _weights(moe)
    for name in ("WQA", "WQB", "WKVA", "WUK", "WUV", "WO", "WIQ", "WIK", "WIW"):
        assert weight_dtype_of(weights[name], "nvfp4") == "bf16", name
        assert weight_dtype_of(weights[name], "fp8") == "fp8", name  # its FP8 release
    experts = [t for n, t in weights.items() if n.startswith("WE")]
    assert experts and all(weight_dtype_of(t, "nvfp4") == "nvfp4" for t in experts)


def test_a_16_bit_linear_layer_reads_16_bit_activations() -> None:
    """No quantisation kernel before q_a/kv_a of GLM-5 under NVFP4; one under FP8."""
    moe = next(g for g in build_graph(get_model("glm-5")).groups if g.name.startswith("moe"))

    def names(dtype: str) -> list[str]:
        compiled = compile_layer(layer=moe.layer, sizes={**moe.sizes, "b": 4, "m": 1, "p": 100},
                                 degrees={"tp": 8}, fusion=get_runtime("sglang").fusions_at(),
                                 activation_dtype=dtype)
        return [k.name for k in compiled.kernels]

    fp4, fp8 = names("nvfp4"), names("fp8")
    assert fp8[fp8.index("q_a+kv_a") - 1].startswith("quant_")
    assert not fp4[fp4.index("q_a+kv_a") - 1].startswith("quant_")


def test_qwen35_nvfp4_weights_add_up_by_hand() -> None:
    """What Qwen3.5-397B-A17B's NVFP4 release holds in 16 bits: 45 mixers (q/k/v 4096 x
    12288, z 4096 x 8192, out 8192 x 4096; b and a are 16-bit in every checkpoint), 15
    attention layers (q with its gate 4096 x 16384, o 8192 x 4096, and k/v 4096 x 512 per
    GPU: TP 4 over 2 KV heads of 256 leaves each GPU one), 60 shared experts (3 x 4096 x
    1024), a quarter of each on one GPU of TP 4 but k/v: (2 - 4.5/8) bytes more per such
    weight than a checkpoint that quantised them."""
    model = get_model("qwen3.5-397b-a17b")
    plain = dataclasses.replace(model, held_16bit=())

    def weights(m) -> float:
        return memory_use(graph=build_graph(m), gpu=load_gpu("b200"),
                          runtime=get_runtime("sglang"), degrees={"tp": 4, "etp": 4, "ep": 1},
                          pp=1, weight_dtype="nvfp4", kv_dtype="bf16", sequences=1,
                          context_tokens=1).weights_bytes

    mixer = 4096 * 12288 + 4096 * 8192 + 8192 * 4096
    attention = 4096 * 16384 + 8192 * 4096
    shared = 3 * 4096 * 1024
    per_gpu = (45 * mixer + 15 * attention + 60 * shared) / 4 + 15 * 4096 * 512
    extra = per_gpu * (DTYPE_BYTES["bf16"] - DTYPE_BYTES["nvfp4"])
    assert weights(model) - weights(plain) == pytest.approx(extra, rel=1e-9)


def test_held_16bit_is_checked() -> None:
    model = get_model("glm-5")
    for bad in ((("bf16", ("WQA",)),), (("nvfp4", ("q_a",)),), (("nvfp4", ()),)):
        with pytest.raises(ModelConfigError, match="held_16bit"):
            check_model_config(dataclasses.replace(model, held_16bit=bad), where="test")


@pytest.mark.parametrize("name", [m.name for m in list_models() if get_model(m.name).held_16bit])
def test_every_held_weight_is_one_the_model_has(name: str) -> None:
    """A zoo entry's held_16bit names weights its layers read (a typo would hold nothing;
    a model variant without an op, such as an output gate, simply holds less)."""
    model = get_model(name)
    graph = build_graph(model)
    read = {t.name.split("__")[0] for g in graph.groups
            for layer in (g.layer, g.prompt_attention) if layer
            for op in layer.ops for t in op.inputs}
    for _, weights in model.held_16bit:
        assert set(weights) <= read, sorted(set(weights) - read)
