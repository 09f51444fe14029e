"""The expected error a prediction reports: the worst held-out fold it falls in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from energylens.calibration.file import calibration_fits, default_calibration
from energylens.cost.constants import Calibration
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.validation.expected_error import expected_error
from energylens.workloads import Workload


def _fold(regime: str, energy: float, itl: float, rows: int = 10) -> dict[str, object]:
    return {"regime": regime, "errors": {
        "energy_per_token_joules": {"mape": energy, "n": rows},
        "median_itl_ms": {"mape": itl, "n": rows}}}


@pytest.fixture
def calibration(tmp_path: Path) -> Calibration:
    """A calibration file whose H100 folds carry hand-chosen errors, one per regime."""
    folds = {
        "gpu-count: fit 1-2 GPUs, predict 4-8": _fold("gpu-count", 0.30, 0.05, rows=31),
        "precision: fit BF16, predict FP8/MXFP4": _fold("precision", 0.10, 0.20),
        "task: fit chat, predict reasoning/FIM": _fold("task", 0.12, 0.25),
        "family: fit dense, predict MoE": _fold("family", 0.07, 0.08),
        "family: fit MoE, predict dense": _fold("family", 0.03, 0.04),
        "family: fit transformers, predict hybrid Mamba-2": _fold("family", 0.40, 0.50),
    }
    generation = {"gpu-generation: fit H100-SXM, predict B200": _fold("gpu-generation", 0.17,
                                                                       0.14, rows=95)}
    bench = {  # LLM-Inference-Bench entries as calibrate writes them
        "llm-inference-bench/vllm/H100-SXM": {
            "in_sample": {"latency_s": {"mape": 0.22, "n": 369}}},
        "llm-inference-bench/trtllm/A100-40GB-SXM": {
            "in_sample": {"latency_s": {"mape": 0.147, "n": 256}},
            "leave_one_model_out": {"latency_s": {"mape": 0.153, "n": 256}}}}
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump({"fits": {"regimes/mlenergy/H100-SXM": folds,
                                             "regimes/mlenergy/B200": generation, **bench}}))
    return Calibration(source=str(path))


def _expect(calibration: Calibration, *, model: str, gpu: str = "H100",
            deployment: Deployment | None = None, workload: Workload | None = None,
            kv_limited: bool = False):
    return expected_error(model=get_model(model), gpu=load_gpu(gpu),
                          deployment=deployment or Deployment(),
                          workload=workload or Workload(kind="serving"), calibration=calibration,
                          kv_limited=kv_limited)


def _by_field(found) -> dict[str, tuple[float, str]]:
    return {e.field: (e.mape, e.fold) for e in found.errors}


def test_dense_one_gpu_chat_is_judged_by_its_family_fold_only(calibration: Calibration) -> None:
    found = _expect(calibration, model="llama-3.1-8b")
    assert found.folds == ("H100-SXM family: fit MoE, predict dense",)
    assert _by_field(found) == {
        "energy_per_output_token_j": (0.03, "H100-SXM family: fit MoE, predict dense"),
        "tpot_s": (0.04, "H100-SXM family: fit MoE, predict dense")}


def test_each_field_takes_the_worst_fold_the_prediction_falls_in(
        calibration: Calibration) -> None:
    # MoE on 8 GPUs in FP8 with long outputs: family, gpu-count, precision and task folds.
    found = _expect(calibration, model="qwen3-30b-a3b",
                    deployment=Deployment(num_gpus=8, ep=8, weight_dtype="fp8"),
                    workload=Workload(kind="serving", output_tokens=4000))
    assert len(found.folds) == 4
    assert _by_field(found) == {
        "energy_per_output_token_j": (0.30, "H100-SXM gpu-count: fit 1-2 GPUs, predict 4-8"),
        "tpot_s": (0.25, "H100-SXM task: fit chat, predict reasoning/FIM")}
    assert found.as_dict()["energy_per_output_token_j"]["rows"] == 31


def test_gpu_count_is_per_replica_and_chat_lengths_stay_out_of_the_task_fold(
        calibration: Calibration) -> None:
    # 4 replicas of one GPU: each runs like the 1-GPU rows; 500 tokens out is chat-like.
    found = _expect(calibration, model="llama-3.1-8b", deployment=Deployment(num_gpus=4, dp=4),
                    workload=Workload(kind="serving", input_tokens=512, output_tokens=500))
    assert found.folds == ("H100-SXM family: fit MoE, predict dense",)
    two = _expect(calibration, model="llama-3.1-8b", deployment=Deployment(num_gpus=4, tp=4))
    assert "H100-SXM gpu-count: fit 1-2 GPUs, predict 4-8" in two.folds


def test_hybrid_models_are_judged_by_the_hybrid_fold(calibration: Calibration) -> None:
    found = _expect(calibration, model="nemotron-nano-9b-v2")
    assert _by_field(found)["tpot_s"] == (
        0.50, "H100-SXM family: fit transformers, predict hybrid Mamba-2")


def test_a_gpu_without_serving_folds_is_judged_by_the_generation_fold(
        calibration: Calibration) -> None:
    found = _expect(calibration, model="llama-3.1-8b", gpu="A100",
                    deployment=Deployment(runtime="sglang"))
    assert found.folds == ("B200 gpu-generation: fit H100-SXM, predict B200",)
    assert _by_field(found)["energy_per_output_token_j"][0] == 0.17
    assert any("sglang" in note for note in found.notes)  # the folds are vLLM rows


def test_no_folds_no_claim(tmp_path: Path) -> None:
    assert _expect(Calibration(), model="llama-3.1-8b") is None  # built-in defaults
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump({"kernels": {}}))
    assert _expect(Calibration(source=str(path)), model="llama-3.1-8b") is None


def test_the_shipped_calibration_reports_its_own_fold_errors() -> None:
    shipped = default_calibration()
    folds = calibration_fits(shipped)["regimes/mlenergy/H100-SXM"]
    found = _expect(shipped, model="llama-3.1-8b")
    fold = folds["family: fit MoE, predict dense"]["errors"]
    assert _by_field(found) == {
        "energy_per_output_token_j": (fold["energy_per_token_joules"]["mape"],
                                      "H100-SXM family: fit MoE, predict dense"),
        "tpot_s": (fold["median_itl_ms"]["mape"], "H100-SXM family: fit MoE, predict dense")}


def test_predict_cli_prints_and_serialises_it() -> None:
    command = [sys.executable, "-m", "energylens.cli", "predict", "--model", "llama-3.1-70b",
               "--gpu", "H100", "--tp", "4"]
    out = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert set(out["expected_error"]) >= {"energy_per_output_token_j", "tpot_s", "folds"}
    assert "H100-SXM gpu-count: fit 1-2 GPUs, predict 4-8" in out["expected_error"]["folds"]
    table = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "expected error (held-out MAPE" in table


def test_study_report_gives_each_pareto_point_its_expected_error(tmp_path: Path) -> None:
    from energylens.cli.main import main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "knobs": {"tp": {"type": "ordinal", "values": [1, 4], "baseline": 1},
                  "dtype": {"type": "categorical", "values": ["bf16", "fp8"], "baseline": "bf16"}},
        "fixed": {"gpu": "B200", "batch": 16}}))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "expected-error-test", "space": "space.yaml", "model": "llama-3.1-8b",
        "workload": {"kind": "batch", "input_tokens": 256, "output_tokens": 64},
        "objectives": ["minimize energy_per_output_token_j", "minimize tpot_s"],
        "engine": "grid", "results": "out"}))
    assert main(["study", "run", str(study)]) == 0
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    assert len(front)
    folds = calibration_fits(default_calibration())["regimes/mlenergy/B200"]
    for row in front.itertuples():
        expected = [folds["family: fit MoE, predict dense"]]
        if row.tp == 4:
            expected.append(folds["gpu-count: fit 1-2 GPUs, predict 4-8"])
        if row.dtype == "fp8":
            expected.append(folds["precision: fit BF16, predict FP8/MXFP4"])
        for field, metric in (("energy_per_output_token_j", "energy_per_token_joules"),
                              ("tpot_s", "median_itl_ms")):
            worst = max(f["errors"][metric]["mape"] for f in expected)
            assert getattr(row, f"expected_error_{field}") == pytest.approx(worst)
        assert "B200" in row.expected_error_folds
    assert "expected_error_ttft_s" not in front.columns  # a static batch: no TTFT claim
    # a request's energy is its share of the run's: the same relative error as per token
    assert (front["expected_error_energy_per_request_j"]
            == front["expected_error_energy_per_output_token_j"]).all()
    assert main(["study", "report", str(study)]) == 0  # a rewritten report keeps them
    assert "expected_error_tpot_s" in pd.read_csv(tmp_path / "out" / "pareto.csv").columns


def test_a_load_studys_pareto_points_that_preempted_quote_the_kv_limited_rows(
        tmp_path: Path) -> None:
    """Llama-3.1-70B on 2 H100 preempts 64 clients of 3,072 tokens; on 8 it holds them:
    only the 2-GPU point's TTFT carries the error of the rows a full KV cache decided."""
    from energylens.cli.main import main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "knobs": {"tp": {"type": "ordinal", "values": [2, 8], "baseline": 2}},
        "fixed": {"gpu": "H100"}}))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "kv-limited-test", "space": "space.yaml", "model": "llama-3.1-70b",
        "workload": {"kind": "load", "concurrency": 64, "num_requests": 128,
                     "input_tokens": 2048, "output_tokens": 1024},
        "objectives": ["minimize ttft_mean_s", "minimize num_gpus"],
        "engine": "grid", "results": "out"}))
    assert main(["study", "run", str(study)]) == 0
    front = pd.read_csv(tmp_path / "out" / "pareto.csv").set_index("tp")
    table = _load_table()
    group = next(g for g in table["groups"] if (g["runtime"], g["gpu"]) == ("vllm", "H100-SXM"))
    assert front.loc[2, "preemptions"] > 0 and front.loc[8, "preemptions"] == 0
    assert front.loc[2, "expected_error_ttft_s"] == pytest.approx(table["kv_limited"]["ttft_s"])
    assert front.loc[8, "expected_error_ttft_s"] == pytest.approx(group["ttft_s"])


