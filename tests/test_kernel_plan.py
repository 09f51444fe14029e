"""Kernel plans (the per-kernel facts pricing reads, built once) and the number path of
``kernel_cost``: a kernel priced at numbers costs what it costs inside an array."""

from __future__ import annotations

import numpy as np
import pytest

from energylens.cost.constants import KernelConstants
from energylens.cost.kernel_plan import kernel_plan, weight_bytes_fixed
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import ACTIVE_EXPERTS, Size, tensor_bytes
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model

GPU = load_gpu("H100")


FUSED = frozenset({"qkv", "gate_up", "attention"})


def _kernels(model: str, degrees: dict[str, int],
             fusion: frozenset[str] = FUSED) -> list[tuple[Kernel, float | None]]:
    graph = build_graph(get_model(model))
    out: list[tuple[Kernel, float | None]] = []
    for group in (*graph.groups, graph.head_group):
        compiled = compile_layer(layer=group.layer, sizes=group.sizes, degrees=degrees,
                                 fusion=fusion)
        out.extend((kernel, group.window) for kernel in compiled.kernels)
    return out


CASES = [("llama-3.1-70b", {"tp": 4, "etp": 1, "ep": 1}),
         ("qwen3-30b-a3b", {"tp": 1, "etp": 1, "ep": 8})]


@pytest.mark.parametrize(("model", "degrees"), CASES)
@pytest.mark.parametrize("constants", [KernelConstants(),  # a hot kernel throttles
                                       KernelConstants(energy_per_tensor_flop_j=5e-12)])
@pytest.mark.parametrize("fusion", [FUSED, frozenset()])  # unfused: the cache read apart
def test_numbers_cost_what_the_same_values_cost_inside_arrays(model, degrees, constants,
                                                              fusion) -> None:
    """Every kernel of a dense and an MoE model, priced at number phases, equals the same
    configuration priced as one element of an array phase (the vectorised path), to 1e-14
    (bit for bit unthrottled; the power cap's bisection runs on arrays either way)."""
    clock = ClockState.at(gpu=GPU, freq_mhz=None, constants=constants)
    batches = np.array([1.0, 7.0, 64.0, 300.0])
    tokens = np.array([1.0, 1.0, 512.0, 2048.0])
    contexts = np.array([17.0, 1024.0, 512.0, 4096.0])
    active = np.array([1.0, 3.5, 16.0, 16.0])
    for kernel, window in _kernels(model, degrees, fusion):
        many: dict[str, Size] = {"b": batches, "m": tokens, "p": contexts, "n": np.ones(4), "t": tokens,
                ACTIVE_EXPERTS: active}
        arrays = kernel_cost(kernel=kernel, phase=many, window=window, gpu=GPU,
                             constants=constants, clock=clock, weight_dtype="fp8")
        for i in range(len(batches)):
            one: dict[str, Size] = {k: float(np.asarray(v)[i]) for k, v in many.items()}
            number = kernel_cost(kernel=kernel, phase=one, window=window, gpu=GPU,
                                 constants=constants, clock=clock, weight_dtype="fp8")
            for field in ("latency_s", "compute_energy_j", "memory_energy_j", "flops", "bytes"):
                got, want = getattr(number, field), np.asarray(getattr(arrays, field))[i]
                assert np.ndim(got) == 0
                assert got == pytest.approx(float(want), rel=1e-14, abs=0.0), (kernel.name, field)


def test_a_plan_is_built_once_per_kernel_and_setting() -> None:
    kernel, window = _kernels(*CASES[0])[1]
    constants = KernelConstants()
    plan = kernel_plan(kernel=kernel, gpu=GPU, constants=constants, weight_dtype="bf16",
                       kv_dtype="bf16", window=window)
    assert kernel_plan(kernel=kernel, gpu=GPU, constants=constants, weight_dtype="bf16",
                       kv_dtype="bf16", window=window) is plan
    fp8 = kernel_plan(kernel=kernel, gpu=GPU, constants=constants, weight_dtype="fp8",
                      kv_dtype="bf16", window=window)
    assert fp8 is not plan


def test_weight_bytes_are_fixed_until_a_phase_names_active_experts() -> None:
    """A weight's bytes read only its own ranks: the plan's number is tensor_bytes'; an
    expert weight under an active-expert count is priced per call (fewer experts read)."""
    constants = KernelConstants()
    expert_weights = 0
    for kernel, window in _kernels(*CASES[1]):
        plan = kernel_plan(kernel=kernel, gpu=GPU, constants=constants, weight_dtype="fp8",
                           kv_dtype="bf16", window=window)
        for tensor in plan.tensors:
            if not tensor.tensor.name.startswith("W"):
                assert tensor.fixed_bytes is None
                continue
            assert tensor.fixed_bytes == tensor_bytes(tensor=tensor.tensor, sizes=dict(tensor.sizes),
                                                      weight_dtype="fp8", window=window)
            phase = {"b": 4.0, "m": 1.0}
            assert weight_bytes_fixed(tensor, phase)
            if tensor.expert_weight:
                expert_weights += 1
                assert not weight_bytes_fixed(tensor, {**phase, ACTIVE_EXPERTS: 3.0})
    assert expert_weights >= 2  # the routed experts' gate/up and down projections


def test_unfused_attention_reads_the_kv_cache_at_the_caches_own_efficiency() -> None:
    """The score and value contractions of an unfused attention gather the same paged
    cache the fused kernel does: their plans say so, a plain GEMM's does not, and a decode
    step of 32 sequences at 2,048 tokens of context is no faster unfused with H100's
    shipped constants (it was: 99.9 us a layer against the fused kernel's 109.2, its cache
    streamed at the generic 98 % of HBM peak against the fused kernel's fitted 84 %, so
    dropping the fusion looked like a speed-up; now 113.8 us)."""
    from energylens.calibration.file import default_calibration

    graph = build_graph(get_model("llama-3.1-8b"))
    layer = graph.groups[0]
    constants = default_calibration().kernel(GPU.name)
    clock = ClockState.at(gpu=GPU, freq_mhz=None, constants=constants)
    phase: dict[str, Size] = {"b": 32.0, "m": 1.0, "p": 2048.0, "n": 1.0, "t": 32.0}

    def attention_s(fusion: frozenset[str]) -> float:
        compiled = compile_layer(layer=layer.layer, sizes=layer.sizes, degrees={"tp": 1},
                                 fusion=fusion)
        total = 0.0
        for kernel in compiled.kernels:
            plan = kernel_plan(kernel=kernel, gpu=GPU, constants=constants, weight_dtype="bf16",
                               kv_dtype="bf16", window=layer.window)
            if not any(op.causal for op in kernel.ops):
                assert not plan.reads_kv_cache, kernel.name
                continue
            assert plan.reads_kv_cache or not any(
                t.name in ("KC", "VC") for op in kernel.ops for t in op.inputs), kernel.name
            total += float(kernel_cost(kernel=kernel, phase=phase, window=layer.window,
                                       gpu=GPU, constants=constants, clock=clock,
                                       weight_dtype="bf16").latency_s)
        return total

    fused, unfused = attention_s(frozenset({"attention"})), attention_s(frozenset())
    assert unfused >= fused
