"""``validate`` refuses a --gpu that would relabel rows recording their own GPU (a review)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.cli import main

TASK = Path(__file__).resolve().parents[1] / "data/measurements/mlenergy/tasks/lm-arena-chat.json"


def _rows_on(gpu: str, tmp_path: Path, count: int = 2) -> Path:
    doc = json.loads(TASK.read_text())
    doc["configurations"] = [c for c in doc["configurations"] if c["gpu_model"] == gpu][:count]
    path = tmp_path / f"{gpu}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_gpu_other_than_the_rows_own_is_refused_naming_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "mlenergy", str(TASK), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "record their GPUs (B200, H100-SXM)" in err
    assert main(["validate", "mlenergy", str(_rows_on("B200", tmp_path)), "--gpu", "h100"]) == 2
    assert "(B200)" in capsys.readouterr().err


def test_the_rows_own_gpu_given_again_is_accepted(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "mlenergy", str(_rows_on("H100", tmp_path)), "--gpu", "h100-sxm",
                 "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 2
