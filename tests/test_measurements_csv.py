"""The measurement CSV: converters round-trip into validate, unknown columns are carried,
refusals carry their reason, k-shot with K = 0 is plain validation."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.errors import MeasurementError
from energylens.measurements import user_csv
from energylens.measurements.convert import Converted, Options, converters, to_csv
from energylens.measurements.user_csv import load_user_csv, row_case
from energylens.predict import predict
from energylens.validation.kshot import fit_rows, k_shot, validate_measured
from energylens.validation.predictors import validate
from energylens.workloads import Workload

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "data" / "measurements" / "llm-inference-bench" / "All_results.csv"
MLENERGY = REPO / "data" / "measurements" / "mlenergy" / "tasks" / "lm-arena-chat.json"

HEADER = "model,gpu,num_gpus,tp,runtime,workload,batch,input_tokens,output_tokens"


def _write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _convert(fmt: str, source: Path, tmp_path: Path, **options: object) -> Path:
    out = tmp_path / f"{fmt}.csv"
    out.write_text(to_csv(converters()[fmt](source, Options(**options))))  # type: ignore[arg-type]
    return out


def _small_lib(tmp_path: Path) -> Path:
    """vLLM rows on H100 and A100 of the bench, two TensorRT-LLM rows (a release with its
    own overheads), two llama.cpp rows and two SambaFlow rows (SN40L, a dataflow runtime)."""
    with LIB.open() as f:
        rows = list(csv.DictReader(f))
    keep = [r for r in rows if r["Framework"] == "vLLM" and "Nvidia" in r["Hardware"]
            and r["Model"] == "meta-llama/Meta-Llama-3-8B"][:12]
    keep += [r for r in rows if r["Framework"] == "TensorRT-LLM" and "H100" in r["Hardware"]
             and r["Model"] == "meta-llama/Meta-Llama-3-8B"][:2]
    keep += [r for r in rows if r["Framework"] == "llama.cpp" and r["Batch Size"] == "16"][:2]
    keep += [r for r in rows if r["Framework"] == "sambaflow"][:2]
    path = tmp_path / "lib.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(keep)
    return path


def test_llm_inference_bench_round_trip_predicts_what_its_own_validator_does(tmp_path: Path) -> None:
    source = _small_lib(tmp_path)
    converted = load_user_csv(_convert("llm-inference-bench", source, tmp_path))
    ours = validate_measured(converted, calibration=default_calibration()).rows
    theirs = validate(format="llm-inference-bench", path=source).rows
    assert len(ours) == len(theirs) == 18
    assert {o.row.values["runtime"] for o in ours[12:14]} == {"trtllm"}
    for mine, bench in zip(ours, theirs, strict=True):
        assert mine.row.measured["e2e_s"] == bench.measured["latency_s"]
        if bench.error is None:
            assert mine.error is None
            assert mine.predicted["e2e_s"] == pytest.approx(bench.predicted["latency_s"], rel=1e-9)
            assert mine.predicted["total_tokens_per_s"] == pytest.approx(
                bench.predicted["throughput_tokens_per_s"], rel=1e-9)
    assert {o.row.values["runtime"] for o in ours[-2:]} == {"sambaflow"}
    assert all(o.error is None for o in ours[-2:])
    # llama.cpp's throughput x latency is one sequence's tokens: not a batch of 16 but one
    # sequence whose prompt runs in passes of 16 tokens (its -b), priced as the validator
    # does (checked above), slower than the prompt in one pass
    for outcome, bench in zip(ours[14:16], theirs[14:16], strict=True):
        assert bench.input["Framework"] == "llama.cpp"
        assert outcome.row.values["batch"] == 1
        assert outcome.row.values["prefill_chunk_tokens"] == 16
        case = row_case(outcome.row)
        one_pass = predict(model=case.model, gpu=case.gpu, workload=case.workload,
                           deployment=replace(case.deployment, prefill_chunk_tokens=None))
        assert outcome.predicted["e2e_s"] > one_pass.prefill.latency_s + one_pass.decode.latency_s


def test_mlenergy_round_trip_keeps_the_layout_and_the_predictions(tmp_path: Path) -> None:
    from energylens.measurements import mlenergy
    from energylens.measurements.formats import load_measurements

    converted = load_user_csv(_convert("mlenergy", MLENERGY, tmp_path))
    source = load_measurements(format="mlenergy", path=MLENERGY).rows
    outcomes = validate_measured(converted, calibration=default_calibration()).rows
    checked = 0
    for outcome, row in list(zip(outcomes, source, strict=True))[::6]:
        try:
            expected = mlenergy.predict_row(row.input, calibration=default_calibration())
        except mlenergy.UnsupportedRow:
            assert outcome.error is not None
            continue
        assert outcome.predicted["itl_p50_s"] == pytest.approx(expected["median_itl_ms"] / 1e3)
        assert outcome.predicted["energy_per_output_token_j"] == pytest.approx(
            expected["energy_per_token_joules"])
        checked += 1
    assert checked >= 5


def test_splitwise_round_trip(tmp_path: Path) -> None:
    source = _write(tmp_path, "model,hardware,prompt_size,batch_size,token_size,prompt_time,"
                              "token_time,tensor_parallel\nllama-3.1-8b,H100,512,4,128,60,9,1\n",
                    "perf_model.csv")
    converted = load_user_csv(_convert("splitwise", source, tmp_path))
    row = converted.rows[0]
    assert row.measured == {"ttft_s": 0.06, "tpot_s": 0.009}
    assert row.values["workload"] == "batch" and row.values["batch"] == 4
    outcome = validate_measured(converted, calibration=default_calibration()).rows[0]
    assert outcome.error is None and outcome.predicted["ttft_s"] > 0


def test_vllm_benchmark_result_becomes_a_load_row(tmp_path: Path) -> None:
    result = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "completed": 100,
              "request_rate": float("inf"), "max_concurrency": 16, "total_input_tokens": 102400,
              "total_output_tokens": 12800, "mean_ttft_ms": 80.0, "median_ttft_ms": 70.0,
              "p99_ttft_ms": 200.0, "mean_tpot_ms": 9.0, "output_throughput": 1500.0}
    source = _write(tmp_path, json.dumps(result).replace("Infinity", '"inf"'), "result.json")
    converted = load_user_csv(_convert("vllm-benchmark", source, tmp_path, gpu="H100",
                                       num_gpus=1))
    row = converted.rows[0]
    assert row.values["workload"] == "load" and row.values["concurrency"] == 16
    assert row.values["input_tokens"] == 1024 and row.values["output_tokens"] == 128
    assert row.measured["ttft_p50_s"] == pytest.approx(0.07)
    assert row.measured["ttft_p99_s"] == pytest.approx(0.2)
    assert row.measured["output_tokens_per_s"] == 1500.0
    # the benchmark's 100 requests, its means over all of them: none left out as warm-up
    workload = user_csv.row_case(row).workload
    assert (workload.num_requests, workload.warmup_fraction) == (100, 0.0)


def test_vllm_benchmark_without_the_gpu_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = _write(tmp_path, json.dumps({"model_id": "x", "completed": 1}), "result.json")
    assert main(["measurements", "convert", "vllm-benchmark", str(source)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --gpu and --num-gpus" in err[0]


VLLM_RESULT = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "completed": 100,
               "request_rate": 4.0, "max_concurrency": None, "total_input_tokens": 102400,
               "total_output_tokens": 12800, "mean_ttft_ms": 80.0, "mean_tpot_ms": 9.0,
               "output_throughput": 1500.0}


def _vllm(tmp_path: Path, *results: dict[str, object], **options: object) -> Converted:
    source = _write(tmp_path, "\n".join(json.dumps(r) for r in results), "result.json")
    return converters()["vllm-benchmark"](source, Options(**({"gpu": "H100", "num_gpus": 1}
                                                             | options)))  # type: ignore[arg-type]


def test_a_request_rate_capped_at_a_concurrency_is_refused_not_read_as_either(
        tmp_path: Path) -> None:
    """vLLM's --request-rate 4 --max-concurrency 16: an open loop capped at 16 clients,
    which the load kind does not model; the converter writes both, the row is refused."""
    converted = _vllm(tmp_path, VLLM_RESULT | {"max_concurrency": 16}, VLLM_RESULT)
    assert [(r["request_rate"], r["concurrency"]) for r in converted.rows] == [(4.0, 16),
                                                                               (4.0, None)]
    assert converted.notes == ["result 0: a request rate capped at max_concurrency, an open "
                               "loop the load kind does not model: written with both, "
                               "validate refuses such rows"]
    path = tmp_path / "v.csv"
    path.write_text(to_csv(converted))
    capped, open_loop = validate_measured(load_user_csv(path),
                                          calibration=default_calibration()).rows
    assert capped.predicted == {} and "open loop capped at a concurrency" in (capped.error or "")
    assert open_loop.error is None and open_loop.predicted["tpot_s"] > 0


def test_vllm_benchmark_zero_and_nan_latencies_are_not_written(tmp_path: Path) -> None:
    """vLLM writes mean_tpot_ms 0.0 for one-token outputs and NaN percentiles: left out
    (with a note), so the file still reads and the other metrics are scored."""
    converted = _vllm(tmp_path, VLLM_RESULT | {"mean_tpot_ms": 0.0, "p99_ttft_ms": float("nan"),
                                               "output_throughput": -1.0},
                      VLLM_RESULT | {"mean_tpot_ms": 0.0})
    assert converted.notes == ["not written, not a positive number: p99_ttft_ms (1 result), "
                               "mean_tpot_ms (2 results), output_throughput (1 result)"]
    path = tmp_path / "v.csv"
    path.write_text(to_csv(converted))
    rows = load_user_csv(path).rows
    assert rows[0].measured == {"ttft_s": 0.08} and rows[1].measured["output_tokens_per_s"] == 1500


def test_vllm_benchmark_client_api_backends_are_not_the_runtime(tmp_path: Path,
                                                                 capsys) -> None:  # type: ignore[no-untyped-def]
    """``--backend openai-chat`` names the API the client spoke, not the engine: the row
    takes the default runtime (or --runtime) instead of being refused as an unknown one."""
    results = (VLLM_RESULT | {"backend": "openai-chat"}, VLLM_RESULT | {"backend": "openai"},
               VLLM_RESULT | {"backend": "sglang"})
    converted = _vllm(tmp_path, *results)
    assert [r["runtime"] for r in converted.rows] == [None, None, "sglang"]
    assert converted.notes == ["backend openai, openai-chat is the client API, not the engine: "
                               "runtime left empty (vllm); pass --runtime to name it"]
    path = tmp_path / "v.csv"
    path.write_text(to_csv(converted))
    outcome = validate_measured(load_user_csv(path), calibration=default_calibration()).rows[0]
    assert outcome.error is None and outcome.row.values["runtime"] is None
    named = _vllm(tmp_path, *results, runtime="TensorRT-LLM")
    assert [r["runtime"] for r in named.rows] == ["trtllm"] * 3 and named.notes == []
    source = tmp_path / "result.json"
    assert main(["measurements", "convert", "vllm-benchmark", str(source), "--gpu", "H100",
                 "--num-gpus", "1", "--runtime", "sglang"]) == 0
    assert list(csv.DictReader(capsys.readouterr().out.splitlines()))[0]["runtime"] == "sglang"
    assert main(["measurements", "convert", "vllm-benchmark", str(source), "--gpu", "H100",
                 "--num-gpus", "1", "--runtime", "vlm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown runtime 'vlm'; did you mean vllm?" in err[0]


def test_e2e_percentiles_are_read_and_predicted(tmp_path: Path) -> None:
    """The converter's e2e_p90_s and e2e_p99_s are metrics of the format: a load row
    predicts them (p50 <= p90 <= p99), a static batch as its one end-to-end time."""
    converted = _vllm(tmp_path, VLLM_RESULT | {"p90_e2el_ms": 1500.0, "p99_e2el_ms": 2000.0})
    path = tmp_path / "v.csv"
    path.write_text(to_csv(converted))
    measurements = load_user_csv(path)
    assert measurements.ignored == ()  # the converter's date is carried, not named
    assert {"e2e_p90_s": 1.5, "e2e_p99_s": 2.0}.items() <= measurements.rows[0].measured.items()
    load = validate_measured(measurements, calibration=default_calibration()).rows[0].predicted
    assert 0 < load["e2e_p50_s"] <= load["e2e_p90_s"] <= load["e2e_p99_s"]
    batch = validate_measured(load_user_csv(_write(tmp_path, f"{HEADER},e2e_p99_s\n"
                                                   "llama-3.1-8b,H100,1,1,vllm,batch,4,512,128,"
                                                   "1.2\n")),
                              calibration=default_calibration()).rows[0].predicted
    assert batch["e2e_p90_s"] == batch["e2e_p99_s"] == batch["e2e_s"] > 0


def test_vllm_benchmark_metadata_sizes_are_read_as_whole_numbers(tmp_path: Path,
                                                                   capsys) -> None:  # type: ignore[no-untyped-def]
    """``--metadata num_gpus=2.0 tp=2`` saves strings: read as counts, a bad one refused in
    one line (exit code 2), never a traceback."""
    metadata = {"gpu": "H100", "num_gpus": "2.0", "tensor_parallel_size": "2"}
    row = _vllm(tmp_path, VLLM_RESULT | metadata, gpu=None, num_gpus=None).rows[0]
    assert (row["num_gpus"], row["tp"]) == (2, 2)
    for bad in ({"num_gpus": "2.5"}, {"tp": "x"}, {"num_gpus": True}):
        source = _write(tmp_path, json.dumps(VLLM_RESULT | metadata | bad), "result.json")
        assert main(["measurements", "convert", "vllm-benchmark", str(source)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        key = next(iter(bad))
        assert len(err) == 1 and f"result 0: key '{key}' must be a whole number >= 1" in err[0]


def test_vllm_benchmark_on_a_folder_says_it_is_one(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["measurements", "convert", "vllm-benchmark", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{tmp_path}: is a directory, expected a file")


AIC_HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,"
              "isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,"
              "attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n")


def test_aiconfigurator_rows_keep_id_layout_and_concurrency(tmp_path: Path) -> None:
    source = _write(tmp_path, AIC_HEADER
                    + "r1,db; silicon_concurrency=32; x=1,sglang,0.5,deepseek-ai/DeepSeek-V3,"
                      "h200_sxm,fp8,agg,1024,1024,fp8,fp8,32,8,1,8,1,8,900,25\n"
                    + "r2,db; silicon_concurrency=4,vllm,0.11,Qwen/Qwen3-32B,h100_sxm,,agg,"
                      "1024,128,fp8,,4,2,1,1,2,1,150,18\n"
                    + "r3,db; silicon_concurrency=4,vllm,0.11,Qwen/Qwen3-32B,h100_sxm,fp8,"
                      "disagg,1024,128,fp8,,,,,,,,150,18\n",
                    "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options())
    assert [r["id"] for r in converted.rows] == ["r1", "r2"]
    assert any("1 disaggregated row" in n for n in converted.notes)
    first = converted.rows[0]
    assert (first["tp"], first["attention_dp"], first["ep"], first["moe_tp"], first["num_gpus"],
            first["concurrency"], first["workload"]) == (8, 8, 8, 1, 64, 32, "load")
    assert first["num_requests"] == 320  # runs of 10 x concurrency requests (SOURCES.md)
    assert converted.rows[1]["dtype"] == "fp8"  # gemm_quant_mode where precision is empty
    path = tmp_path / "aic.csv"
    path.write_text(to_csv(converted))
    measurements = load_user_csv(path)
    assert measurements.ignored == ("id", "max_batch_size", "wip", "provenance")
    outcome = validate_measured(measurements, calibration=default_calibration()).rows[0]
    # attention_dp is read; 8 x 8 attention GPUs cannot hold an 8 x 1 MoE layer
    assert "ep x moe_tp = 8 != tp x attention_dp = 64" in (outcome.error or "")
    serving = converters()["aiconfigurator"](source, Options(load_as_serving=True)).rows[1]
    assert (serving["workload"], serving["batch"]) == ("serving", 4)


def test_unknown_columns_are_carried_through_unchanged_and_named_once(tmp_path: Path,
                                                                     capsys) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, f"{HEADER},ttft_s,notes,id\n"
                            "llama-3.1-8b,H100,1,1,vllm,batch,4,512,128,0.05, a note ,007\n"
                            "llama-3.1-8b,H100,1,1,vLLM,batch,8,512,128,0.09,,008\n")
    assert main(["validate", "measurements", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert set(report) == {"rows", "metrics"}
    assert [r["input"]["id"] for r in report["rows"]] == ["007", "008"]
    assert report["rows"][0]["input"]["notes"] == " a note "
    assert report["rows"][1]["input"]["runtime"] == "vllm"
    assert set(report["rows"][0]) == {"input", "predicted", "error"}
    assert report["metrics"]["ttft_s"]["n"] == 2
    notes = [line for line in captured.err.splitlines() if "not part of the format" in line]
    assert len(notes) == 1 and "notes, id" in notes[0]
    assert "\x1b" not in captured.err  # no progress bar where stderr is not a terminal


def test_a_serving_rows_mean_batch_may_be_fractional(tmp_path: Path) -> None:
    """A serving row's batch is a mean of running sequences (ML.ENERGY's 2.5); a static
    batch's and a concurrency are whole (refused otherwise: tests/test_measurements_bad_input)."""
    path = _write(tmp_path, f"{HEADER},concurrency,tpot_s\n"
                            "llama-3.1-8b,H100,1,1,vllm,serving,2.5,512,128,,0.01\n"
                            "llama-3.1-8b,H100,1,1,vllm,load,,512,128,16.0,0.01\n")
    serving, load = load_user_csv(path).rows
    assert row_case(serving).workload.batch == 2.5
    assert row_case(load).workload.concurrency == 16 and load.as_input()["concurrency"] == 16


