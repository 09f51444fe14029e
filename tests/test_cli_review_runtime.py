"""Runtime messages name the release asked for, the engines that run on a GPU, and every
spelling of an engine (a review)."""

from __future__ import annotations

import pytest

from energylens.cli import main


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    return err


def test_a_refusal_names_the_release_requested(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "4", "--ep", "2",
                 "--moe-tp", "2", "--runtime-version", "0.17.0")
    assert "vLLM 0.17.0 spreads whole experts" in err and "0.11.0" not in err


def test_a_gpu_the_engine_does_not_run_on_names_the_engines_that_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "--model", "llama-3.1-8b", "--gpu", "gaudi2")
    assert "does not run on habana" in err and "--runtime deepspeed-habana" in err


@pytest.mark.parametrize("spelling", ["llama-cpp", "llamacpp", "llama.cpp"])
def test_llama_cpp_is_accepted_in_every_spelling(spelling: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime", spelling,
                 "--json"]) == 0
    assert '"runtime": "llama.cpp"' in capsys.readouterr().out


def test_a_leading_v_is_dropped_from_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime-version",
                 "v0.17.0", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["configuration"]["runtime_version"] == "0.17.0"
    assert captured.err == ""


@pytest.mark.parametrize(("release", "where"), [("0.0.1", "earlier"), ("99.0.0", "later")])
def test_a_release_outside_the_profile_s_facts_is_warned_of(
        release: str, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime-version",
                 release, "--json"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"energylens: warning: vLLM {release} is {where} than the releases its profile's facts "
        "name (0.8 to 0.17): what changed outside them is not known to energylens"]


def test_a_release_the_facts_describe_passes_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime-version",
                 "0.11.1", "--json"]) == 0
    assert capsys.readouterr().err == ""
