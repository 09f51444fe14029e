"""data/measurements/SOURCES.md says what the code and the data say: the chat prompt and
vLLM's reserve the code uses, and that LLM-Inference-Bench is fitted on."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from energylens.measurements.mlenergy import TASK_INPUT_TOKENS

REPO = Path(__file__).resolve().parents[1]
SOURCES = (REPO / "data/measurements/SOURCES.md").read_text()


def _row(folder: str) -> str:
    return next(line for line in SOURCES.splitlines() if line.startswith(f"| `{folder}"))


def test_the_chat_prompt_and_vllms_reserve_are_the_codes() -> None:
    row = _row("mlenergy/")
    prompt = re.search(r"`lm-arena-chat` (\d+) tokens", row)
    reserve = re.search(r"vLLM's memory reserve identified by the same runs: ([\d.]+) GB", row)
    assert prompt is not None and reserve is not None
    assert float(prompt.group(1)) == TASK_INPUT_TOKENS["lm-arena-chat"]  # 478 (was 477)
    vllm = yaml.safe_load((REPO / "energylens/data/runtimes/vllm.yaml").read_text())
    assert float(reserve.group(1)) * 1e9 == float(vllm["reserve_bytes"]["value"])  # 3.5 GB (was 5)


def test_llm_inference_bench_is_documented_as_fitted_where_the_calibration_fits_it() -> None:
    calibration = (REPO / "energylens/data/calibration.yaml").read_text()
    assert "fit: llm-inference-bench/vllm/H100-SXM" in calibration
    row = _row("llm-inference-bench/")
    assert "fit_bench" in row and "validation only, never fitted (`energylens validate" not in row