def test_attention_dp_given_as_a_flag_is_echoed_as_that_flag(tmp_path: Path) -> None:
    """``true`` (enabled, size not given) and ``false`` are echoed as they were given, not
    as the sizes they stand for inside (0 and 1); a size as the size."""
    path = _write(tmp_path, "model,gpu,num_gpus,attention_dp,ttft_s\n"
                            "qwen3-30b-a3b,H100,4,true,1\nqwen3-30b-a3b,H100,4,False,1\n"
                            "qwen3-30b-a3b,H100,4,2,1\n")
    assert [r.as_input()["attention_dp"] for r in load_user_csv(path).rows] == [True, False, 2]


def test_zero_speculative_tokens_and_shared_prefix_read_as_none_however_written(
        tmp_path: Path) -> None:
    """0, 0.0 and 0e0 are all no drafts and no shared prefix, as an empty cell."""
    path = _write(tmp_path, "model,gpu,num_gpus,speculative_tokens,shared_prefix_tokens,"
                            "input_tokens,output_tokens,ttft_s\n"
                            + "".join(f"llama-3.1-8b,H100,1,{z},{z},512,128,1\n"
                                      for z in ("0", "0.0", "0e0", "")))
    for row in load_user_csv(path).rows:
        assert not row.values["speculative_tokens"] and not row.values["shared_prefix_tokens"]
        assert row_case(row).deployment.speculative_tokens == 0


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_semicolon_or_tab_separated_file_is_read_as_one(tmp_path: Path, delimiter: str) -> None:
    text = f"{HEADER},ttft_s\nllama-3.1-8b,H100,1,1,vllm,batch,4,512,128,0.05\n"
    comma = load_user_csv(_write(tmp_path, text, "comma.csv"))
    other = load_user_csv(_write(tmp_path, text.replace(",", delimiter), "other.csv"))
    assert [r.values for r in other.rows] == [r.values for r in comma.rows]
    assert other.metrics == ("ttft_s",) and other.ignored == ()


