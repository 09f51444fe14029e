"""ML.ENERGY's host-bound screen in the converter compares a reasoning run with the model's
chat run, which lives in another task file: the converter screens against the other files
of the folder, as the fits do (every task file together)."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmark_scripts import load_benchmark

from energylens.measurements.convert import Options, converters

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "data" / "measurements" / "mlenergy" / "tasks"
MODELS = REPO / "data" / "measurements" / "mlenergy" / "models"


def _convert(path: Path, options: Options | None = None) -> list[dict]:
    return converters()["mlenergy"](path, options or Options()).rows


def test_a_gpqa_run_slower_and_cooler_than_its_chat_run_is_screened() -> None:
    """tasks/gpqa.json configuration 0: Qwen3-14B on one B200 at 8 sequences, ITL 33.63 ms
    at 319.8 W against the chat run's 7.16 ms at 759.9 W: host-bound."""
    row = _convert(TASKS / "gpqa.json")[0]
    assert (row["model"], row["gpu"], row["max_num_seqs"]) == ("Qwen/Qwen3-14B", "B200", 8)
    assert round(row["itl_p50_s"] * 1e3, 2) == 33.63 and round(row["power_w"], 1) == 319.8
    assert row["screened"].startswith("host-bound: ")


def test_the_task_files_screen_as_the_fits_do() -> None:
    """39 gpqa rows (11 before, when each file was screened alone), 14 chat rows, no
    fill-in-the-middle row: 53 in all, the rows the fits screen over every task file."""
    counts = {f.stem: sum(1 for r in _convert(f) if r["screened"])
              for f in sorted(TASKS.glob("*.json"))}
    assert counts == {"gpqa": 39, "lm-arena-chat": 14, "sourcegraph-fim": 0}


def test_a_model_file_is_screened_against_the_model_files_beside_it() -> None:
    rows = _convert(MODELS / "Qwen__Qwen3-14B__gpqa.json")
    b200 = {r["max_num_seqs"]: r["screened"] for r in rows if r["gpu"] == "B200"}
    assert b200[8].startswith("host-bound: ")


def test_a_file_alone_or_with_named_files_is_screened_against_those(tmp_path: Path) -> None:
    alone = tmp_path / "gpqa.json"
    shutil.copy(TASKS / "gpqa.json", alone)
    (tmp_path / "notes.json").write_text('{"not": "a leaderboard file"}')
    assert sum(1 for r in _convert(alone) if r["screened"]) == 11
    named = Options(screen_with=(TASKS / "lm-arena-chat.json",))
    assert sum(1 for r in _convert(alone, named) if r["screened"]) == 39


def test_validate_mlenergy_itl_leaves_the_screened_gpqa_run_out() -> None:
    rows = load_benchmark("validate_mlenergy_itl").load_rows(TASKS / "gpqa.json", length_cv=0.0)
    assert rows[0]["screened"].startswith("host-bound: ")
    assert sum(1 for r in rows if r["screened"]) == 39
