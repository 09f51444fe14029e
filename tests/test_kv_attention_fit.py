"""The decode-attention KV bandwidth efficiency, fitted on measured kernel tables."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_kv_attention import (
    FIELD,
    DecodeAttentionTable,
    fit_kv_attention,
    predicted_s,
    read_table,
)
from energylens.calibration.run import discover
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1] / "data" / "measurements"
H100 = ROOT / "aiconfigurator/kernels/h100_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"


def _synthetic(efficiency: float) -> DecodeAttentionTable:
    """Rows the cost model itself prices at ``efficiency``: the fit must give it back."""
    batch = np.array([1.0, 8.0, 64.0, 256.0, 16.0, 128.0])
    context = np.array([4096.0, 2048.0, 1024.0, 512.0, 8192.0, 256.0])
    heads, kv_heads, dim = (np.array(v) for v in ([32, 32, 64, 8, 40, 16], [8, 8, 8, 1, 8, 2],
                                                  [128, 128, 64, 128, 128, 128]))
    table = DecodeAttentionTable(path=Path("synthetic"), gpu="H100-SXM", batch=batch,
                                 context=context, heads=heads, kv_heads=kv_heads, head_dim=dim,
                                 latency_s=np.ones(6))
    constants = replace(default_calibration().kernel("H100-SXM"), **{FIELD: efficiency})
    times = predicted_s(table=table, rows=np.ones(6, dtype=bool), gpu=load_gpu("h100"),
                        constants=constants)
    return replace(table, latency_s=times)


def test_the_fit_recovers_an_efficiency_from_the_models_own_times():
    result = fit_kv_attention(table=_synthetic(0.55),
                              constants=default_calibration().kernel("H100-SXM"))
    assert result.values[FIELD] == pytest.approx(0.55, abs=2e-3)
    assert result.in_sample["latency"].mape < 1e-3
    assert not result.at_bound


def test_kv_reads_dominate_the_measured_h100_decode_attention():
    """On vLLM's measured FA3 decode kernels the fitted share of HBM peak is physical
    (well under 1), the held-out half is predicted about as well as the fitted one."""
    table = read_table(path=H100)
    assert table.gpu == "H100-SXM" and table.latency_s.size > 1000
    result = fit_kv_attention(table=table, constants=default_calibration().kernel("H100-SXM"))
    assert 0.4 < result.values[FIELD] < 0.95
    assert result.leave_out["latency"].mape < 1.2 * result.in_sample["latency"].mape + 0.02


def test_calibrate_finds_the_decode_attention_tables():
    tables = discover(ROOT).decode_attention_tables
    assert H100 in tables and len(tables) >= 5
