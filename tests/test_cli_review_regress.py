"""``regress`` refuses a grid that cannot identify its fit, and names the GPU (a review)."""

from __future__ import annotations

import pytest

from energylens.cli import main
from energylens.cli.main import build_parser
from energylens.validation.regression import DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS

MODEL = ["regress", "--model", "llama-3.1-8b", "--gpu", "h100"]


@pytest.mark.parametrize("args", [["--input-tokens", "100"], ["--output-tokens", "50,50"]])
def test_one_length_is_refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*MODEL, *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "one length cannot separate" in err


def test_a_fractional_batch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*MODEL, "--batch", "0.5"])
    assert stop.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_the_header_names_the_gpu_canonically(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*MODEL, "--tp", "2", "--input-tokens", "100,200",
                 "--output-tokens", "10,20"]) == 0
    assert "on 2 x H100-SXM (batch, batch 32)" in capsys.readouterr().out


def test_the_help_states_the_grid_defaults() -> None:
    parser = build_parser()
    regress = parser._subparsers._group_actions[0].choices["regress"]  # type: ignore[union-attr]
    text = " ".join(regress.format_help().split())
    assert f"(default: {','.join(map(str, DEFAULT_INPUT_TOKENS))})" in text
    assert f"(default: {','.join(map(str, DEFAULT_OUTPUT_TOKENS))})" in text
    assert "sequences per batch (default: 32)" in text