def test_a_spreadsheets_empty_trailing_columns_are_dropped(tmp_path: Path) -> None:
    """``ttft_s,,`` (columns without a name or a value) is neither a duplicated column nor
    one carried as not part of the format; a nameless column with values is carried."""
    for extra in (",", ",,"):
        measurements = load_user_csv(_write(
            tmp_path, f"{HEADER},ttft_s{extra}\nllama-3.1-8b,H100,1,1,vllm,batch,4,512,128,0.05"
                      f"{extra}\nllama-3.1-8b,H100,1,1,vllm,batch,8,512,128,0.09\n"))
        assert measurements.ignored == () and len(measurements.rows) == 2
        assert "" not in measurements.rows[0].columns
    kept = load_user_csv(_write(tmp_path, f"{HEADER},ttft_s,\n"
                                          "llama-3.1-8b,H100,1,1,vllm,batch,4,512,128,0.05,7\n"))
    assert kept.ignored == ("",) and kept.rows[0].as_input()[""] == "7"


def test_attention_dp_on_a_dense_model_is_refused_as_such_whatever_the_gpu_count(
        tmp_path: Path) -> None:
    """One GPU cannot hold 2 attention ranks (tp would be 0), but the reason is the model."""
    path = _write(tmp_path, "model,gpu,num_gpus,attention_dp,input_tokens,output_tokens,ttft_s\n"
                            + "".join(f"llama-3.1-8b,H100,{n},{a},512,128,1\n"
                                      for n, a in ((1, 2), (4, 2), (4, "true"))))
    errors = {o.error for o in validate_measured(load_user_csv(path),
                                                 calibration=default_calibration()).rows}
    assert errors == {"attention_dp lays out a MoE layer but llama-3.1-8b is a dense model "
                      "(use dp for replicas)"}


def test_an_engine_named_with_its_release_in_one_cell_gives_both(tmp_path: Path) -> None:
    """``vLLM 0.6.3`` in a framework column is vLLM at release 0.6.3, which prices the
    release's own overheads (the same as the two columns given apart); ``llama.cpp`` and
    ``vllm-v1`` carry no release; a cell and a runtime_version that disagree are refused."""
    head = "model,gpu,num_gpus,framework,runtime_version,workload,batch,input_tokens,output_tokens,tpot_s\n"
    rows = ["vLLM 0.6.3,", "sglang==0.4.1,", "TensorRT-LLM v0.12.0,0.12.0", "llama.cpp,",
            "vllm-v1,", "vllm,0.6.3"]
    path = _write(tmp_path, head + "".join(f"llama-3.1-8b,H100,1,{r},serving,16,512,128,0.02\n"
                                          for r in rows))
    read = load_user_csv(path).rows
    assert [(r.values["runtime"], r.values["runtime_version"]) for r in read] == [
        ("vllm", "0.6.3"), ("sglang", "0.4.1"), ("trtllm", "0.12.0"), ("llama.cpp", None),
        ("vllm", None), ("vllm", "0.6.3")]
    tpot = [r.predicted["tpot_s"] for r in validate_measured(
        load_user_csv(path), calibration=default_calibration()).rows]
    assert tpot[0] == tpot[5] != tpot[4]
    bad = _write(tmp_path, head + "llama-3.1-8b,H100,1,vLLM 0.6.3,0.8.0,serving,16,512,128,0.02\n")
    with pytest.raises(MeasurementError, match="names release 0.6.3"):
        load_user_csv(bad)


def test_fp8_spellings_of_vllm_and_torch_are_fp8(tmp_path: Path) -> None:
    path = _write(tmp_path, "model,gpu,num_gpus,dtype,kv_dtype,input_tokens,output_tokens,ttft_s\n"
                            + "".join(f"llama-3.1-8b,H100,1,{d},{d},512,128,1\n" for d in
                                      ("fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "float8_e5m2",
                                       "FP8-E4M3", "fp8_e4m3fn", "w8a8-fp8")))
    for row in load_user_csv(path).rows:
        deployment = row_case(row).deployment
        assert (deployment.weight_dtype, deployment.kv_dtype) == ("fp8", "fp8")


def test_quantisation_method_names_are_their_weight_dtypes(tmp_path: Path) -> None:
    """vLLM/TGI ``--quantization`` names read as the dtype they store: AWQ/GPTQ/Marlin are
    4-bit weights (the int4 path: 16-bit activations), W8A8 8-bit integers."""
    methods = {"awq": "int4", "AWQ_Marlin": "int4", "gptq": "int4", "gptq_marlin": "int4",
               "w4a16": "int4", "w8a8": "int8", "fp8_dynamic": "fp8", "INT4-AWQ": "int4",
               "gptq-int4": "int4", "F16": "fp16"}
    path = _write(tmp_path, "model,gpu,num_gpus,dtype,input_tokens,output_tokens,ttft_s\n"
                            + "".join(f"llama-3.1-8b,H100,1,{m},512,128,1\n" for m in methods))
    got = [row_case(row).deployment.weight_dtype for row in load_user_csv(path).rows]
    assert got == list(methods.values())


def test_millisecond_metrics_and_engine_layout_names_are_read(tmp_path: Path) -> None:
    """``ttft_ms``/``tpot_p90_ms`` (benchmark_serving's units) are seconds / 1,000, and
    vLLM's ``tensor_parallel_size`` / ``max_concurrency`` name our tp / concurrency."""
    path = _write(tmp_path, "model,gpu,num_gpus,tensor_parallel_size,workload,max_concurrency,"
                            "input_tokens,output_tokens,ttft_ms,tpot_p90_ms\n"
                            "llama-3.1-8b,H100,2,2,load,8,512,128,250,12.5\n")
    measurements = load_user_csv(path)
    assert set(measurements.metrics) == {"ttft_s", "tpot_p90_s"}
    row = measurements.rows[0]
    assert row.measured == {"ttft_s": pytest.approx(0.25), "tpot_p90_s": pytest.approx(0.0125)}
    assert (row.values["tp"], row.values["concurrency"]) == (2, 8)
    assert measurements.ignored == ()


