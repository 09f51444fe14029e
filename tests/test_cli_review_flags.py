"""Flags a path does not read, and outputs it cannot write, are refused in one line with
exit code 2 before any prediction runs (a review)."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.cli import main

MODEL = ["--model", "llama-3.1-8b", "--gpu", "h100"]


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["predict", *args]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err
    assert captured.out == ""
    return captured.err


def test_a_plot_suffix_no_picture_format_has_is_refused_up_front(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import energylens.predict

    def never(**_: object) -> None:
        raise AssertionError("predicted before refusing")

    monkeypatch.setattr(energylens.predict, "predict", never)
    err = _refused(capsys, *MODEL, "--workload", "load", "--num-requests", "50",
                   "--plot", str(tmp_path / "x.txt"))
    assert ".txt is no picture format" in err and ".png" in err
    assert "colocated load workload" in _refused(capsys, *MODEL, "--plot",
                                                 str(tmp_path / "x.png"))
    assert not list(tmp_path.iterdir())
