"""The accuracy figures README quotes are the ones the shipped calibration and accuracy tables
give: a recalibration that moves them fails here until README says what users will see."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from energylens.calibration.file import default_calibration
from energylens.cli import main
from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.validation.expected_error import expected_error, load_accuracy_table

README = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _errors(*, model: str, gpu: str, deployment: Deployment, workload: Workload) -> dict[str, str]:
    found = expected_error(model=get_model(model), gpu=load_gpu(gpu), deployment=deployment,
                           workload=workload, calibration=default_calibration())
    assert found is not None
    return {e.field: _pct(e.mape) for e in found.errors}


def test_readme_quotes_the_expected_error_predict_prints() -> None:
    dense = _errors(model="llama-3.1-70b", gpu="h100", deployment=Deployment(tp=4),
                    workload=Workload(batch=16, input_tokens=1024))
    assert (f"expects {dense['energy_per_output_token_j']} on energy and "
            f"{dense['tpot_s']} on TPOT") in README
    moe = _errors(model="qwen3-30b-a3b", gpu="b200",
                  deployment=Deployment(tp=8, weight_dtype="fp8"),
                  workload=Workload(batch=16, input_tokens=1024))
    assert (f"an 8-GPU FP8 MoE on B200 {moe['energy_per_output_token_j']} and "
            f"{moe['tpot_s']}") in README


def test_readme_quotes_the_load_and_static_batch_errors_shipped() -> None:
    table = load_accuracy_table()
    trt_h100 = next(g for g in table["groups"]
                    if g["runtime"] == "trtllm" and g["gpu"] == "H100-SXM")
    assert (f"TensorRT-LLM on H100 {_pct(trt_h100['ttft_s'])} TTFT, "
            f"{_pct(trt_h100['tpot_s'])} TPOT") in README
    kv = table["kv_limited"]
    assert (f"{_pct(kv['ttft_s'])} TTFT, {_pct(kv['tpot_s'])} TPOT over {kv['rows']} rows"
            in README)
    batch = Workload(batch=16, input_tokens=1024)
    quoted = re.search(r"vLLM on H100 (\S+ %), on MI300X (\S+ %), TensorRT-LLM on A100 40 GB "
                       r"(\S+ %)", README)
    assert quoted is not None
    shipped = [_errors(model="llama-3.1-8b", gpu=gpu, workload=batch,
                       deployment=Deployment(runtime=runtime))["static_batch_latency_s"]
               for runtime, gpu in [("vllm", "h100"), ("vllm", "mi300x"),
                                    ("trtllm", "a100-40gb")]]
    assert list(quoted.groups()) == shipped


def _cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _change(value: float, base: float) -> str:
    return f"{round(100 * (value / base - 1)):+d} %"


def test_readme_quotes_what_if_layouts_breakdown_and_kv_figures(capsys) -> None:
    found = _cli_json(["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4",
                       "--workload", "serving", "--batch", "64", "--what-if"], capsys)
    rows = {r["change"]: r for r in found["what_if"]}
    base = rows["as given"]
    fp8, slow, wide = rows["FP8 weights"], rows["clock x0.8"], rows["2x tensor parallel"]
    energy, tpot = "energy_per_output_token_j", "tpot_s"
    assert (f"FP8 weights {_change(fp8[energy], base[energy])} energy and "
            f"{_change(fp8[tpot], base[tpot])} TPOT, 0.8x clock "
            f"{_change(slow[energy], base[energy])} energy at {_change(slow[tpot], base[tpot])} "
            f"TPOT, twice the GPUs {_change(wide[tpot], base[tpot])} TPOT at "
            f"{_change(wide[energy], base[energy])} energy") in README

    found = _cli_json(["predict", "--model", "mixtral-8x7b", "--gpu", "a100-40gb",
                       "--num-gpus", "4", "--tp", "4", "--runtime", "trtllm", "--batch", "1",
                       "--layouts"], capsys)
    tpots = {r["layout"]: r["tpot_s"] for r in found["layouts"] if r["feasible"]}
    assert (f"TP4 {1e3 * tpots['TP4']:.2f} ms, "
            + ", ".join(f"{name} {_change(tpots[name], tpots['TP4'])}"
                        for name in ["TP4 EP2", "TP4 EP4", "PP4"])) in README

    found = _cli_json(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100",
                       "--workload", "serving", "--batch", "64", "--breakdown"], capsys)
    decode = found["breakdown"]["decode"]
    time_share = decode["seconds"]["MoE experts"] / sum(decode["seconds"].values())
    energy_share = decode["joules"]["MoE experts"] / sum(decode["joules"].values())
    assert (f"decoding 64 sequences spends {round(100 * time_share)} % of its step and "
            f"{round(100 * energy_share)} % of its energy reading experts") in README

    found = _cli_json(["predict", "--model", "minimax-m2.5", "--gpu", "b200", "--tp", "2",
                       "--workload", "serving", "--batch", "512", "--input-tokens", "1024",
                       "--output-tokens", "1024"], capsys)
    assert (f"KV cache full: {math.floor(found['running_batch'])} of the 512 sequences per "
            "replica run at once") in README
