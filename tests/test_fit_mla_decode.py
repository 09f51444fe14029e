"""MLA's decode-form attention: its own constants, fitted on TensorRT-LLM's MLA generation
table, and the prices they enter (only MLA decode attention)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_mla_decode import (
    FIELDS,
    MIN_HEADS,
    MlaDecodeTable,
    fit_mla_decode,
    predicted_s,
    read_table,
)
from energylens.calibration.run import discover
from energylens.cost.constants import MLA_DECODE_ROW_TILE, KernelConstants
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1] / "data" / "measurements"
H200 = ROOT / "aiconfigurator/kernels/h200_sxm/mla/trtllm/1.3.0rc20/generation_mla_perf.parquet"
TRUE = dict(zip(FIELDS, (0.7, 0.85, 40e-9, 14e-6), strict=True))


def _table(heads: tuple[int, ...], kv: str = "bf16") -> MlaDecodeTable:
    rows = [(b, p, h) for h in heads for p in (128.0, 1024.0, 8192.0, 32768.0)
            for b in (1.0, 16.0, 128.0, 512.0)]
    batch, context, head = (np.array(v) for v in zip(*rows, strict=True))
    return MlaDecodeTable(path=Path("synthetic"), gpu="H200-SXM", batch=batch, context=context,
                          heads=head.astype(int), kv_dtype=np.full(batch.size, kv),
                          latency_s=np.ones(batch.size))


def _priced(table: MlaDecodeTable, values: dict[str, float], gpu: str = "H200-SXM") -> np.ndarray:
    constants = replace(default_calibration().kernel(gpu), **values)
    return predicted_s(table=table, rows=np.ones(table.batch.size, dtype=bool),
                       gpu=load_gpu(gpu), constants=constants)


def test_fit_recovers_the_constants_it_was_priced_with() -> None:
    table = _table((16, 32, 64, 128))
    noise = np.exp(np.random.default_rng(5).normal(0.0, 0.02, table.batch.size))
    table = replace(table, latency_s=_priced(table, TRUE) * noise)
    result = fit_mla_decode(table=table, constants=default_calibration().kernel("H200-SXM"))
    for name, value in TRUE.items():
        assert result.values[name] == pytest.approx(value, rel=0.15), name
    assert result.at_bound == []
    assert result.leave_out["latency"].mape < 0.05  # held-out halves: the same kernel


def test_heads_within_one_row_tile_stream_the_cache_once() -> None:
    """1-64 query heads share one 64-row tile: where the cache stream binds, 16 and 64
    heads take the same time (the table's flat rows); 128 heads take two tiles' MMAs."""
    assert MLA_DECODE_ROW_TILE == 64.0
    streaming = _priced(_table((16, 64)), TRUE).reshape(2, -1)
    long_batches = slice(-2, None)  # 32k tokens, the largest batches
    assert streaming[0, long_batches] == pytest.approx(streaming[1, long_batches], rel=0.02)
    computing = _priced(_table((64, 128)), replace_fields(TRUE, 0.2)).reshape(2, -1)
    assert computing[1, -1] == pytest.approx(2.0 * computing[0, -1], rel=0.05)


def replace_fields(values: dict[str, float], efficiency: float) -> dict[str, float]:
    return {**values, "mla_decode_efficiency_max": efficiency}


def test_fp8_cache_runs_fp8_mmas_on_blackwell_only() -> None:
    """A compute-bound shape (efficiency low enough that MMAs bind): an FP8 cache halves
    its MMA time on B200 (FP8 rate), not on H200 (dequantised to BF16)."""
    values = replace_fields(TRUE, 0.1)
    for gpu, speedup in (("B200", 2.0), ("H200-SXM", 1.0)):
        bf16 = _priced(replace(_table((128,)), gpu=gpu), values, gpu=gpu)[-1]
        fp8 = _priced(replace(_table((128,), kv="fp8"), gpu=gpu), values, gpu=gpu)[-1]
        assert bf16 / fp8 == pytest.approx(speedup, rel=0.1), gpu


def test_table_rows_kept() -> None:
    table = read_table(path=H200)
    assert table.gpu == "H200-SXM"
    assert table.heads.min() >= MIN_HEADS and np.all(128 % table.heads == 0)
    assert set(table.kv_dtype) == {"bf16", "fp8"}
    # TensorRT-LLM's kernel, 64 heads, 1,024 sequences of 16,384 cached tokens, BF16 cache
    at = (table.heads == 64) & (table.batch == 1024) & (table.context == 16384) \
        & (table.kv_dtype == "bf16")
    assert table.latency_s[at][0] == pytest.approx(4.4511e-3, rel=1e-3)


def test_discovered_by_calibrate() -> None:
    found = discover(ROOT)
    assert {p.parts[-5] for p in found.mla_decode_tables} == {
        "h100_sxm", "h200_sxm", "b200_sxm", "gb200"}


def test_unset_decode_constants_price_as_the_grouped_query_kernel() -> None:
    base = KernelConstants()
    assert base.for_mla_decode() is base
    own = replace(base, **TRUE)
    priced = own.for_mla_decode()
    assert priced is own.for_mla_decode()  # one object: kernel plans keyed by it are reused
    assert (priced.attention_efficiency_max, priced.kv_bandwidth_efficiency,
            priced.attention_tile_s, priced.kernel_overhead_s) == tuple(TRUE.values())
    assert priced.attention_row_tile == MLA_DECODE_ROW_TILE
