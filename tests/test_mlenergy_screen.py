"""Host-bound ML.ENERGY runs: screened from fits by comparing a model's tasks."""

from __future__ import annotations

from pathlib import Path

from energylens.measurements.formats import load_measurements
from energylens.measurements.mlenergy_screen import host_bound_runs

TASKS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "mlenergy" / "tasks"


def _row(task: str, batch: int, itl_ms: float, power_w: float, gpu: str = "B200"):
    values = {"model_id": "m", "gpu_model": gpu, "num_gpus": 1, "task": task,
              "max_num_seqs": batch}
    return values, {"median_itl_ms": itl_ms, "avg_power_watts": power_w}


def test_slower_and_cooler_than_the_chat_run_is_host_bound():
    rows = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("lm-arena-chat", 64, 12.0, 650.0),
            _row("gpqa", 8, 16.0, 300.0), _row("gpqa", 64, 30.0, 420.0)]
    assert host_bound_runs(rows) == {("m", "B200", 1, "gpqa")}


def test_slower_but_hotter_or_only_somewhat_slower_is_not():
    hotter = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("gpqa", 8, 16.0, 700.0)]
    longer_context = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("gpqa", 8, 6.5, 550.0)]
    no_chat = [_row("gpqa", 8, 16.0, 300.0)]
    other_gpu = [_row("lm-arena-chat", 8, 5.0, 600.0, gpu="H100"), _row("gpqa", 8, 16.0, 300.0)]
    for rows in (hotter, longer_context, no_chat, other_gpu):
        assert host_bound_runs(rows) == frozenset()


def test_the_shipped_data_screens_only_b200_reasoning_runs():
    rows = [(r.input, r.measured) for f in sorted(TASKS.glob("*.json"))
            for r in load_measurements(format="mlenergy", path=f).rows]
    screened = host_bound_runs(rows)
    assert {gpu for _, gpu, _, _ in screened} == {"B200"}
    assert {task for *_, task in screened} == {"gpqa"}
    assert ("Qwen/Qwen3-8B", "B200", 1, "gpqa") in screened
    assert not any(model.startswith("deepseek") for model, *_ in screened)
