"""Quantised checkpoints keep the LM head, router and embedding in 16 bits."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.memory import memory_use
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.params import parameter_count
from energylens.model.zoo import get_model
from energylens.predict import step_context


def _weights_bytes(model_name: str, dtype: str) -> float:
    model, gpu = get_model(model_name), load_gpu("H100")
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(weight_dtype=dtype),
                       calibration=default_calibration())
    return memory_use(graph=ctx.graph, gpu=gpu, runtime=ctx.runtime, degrees=dict(ctx.degrees),
                      pp=1, weight_dtype=dtype, kv_dtype="bf16", sequences=1.0,
                      context_tokens=1.0).weights_bytes


def test_fp8_llama_stores_everything_but_embedding_and_head_in_one_byte() -> None:
    """Llama-3.1-8B: untied 128,256 x 4,096 embedding and LM head stay bf16 (2 B), the
    other parameters take 1 B; norms are counted as weights nowhere in the memory model."""
    model = get_model("llama-3.1-8b")
    total, _ = parameter_count(model)
    head = 2 * model.vocab_size * model.hidden_size
    norms = model.hidden_size * (2 * model.num_layers + 1)
    expected = (total - head - norms) * 1.0 + head * 2.0
    assert _weights_bytes("llama-3.1-8b", "fp8") == pytest.approx(expected, rel=1e-9)
    assert _weights_bytes("llama-3.1-8b", "bf16") == pytest.approx(2 * (total - norms), rel=1e-9)


def test_the_router_of_an_fp8_moe_stays_bf16() -> None:
    """Qwen3-30B-A3B in FP8: every weight at 1 B (half its bf16 bytes), plus one more byte
    for each parameter of the embedding, the LM head and the 48 routers (2,048 x 128)."""
    model = get_model("qwen3-30b-a3b")
    assert model.moe is not None
    head = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    routers = model.num_layers * model.hidden_size * model.moe.num_experts
    expected = _weights_bytes("qwen3-30b-a3b", "bf16") / 2 + head + routers
    assert _weights_bytes("qwen3-30b-a3b", "fp8") == pytest.approx(expected, rel=1e-9)


def test_gpt_oss_keeps_attention_in_bf16_memory() -> None:
    """MXFP4 quantises only the routed experts: attention weights take 2 B in memory."""
    mxfp4 = _weights_bytes("gpt-oss-20b", "mxfp4")
    bf16 = _weights_bytes("gpt-oss-20b", "bf16")
    assert 0.25 * bf16 < mxfp4 < 0.5 * bf16  # experts are ~90 % of it, at 4.25 bits
    nvfp4_everything = _weights_bytes("gpt-oss-20b", "nvfp4")
    assert nvfp4_everything < mxfp4  # NVFP4 quantises attention too (4.5 bits)
