"""``predict --launch-command`` writes what the user gave, not the CLI's defaults (a review)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from energylens.cli import main

MODEL = ["--model", "llama-3.1-8b", "--gpu", "h100"]


def _script(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[str], list[str]]:
    assert main(["predict", *MODEL, "--launch-command", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    server = next(x for x in lines if not x.startswith(("#", "set ")))
    return shlex.split(server), [x for x in lines if x.startswith("# ")]


def test_no_running_cap_from_the_default_batch(capsys: pytest.CaptureFixture[str]) -> None:
    words, notes = _script(capsys)
    assert "--max-num-seqs" not in words  # the engine's own default
    assert words[words.index("--max-model-len") + 1] == "640"
    assert any("context length 640 tokens" in n and "--input-tokens 512" in n for n in notes)
    words, _ = _script(capsys, "--runtime", "sglang")
    assert "--max-running-requests" not in words


def test_what_the_user_gave_is_written_without_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    words, notes = _script(capsys, "--batch", "8", "--input-tokens", "1000",
                           "--output-tokens", "200")
    assert words[words.index("--max-num-seqs") + 1] == "8"
    assert words[words.index("--max-model-len") + 1] == "1200"
    assert not any("context length" in n for n in notes)
    words, _ = _script(capsys, "--batch", "1")
    assert words[words.index("--max-num-seqs") + 1] == "1"


def test_launch_json_carries_the_configuration_and_expected_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", *MODEL, "--launch-command", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["configuration"]["runtime"] == "vllm" and "expected_error" in out
    assert out["launch_command"].startswith("vllm serve")


def test_an_overlay_says_why_no_expected_error_is_quoted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("version: 2\nbase: shipped\noverlay:\n  gpus: [H100-SXM]\n  factors:\n"
                       "    power: {value: 1.05, kind: fitted}\n")
    assert main(["predict", *MODEL, "--calibration", str(overlay)]) == 0
    out = capsys.readouterr().out
    assert f"expected error: not quoted: {overlay} holds no held-out errors" in out
    assert main(["predict", *MODEL]) == 0
    assert "not quoted" not in capsys.readouterr().out