def test_benchmark_names_of_lengths_and_counts_are_read(tmp_path: Path) -> None:
    """GenAI-Perf's and AIConfigurator's ISL / OSL, vLLM's ``input_len`` / ``num_prompts``
    and ``gpu_count`` name our columns; ``batch_size`` stays foreign (not our batch)."""
    path = _write(tmp_path, "model,gpu,gpu_count,workload,concurrency,ISL,OSL,num_prompts,"
                            "batch_size,ttft_s\n"
                            "llama-3.1-8b,H100,1,load,8,512,128,80,4,0.2\n")
    measurements = load_user_csv(path)
    values = measurements.rows[0].values
    assert (values["num_gpus"], values["input_tokens"], values["output_tokens"],
            values["num_requests"]) == (1, 512, 128, 80)
    assert measurements.ignored == ("batch_size",)
    both = _write(tmp_path, "model,gpu,num_gpus,isl,input_tokens,ttft_s\nllama-3.1-8b,H100,1,"
                            "512,512,0.2\n")
    with pytest.raises(MeasurementError, match="'input_tokens' appears more than once"):
        load_user_csv(both)


def test_a_metric_in_seconds_and_milliseconds_at_once_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "model,gpu,num_gpus,ttft_s,ttft_ms\nllama-3.1-8b,H100,1,0.2,200\n")
    with pytest.raises(MeasurementError, match="'ttft_s' appears more than once"):
        load_user_csv(path)


def test_refusals_carry_their_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, f"{HEADER},ep,moe_tp,concurrency,tpot_s\n"
                            "qwen3-30b-a3b,H100,4,4,vllm,batch,4,512,128,2,1,,0.02\n"
                            "llama-3.1-8b,H100,1,1,vllm,load,,512,128,,,8,0.01\n"
                            "llama-3.1-8b,H100,1,1,no-such-engine,batch,4,512,128,,,,0.01\n"
                            "llama-3.1-8b,H100,1,1,vllm,batch,4,,128,,,,0.01\n")
    monkeypatch.setattr(user_csv, "kind_names", lambda: ("batch", "serving"))
    done: list[int] = []  # the progress callback: once per row, refused rows too
    errors = [o.error for o in validate_measured(load_user_csv(path),
                                                 calibration=default_calibration(),
                                                 on_row=lambda: done.append(1)).rows]
    assert len(done) == 4
    assert "ep x moe_tp = 2 != tp x attention_dp = 4" in (errors[0] or "")
    assert errors[1] == ("serving under load is not simulated (no workload kind named 'load' "
                         "is registered)")
    assert "runtime 'no-such-engine' has no profile" in (errors[2] or "")
    assert errors[3] == "no input_tokens: needed to predict a batch row"


K_SHOT_ROWS = "".join(f"llama-3.1-8b,{gpu},1,1,vllm,batch,{b},{n},128,{t:.4f}\n"
                      for gpu in ("H100", "A100") for b, n, t in
                      ((1, 128, 0.02), (8, 512, 0.1), (32, 1024, 0.6), (64, 2048, 2.0),
                       (16, 256, 0.1)))


def test_k_shot_with_k_0_is_plain_validation(tmp_path: Path) -> None:
    measurements = load_user_csv(_write(tmp_path, f"{HEADER},ttft_s\n{K_SHOT_ROWS}"))
    plain = validate_measured(measurements, calibration=default_calibration()).as_dict()
    zero = k_shot(measurements, k=0, group_by=["gpu"], seed=3,
                  calibration=default_calibration()).as_dict()
    assert all(row.pop("fitted_on") is False for row in zero["rows"])
    # k-shot adds its groups, named by the GPUs the rows' text resolves to
    assert set(zero.pop("groups")) == {"gpu=H100-SXM", "gpu=A100-80GB-SXM"}
    assert zero == plain


