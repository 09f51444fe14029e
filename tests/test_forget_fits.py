"""A blind base: the calibration without the engine constants it fitted on a file, for the
(runtime, GPU) of a k-shot group (`validate measurements --k-shot K --forget-fits-on F`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.calibration.file import calibration_document, default_calibration
from energylens.calibration.forget import forget_fits, forgotten_fields
from energylens.cli.main import main
from energylens.measurements.user_csv import load_user_csv
from energylens.runtime import get_runtime
from energylens.validation.kshot import BlindBase, k_shot

LIB = "data/measurements/llm-inference-bench/All_results.csv"
DOC = calibration_document(default_calibration())


def _entry(runtime: str, gpu: str, field: str) -> dict:  # type: ignore[type-arg]
    return DOC["runtimes"][runtime][gpu][field]


def test_the_shipped_calibration_records_its_provenance() -> None:
    assert _entry("trtllm", "A100-40GB-SXM", "step_overhead_s")["fitted_on"] == [LIB]


def test_the_borrowing_chain_is_followed_past_borrowed_values() -> None:
    # A100 40 GB borrows from A100 80 GB, whose TensorRT-LLM overheads are only borrowed
    # (from the 40 GB card's fit): the chain goes on to H100 SXM's fit, as calibrate's
    # borrowing would without the 40 GB rows.
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="trtllm",
                                 gpu="A100-40GB-SXM")
    assert forgotten == {name: _entry("trtllm", "H100-SXM", name)["value"]
                         for name in ("step_overhead_s", "per_sequence_overhead_s",
                                      "collective_sync_s")}


def test_a_gpu_without_a_fitted_relative_falls_back_to_the_profiles_priors() -> None:
    # Nothing DeepSpeed-MII runs on besides the A100 40 GB was fitted: the chain ends
    # without a value, and its priors stand in: vLLM's overheads on that GPU
    # (prior_overheads_from; no all-reduce arrival time: the field's default, none).
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="deepspeed-mii",
                                 gpu="A100-40GB-SXM")
    assert get_runtime("deepspeed-mii").prior_overheads_from == "vllm"
    assert forgotten == {
        "step_overhead_s": _entry("vllm", "A100-40GB-SXM", "step_overhead_s")["value"],
        "per_sequence_overhead_s": _entry("vllm", "A100-40GB-SXM",
                                          "per_sequence_overhead_s")["value"],
        "collective_sync_s": 0.0}


def test_a_runtime_whose_priors_are_another_runtimes_takes_its_values_on_the_gpu() -> None:
    # SGLang's overheads are vLLM's on the same GPU (prior_overheads_from), as calibrate
    # writes them: a blind SGLang section on a GPU no relative fits stands in with those.
    doc = {"runtimes": {
        "vllm": {"H100-SXM": {"step_overhead_s": {"value": 7e-4, "kind": "fitted"}}},
        "sglang": {"H100-SXM": {"step_overhead_s": {
            "value": 1e-3, "kind": "fitted", "fitted_on": ["user.csv"]}}}}}
    assert get_runtime("sglang").prior_overheads_from == "vllm"
    assert forgotten_fields(document=doc, data_file="user.csv", runtime="sglang",
                            gpu="H100-SXM") == {"step_overhead_s": 7e-4}


def test_a_gpu_with_a_fitted_relative_takes_the_relatives_values() -> None:
    # GH200 borrows from H100 SXM, where TensorRT-LLM's overheads were fitted on H100 rows.
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="trtllm", gpu="GH200")
    assert forgotten["step_overhead_s"] == _entry("trtllm", "H100-SXM", "step_overhead_s")["value"]
    # MI250 borrows from MI300X: llama.cpp's memory scale fitted there (its own rows)
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="llama.cpp", gpu="MI250")
    assert forgotten["memory_efficiency_scale"] == _entry(
        "llama.cpp", "MI300X", "memory_efficiency_scale")["value"]
    # and MI300X takes its engines from MI250 first (engines_from), not from H100 (its
    # borrows): the same vendor's ROCm kernels; the cycle back to MI300X is never followed
    for runtime, name in (("llama.cpp", "memory_efficiency_scale"),
                          ("vllm@legacy", "v1_kv_bandwidth_share")):
        forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime=runtime, gpu="MI300X")
        assert forgotten[name] == _entry(runtime, "MI250", name)["value"]
        assert forgotten[name] != _entry(runtime, "H100-SXM", name)["value"]


def test_constants_fitted_on_other_files_are_kept() -> None:
    # vLLM's own H100 section was fitted on ML.ENERGY, not on the bench
    assert forgotten_fields(document=DOC, data_file=LIB, runtime="vllm", gpu="H100-SXM") == {}
    base = default_calibration()
    same = forget_fits(calibration=base, document=DOC, data_file=LIB,
                       pairs={("sglang", "H100-SXM")})
    assert same is base


def test_a_legacy_section_is_forgotten_with_its_runtime() -> None:
    # The bench's vLLM (V0, before 0.8.0) overheads live in vllm@legacy sections. H100 has
    # no relative: without its legacy fit it is priced with vLLM's own H100 overheads, as
    # a GPU without a legacy section is; GH200 borrows from H100 and takes H100's fit.
    assert _entry("vllm@legacy", "H100-SXM", "step_overhead_s")["fitted_on"] == [LIB]
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="vllm@legacy",
                                 gpu="H100-SXM")
    assert forgotten == {name: _entry("vllm", "H100-SXM", name)["value"]
                         for name in ("step_overhead_s", "per_sequence_overhead_s",
                                      "collective_sync_s", "v1_kv_bandwidth_share")}
    forgotten = forgotten_fields(document=DOC, data_file=LIB, runtime="vllm@legacy",
                                 gpu="GH200")
    assert forgotten["step_overhead_s"] == _entry("vllm@legacy", "H100-SXM",
                                                  "step_overhead_s")["value"]
    blind = forget_fits(calibration=default_calibration(), document=DOC, data_file=LIB,
                        pairs={("vllm", "H100-SXM")})
    v0 = get_runtime("vllm").calibration_for(calibration=blind, gpu="H100-SXM", version="0.6")
    own = blind.runtime(runtime="vllm", gpu="H100-SXM")
    priced = v0.runtime(runtime="vllm", gpu="H100-SXM")
    assert (priced.step_overhead_s, priced.per_sequence_overhead_s) == pytest.approx(
        (own.step_overhead_s, own.per_sequence_overhead_s), rel=1e-5)


ROWS = ("model,gpu,num_gpus,tp,framework,runtime_version,workload,batch,input_tokens,"
        "output_tokens,e2e_s\n"
        "meta-llama/Llama-2-7b-hf,A100-40GB-SXM,1,1,Deepspeed-MII,,batch,1,128,128,1.515\n"
        "meta-llama/Llama-2-7b-hf,A100-40GB-SXM,1,1,Deepspeed-MII,,batch,16,128,128,1.808\n"
        "meta-llama/Llama-2-7b-hf,A100-40GB-SXM,1,1,vLLM,,batch,1,128,128,1.60\n")


def test_a_blind_group_is_predicted_with_the_forgotten_constants(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(ROWS)
    measurements = load_user_csv(path)
    base = default_calibration()
    plain = k_shot(measurements, k=0, group_by=["framework"], seed=0, calibration=base)
    blind = k_shot(measurements, k=0, group_by=["framework"], seed=0, calibration=base,
                   blind=BlindBase(document=DOC, data_file=LIB))
    mii = [(p.predicted["e2e_s"], b.predicted["e2e_s"])
           for p, b in zip(plain.rows[:2], blind.rows[:2], strict=True)]
    # per step (128 decodes and the prompt's pass): the fitted overheads against its
    # priors (vLLM's on the GPU), the per-sequence one for each of 1 and 16 sequences
    step, per_sequence = (_entry("deepspeed-mii", "A100-40GB-SXM", f)["value"]
                          for f in ("step_overhead_s", "per_sequence_overhead_s"))
    prior_step, prior_per_sequence = (_entry("vllm", "A100-40GB-SXM", f)["value"]
                                      for f in ("step_overhead_s", "per_sequence_overhead_s"))
    for (fitted, forgotten), batch in zip(mii, (1, 16), strict=True):
        saved = 129 * ((step - prior_step) + batch * (per_sequence - prior_per_sequence))
        assert fitted - forgotten == pytest.approx(saved, rel=0.02)
    assert plain.rows[2].predicted == blind.rows[2].predicted  # vLLM: nothing fitted there


def test_the_cli_refuses_a_file_nothing_was_fitted_on(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    path.write_text(ROWS)
    for extra, message in (
            (["--k-shot", "0", "--group-by", "framework", "--forget-fits-on", "x.csv"],
             "no engine constant of"),
            (["--forget-fits-on", LIB], "--forget-fits-on goes with --k-shot")):
        assert main(["validate", "measurements", str(path), *extra]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and message in err[0], err
    assert main(["validate", "measurements", str(path), "--k-shot", "0", "--group-by",
                 "framework", "--forget-fits-on", LIB, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["error"] is None for r in rows)
