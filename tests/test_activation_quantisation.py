"""W8A8 / W4A4 linear layers read quantised activations: a quantisation kernel runs before
each one unless the kernel that made its input quantises it (fusions ``quant`` and
``epilogue_quant``)."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.step import SequenceGroup, StepContext, _compiled, step_cost
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import step_context

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _ctx(*, model: str = LLAMA, gpu: str = "H100-SXM", dtype: str = "fp8",
         runtime: str = "vllm", fusion: frozenset[str] | None = None,
         ep: int = 1, tp: int = 1) -> StepContext:
    return step_context(model=get_model(model), gpu=load_gpu(gpu),
                        deployment=Deployment(num_gpus=tp, tp=tp, ep=ep, weight_dtype=dtype,
                                              runtime=runtime, fusion=fusion),
                        calibration=default_calibration())


def _quantised(ctx: StepContext, group: int = 0) -> list[str]:
    compiled = _compiled(ctx.graph.groups[group], ctx.degrees, ctx.fusion,
                         ctx.activation_dtype)
    return [k.reads[0].name for k in compiled.kernels if k.name.startswith("quant_")]


def test_each_runtime_quantises_where_its_kernels_do() -> None:
    """Llama's four linear-layer inputs: the norms' outputs N and N2, the attention output
    O and the activation output Z. SGLang quantises all four in kernels of their own, vLLM
    only the attention output (Inductor fuses the rest into the norm and SiLU x mul),
    TensorRT-LLM none (fused everywhere); bf16 weights quantise nothing."""
    assert _quantised(_ctx(runtime="sglang")) == ["N", "O", "N2", "Z"]
    assert _quantised(_ctx(runtime="vllm")) == ["O"]
    assert _quantised(_ctx(runtime="trtllm")) == []
    for runtime in ("sglang", "vllm", "trtllm"):
        assert _quantised(_ctx(runtime=runtime, dtype="bf16")) == []


def test_weight_only_formats_and_gpus_without_the_units_keep_16_bit_activations() -> None:
    """FP8 on an A100 (no FP8 tensor cores) is dequantised in the GEMM; MXFP4 and INT4
    are weight-only formats; INT8 W8A8 quantises on every GPU (INT8 tensor cores)."""
    sglang = frozenset({"attention", "qkv", "gate_up", "norm_residual"})
    assert _quantised(_ctx(gpu="A100-80GB-SXM", fusion=sglang)) == []
    assert _quantised(_ctx(dtype="int4", fusion=sglang)) == []
    assert _quantised(_ctx(gpu="A100-80GB-SXM", dtype="int8", fusion=sglang)) == [
        "N", "O", "N2", "Z"]
    assert _quantised(_ctx(gpu="H100-SXM", dtype="nvfp4", fusion=sglang)) == []  # no FP4 units
    assert _quantised(_ctx(gpu="B200", dtype="nvfp4", fusion=sglang)) == ["N", "O", "N2", "Z"]


def test_a_plain_gemm_output_needs_the_epilogue_fusion() -> None:
    """DeepSeek-V3's MLA: the output projection reads the V up-projection's output, a
    batched GEMM with no vector op to quantise in, so vLLM (``quant`` only) quantises it in
    a kernel of its own and TensorRT-LLM (``epilogue_quant`` too) does not."""
    assert "O" in _quantised(_ctx(model="deepseek-v3", runtime="vllm"))
    assert _quantised(_ctx(model="deepseek-v3", runtime="trtllm")) == []


def test_fused_moe_experts_and_the_router_add_no_quantisation_kernel() -> None:
    """Qwen3-30B-A3B in FP8 under SGLang: the attention's inputs (N, O) are quantised; the
    router (bf16 weights) and the grouped expert GEMMs (quantised inside the fused MoE
    kernel, which the MoE kernel tables time whole) are not."""
    ctx = _ctx(model="qwen3-30b-a3b", runtime="sglang")
    assert _quantised(ctx) == ["N", "O"]


def test_one_quantisation_kernel_costs_its_floor_plus_three_bytes_per_element() -> None:
    """Hand value: 4,096 tokens of N (hidden 4,096) read in bf16 (2 B) and written in FP8
    (1 B): 3 x 4,096 x 4,096 bytes streamed at the elementwise class's share of HBM peak;
    the kernel takes at least that and its launch floor, at most their sum and its vector
    work (3 FLOP per element)."""
    ctx = _ctx(runtime="sglang")
    compiled = _compiled(ctx.graph.groups[0], ctx.degrees, ctx.fusion, ctx.activation_dtype)
    kernel = next(k for k in compiled.kernels if k.name == "quant_N")
    constants = ctx.constants
    gpu = ctx.gpu
    cost = kernel_cost(kernel=kernel, phase={"b": 1.0, "m": 4096.0}, window=None, gpu=gpu,
                       constants=constants, clock=ClockState.at(gpu=gpu, freq_mhz=None,
                                                                constants=constants),
                       weight_dtype="fp8")
    nbytes = 3.0 * 4096 * 4096
    assert cost.bytes == pytest.approx(nbytes)
    stream = nbytes / (gpu.hbm_bandwidth_bytes_per_s * constants.elementwise_bandwidth_efficiency)
    assert cost.memory_s == pytest.approx(stream, rel=1e-9)
    assert cost.flops == pytest.approx(3.0 * 4096 * 4096)
    vector_s = cost.flops / (gpu.peak_flops_per_s("fp32") * constants.vector_efficiency)
    floor = constants.elementwise_overhead_s
    assert max(stream, floor) < cost.latency_s <= stream + vector_s + floor


def test_a_standalone_quantisation_makes_the_step_slower_by_its_kernels() -> None:
    """Without the ``quant`` fusions an FP8 decode step takes longer, by at least the
    launch floors of its 4 x 32 quantisation kernels; with both fusions it costs what the
    same step costs with no quantisation priced at all."""
    fused = frozenset({"attention", "qkv", "gate_up", "norm_residual", "quant",
                       "epilogue_quant"})
    unfused = fused - {"quant", "epilogue_quant"}
    seqs = [SequenceGroup(sequences=8.0, new_tokens=1.0, context=1024.0)]
    slow = step_cost(ctx=_ctx(fusion=unfused), seqs=seqs).latency_s
    fast = step_cost(ctx=_ctx(fusion=fused), seqs=seqs).latency_s
    floor = _ctx().constants.elementwise_overhead_s
    assert float(slow - fast) >= 4 * 32 * floor
    assert float(slow - fast) < 4 * 32 * floor * 1.5  # 8 tokens: the floors dominate