def test_k_shot_scores_only_rows_not_fitted_on(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, f"{HEADER},ttft_s\n{K_SHOT_ROWS}")
    assert main(["validate", "measurements", str(path), "--k-shot", "2", "--group-by", "gpu",
                 "--seed", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    fitted = [r["input"]["gpu"] for r in report["rows"] if r["fitted_on"]]
    assert sorted(fitted) == ["A100", "A100", "H100", "H100"]
    assert report["metrics"]["ttft_s"]["n"] == 6
    assert "nothing is scored" not in capsys.readouterr().err


def test_k_shot_says_when_every_row_was_fitted_on(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Groups no larger than K leave no row to score: one note instead of an empty table."""
    path = _write(tmp_path, f"{HEADER},ttft_s\n{K_SHOT_ROWS}")
    assert main(["validate", "measurements", str(path), "--k-shot", "2",
                 "--group-by", "gpu,batch,input_tokens", "--json"]) == 0
    assert "nothing is scored" in capsys.readouterr().err


def test_k_shot_report_counts_groups_and_scores_held_out_rows(tmp_path: Path) -> None:
    from energylens.validation.kshot_report import DATASETS, group_errors, render

    measurements = load_user_csv(_write(tmp_path, f"{HEADER},ttft_s\n{K_SHOT_ROWS}"))
    report = k_shot(measurements, k=2, group_by=["gpu"], seed=0,
                    calibration=default_calibration())
    groups = group_errors(report, group_by=["gpu"], metric="ttft_s")
    assert {k: (rows, predicted, screened, len(ape), len(same))
            for k, (rows, predicted, screened, ape, same) in groups.items()} == {
        "gpu=H100-SXM": (5, 5, 0, 3, 3), "gpu=A100-80GB-SXM": (5, 5, 0, 3, 3)}
    text = render([(DATASETS[0], 2, 0, groups)], [DATASETS[0]], seeds=1)
    assert "| gpu=A100-80GB-SXM | 5 | 5 | 0 |" in text


def test_k_shot_groups_one_gpu_or_model_however_each_row_names_it(tmp_path: Path) -> None:
    """nvidia-smi's name and the short one are one GPU, the Hugging Face id and the zoo
    name one model: one group of ten rows, not two of five."""
    spelled = K_SHOT_ROWS.replace("llama-3.1-8b,A100", "meta-llama/Llama-3.1-8B,A100")
    spelled = spelled.replace(",A100,", ",NVIDIA H100 80GB HBM3,")
    measurements = load_user_csv(_write(tmp_path, f"{HEADER},ttft_s\n{spelled}"))
    report = k_shot(measurements, k=2, group_by=["model", "gpu"], seed=0,
                    calibration=default_calibration())
    assert set(report.as_dict()["groups"]) == {"model=llama-3.1-8b,gpu=H100-SXM"}
    assert sum(row.fitted_on for row in report.rows) == 2


def test_load_rows_are_predicted_by_the_load_kind_with_its_percentiles(tmp_path: Path) -> None:
    path = _write(tmp_path, f"{HEADER},concurrency,ttft_p90_s,tpot_s\n"
                            "llama-3.1-8b,H100,1,1,vllm,load,,256,32,4,0.05,0.008\n")
    outcome = validate_measured(load_user_csv(path), calibration=default_calibration()).rows[0]
    assert outcome.error is None, outcome.error
    p = outcome.predicted
    assert 0 < p["ttft_p50_s"] <= p["ttft_p90_s"] <= p["ttft_p99_s"]
    assert p["tpot_s"] > 0 and p["request_throughput_per_s"] > 0


def test_a_load_rows_shared_prefix_is_predicted_as_cached(tmp_path: Path) -> None:
    """The same open loop (3 requests/s) with 3,000 of its 4,000 prompt tokens shared: a
    much shorter TTFT (each prompt computes a quarter of its tokens) and no longer TPOT;
    a batch row may not carry one."""
    path = _write(tmp_path, f"{HEADER},request_rate,shared_prefix_tokens,tpot_s\n"
                            "llama-3.1-8b,H100,1,1,vllm,load,,4000,200,3,,0.02\n"
                            "llama-3.1-8b,H100,1,1,vllm,load,,4000,200,3,3000,0.02\n"
                            "llama-3.1-8b,H100,1,1,vllm,batch,1,4000,200,,3000,0.02\n")
    cold, warm, batch = validate_measured(load_user_csv(path),
                                          calibration=default_calibration()).rows
    assert cold.error is None and warm.error is None
    assert warm.predicted["ttft_p50_s"] < 0.5 * cold.predicted["ttft_p50_s"]
    assert warm.predicted["tpot_s"] <= cold.predicted["tpot_s"]
    assert "shared_prefix_tokens" in (batch.error or "")


def test_aiconfigurator_kv_precision_follows_the_checkpoint_where_the_engine_does(
        tmp_path: Path) -> None:
    """NVFP4 and Qwen3-32B per-tensor FP8 rows ran NVIDIA Model Optimizer checkpoints (FP8
    KV declared): written kv_dtype fp8 for TensorRT-LLM, whose auto follows the checkpoint,
    and for vLLM from the release its profile names (0.12); left to auto for older vLLM,
    and for a publisher's own FP8 release (DeepSeek's)."""
    rows = [("trtllm", "1.0", "deepseek-ai/DeepSeek-R1", "fp4", "nvfp4"),
            ("vllm", "0.11.1", "deepseek-ai/DeepSeek-R1", "fp4", "nvfp4"),
            ("vllm", "0.19.0", "deepseek-ai/DeepSeek-R1", "fp4", "nvfp4"),
            ("trtllm", "1.0", "Qwen/Qwen3-32B", "fp8", "fp8"),
            ("trtllm", "1.0", "deepseek-ai/DeepSeek-R1", "fp8", "fp8"),
            ("trtllm", "1.0", "meta-llama/Llama-3.1-8B-Instruct", "", "")]
    text = AIC_HEADER + "".join(
        f"r{i},db; silicon_concurrency=4,{engine},{version},{model},h200_sxm,{precision},agg,"
        f"1024,1024,{gemm},{gemm},4,8,1,1,1,8,490,8.6\n"
        for i, (engine, version, model, precision, gemm) in enumerate(rows))
    converted = converters()["aiconfigurator"](_write(tmp_path, text, "silicon_sample.csv"),
                                               Options())
    assert [r["kv_dtype"] for r in converted.rows] == ["fp8", None, "fp8", "fp8", None, None]
    assert any("3 row(s) written with kv_dtype fp8" in n for n in converted.notes)


def _minimax_campaign(tmp_path: Path, rows: list[tuple[str, int, float, float]]) -> Converted:
    """AIConfigurator rows of MiniMax-M2.5 FP8 on 2 B200 (vLLM 0.19.0), 1,024 + 1,024
    tokens, one per (day measured, clients, TTFT ms, TPOT ms), converted."""
    text = AIC_HEADER + "".join(
        f"r{i},db; silicon_concurrency={clients}; measured={day}T00:00:00Z,vllm,0.19.0,"
        f"MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,{clients},2,1,1,1,2,"
        f"{ttft_ms},{tpot_ms}\n" for i, (day, clients, ttft_ms, tpot_ms) in enumerate(rows))
    return converters()["aiconfigurator"](_write(tmp_path, text, "silicon_sample.csv"), Options())


def test_a_run_filed_again_under_another_campaign_carries_what_its_campaign_shows(
        tmp_path: Path) -> None:
    """The 8-client run of a campaign shown to hold an FP8 cache, filed again on another
    day with the same numbers, is that run: FP8 too, and written once."""
    rows = [("2026-04-03", 512, 1100, 47.0), ("2026-04-03", 8, 80, 11.0),
            ("2026-04-08", 8, 80, 11.0)]
    converted = _minimax_campaign(tmp_path, rows)
    assert [(r["id"], r["kv_dtype"]) for r in converted.rows] == [("r0", "fp8"), ("r1", "fp8")]
    assert any(n.startswith("3 row(s) written with kv_dtype fp8") for n in converted.notes)


def test_a_campaign_that_held_more_than_a_16_bit_cache_is_read_as_fp8(tmp_path: Path) -> None:
    """MiniMax-M2.5 FP8 on 2 B200 (vLLM 0.19.0): 512 clients of 1,024 + 1,024 tokens at a
    measured TTFT of 1.1 s and TPOT of 47 ms kept ~512 x 0.98 x 1,536 = 770 thousand tokens
    resident, far above what a 16-bit cache holds there (~410 thousand): that run's
    campaign, its 8-client run included, is written with an FP8 cache. The same campaign
    measured on another day with 8 clients alone (~12 thousand tokens, another run: its
    numbers differ) stays auto, and the 16-bit pool's share comes out as hand-computed."""
    from energylens.measurements.convert.kv_evidence import resident_share
    from energylens.measurements.user_csv import load_user_csv

    rows = [("2026-04-03", 512, 1100, 47.0), ("2026-04-03", 8, 80, 11.0),
            ("2026-04-08", 8, 81, 11.1)]
    converted = _minimax_campaign(tmp_path, rows)
    assert [r["kv_dtype"] for r in converted.rows] == ["fp8", "fp8", None]
    assert any(n.startswith("2 row(s) written with kv_dtype fp8: a run of their campaign")
               for n in converted.notes)
    plain = [{**r, "kv_dtype": None} for r in converted.rows[:1]]
    path = tmp_path / "one.csv"
    path.write_text(to_csv(Converted(rows=plain)), encoding="utf-8")
    e2e = 1.1 + 1023 * 0.047
    resident = 512 * (e2e - 1.1) / e2e * (1024 + 512)
    share = resident_share(load_user_csv(path).rows[0])
    assert share is not None and 1.5 < share < 2.2
    assert 3.0e5 < resident / share < 5.0e5  # 16-bit tokens two B200s hold beside the weights


def test_aiconfigurator_rows_with_the_expert_split_multiplied_into_tp_size(tmp_path: Path) -> None:
    """tp_size = moe_tp_size x moe_ep_size = N x N without attention DP is the N-GPU launch
    tp = ep = N (the ids that name a layout say so); other explicit layouts are kept."""
    source = _write(tmp_path, AIC_HEADER
                    + "a_tp8_ep8_1,db; silicon_concurrency=4,trtllm,1.2,deepseek-ai/DeepSeek-R1,"
                      "h200_sxm,fp8,agg,1024,1024,fp8,fp8,4,64,1,1,8,8,490,8.6\n"
                    + "b_cfg7,db; silicon_concurrency=4,sglang,0.5,deepseek-ai/DeepSeek-V3,"
                      "b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,4,16,1,1,4,4,300,8\n"
                    + "c_tp8_ep4,db; silicon_concurrency=4,trtllm,1.2,deepseek-ai/DeepSeek-R1,"
                      "h200_sxm,fp8,agg,1024,1024,fp8,fp8,4,8,1,1,2,4,490,8.6\n",
                    "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options())
    layouts = [(r["tp"], r["ep"], r["moe_tp"], r["num_gpus"]) for r in converted.rows]
    assert layouts == [(8, 8, 1, 8), (4, 4, 1, 4), (8, 4, 2, 8)]
    assert any("2 row(s) record an N-GPU layout multiplied to N x N" in n
               for n in converted.notes)


def test_aiconfigurator_attention_dp_rows_with_the_layout_multiplied(tmp_path: Path) -> None:
    """The same N x N multiplication with attention DP: TensorRT-LLM attention_dp_size
    N x N over moe_tp = moe_ep = N is attention DP N with EP N; vLLM tp_size =
    attention_dp_size = N with moe_ep_size N x N is TP N, EP N. A consistent attention-DP
    layout (attention DP 8 over EP 8) is kept."""
    rows = [("trtllm", "deepseek-ai/DeepSeek-R1", 1, 64, 8, 8),
            ("vllm", "moonshotai/Kimi-K2.5", 4, 4, 1, 16),
            ("trtllm", "deepseek-ai/DeepSeek-R1", 1, 8, 1, 8)]
    source = _write(tmp_path, AIC_HEADER + "".join(
        f"r{i},db; silicon_concurrency=64,{engine},1.2,{model},b200_sxm,fp4,agg,1024,1024,"
        f"nvfp4,nvfp4,8,{tp},1,{adp},{moe_tp},{ep},{490 + i},8.6\n"  # distinct runs: no repeat
        for i, (engine, model, tp, adp, moe_tp, ep) in enumerate(rows)), "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options())
    layouts = [(r["tp"], r["attention_dp"], r["ep"], r["moe_tp"], r["num_gpus"])
               for r in converted.rows]
    assert layouts == [(1, 8, 8, 1, 8), (4, 1, 4, 1, 4), (1, 8, 8, 1, 8)]


def test_aiconfigurator_moe_tp_over_one_board_is_read_as_wide_ep(tmp_path: Path) -> None:
    """tp_size = moe_tp_size = N > 8 with no EP and no attention DP (GB200 DeepSeek-R1 at N
    = 12-72: N does not split the 128 MLA heads) is attention DP N with EP N; MoE TP 8 over
    TP 8 (one board: a layout that runs) is kept."""
    rows = [("trtllm", 36, 36, 1), ("sglang", 72, 72, 1), ("trtllm", 8, 8, 1)]
    source = _write(tmp_path, AIC_HEADER + "".join(
        f"r{i},db; silicon_concurrency=64,{engine},1.2,deepseek-ai/DeepSeek-R1,gb200,fp4,agg,"
        f"1024,1024,nvfp4,nvfp4,8,{tp},1,1,{moe_tp},{ep},490,8.6\n"
        for i, (engine, tp, moe_tp, ep) in enumerate(rows)), "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options())
    layouts = [(r["tp"], r["attention_dp"], r["ep"], r["moe_tp"], r["num_gpus"])
               for r in converted.rows]
    assert layouts == [(1, 36, 36, 1, 36), (1, 72, 72, 1, 72), (8, 1, 1, 8, 8)]
    assert any("2 row(s) record MoE TP N > 8" in n for n in converted.notes)


def test_aiconfigurator_dynamo_rows_fill_whole_workers(tmp_path: Path) -> None:
    """A Dynamo-run row whose concurrency is k x batch_size (k whole, > 1) ran k workers:
    dp = k, num_gpus k x the layout's. A row run without Dynamo, or whose concurrency is
    no whole multiple, keeps one replica."""
    dynamo = "image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1"
    rows = [(f"silicon_concurrency=448; {dynamo}", 14), (f"silicon_concurrency=48; {dynamo}", 14),
            ("silicon_concurrency=448", 14), (f"silicon_concurrency=14; {dynamo}", 14)]
    source = _write(tmp_path, AIC_HEADER + "".join(
        f"r{i},db; {where},trtllm,1.3.0rc5,Qwen/Qwen3-32B,gb200,fp8,agg,15000,500,fp8,fp8,"
        f"{batch},2,1,1,1,1,900,13\n" for i, (where, batch) in enumerate(rows)),
        "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options())
    assert [(r["dp"], r["num_gpus"]) for r in converted.rows] == [
        (32, 64), (None, 2), (None, 2), (None, 2)]
    assert any("1 Dynamo row(s) written with dp" in n for n in converted.notes)


SHIPPED_AIC = REPO / "data/measurements/aiconfigurator/silicon_sample_agg.csv"
SOURCE_AIC = REPO.parent / "shared/data/aiconfigurator/silicon_sample.csv"


@pytest.mark.skipif(not SOURCE_AIC.exists(), reason="needs ../shared (the source of the "
                    "shipped AIConfigurator rows) beside the repository")
def test_the_shipped_aiconfigurator_rows_are_what_the_converter_writes_today() -> None:
    """data/measurements' converted rows may not drift from the converter (SOURCES.md
    says how they were made): converting the source again gives the same CSV."""
    converted = converters()["aiconfigurator"](SOURCE_AIC, Options())
    assert to_csv(converted) == SHIPPED_AIC.read_text()


def test_the_runtime_version_column_picks_the_release_and_a_build_name_is_the_profiles(
        tmp_path: Path) -> None:
    """An EP row of vLLM 0.19 carries no fixed time per MoE layer, one of 0.16 does (both
    after async scheduling hid the CPU overheads, 0.14): the step differs by that time x
    the MoE layers; a build that names no release reads as the profile's 0.11, as 0.11.1."""
    from energylens.model.zoo import get_model

    path = _write(tmp_path, "model,gpu,num_gpus,tp,ep,runtime,runtime_version,workload,batch,"
                            "input_tokens,output_tokens,tpot_s\n" + "".join(
                                f"qwen3-30b-a3b,H100,2,2,2,vllm,{v},serving,16,512,128,0.02\n"
                                for v in ("0.19.0", "0.16.0", "nightly-dev", "0.11.1")))
    rows = validate_measured(load_user_csv(path), calibration=default_calibration()).rows
    assert all(r.error is None for r in rows), [r.error for r in rows]
    new, old, nightly, profile = (r.predicted["tpot_s"] for r in rows)
    per_layer = default_calibration().runtime(runtime="vllm", gpu="H100-SXM").ep_moe_layer_overhead_s
    assert old - new == pytest.approx(per_layer * get_model("qwen3-30b-a3b").moe.num_moe_layers,
                                      rel=1e-6)
    assert nightly == profile


def test_llm_inference_bench_deepspeed_rows_are_habanas_fork_not_mii(tmp_path: Path) -> None:
    """The bench's "Deepspeed" rows ran Habana's DeepSpeed on Gaudi2; a bare "deepspeed"
    reads as DeepSpeed-MII (which refuses Habana cards), so the converter names the runtime."""
    with LIB.open() as f:
        rows = [r for r in csv.DictReader(f) if r["Framework"] == "Deepspeed"][:2]
    source = tmp_path / "gaudi.csv"
    with source.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    converted = load_user_csv(_convert("llm-inference-bench", source, tmp_path))
    outcomes = validate_measured(converted, calibration=default_calibration()).rows
    assert {o.row.values["runtime"] for o in outcomes} == {"deepspeed-habana"}
    assert all(o.error is None for o in outcomes)


def test_rows_faster_than_reading_the_weights_are_screened_not_scored(tmp_path: Path) -> None:
    """Llama-3.1-8B in BF16 on one H100: 8.03e9 x 2 bytes read 128 times at 3.35 TB/s is
    0.614 s, one pass 4.8 ms; rows below that did not run as described."""
    header = f"{HEADER},speculative_tokens,e2e_s,tpot_s\n"
    rows = ("llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,,0.10,\n"     # e2e below 128 passes
            "llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,,0.70,\n"     # above: kept
            "llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,,,0.001\n"    # TPOT below one pass
            "llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,3,,0.001\n")  # speculative: kept
    measurements = load_user_csv(_write(tmp_path, header + rows))
    report = validate_measured(measurements, calibration=default_calibration())
    screened = [o.screened for o in report.rows]
    assert screened[0] is not None and "0.614 s" in screened[0]
    assert screened[2] is not None and "tpot_s" in screened[2] and "0.00479 s" in screened[2]
    assert screened[1] is None and screened[3] is None
    metrics = report.metrics
    assert metrics["e2e_s"]["n"] == 1 and metrics["tpot_s"]["n"] == 1
    assert metrics["e2e_s[impossible]"]["n"] == 1 and metrics["e2e_s[with impossible]"]["n"] == 2
    assert report.as_dict()["rows"][0]["screened"] == screened[0]
    assert "screened" not in report.as_dict()["rows"][1]
    _, skipped = fit_rows(measurements, calibration=default_calibration())
    assert [number for number, _ in skipped] == [1, 3]


def test_calibrate_from_leaves_out_rows_it_cannot_fit_and_their_gpus(tmp_path: Path,
                                                                       capsys) -> None:  # type: ignore[no-untyped-def]
    """Llama-3.1-405B in BF16 (811 GB) on two B200s (2 x 192 GB) is infeasible, and a
    serving row predicts no TTFT percentile: neither is fitted on nor named in the
    overlay's rows or GPUs (whose factors would move a B200 prediction)."""
    import yaml

    path = _write(tmp_path, "model,gpu,num_gpus,workload,batch,input_tokens,output_tokens,"
                            "tpot_s,ttft_p90_s\n"
                            "llama-3.1-8b,H100,1,batch,16,512,128,0.0095,\n"
                            "llama-3.1-8b,H100,1,batch,64,256,128,0.0138,\n"
                            "llama-3.1-405b,B200,2,batch,16,512,128,10,\n"
                            "llama-3.1-8b,B200,1,serving,16,512,128,,0.05\n")
    rows, skipped = fit_rows(load_user_csv(path), calibration=default_calibration())
    assert len(rows) == 2 and {r.gpu for r in rows} == {"H100-SXM"}
    assert [n for n, _ in skipped] == [3, 4]
    assert skipped[0][1].startswith("infeasible: ")
    assert skipped[1][1] == "a serving row predicts none of its measured metrics (ttft_p90_s)"
    out = tmp_path / "my.yaml"
    assert main(["calibrate", "--from", str(path), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert "fitted on 2 row(s)" in captured.out and "(GPUs: H100-SXM)" in captured.out
    assert "row 3 not fitted: infeasible" in captured.err
    assert "row 4 not fitted: a serving row" in captured.err
    overlay = yaml.safe_load(out.read_text())["overlay"]
    assert overlay["gpus"] == ["H100-SXM"] and overlay["fitted_on"]["rows"] == [1, 2]


def test_k_shot_never_fits_on_a_screened_row(tmp_path: Path) -> None:
    text = (f"{HEADER},e2e_s\n" + "".join(
        f"llama-3.1-8b,H100,1,1,vllm,batch,{b},128,128,{t}\n"
        for b, t in ((1, 0.01), (2, 0.02), (4, 0.03), (8, 1.2), (16, 1.4), (32, 1.9))))
    report = k_shot(load_user_csv(_write(tmp_path, text)), k=5, group_by=["gpu"], seed=0,
                    calibration=default_calibration())
    assert [o.fitted_on for o in report.rows] == [False, False, False, True, True, True]
    assert all(o.screened is not None for o in report.rows[:3])


def test_a_row_marked_screened_is_predicted_never_fitted_and_scored_apart(
        tmp_path: Path) -> None:
    """A ``screened`` reason of the user's (or a converter's: a host-paced run) keeps the
    row out of every fit and of the headline error, reported per kind beside it."""
    text = (f"{HEADER},screened,tpot_s\n"
            "llama-3.1-8b,H100,1,1,vllm,batch,8,128,128,,0.009\n"
            "llama-3.1-8b,H100,1,1,vllm,batch,16,128,128,host-bound: GPUs idle,0.050\n"
            "llama-3.1-8b,H100,1,1,vllm,batch,32,128,128,,0.011\n")
    measurements = load_user_csv(_write(tmp_path, text))
    report = validate_measured(measurements, calibration=default_calibration())
    assert [o.screened for o in report.rows] == [None, "host-bound: GPUs idle", None]
    metrics = report.metrics
    assert metrics["tpot_s"]["n"] == 2 and metrics["tpot_s[host-bound]"]["n"] == 1
    assert metrics["tpot_s[with host-bound]"]["n"] == 3 and "tpot_s[impossible]" not in metrics
    _, skipped = fit_rows(measurements, calibration=default_calibration())
    assert skipped == [(2, "host-bound: GPUs idle")]
    shot = k_shot(measurements, k=2, group_by=["gpu"], seed=0, calibration=default_calibration())
    assert [o.fitted_on for o in shot.rows] == [True, False, True]


def test_the_mlenergy_converter_marks_the_runs_the_host_paced(tmp_path: Path) -> None:
    """ML.ENERGY's Llama-3.1-8B chat run on one B200 drew 449 W at 128 sequences against
    617 W at 64 (ITL 26.7 against 9.0 ms): the GPU idled, the row is screened; the 64
    sequences' row, hotter than every smaller batch of its series, is not."""
    converted = load_user_csv(_convert("mlenergy", MLENERGY, tmp_path))
    llama = {int(r.values["max_num_seqs"]): r for r in converted.rows
             if r.values["model"] == "meta-llama/Llama-3.1-8B-Instruct" and r.values["gpu"] == "B200"}
    assert str(llama[128].values["screened"]).startswith("host-bound: ")
    assert llama[64].values["screened"] is None


def test_a_row_the_kv_cache_decided_carries_a_note(tmp_path: Path) -> None:
    """Llama-3.1-70B BF16 on 4 H100 cannot hold 1,024 sequences of 2,048 + 1,024 tokens:
    the row says so (its KV precision matters); 8 sequences fit and carry no note."""
    text = (f"{HEADER},tpot_s\n"
            "llama-3.1-70b,H100,4,4,vllm,serving,1024,2048,1024,0.05\n"
            "llama-3.1-70b,H100,4,4,vllm,serving,8,2048,1024,0.02\n")
    report = validate_measured(load_user_csv(_write(tmp_path, text)),
                               calibration=default_calibration())
    capped, free = report.rows
    assert capped.note is not None and capped.note.startswith("KV cache full: ")
    assert "of the 1,024 sequences per replica" in capped.note
    assert report.as_dict()["rows"][0]["note"] == capped.note
    assert free.note is None and "note" not in report.as_dict()["rows"][1]


def test_the_table_view_names_the_screened_summaries_and_one_column_per_metric(
        tmp_path: Path, capsys) -> None:
    """"[impossible]" must print as text (rich would read it as markup) and the per-row
    table keeps one column per measured metric."""
    path = _write(tmp_path, f"{HEADER},e2e_s\n"
                            "llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,0.10\n"
                            "llama-3.1-8b,H100,1,1,vllm,batch,1,128,128,0.70\n")
    assert main(["validate", "measurements", str(path)]) == 0
    out = capsys.readouterr().out
    assert "e2e_s[impossible]" in out and "e2e_s[with impossible]" in out
    header = next(line for line in out.splitlines() if "workload" in line and "row" in line)
    assert header.count("e2e_s") == 1


def test_llm_inference_bench_ttft_files_become_prefill_rows_of_the_whole_batch(
        tmp_path: Path) -> None:
    """Fig_21 and Fig_22 time 16 prompts of 1,024 tokens to their first token: each row is a
    batch with ``ttft_s`` (Fig_22's TTFT Latency, Fig_21's Latency of one output token, the
    same runs), the layout and release read as the bench's other rows, and every row is
    predicted, its TTFT the batch's prefill."""
    bench = REPO / "data" / "measurements" / "llm-inference-bench"
    source = bench / "Fig_22" / "all_results_TTFT_ITL.csv"
    with source.open() as f:
        raw = [r for r in csv.DictReader(f) if r["Hardware"]]
    rows = load_user_csv(_convert("llm-inference-bench", source, tmp_path)).rows
    assert len(rows) == len(raw) == 30
    for row, measured in zip(rows, raw, strict=True):
        assert row.measured["ttft_s"] == pytest.approx(float(measured["TTFT Latency"]))
        assert (row.values["batch"], row.values["input_tokens"], row.values["output_tokens"]) \
            == (16, 1024, 1)
    fig21 = _convert("llm-inference-bench", bench / "Fig_21" / "all_results_TTFT.csv",
                     tmp_path / "..")
    assert [r.measured for r in load_user_csv(fig21).rows] == [r.measured for r in rows]
    report = validate_measured(load_user_csv(_convert("llm-inference-bench", source, tmp_path)),
                               calibration=default_calibration())
    assert all(r.error is None for r in report.rows)
    h100 = [r for r in report.rows if "H100" in str(r.row.values["gpu"])]
    assert len(h100) == 6
    for r in h100:  # the prefill of 16 x 1,024 tokens, nothing decoded
        case = row_case(r.row)
        p = predict(model=case.model, gpu=case.gpu, deployment=case.deployment,
                    workload=case.workload)
        assert r.predicted["ttft_s"] == pytest.approx(p.prefill.latency_s, rel=1e-6)


def test_k_shot_reports_each_groups_error_on_the_rows_it_did_not_fit(tmp_path: Path) -> None:
    """Per group the MAPE over the group's rows not fitted on (the pooled metrics' rows,
    split); plain validation has no groups."""
    text = (f"{HEADER},tpot_s\n" + "".join(
        f"llama-3.1-8b,{gpu},1,1,vllm,batch,{b},128,128,{t}\n"
        for gpu, t in (("H100", 0.009), ("A100", 0.013)) for b in (1, 4, 16, 64)))
    measurements = load_user_csv(_write(tmp_path, text))
    report = k_shot(measurements, k=1, group_by=["gpu"], seed=0,
                    calibration=default_calibration())
    groups = report.groups
    assert set(groups) == {"gpu=H100-SXM", "gpu=A100-80GB-SXM"}
    assert all(g["tpot_s"]["n"] == 3 for g in groups.values())  # 4 rows, 1 fitted on
    for key, gpu in (("gpu=H100-SXM", "H100"), ("gpu=A100-80GB-SXM", "A100")):
        mine = [o for o in report.rows if o.row.values["gpu"] == gpu and not o.fitted_on]
        expected = np.mean([abs(o.predicted["tpot_s"] / o.row.measured["tpot_s"] - 1)
                            for o in mine])
        assert groups[key]["tpot_s"]["mape"] == pytest.approx(expected, abs=1e-6)
    assert report.as_dict()["groups"] == groups
    assert "groups" not in validate_measured(measurements,
                                             calibration=default_calibration()).as_dict()


def test_a_load_rows_length_spread_and_itl_percentiles(tmp_path: Path) -> None:
    """A closed loop of 32 clients, fixed lengths and lengths of CV 0.8: the spread reaches
    the workload and the ITL percentiles are predicted and ordered. With fixed lengths the
    clients stay in lockstep cohorts (all prompts admitted together, their first token
    from that step), so no decode step carries a prompt: p99 ITL is a decode step. Varied
    lengths desynchronise them and prompts join decode steps: a p99 well above the
    median. A batch row may not carry a spread; "0.0" reads as none."""
    row = "llama-3.1-8b,H100,1,1,vllm,load,,512,256,32,{cv},0.02,0.03\n"
    path = _write(tmp_path, f"{HEADER},concurrency,length_cv,itl_p90_s,itl_p99_s\n"
                            + row.format(cv="0.0") + row.format(cv="0.8")
                            + "llama-3.1-8b,H100,1,1,vllm,batch,1,512,256,,0.8,0.02,0.03\n")
    measurements = load_user_csv(path)
    assert row_case(measurements.rows[0]).workload.length_cv == 0.0
    assert row_case(measurements.rows[1]).workload.length_cv == 0.8
    fixed, spread, batch = validate_measured(measurements, calibration=default_calibration()).rows
    for outcome in (fixed, spread):
        assert outcome.error is None, outcome.error
        p = outcome.predicted
        assert 0 < p["itl_p50_s"] <= p["itl_p90_s"] <= p["itl_p99_s"]
    assert fixed.predicted["itl_p99_s"] < 1.2 * fixed.predicted["itl_p50_s"]
    assert spread.predicted["itl_p99_s"] > 2 * spread.predicted["itl_p50_s"]
    assert "length_cv" in (batch.error or "")


AIC_POOL_HEADER = AIC_HEADER.rstrip("\n") + "," + ",".join(
    f"{pool}_{key}" for pool in ("prefill", "decode")
    for key in ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size",
                "moe_tp_size", "moe_ep_size")) + "\n"


def _disagg_row(name: str, prefill: str, decode: str, *, ttft: float = 300.0,
                version: str = "1.1.0", image: str = "") -> str:
    """A disaggregated row: each pool ``batch,workers,tp,pp,adp,moe_tp,ep``."""
    return (f"{name},db; silicon_concurrency=16{image},trtllm,{version},deepseek-ai/DeepSeek-R1,"
            f"gb200,fp4,disagg,1024,1024,nvfp4,nvfp4,,,,,,,{ttft},9,{prefill},{decode}\n")


def test_aiconfigurator_disaggregated_rows_become_two_pools(tmp_path: Path) -> None:
    """--disaggregated writes each pool's layout (the agg rows' readings: a MoE TP over
    one board read as wide EP) and workers, num_gpus both pools' GPUs; a row that names
    no worker counts cannot size its pools and is left out, as are aggregated rows."""
    source = _write(tmp_path, AIC_POOL_HEADER
                    + _disagg_row("d1", "1,1,1,1,4,1,4", "1,4,8,1,1,1,8")
                    + _disagg_row("d2", "1,2,16,1,1,16,1", "1,1,4,1,1,4,1", ttft=301.0)
                    + _disagg_row("d3", ",,4,1,1,4,1", ",,4,1,1,4,1", ttft=302.0)
                    + "a1,db; silicon_concurrency=4,vllm,0.11,Qwen/Qwen3-32B,h100_sxm,fp8,agg,"
                      "1024,128,fp8,,4,2,1,1,2,1,150,18," + "," * 13 + "\n",
                    "silicon_sample.csv")
    converted = converters()["aiconfigurator"](source, Options(disaggregated=True))
    assert [r["id"] for r in converted.rows] == ["d1", "d2"]
    pools = [tuple(r[f"{pool}_{key}"] for pool in ("prefill", "decode")
                   for key in ("tp", "attention_dp", "ep", "moe_tp", "replicas"))
             + (r["num_gpus"],) for r in converted.rows]
    assert pools == [(1, 4, 4, 1, 1, 8, 1, 8, 1, 4, 4 + 32),
                     (1, 16, 16, 1, 2, 4, 1, 1, 4, 1, 32 + 4)]
    assert any("1 disaggregated row(s) left out: no prefill_num_workers" in n
               for n in converted.notes)
    assert any("1 aggregated row(s) left out" in n for n in converted.notes)
    assert converters()["aiconfigurator"](source, Options()).rows[0]["id"] == "a1"


def test_a_disaggregated_row_is_predicted_on_its_pools(tmp_path: Path) -> None:
    """A row with pool columns is the two-pool prediction of its closed loop; num_gpus
    must be the pools' and pools serve load rows only (one-line reasons)."""
    from energylens.workloads.load.disagg import Pool, predict_disaggregated

    header = ("model,gpu,num_gpus,prefill_tp,prefill_replicas,decode_tp,decode_replicas,"
              "workload,concurrency,num_requests,batch,input_tokens,output_tokens,ttft_s,tpot_s\n")
    path = _write(tmp_path, header + "llama-3.1-8b,H100,3,1,1,1,2,load,6,60,,1024,128,0.1,0.01\n"
                  + "llama-3.1-8b,H100,4,1,1,1,2,load,6,60,,1024,128,0.1,0.01\n"
                  + "llama-3.1-8b,H100,3,1,1,1,2,serving,,,6,1024,128,0.1,0.01\n")
    rows = validate_measured(load_user_csv(path), calibration=default_calibration()).rows
    direct = predict_disaggregated(
        model="llama-3.1-8b", workload=Workload(
            kind="load", concurrency=6, num_requests=60, input_tokens=1024, output_tokens=128,
            warmup_fraction=0.0),
        prefill=Pool(gpu="H100", deployment=Deployment(tp=1, dp=1, num_gpus=1)),
        decode=Pool(gpu="H100", deployment=Deployment(tp=1, dp=2, num_gpus=2)))
    assert rows[0].error is None
    assert rows[0].predicted["ttft_s"] == pytest.approx(direct.ttft_s, rel=1e-12)
    assert rows[0].predicted["tpot_s"] == pytest.approx(direct.tpot_s, rel=1e-12)
    assert rows[1].error == "num_gpus 4 is not the pools' 1 + 2 GPUs"
    assert "pools serve a load row" in (rows[2].error or "")


SHIPPED_AIC_DISAGG = REPO / "data/measurements/aiconfigurator/silicon_sample_disagg.csv"


@pytest.mark.skipif(not SOURCE_AIC.exists(), reason="needs ../shared (the source of the "
                    "shipped AIConfigurator rows) beside the repository")
def test_the_shipped_disaggregated_rows_are_what_the_converter_writes_today() -> None:
    """As the aggregated file: converting the source again gives the same CSV."""
    converted = converters()["aiconfigurator"](SOURCE_AIC, Options(disaggregated=True))
    assert to_csv(converted) == SHIPPED_AIC_DISAGG.read_text()


def test_a_dynamo_image_tag_as_backend_version_is_dynamos_release_not_the_engines(
        tmp_path: Path) -> None:
    """backend_version equal to the tag of the Dynamo runtime image the row ran is Dynamo's
    release (0.8.1.post2 read as TensorRT-LLM 0.8 would price a pre-1.0 engine): written
    as dynamo_version, the engine's release left to the profile; an engine release beside
    a Dynamo image of another tag is kept."""
    image = "; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2"
    source = _write(tmp_path, AIC_POOL_HEADER
                    + _disagg_row("d1", "1,1,1,1,4,1,4", "1,4,8,1,1,1,8", version="0.8.1.post2",
                                  image=image)
                    + _disagg_row("d2", "1,1,1,1,4,1,4", "1,4,8,1,1,1,8", version="1.3.0rc1",
                                  image=image, ttft=301.0), "silicon_sample.csv")
    rows = converters()["aiconfigurator"](source, Options(disaggregated=True)).rows
    assert (rows[0]["runtime_version"], rows[0]["dynamo_version"]) == (None, "0.8.1.post2")
    assert rows[1]["runtime_version"] == "1.3.0rc1" and "dynamo_version" not in rows[1]


@pytest.mark.parametrize("seed", ["0", "1", "2", "3"])
def test_carried_columns_at_the_same_place_keep_the_order_first_seen(seed: str) -> None:
    """Two carried columns whose earliest place in a row is the same go in the order first
    seen, whatever the interpreter's string hashing (a set decided it: the shipped
    disaggregated file's header changed between runs)."""
    import subprocess
    import sys

    code = ("from energylens.measurements.convert import Converted, to_csv\n"
            "rows = [{'model': 'm', 'dynamo_version': '0.8', 'wip': 'false'},"
            " {'model': 'm', 'wip': 'true'}]\n"
            "print(to_csv(Converted(rows=rows)).splitlines()[0])\n")
    header = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env={"PYTHONHASHSEED": seed}).stdout.strip()
    assert header == "model,dynamo_version,wip"