def _load_table() -> dict:
    from importlib import resources

    return yaml.safe_load(resources.files("energylens.data").joinpath(
        "accuracy/aiconfigurator_load.yaml").read_text())


def test_a_load_prediction_adds_ttft_and_tpot_under_load_of_its_runtime_and_gpu(
        calibration: Calibration) -> None:
    table = _load_table()
    group = next(g for g in table["groups"] if (g["runtime"], g["gpu"]) == ("trtllm", "H100-SXM"))
    found = _expect(calibration, model="llama-3.1-8b",
                    deployment=Deployment(runtime="trtllm"),
                    workload=Workload(kind="load", concurrency=8))
    fields = _by_field(found)
    assert fields["ttft_s"] == (group["ttft_s"], "AIConfigurator serving rows under load "
                                                 "(trtllm on H100-SXM)")
    # TPOT: the worse of the family fold's (0.04 in the fixture) and the one under load
    assert fields["tpot_s"][0] == max(0.04, group["tpot_s"])
    assert fields["energy_per_output_token_j"][0] == 0.03  # energy: the folds only
    assert any("AIConfigurator" in fold for fold in found.folds)
    assert not found.notes  # the runtime was checked under load: no pointer needed
    # a static batch of the same deployment has no TTFT claim
    assert "ttft_s" not in _by_field(_expect(calibration, model="llama-3.1-8b",
                                             deployment=Deployment(runtime="trtllm"),
                                             workload=Workload(kind="batch")))


