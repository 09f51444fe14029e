"""AIConfigurator's converted rows: one row per measurement (repeats dropped), and the rows
of work-in-progress runs carried with ``wip`` true and scored apart."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from benchmark_scripts import load_benchmark

from energylens.measurements.convert import Options, converters
from energylens.measurements.user_csv import KNOWN, METRICS, load_user_csv

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "data/measurements/aiconfigurator/silicon_sample_agg.csv"
HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,"
          "isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,"
          "attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n")


def _shipped() -> list[dict[str, str]]:
    with SHIPPED.open() as f:
        return list(csv.DictReader(f))


def test_the_shipped_rows_hold_each_measurement_once() -> None:
    """2,530 aggregated rows, 545 of them bit-identical in inputs (as the model reads them)
    and TTFT/TPOT to another and 179 more its last printed digit or a 2-decimal copy of it:
    1,806 rows. No two share their TTFT and TPOT at the same load, whatever their labels
    (DeepSeek-R1 and -V3, two nightly tags). The MiniMax-M2.5 run at 4 clients of 1,024 /
    8,192 tokens on 2 B200 (TTFT 113.219 ms, TPOT 10.087 ms) is kept under its first id,
    ..._553, and its repeat ..._1353 is gone."""
    rows = _shipped()
    assert len(rows) == 1806
    inputs = [k for k in rows[0] if k in KNOWN and k not in METRICS]
    counts = Counter(tuple(r[k] for k in [*inputs, "ttft_s", "tpot_s"]) for r in rows)
    assert max(counts.values()) == 1
    unlabelled = [k for k in inputs if k not in ("model", "runtime_version", "kv_dtype")]
    counts = Counter(tuple(r[k] for k in [*unlabelled, "ttft_s", "tpot_s"]) for r in rows)
    assert max(counts.values()) == 1
    ids = {r["id"] for r in rows}
    stem = "2026_03_25_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x8192_c4_tp2_0_ep1_0_"
    assert stem + "553" in ids and stem + "1353" not in ids
    kept = next(r for r in rows if r["id"] == stem + "553")
    assert (float(kept["ttft_s"]), float(kept["tpot_s"])) == (
        113.21903072384885 / 1e3, 10.087015543504094 / 1e3)


def _convert(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    source = tmp_path / "silicon_sample.csv"
    source.write_text(HEADER + "".join(lines), encoding="utf-8")
    return converters()["aiconfigurator"](source, Options())


def _line(name: str, ttft: str, tpot: str, *, clients: int = 4, wip: str = "False",
          engine: str = "vllm,0.19.0", model: str = "Qwen/Qwen3-32B",
          system: str = "h100_sxm", tp: int = 2) -> str:
    return (f"{name},db; silicon_concurrency={clients}; wip={wip},{engine},{model},"
            f"{system},fp8,agg,1024,1024,fp8,,4,{tp},1,1,1,1,{ttft},{tpot}\n")


def test_repeats_are_dropped_and_counted_and_close_runs_kept(tmp_path: Path) -> None:
    """A bit-identical copy, a copy differing in the last printed digit and a 2-decimal
    copy (even one listed first) are dropped, the full-precision row kept under its id; a
    run 0.08 % away and a run at other clients stay."""
    converted = _convert(tmp_path, [
        _line("rounded", "163.73", "7.42"),
        _line("full", "163.72509357752278", "7.423259694292521"),
        _line("identical", "163.72509357752278", "7.423259694292521"),
        _line("digit", "163.7250935775228", "7.423259694292522"),
        _line("close", "163.86", "7.43"),
        _line("other_load", "163.72509357752278", "7.423259694292521", clients=8)])
    assert [r["id"] for r in converted.rows] == ["full", "close", "other_load"]
    note = next(n for n in converted.notes if "repeats" in n)
    assert note.startswith("3 of the 6 aggregated row(s) dropped as repeats")
    assert "1 bit-identical, 1 to the last printed digit, 1 rounded to 2 decimals" in note


def test_a_run_filed_under_two_labels_the_model_reads_alike_counts_once(tmp_path: Path) -> None:
    """DeepSeek-R1 filed again as DeepSeek-V3 (one zoo entry), a nightly filed under two
    build tags (both read as the profile's release): one row each, the first label kept.
    Another release or another model of the same numbers stays."""
    labels = [("r1", "deepseek-ai/DeepSeek-R1", "0.5.9"), ("v3", "deepseek-ai/DeepSeek-V3", "0.5.9"),
              ("nightly", "deepseek-ai/DeepSeek-V3", "nightly-dev"),
              ("tagged", "deepseek-ai/DeepSeek-V3", "nightly-dev-20260216-d3bae71e"),
              ("release", "deepseek-ai/DeepSeek-V3", "0.5.10"),
              ("kimi", "moonshotai/Kimi-K2.5", "0.5.9")]
    converted = _convert(tmp_path, [
        _line(name, "120.5", "9.25", engine=f"sglang,{version}", model=model, system="b200_sxm",
              tp=8) for name, model, version in labels])
    assert [r["id"] for r in converted.rows] == ["r1", "nightly", "release", "kimi"]


def test_a_work_in_progress_run_carries_wip_and_is_never_dropped(tmp_path: Path) -> None:
    converted = _convert(tmp_path, [_line("a", "100.5", "9.5", wip="True"),
                                    _line("b", "100.5", "9.5", clients=8)])
    assert [(r["id"], r["wip"]) for r in converted.rows] == [("a", "true"), ("b", "false")]
    assert any(n.startswith("1 row(s) of runs marked wip=True") for n in converted.notes)
    path = tmp_path / "aic.csv"
    from energylens.measurements.convert import to_csv
    path.write_text(to_csv(converted))
    assert "wip" in load_user_csv(path).ignored  # carried, not read


def test_the_shipped_rows_of_work_in_progress_runs_say_so() -> None:
    """187 aggregated rows are marked wip=True (125 once repeats are dropped): MiniMax-M2.5
    on vLLM (0.19.0 and a nightly, B200 and B300), Qwen3.5-397B on SGLang 0.5.9 and GLM-5
    on SGLang nightly-dev (B300), Kimi-K2.5 on vLLM 0.17.0 (B300)."""
    rows = _shipped()
    flagged = [r for r in rows if r["wip"] == "true"]
    assert len(flagged) == 125 and {r["wip"] for r in rows} == {"true", "false"}
    assert all(("wip=True" in r["provenance"]) == (r["wip"] == "true") for r in rows)
    assert "2026_03_25_minimax_m2_5_b300_sxm_vllm_fp8_agg_1024x1024_c16_tp4_0_ep1_0_1" in {
        r["id"] for r in flagged}


def test_validate_load_aic_prints_the_work_in_progress_rows_apart() -> None:
    bench = load_benchmark("validate_load_aic")

    def row(wip: str, ttft: float, tpot: float) -> dict:
        return {"input": {"runtime": "vllm", "gpu": "b200_sxm", "ttft_s": 1.0, "tpot_s": 1.0,
                          "wip": wip}, "predicted": {"ttft_s": ttft, "tpot_s": tpot}}

    result = {"rows": [row("true", 1.5, 1.1), row("false", 1.1, 1.0), row("false", 0.9, 1.0),
                       {"input": {"runtime": "vllm", "gpu": "b200_sxm", "wip": "true"},
                        "predicted": {}, "error": "unsupported"}]}
    errors, kv_limited, apart, left_out = bench.row_errors(result)
    lines = bench.error_table(errors, kv_limited=kv_limited, apart=apart)
    assert "| all | | 3 | 23.3 % | | 3.3 % | |" in lines
    assert lines[-1] == "| rows of work-in-progress runs | | 1 | 50.0 % | | 10.0 % | |"
    assert left_out == Counter({"unsupported": 1})


def test_validate_load_aic_prints_the_rows_served_through_dynamo_apart() -> None:
    bench = load_benchmark("validate_load_aic")

    def row(provenance: str, tpot: float) -> dict:
        return {"input": {"runtime": "trtllm", "gpu": "gb200", "ttft_s": 1.0, "tpot_s": 1.0,
                          "wip": "false", "provenance": provenance},
                "predicted": {"ttft_s": 1.0, "tpot_s": tpot}}

    dynamo = "source_file=x.csv; image=nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.9.0; " \
             "dynamo_version=0.9.0"
    result = {"rows": [row(dynamo, 0.25), row("source_file=y.csv", 1.1), row("", 0.9)]}
    errors, kv_limited, apart, _ = bench.row_errors(result)
    lines = bench.error_table(errors, kv_limited=kv_limited, apart=apart)
    assert "| all | | 3 | 0.0 % | | 31.7 % | |" in lines  # kept in every figure
    assert lines[-1] == "| rows served through NVIDIA Dynamo | | 1 | 0.0 % | | 75.0 % | |"
