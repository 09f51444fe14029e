"""Host-bound ML.ENERGY rows: screened from fits by comparing a model's tasks and, within a
run series, the power of each batch with the smaller ones."""

from __future__ import annotations

from pathlib import Path

from energylens.measurements.formats import load_measurements
from energylens.measurements.mlenergy_screen import POWER_DROP, host_bound_rows

TASKS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "mlenergy" / "tasks"


def _row(task: str, batch: int, itl_ms: float, power_w: float, gpu: str = "B200"):
    values = {"model_id": "m", "gpu_model": gpu, "num_gpus": 1, "task": task,
              "max_num_seqs": batch, "tensor_parallel": 1, "expert_parallel": 1,
              "data_parallel": 1, "weight_precision": "bfloat16"}
    return values, {"median_itl_ms": itl_ms, "avg_power_watts": power_w}


def _batches(rows) -> set[tuple[str, int]]:
    return {(key[3], key[-1]) for key in host_bound_rows(rows)}


def test_slower_and_cooler_than_the_chat_run_screens_the_whole_run():
    rows = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("lm-arena-chat", 64, 12.0, 650.0),
            _row("gpqa", 8, 16.0, 300.0), _row("gpqa", 64, 30.0, 420.0)]
    assert _batches(rows) == {("gpqa", 8), ("gpqa", 64)}


def test_slower_but_hotter_or_only_somewhat_slower_is_not():
    hotter = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("gpqa", 8, 16.0, 700.0)]
    longer_context = [_row("lm-arena-chat", 8, 5.0, 600.0), _row("gpqa", 8, 6.5, 550.0)]
    no_chat = [_row("gpqa", 8, 16.0, 300.0)]
    other_gpu = [_row("lm-arena-chat", 8, 5.0, 600.0, gpu="H100"), _row("gpqa", 8, 16.0, 300.0)]
    for rows in (hotter, longer_context, no_chat, other_gpu):
        assert host_bound_rows(rows) == frozenset()


def test_a_bigger_batch_drawing_less_power_than_a_smaller_one_is_screened_alone():
    cool = 620.0 * POWER_DROP - 1.0
    rows = [_row("lm-arena-chat", 32, 6.0, 600.0), _row("lm-arena-chat", 64, 9.0, 620.0),
            _row("lm-arena-chat", 128, 26.0, cool), _row("lm-arena-chat", 256, 30.0, 700.0)]
    assert _batches(rows) == {("lm-arena-chat", 128)}


def test_flat_power_at_the_cap_or_a_small_dip_is_not():
    rows = [_row("lm-arena-chat", 64, 9.0, 700.0), _row("lm-arena-chat", 128, 15.0, 700.0),
            _row("lm-arena-chat", 256, 25.0, 700.0 * POWER_DROP + 1.0)]
    assert host_bound_rows(rows) == frozenset()


def test_the_shipped_data_screens_b200_rows_and_only_one_h100_series():
    rows = [(r.input, r.measured) for f in sorted(TASKS.glob("*.json"))
            for r in load_measurements(format="mlenergy", path=f).rows]
    screened = host_bound_rows(rows)
    assert ("Qwen/Qwen3-8B", "B200", 1, "gpqa") in {key[:4] for key in screened}
    h100 = {key[0] for key in screened if key[1].startswith("H100")}
    assert h100 <= {"openai/gpt-oss-120b"}
    assert not any(key[0].startswith("deepseek") and key[3] == "gpqa" for key in screened)
