"""``--forget-fits-on`` names the data file in any path form (a review)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.calibration.file import calibration_document, default_calibration
from energylens.calibration.forget import REPO_ROOT, forgotten_fields, repository_path
from energylens.cli import main

LIB = "data/measurements/llm-inference-bench/All_results.csv"
ROWS = ("model,gpu,num_gpus,tp,framework,workload,batch,input_tokens,output_tokens,e2e_s\n"
        "meta-llama/Llama-2-7b-hf,A100-40GB-SXM,1,1,Deepspeed-MII,batch,1,128,128,1.515\n"
        "meta-llama/Llama-2-7b-hf,A100-40GB-SXM,1,1,Deepspeed-MII,batch,16,128,128,1.808\n")


def test_absolute_and_dotted_forms_name_the_repository_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    for form in (str(REPO_ROOT / LIB), f"./{LIB}", LIB, f"data/../{LIB}"):
        assert repository_path(form) == LIB
    document = calibration_document(default_calibration())
    fitted = forgotten_fields(document=document, data_file=LIB, runtime="deepspeed-mii",
                              gpu="A100-40GB-SXM")
    assert fitted  # the shipped calibration fitted DeepSpeed-MII's A100 overheads on it
    assert forgotten_fields(document=document, data_file=str(REPO_ROOT / LIB),
                            runtime="deepspeed-mii", gpu="A100-40GB-SXM") == fitted


def test_the_cli_takes_an_absolute_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    path.write_text(ROWS)
    args = ["validate", "measurements", str(path), "--k-shot", "0", "--group-by", "framework",
            "--json", "--forget-fits-on"]
    assert main([*args, LIB]) == 0
    relative = json.loads(capsys.readouterr().out)
    assert main([*args, str(REPO_ROOT / LIB)]) == 0
    assert json.loads(capsys.readouterr().out) == relative
