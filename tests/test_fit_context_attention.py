"""The prefill (context) attention efficiency and its half-point, fitted on measured kernel
tables; and the attention price they enter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_context_attention import (
    BOUNDS,
    FIELDS,
    ContextAttentionTable,
    fit_context_attention,
    predicted_s,
    read_table,
)
from energylens.calibration.run import discover
from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import load_gpu
from energylens.model.families import family_part, parse_layer

ROOT = Path(__file__).resolve().parents[1] / "data" / "measurements"
H100 = ROOT / "aiconfigurator/kernels/h100_sxm/attention/vllm/0.24.0/context_attention_perf.parquet"
CLOCK = ClockState(ratio=1.0, dynamic_scale=1.0)


def _kernel(*, heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
    layer = parse_layer(name="attention", parts=[family_part("attention")], norm="rmsnorm")
    compiled = compile_layer(layer=layer, sizes={"d": heads * head_dim, "g": kv_heads,
                                                 "r": heads // kv_heads, "e": head_dim},
                             degrees={}, fusion=frozenset({"attention"}))
    return next(k for k in compiled.kernels if k.name == "qk+soft+av")


def _synthetic(efficiency: float, half: float) -> ContextAttentionTable:
    """Rows the cost model itself prices at ``efficiency`` and ``half`` (times 2 % seeded
    noise): the fit must give them back. Prompts of 1k to 16k tokens, 1 to 8 query heads
    per KV head, head dims 64 and 128."""
    shapes = [(32, 8, 128), (8, 8, 128), (64, 8, 64), (16, 2, 128)]
    isl = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0]
    rows = [(b, s, *shape) for shape in shapes for s in isl for b in (1.0, 4.0)]
    batch, length, heads, kv_heads, dim = (np.array(v) for v in zip(*rows, strict=True))
    table = ContextAttentionTable(path=Path("synthetic"), gpu="H100-SXM", batch=batch,
                                  isl=length, heads=heads.astype(int),
                                  kv_heads=kv_heads.astype(int), head_dim=dim.astype(int),
                                  latency_s=np.ones(batch.size))
    constants = replace(default_calibration().kernel("H100-SXM"),
                        **dict(zip(FIELDS, (efficiency, half), strict=True)))
    times = predicted_s(table=table, rows=np.ones(batch.size, dtype=bool),
                        gpu=load_gpu("h100"), constants=constants)
    noise = np.exp(np.random.default_rng(7).normal(0.0, 0.02, batch.size))
    return replace(table, latency_s=times * noise)


def test_the_fit_recovers_both_constants_from_the_models_own_times():
    result = fit_context_attention(table=_synthetic(0.6, 900.0),
                                   constants=default_calibration().kernel("H100-SXM"))
    assert result.values["attention_efficiency_max"] == pytest.approx(0.6, rel=0.03)
    assert result.values["attention_m_half"] == pytest.approx(900.0, rel=0.05)
    assert result.in_sample["latency"].mape < 0.03
    assert result.leave_out["latency"].mape < 0.04
    assert not result.at_bound


def test_the_measured_h100_prefill_attention_fit_is_inside_its_bounds():
    """vLLM's FA3 prefill on H100: both constants identified (inside their ranges, at
    neither bound), the half-point far above the GEMM's 16-ish rows (the slow ramp with
    the prompt the measurements show), and the held-out half predicted about as well as
    the fitted one, within 20 %."""
    table = read_table(path=H100)
    assert table.gpu == "H100-SXM" and table.latency_s.size == 1500
    assert table.isl.min() >= 1024
    result = fit_context_attention(table=table,
                                   constants=default_calibration().kernel("H100-SXM"))
    for name, (low, high) in zip(FIELDS, BOUNDS, strict=True):
        assert low < result.values[name] < high
    assert not result.at_bound
    assert result.values["attention_m_half"] > 500.0
    assert result.leave_out["latency"].mape < 0.20
    assert result.leave_out["latency"].mape < 1.2 * result.in_sample["latency"].mape + 0.02


#: No power drawn: no kernel is throttled, so compute times are the unclocked ones.
UNTHROTTLED = KernelConstants(static_power_w=0.0, busy_power_w=0.0,
                              energy_per_tensor_flop_j=0.0, energy_per_vector_flop_j=0.0,
                              energy_per_hbm_byte_j=0.0)


def _compute_s(kernel, phase: dict, vector_efficiency: float) -> float:
    constants = replace(UNTHROTTLED, vector_efficiency=vector_efficiency)
    return float(kernel_cost(kernel=kernel, phase=phase, window=None, gpu=load_gpu("h100"),
                             constants=constants, clock=CLOCK, weight_dtype="bf16").compute_s)


@pytest.mark.parametrize("phase", [{"b": 1.0, "m": 4096.0, "p": 4096.0},
                                   {"b": 8.0, "m": 512.0, "p": 2048.0},
                                   {"b": 32.0, "m": 1.0, "p": 8192.0}])
def test_fused_attention_runs_its_softmax_under_the_mmas(phase):
    """A fused attention kernel's compute time is the slower of its MMAs and its softmax:
    with the softmax nearly free it is the MMAs' time; with the softmax dominant it scales
    as 1 / vector efficiency; in between, the larger of the two, never their sum."""
    kernel = _kernel()
    tensor_s = _compute_s(kernel, phase, 1e6)
    assert _compute_s(kernel, phase, 1e7) == pytest.approx(tensor_s, rel=1e-12)
    slow = 1e-5
    vector_at = _compute_s(kernel, phase, slow) * slow  # vector seconds x efficiency
    assert _compute_s(kernel, phase, slow / 2) == pytest.approx(2 * vector_at / slow, rel=1e-9)
    for efficiency in (0.02, 0.05, 0.25, 1.0):
        expected = max(tensor_s, vector_at / efficiency)
        assert _compute_s(kernel, phase, efficiency) == pytest.approx(expected, rel=1e-6)


def test_a_gemm_with_a_vector_epilogue_still_adds_the_two():
    """The gate/up GEMM with SiLU x mul in its epilogue (fusion ``act``) is no attention
    kernel: its vector time adds to its tensor time."""
    layer = parse_layer(name="mlp", parts=[family_part("mlp_gated")], norm="rmsnorm")
    compiled = compile_layer(layer=layer, sizes={"d": 4096, "f": 14336}, degrees={},
                             fusion=frozenset({"gate_up", "act"}))
    kernel = next(k for k in compiled.kernels if k.name == "gate+up+act")
    phase = {"b": 1.0, "m": 4096.0}
    tensor_s = _compute_s(kernel, phase, 1e6)
    for efficiency in (0.05, 0.25):
        vector_s = (_compute_s(kernel, phase, 1e-5) - tensor_s) * 1e-5 / efficiency
        assert _compute_s(kernel, phase, efficiency) == pytest.approx(tensor_s + vector_s,
                                                                        rel=1e-6)


def test_the_half_point_slows_prefill_only_and_counts_keys():
    """With a half-point: decode (one new token) is priced as without it; a prompt is
    slower; a chunk of 512 tokens after 7,680 cached ones ramps over its 8,192 keys (as
    fast per FLOP as an 8k prompt, faster than a 512-token prompt); a sliding window clips
    the keys; the scalar and array paths agree."""
    kernel, gpu = _kernel(), load_gpu("h100")
    base = default_calibration().kernel("H100-SXM")
    ramped = replace(base, attention_m_half=4000.0)

    def cost(constants: KernelConstants, m: float, p: float, window: float | None = None):
        return kernel_cost(kernel=kernel, phase={"b": 2.0, "m": m, "p": p}, window=window,
                           gpu=gpu, constants=constants, clock=CLOCK, weight_dtype="bf16")

    assert cost(ramped, 1.0, 4096.0).latency_s == cost(base, 1.0, 4096.0).latency_s
    assert cost(ramped, 4096.0, 4096.0).compute_s > 1.1 * cost(base, 4096.0, 4096.0).compute_s

    def per_flop(m: float, p: float, window: float | None = None) -> float:
        c = cost(ramped, m, p, window)
        return float(c.compute_s) / float(c.flops)

    assert per_flop(512.0, 8192.0) == pytest.approx(per_flop(8192.0, 8192.0), rel=0.02)
    assert per_flop(512.0, 8192.0) < 0.5 * per_flop(512.0, 512.0)
    assert per_flop(512.0, 8192.0, window=512.0) > 1.5 * per_flop(512.0, 8192.0)
    m = np.array([1.0, 2.0, 512.0, 4096.0, 512.0])
    p = np.array([4096.0, 4096.0, 8192.0, 4096.0, 512.0])
    for window in (None, 1024.0):
        array = kernel_cost(kernel=kernel, phase={"b": 2.0, "m": m, "p": p}, window=window,
                            gpu=gpu, constants=ramped, clock=CLOCK, weight_dtype="bf16")
        scalar = [cost(ramped, float(mi), float(pi), window).latency_s
                  for mi, pi in zip(m, p, strict=True)]
        np.testing.assert_allclose(array.latency_s, scalar, rtol=1e-9)


def test_calibrate_finds_the_context_attention_tables():
    data = discover(ROOT)
    assert H100 in data.context_attention_tables and len(data.context_attention_tables) >= 6
    assert H100 in data.all_files()
