"""Weight formats of quantised releases (FP8, AWQ/GPTQ int4, NVFP4): the weight dtype
reaches memory and the roofline with the bytes per weight of the format."""

from __future__ import annotations

import dataclasses

import pytest

from energylens.cost.memory import memory_use
from energylens.cost.work import DTYPE_BYTES
from energylens.deployment import Workload
from energylens.hardware import load_gpu
from energylens.model import build_graph, get_model
from energylens.predict import predict
from energylens.runtime import DEFAULT_RUNTIME, get_runtime


def test_bytes_per_weight_of_the_formats() -> None:
    # AWQ/GPTQ: 4 bits + a 16-bit scale and a 4-bit zero per group of 128 weights.
    assert DTYPE_BYTES["int4"] == pytest.approx((4 + (16 + 4) / 128) / 8)
    # NVFP4: 4 bits + an 8-bit scale per 16 weights.
    assert DTYPE_BYTES["nvfp4"] == pytest.approx((4 + 8 / 16) / 8)


@pytest.mark.parametrize("dtype", ["fp8", "int4", "nvfp4"])
def test_weight_bytes_scale_with_the_format(dtype: str) -> None:
    model = get_model("qwen3-8b")

    def weights(weight_dtype: str) -> float:
        return memory_use(graph=build_graph(model), gpu=load_gpu("h100"),
                          runtime=get_runtime(DEFAULT_RUNTIME),
                          degrees={"tp": 1, "etp": 1, "ep": 1}, pp=1, weight_dtype=weight_dtype,
                          kv_dtype="bf16",
                          sequences=1, context_tokens=1).weights_bytes

    # Every weight takes the format's bytes except the untied embedding and LM head (bf16).
    head = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    quantised = weights("bf16") / 2.0 - head
    assert weights(dtype) == pytest.approx(quantised * DTYPE_BYTES[dtype] + head * 2.0)


def test_a_4_bit_release_decodes_faster_than_bf16_at_batch_1() -> None:
    """Decode at batch 1 streams the weights: 4-bit weights make it faster and cheaper."""
    workload = Workload(batch=1, input_tokens=256, output_tokens=64)
    model = get_model("qwen3-8b")
    bf16 = predict(model=model, gpu="h100", workload=workload)
    awq = predict(model=dataclasses.replace(model, weight_dtype="int4"), gpu="h100",
                  workload=workload)
    assert awq.tpot_s < bf16.tpot_s
    assert awq.decode.energy_j < bf16.decode.energy_j
    assert awq.memory_per_gpu_gb < bf16.memory_per_gpu_gb


def test_nvfp4_computes_in_fp4_where_the_gpu_has_fp4_units() -> None:
    b200, h100 = load_gpu("b200"), load_gpu("h100")
    assert b200.peak_flops_per_s("fp4") == b200.dense_flops_per_s["fp4"]
    assert h100.peak_flops_per_s("fp4") == h100.dense_flops_per_s["bf16"]
    workload = Workload(batch=64, input_tokens=2048, output_tokens=8)
    model = dataclasses.replace(get_model("llama-3.1-8b"), weight_dtype="nvfp4")
    for gpu in ("b200", "h100"):
        result = predict(model=model, gpu=gpu, workload=workload)
        assert result.feasible and result.prefill.latency_s > 0
