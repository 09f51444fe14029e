"""Small CLI usability findings of a review: what a line says, and exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from energylens.cli import main

MODEL = ["--model", "llama-3.1-8b", "--gpu", "h100"]
DATA = Path(__file__).resolve().parents[1] / "data/measurements"
ROWS = ("model,gpu,num_gpus,tp,runtime,workload,batch,input_tokens,output_tokens,ttft_s,tpot_s\n"
        "meta-llama/Llama-3.1-8B-Instruct,H100,1,1,vllm,batch,16,1024,128,0.41,0.0093\n")


def test_the_feasibility_line_says_it_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", *MODEL]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("feasible: true") and "(feasible)" not in first
    assert main(["predict", "--model", "llama-3.1-405b", "--gpu", "h100"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "feasible: false (needs" in first and "infeasible" not in first


def test_a_load_run_without_slos_prints_no_slo_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    load = [*MODEL, "--workload", "load", "--num-requests", "40"]
    assert main(["predict", *load]) == 0
    assert "SLO" not in capsys.readouterr().out
    assert main(["predict", *load, "--slo", "ttft_p90_s<=1"]) == 0
    assert "SLOs met: true" in capsys.readouterr().out


def test_load_flags_of_another_workload_are_named_as_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", *MODEL, "--request-rate", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("energylens: error: --request-rate: only a 'load' workload reads it")


def test_an_empty_model_name_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "", "--gpu", "h100"]) == 2
    assert "the model name is empty" in capsys.readouterr().err


def test_measurement_columns_match_in_any_case(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.csv"
    path.write_text(ROWS.replace("model,gpu", "Model,GPU").replace("ttft_s", "TTFT_S"))
    assert main(["validate", "measurements", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"][0]["predicted"]["ttft_s"] > 0
    assert "not part of the format" not in captured.err


def test_a_converter_s_date_column_is_carried_without_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.csv"
    path.write_text(ROWS.replace("tpot_s\n", "tpot_s,date,notes\n").replace("0.0093\n",
                                                                            "0.0093,20250101,x\n"))
    assert main(["validate", "measurements", str(path), "--json"]) == 0
    err = capsys.readouterr().err
    assert "column notes is not part of the format" in err and "date" not in err


def test_a_file_no_row_of_which_is_predicted_exits_1(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("model,gpu,num_gpus,ttft_s\nnope-model,h100,1,0.1\nllama-3.1-8b,zz,1,0.1\n")
    for json_flag in ([], ["--json"]):
        assert main(["validate", "measurements", str(path), *json_flag]) == 1
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1] == ("energylens: error: none of the 2 rows could be "
                                                "predicted (the reason per row is in the output)")


def test_an_unnamed_gpu_asks_for_the_flag(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mm.csv"
    shutil.copy(DATA / "llmcompass/matmul_A100.csv", path)
    assert main(["validate", "llmcompass-matmul", str(path)]) == 2
    err = capsys.readouterr().err
    assert "give --gpu" in err and "pass gpu=" not in err
