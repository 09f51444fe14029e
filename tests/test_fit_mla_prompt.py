"""MLA's prompt-form attention: its own efficiency and ramp, fitted on TensorRT-LLM's MLA
context table, and the prices they enter (only MLA prompts)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_mla_prompt import (
    FIELDS,
    MIN_HEADS,
    MIN_PROMPT_TOKENS,
    MlaPromptTable,
    fit_mla_prompt,
    predicted_s,
    read_table,
)
from energylens.calibration.run import discover
from energylens.cost.constants import KernelConstants
from energylens.cost.step import SequenceGroup, step_cost
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.predict import step_context

ROOT = Path(__file__).resolve().parents[1] / "data" / "measurements"
H200 = ROOT / "aiconfigurator/kernels/h200_sxm/mla/trtllm/1.3.0rc20/context_mla_perf.parquet"


def _synthetic(efficiency: float, half: float) -> MlaPromptTable:
    """Rows the cost model itself prices at ``efficiency`` and ``half`` (times 2 % seeded
    noise): the fit must give them back."""
    rows = [(b, s, h) for h in (16, 32, 64, 128) for s in (128.0, 512.0, 2048.0, 8192.0)
            for b in (1.0, 8.0)]
    batch, isl, heads = (np.array(v) for v in zip(*rows, strict=True))
    table = MlaPromptTable(path=Path("synthetic"), gpu="H200-SXM", batch=batch, isl=isl,
                           heads=heads.astype(int), latency_s=np.ones(batch.size))
    constants = replace(default_calibration().kernel("H200-SXM"),
                        **dict(zip(FIELDS, (efficiency, half), strict=True)))
    times = predicted_s(table=table, rows=np.ones(batch.size, dtype=bool),
                        gpu=load_gpu("H200-SXM"), constants=constants)
    noise = np.exp(np.random.default_rng(3).normal(0.0, 0.02, batch.size))
    return replace(table, latency_s=times * noise)


def test_fit_recovers_the_constants_it_was_priced_with() -> None:
    table = _synthetic(0.7, 900.0)
    result = fit_mla_prompt(table=table, constants=default_calibration().kernel("H200-SXM"))
    assert result.values[FIELDS[0]] == pytest.approx(0.7, rel=0.05)
    assert result.values[FIELDS[1]] == pytest.approx(900.0, rel=0.15)
    assert result.at_bound == []
    assert result.leave_out["latency"].mape < 0.05  # held-out halves: the same kernel


def test_table_rows_kept() -> None:
    table = read_table(path=H200)
    assert table.gpu == "H200-SXM"
    assert table.heads.min() >= MIN_HEADS and np.all(128 % table.heads == 0)
    assert table.isl.min() >= MIN_PROMPT_TOKENS
    # TensorRT-LLM's kernel at 128 heads (TP1), one 8,192-token prompt: 4.8 ms on H200
    at = (table.heads == 128) & (table.batch == 1) & (table.isl == 8192)
    assert table.latency_s[at][0] == pytest.approx(4.816e-3, rel=1e-3)


def test_discovered_by_calibrate() -> None:
    found = discover(ROOT)
    assert {p.parts[-5] for p in found.mla_prompt_tables} >= {"h100_sxm", "h200_sxm", "b200_sxm"}


def test_unset_prompt_constants_price_as_the_grouped_query_kernel() -> None:
    base = KernelConstants(attention_efficiency_max=0.45, attention_m_half=0.0)
    assert base.for_prompt_attention() is base
    own = replace(base, prompt_attention_efficiency_max=0.8, prompt_attention_m_half=600.0)
    priced = own.for_prompt_attention()
    assert (priced.attention_efficiency_max, priced.attention_m_half) == (0.8, 600.0)


def _step(*, model: str, constants_change: dict[str, float], new_tokens: float,
          context: float) -> float:
    gpu = load_gpu("H200-SXM")
    cal = default_calibration()
    cal = cal.with_kernel(gpu.name, **constants_change) if constants_change else cal
    ctx = step_context(model=get_model(model), gpu=gpu, calibration=cal,
                       deployment=Deployment(tp=8, moe_tp=8, runtime="sglang",
                                             weight_dtype="fp8", kv_dtype="bf16"))
    return float(step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=new_tokens,
                                                          context=context)]).latency_s)


def test_prompt_constants_move_mla_prompts_only() -> None:
    slow = {"prompt_attention_efficiency_max": 0.2, "prompt_attention_m_half": 0.0}
    fast = {"prompt_attention_efficiency_max": 0.9, "prompt_attention_m_half": 0.0}
    mla = "deepseek-ai/DeepSeek-V3"
    # an 8,192-token MLA prompt: faster attention, faster step
    assert (_step(model=mla, constants_change=fast, new_tokens=8192, context=8192)
            < _step(model=mla, constants_change=slow, new_tokens=8192, context=8192))
    # an MLA decode step (absorbed form) and a grouped-query prompt do not use them
    assert (_step(model=mla, constants_change=fast, new_tokens=1, context=8192)
            == _step(model=mla, constants_change=slow, new_tokens=1, context=8192))
    gqa = "meta-llama/Llama-3.1-70B-Instruct"
    assert (_step(model=gqa, constants_change=fast, new_tokens=8192, context=8192)
            == _step(model=gqa, constants_change=slow, new_tokens=8192, context=8192))
