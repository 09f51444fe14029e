"""The decode-attention KV bandwidth efficiency and tile time, fitted on measured kernel
tables."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_kv_attention import (
    FIELDS,
    DecodeAttentionTable,
    fit_kv_attention,
    predicted_s,
    read_table,
)
from energylens.calibration.run import discover
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.hardware import load_gpu
from energylens.model.families import family_part, parse_layer

ROOT = Path(__file__).resolve().parents[1] / "data" / "measurements"
H100 = ROOT / "aiconfigurator/kernels/h100_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"


def _synthetic(efficiency: float, tile_s: float) -> DecodeAttentionTable:
    """Rows the cost model itself prices at ``efficiency`` and ``tile_s``: the fit must
    give them back. Long contexts of few sequences and short ones of many."""
    batch = np.array([1.0, 8.0, 64.0, 256.0, 16.0, 128.0, 1024.0, 512.0])
    context = np.array([4096.0, 2048.0, 1024.0, 512.0, 8192.0, 256.0, 64.0, 128.0])
    heads, kv_heads, dim = (np.array(v) for v in ([32, 32, 64, 8, 40, 16, 32, 64],
                                                  [8, 8, 8, 1, 8, 2, 8, 8],
                                                  [128, 128, 64, 128, 128, 128, 128, 128]))
    table = DecodeAttentionTable(path=Path("synthetic"), gpu="H100-SXM", batch=batch,
                                 context=context, heads=heads, kv_heads=kv_heads, head_dim=dim,
                                 latency_s=np.ones(batch.size))
    constants = replace(default_calibration().kernel("H100-SXM"),
                        **dict(zip(FIELDS, (efficiency, tile_s), strict=True)))
    times = predicted_s(table=table, rows=np.ones(batch.size, dtype=bool), gpu=load_gpu("h100"),
                        constants=constants)
    return replace(table, latency_s=times)


def test_the_fit_recovers_both_constants_from_the_models_own_times():
    result = fit_kv_attention(table=_synthetic(0.55, 30e-9),
                              constants=default_calibration().kernel("H100-SXM"))
    assert result.values["kv_bandwidth_efficiency"] == pytest.approx(0.55, abs=2e-3)
    assert result.values["attention_tile_s"] == pytest.approx(30e-9, rel=0.01)
    assert result.in_sample["latency"].mape < 1e-3
    assert not result.at_bound


def test_the_tile_time_is_paid_per_sequence_and_kv_head():
    """The decode kernel's memory time grows by sequences x KV heads x the tile time
    (hand-computed: 1,024 sequences of 8 KV heads at 20 ns, 164 us); its bytes do not."""
    layer = parse_layer(name="attention", parts=[family_part("attention")], norm="rmsnorm")
    compiled = compile_layer(layer=layer, sizes={"d": 4096, "g": 8, "r": 4, "e": 128},
                             degrees={}, fusion=frozenset({"attention"}))
    kernel = next(k for k in compiled.kernels if k.name == "qk+soft+av")
    base = default_calibration().kernel("H100-SXM")
    costs = [kernel_cost(kernel=kernel, phase={"b": 1024.0, "m": 1.0, "p": 65.0}, window=None,
                         gpu=load_gpu("h100"), constants=replace(base, attention_tile_s=tile),
                         clock=ClockState(ratio=1.0, dynamic_scale=1.0), weight_dtype="bf16")
             for tile in (0.0, 20e-9)]
    assert costs[1].bytes == costs[0].bytes
    assert costs[1].memory_s - costs[0].memory_s == pytest.approx(1024 * 8 * 20e-9)


def test_kv_reads_dominate_the_measured_h100_decode_attention():
    """On vLLM's measured FA3 decode kernels the fitted share of HBM peak is physical
    (well under 1), a tile costs tens of nanoseconds (not at a bound), and the held-out
    half is predicted about as well as the fitted one."""
    table = read_table(path=H100)
    assert table.gpu == "H100-SXM" and table.latency_s.size > 1000
    result = fit_kv_attention(table=table, constants=default_calibration().kernel("H100-SXM"))
    assert 0.4 < result.values["kv_bandwidth_efficiency"] < 0.95
    assert 1e-9 < result.values["attention_tile_s"] < 1e-7
    assert not result.at_bound
    assert result.leave_out["latency"].mape < 1.2 * result.in_sample["latency"].mape + 0.02


def test_calibrate_finds_the_decode_attention_tables():
    tables = discover(ROOT).decode_attention_tables
    assert H100 in tables and len(tables) >= 5
