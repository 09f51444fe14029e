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


@pytest.mark.parametrize(("args", "fragment"), [
    (["--batch", "4", "--max-num-seqs", "4"], "only a 'load' workload reads it"),
    (["--workload", "serving", "--max-num-seqs", "4"], "only a 'load' workload reads it"),
    (["--overlap-sms", "8"], "none runs"),
    (["--moe-skew", "1.1"], "dense model"),
    (["--launch-command", "--breakdown"], "without --breakdown"),
    (["--launch-command", "--what-if"], "without --what-if"),
    (["--launch-command", "--layouts"], "without --layouts"),
])
def test_a_flag_the_run_would_not_read_is_refused(
        args: list[str], fragment: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import energylens.predict

    def never(**_: object) -> None:
        raise AssertionError("predicted before refusing")

    monkeypatch.setattr(energylens.predict, "predict", never)
    assert fragment in _refused(capsys, *MODEL, *args)


def test_the_flags_refused_elsewhere_still_run_where_read(capsys: pytest.CaptureFixture[str]) -> None:
    # a launch command writes the cap; two GPUs run an all-reduce; a MoE model routes
    assert main(["predict", *MODEL, "--batch", "4", "--max-num-seqs", "4", "--launch-command"]) == 0
    assert "--max-num-seqs 4" in capsys.readouterr().out
    assert main(["predict", *MODEL, "--tp", "2", "--overlap-sms", "8", "--json"]) == 0
    assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--moe-skew", "1.1",
                 "--json"]) == 0


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n100,20\n300,40\n")
    return path


@pytest.mark.parametrize("flag", [["--input-tokens", "100"], ["--output-tokens", "10"],
                                  ["--length-cv", "0.5"]])
def test_lengths_beside_a_trace_are_refused(flag: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, *MODEL, "--workload", "load", "--trace", str(_trace(tmp_path)),
                   "--num-requests", "20", *flag)
    assert f"{flag[0]}: the --trace sets every request's lengths" in err


def test_a_trace_run_echoes_no_default_lengths_and_breaks_down_its_mean_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["predict", *MODEL, "--workload", "load", "--trace", str(_trace(tmp_path)),
                 "--num-requests", "20", "--breakdown", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not {"input_tokens", "output_tokens"} & set(out["configuration"]["workload"])
    # the prefill priced is the trace's mean prompt (200 tokens), not a 512-token one
    assert main(["predict", *MODEL, "--input-tokens", "200", "--breakdown", "--json"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert main(["predict", *MODEL, "--breakdown", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert out["breakdown"]["prefill"] == fixed["breakdown"]["prefill"]
    assert out["breakdown"]["prefill"] != default["breakdown"]["prefill"]


@pytest.mark.parametrize("flags", [["--jobs", "4"], ["--no-leave-out"]])
def test_calibrate_from_refuses_the_full_fit_s_flags(flags: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("model,gpu,num_gpus,tp,runtime,workload,batch,input_tokens,output_tokens,"
                    "ttft_s,tpot_s,power_w\n"
                    "meta-llama/Llama-3.1-8B-Instruct,H100,1,1,vllm,batch,16,1024,128,0.41,"
                    "0.0093,540\n")
    assert main(["calibrate", "--from", str(rows), "--output", str(tmp_path / "o.yaml"),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{flags[0]}: --from fits an overlay" in err
    assert not (tmp_path / "o.yaml").exists()
