"""The chat prompt length comes from the KV-limited ML.ENERGY runs, not from the errors."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from energylens.measurements.formats import load_measurements
from energylens.measurements.mlenergy import TASK_INPUT_TOKENS
from energylens.measurements.mlenergy_lengths import (
    kv_limited,
    prompt_tokens_of_run,
    task_prompt_tokens,
)
from energylens.runtime import get_runtime, registry

TASKS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "mlenergy" / "tasks"


def _rows() -> list[dict]:
    return [dict(r.input) for f in sorted(TASKS.glob("*.json"))
            for r in load_measurements(format="mlenergy", path=f).rows]


def test_the_shipped_chat_prompt_length_is_the_one_the_data_gives():
    median, estimates = task_prompt_tokens(_rows(), task="lm-arena-chat")
    assert len(estimates) >= 5  # identified by several runs, not one
    assert abs(median - TASK_INPUT_TOKENS["lm-arena-chat"]) <= 0.01 * median


def test_a_run_at_its_cap_is_not_kv_limited_and_identifies_nothing():
    at_cap = next(r for r in _rows() if r["task"] == "lm-arena-chat"
                  and r["avg_batch_size"] >= 0.99 * r["max_num_seqs"])
    assert not kv_limited(at_cap)


def test_a_fuller_cache_means_a_shorter_prompt():
    """Fewer running sequences in the same KV space: each holds more context, so the
    prompt the run identifies is longer (monotone, by the memory model)."""
    run = next(r for r in _rows() if kv_limited(r) and r["task"] == "lm-arena-chat"
               and "Llama-3.1-8B" in r["model_id"])
    fewer = {**run, "avg_batch_size": 0.8 * run["avg_batch_size"]}
    base, longer = prompt_tokens_of_run(run), prompt_tokens_of_run(fewer)
    assert base is not None and longer is not None
    # context per sequence scales as 1 / running batch: (P' + o/2) = (P + o/2) / 0.8
    half_output = run["avg_output_len"] / 2
    assert abs((longer + half_output) - (base + half_output) / 0.8) <= 0.03 * (longer + half_output)


def _log_spread(estimates: list[float]) -> float:
    return statistics.pstdev(math.log(e) for e in estimates)


def test_vllms_reserve_is_where_the_runs_of_both_gpus_agree_best(monkeypatch: pytest.MonkeyPatch):
    """The same chat prompts ran on H100 and B200, so every KV-limited run must give one
    prompt length; the memory vLLM keeps beside weights, activations and KV (the profile's
    ``reserve_bytes``) is the one at which the runs' estimates spread least. The shipped
    value is that minimum on a 0.5 GB grid, and a wrong reserve shows: at 2 GB the H100
    runs give longer prompts than the B200 runs."""
    shipped = get_runtime("vllm")
    spread = {}
    for delta in (-0.5e9, 0.0, 0.5e9):
        monkeypatch.setitem(registry._RUNTIMES, "vllm",
                            replace(shipped, reserve_bytes=shipped.reserve_bytes + delta))
        spread[delta] = _log_spread(task_prompt_tokens(_rows(), task="lm-arena-chat")[1])
    assert spread[0.0] <= min(spread[-0.5e9], spread[0.5e9])
    monkeypatch.setitem(registry._RUNTIMES, "vllm", replace(shipped, reserve_bytes=2.0e9))
    h100, b200 = (task_prompt_tokens([r for r in _rows() if r["gpu_model"] == gpu],
                                     task="lm-arena-chat")[0] for gpu in ("H100", "B200"))
    assert h100 > 1.15 * b200
