"""Bad measurement CSVs, conversions and overlays: exit code 2, one stderr line, no
traceback, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.cli.main import main

GOOD = ("model,gpu,num_gpus,workload,batch,input_tokens,output_tokens,ttft_s\n"
        "llama-3.1-8b,H100,1,batch,4,512,128,0.05\n")

CASES: dict[str, tuple[str, list[str], str]] = {
    "missing required column": ("model,gpu,ttft_s\nx,H100,1\n", [], "missing column 'num_gpus'"),
    "no metric column": ("model,gpu,num_gpus\nx,H100,1\n", [], "no metric column"),
    "non-numeric": (GOOD.replace(",4,", ",four,"), [], "column 'batch' has non-numeric value"),
    "negative metric": (GOOD.replace("0.05", "-0.05"), [], "column 'ttft_s' must be a positive"),
    "fractional GPU count": (GOOD.replace("H100,1,", "H100,1.5,"), [], "must be an integer"),
    "fractional speculative tokens": (GOOD.replace("workload,", "speculative_tokens,workload,")
                                      .replace("H100,1,", "H100,1,1.5,"), [],
                                      "column 'speculative_tokens' must be an integer"),
    "negative shared prefix": (GOOD.replace("workload,", "shared_prefix_tokens,workload,")
                               .replace("H100,1,", "H100,1,-1,"), [],
                               "column 'shared_prefix_tokens' must be a number >= 0"),
    "fractional static batch": (GOOD.replace(",4,", ",2.5,"), [],
                                "column 'batch' must be an integer on a batch row (whole "
                                "sequences), got '2.5' in row 1"),
    "fractional concurrency": (GOOD.replace("workload,", "concurrency,workload,")
                               .replace("H100,1,", "H100,1,16.5,"), [],
                               "column 'concurrency' must be an integer, got '16.5' in row 1"),
    "bad workload": (GOOD.replace("batch,4", "offline,4"), [], "column 'workload' must be one of"),
    "empty file": ("", [], "empty file"),
    "header only": (GOOD.splitlines()[0] + "\n", [], "no data rows"),
    "duplicate column": ("model,gpu,num_gpus,ttft_s,ttft_s\nx,H100,1,1,1\n", [], "appears more"),
    "ragged row": (GOOD.strip() + ",9\n", [], "more fields than the header"),
    "runtime columns disagree": ("model,gpu,num_gpus,runtime,engine,ttft_s\nx,H100,1,vllm,sglang,1\n",
                                 [], "disagree"),
    "unknown group column": (GOOD, ["--k-shot", "1", "--group-by", "cluster"],
                             "--group-by column 'cluster' is not in the file"),
    "k-shot without group": (GOOD, ["--k-shot", "1"], "--k-shot and --group-by go together"),
    "negative k": (GOOD, ["--k-shot", "-1", "--group-by", "gpu"], "--k-shot must be >= 0"),
}


def _one_line(capsys: pytest.CaptureFixture[str], code: int, message: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert message in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_measurement_csv(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, extra, message = CASES[case]
    path = tmp_path / "m.csv"
    path.write_text(text)
    before = sorted(tmp_path.iterdir())
    _one_line(capsys, main(["validate", "measurements", str(path), *extra]), message)
    assert sorted(tmp_path.iterdir()) == before


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(capsys, main(["validate", "measurements", str(tmp_path / "none.csv")]),
              "no such file")


@pytest.mark.parametrize(("text", "message"), [
    ("model,gpu,num_gpus,ttft_s\nx,H100,1,1\n", "no row can be fitted on (row 1: "),
    # infeasible (811 GB of weights on 2 x 192 GB), or no measured metric predicted
    ("model,gpu,num_gpus,input_tokens,output_tokens,tpot_s\nllama-3.1-405b,B200,2,512,128,10\n",
     "no row can be fitted on (row 1: infeasible: "),
    ("model,gpu,num_gpus,workload,batch,input_tokens,output_tokens,ttft_p90_s\n"
     "llama-3.1-8b,H100,1,serving,16,512,128,0.05\n",
     "no row can be fitted on (row 1: a serving row predicts none of its measured metrics"),
    ("model,gpu\nx,H100\n", "missing column 'num_gpus'"),
])
def test_bad_calibrate_from(text: str, message: str, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    path.write_text(text)
    code = main(["calibrate", "--from", str(path), "--output", str(tmp_path / "my.yaml")])
    _one_line(capsys, code, message)
    assert not (tmp_path / "my.yaml").exists()


def test_calibrate_from_on_an_overlay_base_is_refused(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """An overlay stacked on an overlay never loads: --base must be a full calibration."""
    path = tmp_path / "m.csv"
    path.write_text(GOOD)
    first = tmp_path / "first.yaml"
    assert main(["calibrate", "--from", str(path), "--output", str(first)]) == 0
    capsys.readouterr()
    code = main(["calibrate", "--from", str(path), "--base", str(first),
                 "--output", str(tmp_path / "second.yaml")])
    _one_line(capsys, code, "is an overlay file; an overlay's base must be a full calibration")
    assert not (tmp_path / "second.yaml").exists()


def test_bad_conversion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "perf_model.csv"
    path.write_text("model,hardware\nx,H100\n")
    code = main(["measurements", "convert", "splitwise", str(path), "-o", str(tmp_path / "o.csv")])
    _one_line(capsys, code, "missing columns")
    assert not (tmp_path / "o.csv").exists()