def test_a_gpu_the_load_rows_lack_takes_its_runtimes_figure_over_every_gpu(
        calibration: Calibration) -> None:
    table = _load_table()
    assert not any(g["gpu"] == "A100-80GB-SXM" for g in table["groups"])
    found = _expect(calibration, model="llama-3.1-8b", gpu="A100",
                    workload=Workload(kind="load", concurrency=8))
    assert _by_field(found)["ttft_s"] == (
        table["runtimes"]["vllm"]["ttft_s"],
        "AIConfigurator serving rows under load (vllm, every GPU measured)")


def test_a_disaggregated_load_takes_the_error_of_the_disaggregated_rows(
        calibration: Calibration) -> None:
    """On prefill and decode pools a load quotes the measured disaggregated rows' errors:
    its runtime's on its GPU where measured, else all of them (it quoted the colocated
    rows': TTFT 40 % where the disaggregated rows show 61 %)."""
    pools = _load_table()["disaggregated"]
    group = next(g for g in pools["groups"] if (g["runtime"], g["gpu"]) == ("trtllm", "H200-SXM"))
    found = expected_error(model=get_model("deepseek-v3"), gpu=load_gpu("H200"),
                           deployment=Deployment(runtime="trtllm"),
                           workload=Workload(kind="load", concurrency=64),
                           calibration=calibration, disaggregated=True)
    assert _by_field(found)["ttft_s"] == (
        group["ttft_s"], "AIConfigurator's disaggregated serving rows (trtllm on H200-SXM)")
    unmeasured = expected_error(model=get_model("llama-3.1-8b"), gpu=load_gpu("H100"),
                                deployment=Deployment(), calibration=calibration,
                                workload=Workload(kind="load", concurrency=8),
                                disaggregated=True, kv_limited=True)
    assert _by_field(unmeasured)["ttft_s"] == (
        pools["all"]["ttft_s"],
        "AIConfigurator's disaggregated serving rows (every engine and GPU measured)")


def test_a_load_run_the_kv_cache_decided_takes_the_error_of_such_rows(
        calibration: Calibration, capsys) -> None:
    """The measured rows whose predicted run the KV cache decided (queued or preempted
    requests) are far worse than the rest; a prediction that is one of them says so."""
    table = _load_table()
    limited = table["kv_limited"]
    assert limited["ttft_s"] > table["all"]["ttft_s"]
    found = _expect(calibration, model="llama-3.1-8b", deployment=Deployment(runtime="trtllm"),
                    workload=Workload(kind="load", concurrency=8), kv_limited=True)
    fields = _by_field(found)
    basis = ("AIConfigurator serving rows under load (the rows a full KV cache decided, every "
             "engine and GPU)")
    assert fields["ttft_s"] == (limited["ttft_s"], basis)
    assert fields["tpot_s"][0] == max(0.04, limited["tpot_s"])
    # the CLI passes it on: Llama-3.1-70B on 2 H100 cannot hold 64 clients of 3,072 tokens
    from energylens.cli import main

    assert main(["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "2",
                 "--workload", "load", "--concurrency", "64", "--num-requests", "128",
                 "--input-tokens", "2048", "--output-tokens", "1024", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expected_error"]["ttft_s"]["mape"] == limited["ttft_s"]
    assert main(["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "2",
                 "--workload", "load", "--concurrency", "2", "--num-requests", "8",
                 "--input-tokens", "2048", "--output-tokens", "1024", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expected_error"]["ttft_s"]["mape"] != limited["ttft_s"]


def test_static_batches_add_the_benchs_latency_error_of_their_runtime_and_gpu(
        calibration: Calibration) -> None:
    found = _expect(calibration, model="llama-3.1-8b", workload=Workload(kind="batch"))
    assert _by_field(found)["static_batch_latency_s"] == (
        0.22, "LLM-Inference-Bench static batches (vllm on H100-SXM, in-sample)")
    # steady-state serving on a GPU with folds: the folds are the comparable measurement
    serving = _expect(calibration, model="llama-3.1-8b")
    assert "static_batch_latency_s" not in _by_field(serving)
    # a GPU without folds: the bench is its only measurement, whatever the workload
    # (held out by model where calibrate fitted the runtime on the bench); the A100 80 GB
    # takes its engines' constants, and so their error, from the 40 GB card the bench ran
    for name in ("A100-40GB", "A100"):
        a100 = _expect(calibration, model="llama-3.1-8b", gpu=name,
                       deployment=Deployment(runtime="trtllm"), workload=Workload(kind="serving"))
        assert _by_field(a100)["static_batch_latency_s"] == (
            0.153,
            "LLM-Inference-Bench static batches (trtllm on A100-40GB-SXM, held out by model)")
    # no bench rows of this runtime on this GPU: no claim
    assert "static_batch_latency_s" not in _by_field(_expect(
        calibration, model="llama-3.1-8b", deployment=Deployment(runtime="sglang"),
        workload=Workload(kind="batch")))


def test_accuracy_doc_lists_the_load_table_against_issue_12s_targets() -> None:
    from energylens.validation.docs import LOAD_TARGETS, _load_rows

    table = _load_table()
    lines = _load_rows()
    for group in table["groups"]:
        row = next(line for line in lines
                   if line.startswith(f"| {group['runtime']} | {group['gpu']} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == f"{100 * group['ttft_s']:.1f} %"
        assert cells[4] == ("yes" if group["ttft_s"] <= LOAD_TARGETS["ttft_s"] else "no")
        assert cells[6] == ("yes" if group["tpot_s"] <= LOAD_TARGETS["tpot_s"] else "no")


def test_the_load_table_was_written_with_the_shipped_calibration() -> None:
    """Recalibrating without rerunning `benchmarks/validate_load_aic.py --write-accuracy`
    would leave predict and docs/accuracy.md quoting errors of another calibration."""
    import hashlib
    from importlib import resources

    shipped = resources.files("energylens.data").joinpath("calibration.yaml").read_bytes()
    assert _load_table()["calibration_sha256"] == hashlib.sha256(shipped).hexdigest()


def test_the_note_says_where_a_runtime_was_checked_and_where_none_was() -> None:
    """Serving folds are vLLM's: another runtime's note points at its own evidence, the
    bench GPUs its constants were fitted on, or says it has none (the shipped file)."""
    def note(runtime: str) -> str:
        found = expected_error(model=get_model("llama-3.1-8b"), gpu=load_gpu("rtx-4090"),
                               deployment=Deployment(runtime=runtime),
                               workload=Workload(kind="serving"), calibration=default_calibration())
        assert found is not None
        return " ".join(found.notes)

    assert "checked under load in docs/load.md" in note("sglang")
    assert "LLM-Inference-Bench static batches on" in note("llama.cpp")
    assert "under load" not in note("llama.cpp")
    assert "checked against no measurement" in note("tgi")
