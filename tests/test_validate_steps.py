"""``energylens validate steps``: the committed engine-free Llama-3.1-8B steps (H100 and
H200, bf16 and fp8), their price by ``step_cost`` and the CLI's table and errors."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.cli import main
from energylens.cost.step import SequenceGroup, step_cost
from energylens.errors import MeasurementError
from energylens.hardware import load_gpu
from energylens.measurements.energylens_gpu import load_step_files
from energylens.validation.script_kernels import script_overhead
from energylens.validation.steps import file_calibration, price_step, steps_context, validate_steps

DATA = Path(__file__).resolve().parents[1] / "data/measurements/energylens-gpu"
H100_RUN = DATA / "h100-sxm/2026-11-27-b"
H200_RUN = DATA / "h200-sxm/2026-11-27-c"
H100 = load_gpu("NVIDIA H100 80GB HBM3")


@pytest.fixture(scope="module")
def files():
    return load_step_files(path=DATA)


def test_loader_reads_the_four_committed_files(files):
    assert [(f.folder_gpu, f.weight_dtype) for f in files] == [
        ("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("h200-sxm", "bf16"), ("h200-sxm", "fp8")]
    assert [f.device_name for f in files] == ["NVIDIA H100 80GB HBM3"] * 2 + ["NVIDIA H200"] * 2
    for f in files:
        assert len(f.steps) == 11 and f.failed == 0
        assert sum(s.phase == "decode" for s in f.steps) == 8
        assert [s.tokens for s in f.steps if s.phase == "prefill"] == [512, 2048, 8192]
        assert all(s.layers == 32 and s.weight_dtype == f.weight_dtype for s in f.steps)
        assert len(f.idle_power_w) == 2 and all(100 < w < 150 for w in f.idle_power_w)
    # the first file has no weight_dtype column: bf16 by its name
    assert "weight_dtype" not in (H100_RUN / "steps_bf16.csv").read_text().splitlines()[0]


def test_loader_units_seconds_watts_joules(files):
    h100_bf16 = files[0]
    one = next(s for s in h100_bf16.steps if s.phase == "decode" and s.batch == 1)
    assert (one.context, one.tokens) == (1024, 1)
    assert 2e-3 < one.step_time_s < 20e-3
    for f in files:
        for s in f.steps:
            assert 200 < s.power_w < 800
            # energy per call = NVML energy / calls = power x (window / calls)
            assert s.energy_per_call_j == pytest.approx(s.power_w * s.time_per_call_s, rel=0.01)
    prefill = [s for s in h100_bf16.steps if s.phase == "prefill"]
    assert all(s.context == 0 and s.power_capped for s in prefill)  # 0x4 in the window


def test_predicted_energy_is_the_sum_of_the_steps_parts():
    cal = default_calibration()
    ctx = steps_context(gpu=H100, dtype="bf16", calibration=cal)
    price = price_step(ctx=ctx, phase="decode", batch=8, tokens=1, context=1024)
    cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=8.0, new_tokens=1.0,
                                                  context=1024.0)])
    static_w = cal.kernel("H100-SXM").static_power_w
    extra_s, extra_compute_j, extra_memory_j = script_overhead(ctx=ctx, tokens=8.0)
    assert price.latency_s == pytest.approx(float(cost.latency_s) + extra_s)
    assert price.energy_j == pytest.approx(float(cost.compute_energy_j + cost.memory_energy_j
                                                 + cost.communication_energy_j)
                                           + extra_compute_j + extra_memory_j
                                           + static_w * (float(cost.latency_s) + extra_s))
    assert price.energy_j == pytest.approx(price.compute_energy_j + price.memory_energy_j
                                           + price.communication_energy_j
                                           + price.static_energy_j)
    assert price.power_w == pytest.approx(price.energy_j / price.latency_s)
    prefill = price_step(ctx=ctx, phase="prefill", batch=1, tokens=2048, context=0)
    direct = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1.0, new_tokens=2048.0,
                                                    context=2048.0)])
    assert prefill.latency_s == pytest.approx(
        float(direct.latency_s) + script_overhead(ctx=ctx, tokens=2048.0)[0])


def test_the_report_prices_each_row_as_price_step_does():
    report = validate_steps(path=H100_RUN / "steps_fp8.csv")
    row = next(r for r in report.rows if r.phase == "decode" and r.batch == 64
               and r.context == 4096)
    # the FP8 file's GEMMs at the cuBLAS ratio measured beside it (file_calibration)
    (file,) = load_step_files(path=H100_RUN / "steps_fp8.csv")
    ctx = steps_context(gpu=H100, dtype="fp8", calibration=file_calibration(
        file=file, gpu=H100, calibration=default_calibration()))
    assert row.predicted == price_step(ctx=ctx, phase="decode", batch=64, tokens=1, context=4096)
    assert row.errors["energy"] == pytest.approx(row.predicted.energy_j / row.measured_energy_j - 1)


def test_steps_are_priced_with_the_scripts_own_kernels():
    """The script adds each residual before its RMSNorm in a kernel of its own and runs
    SiLU x mul outside the GEMM: its batch-1 step has at least one more small kernel per
    layer than the engine's fused add+norm (32 layers)."""
    cal = default_calibration()
    ctx = steps_context(gpu=H100, dtype="bf16", calibration=cal)
    assert ctx.fusion == frozenset({"attention", "qkv", "gate_up"})
    fused = replace(ctx, fusion=ctx.fusion | {"norm_residual"})
    own = price_step(ctx=ctx, phase="decode", batch=1, tokens=1, context=1024).latency_s
    engine = price_step(ctx=fused, phase="decode", batch=1, tokens=1, context=1024).latency_s
    floor = cal.kernel("H100-SXM").elementwise_overhead_s
    assert own - engine >= 31 * floor


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_a_larger_batch_never_predicts_a_shorter_step(dtype):
    ctx = steps_context(gpu=H100, dtype=dtype, calibration=default_calibration())
    for context in (1024, 4096):
        times = [price_step(ctx=ctx, phase="decode", batch=b, tokens=1, context=context).latency_s
                 for b in (1, 2, 8, 16, 32, 64, 128, 256)]
        assert times == sorted(times)
    prompts = [price_step(ctx=ctx, phase="prefill", batch=1, tokens=s, context=0).latency_s
               for s in (512, 2048, 8192)]
    assert prompts == sorted(prompts)


def test_static_power_comes_from_the_calibration_given():
    cal = default_calibration().with_kernel("H100-SXM", static_power_w=10.0)
    report = validate_steps(path=H100_RUN, calibration=cal)
    assert {i.static_power_w for i in report.idle} == {10.0}
    row = report.rows[0]
    assert row.predicted.static_energy_j == pytest.approx(10.0 * row.predicted.latency_s)


def test_the_gpu_falls_back_to_the_folder_name(tmp_path):
    run = tmp_path / "h200-sxm" / "run"
    run.mkdir(parents=True)
    shutil.copy(H200_RUN / "steps_fp8.csv", run)
    (f,) = load_step_files(path=run)
    assert f.device_name is None and f.folder_gpu == "h200-sxm"
    assert {r.gpu for r in validate_steps(path=run).rows} == {"H200-SXM"}


def test_cli_prints_the_tables(capsys):
    assert main(["validate", "steps", str(H100_RUN)]) == 0
    out = capsys.readouterr().out
    for text in ("H100-SXM", "bf16", "fp8", "decode", "prefill", "energy MAPE", "b=1 ctx=1024",
                 "nothing is fitted"):
        assert text in out


def test_cli_json_counts_every_row_worst_group_first(capsys):
    assert main(["validate", "steps", str(DATA), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 44 and out["fitted"] is False
    assert sum(g["n"] for g in out["groups"]) == 44 and len(out["groups"]) == 8
    assert sum(g["n"] for g in out["totals"]) == 44 and len(out["totals"]) == 4
    mapes = [g["energy"]["mape"] for g in out["groups"]]
    assert mapes == sorted(mapes, reverse=True)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


def test_cli_missing_folder_is_one_line_exit_2(capsys, tmp_path):
    err = _one_line_error(capsys, ["validate", "steps", str(tmp_path / "nope")])
    assert "no such file or folder" in err


def test_cli_folder_without_steps_is_one_line_exit_2(capsys, tmp_path):
    err = _one_line_error(capsys, ["validate", "steps", str(tmp_path)])
    assert "steps" in err


def test_cli_wrong_columns_is_one_line_exit_2(capsys, tmp_path):
    (tmp_path / "steps_bf16.csv").write_text("phase,batch,tokens,context,seconds\n"
                                              "decode,1,1,1024,0.007\n")
    err = _one_line_error(capsys, ["validate", "steps", str(tmp_path)])
    assert "'step_time_s'" in err and "'energy_per_call_j'" in err


def test_bad_values_are_one_line_errors(tmp_path):
    header = ("phase,batch,tokens,context,layers,step_time_s,time_per_call_s,power_w,"
              "energy_per_call_j,error\n")
    path = tmp_path / "steps_fp8.csv"
    path.write_text(header + "decode,1,1,1024,32,0.005,0.005,-300,1.5,\n")
    with pytest.raises(MeasurementError, match="must be positive"):
        load_step_files(path=path)
    path.write_text(header + "warmup,1,1,1024,32,0.005,0.005,300,1.5,\n")
    with pytest.raises(MeasurementError, match="'phase'"):
        load_step_files(path=path)
    path.write_text(header + "decode,1,1,1024,32,0.005,0.005,300,1.5,\n"
                             "decode,512,1,1024,32,,,,,CUDA error: out of memory\n")
    (f,) = load_step_files(path=path)
    assert f.weight_dtype == "fp8" and len(f.steps) == 1 and f.failed == 1


def test_cli_unknown_gpu_is_one_line_exit_2(capsys, tmp_path):
    shutil.copy(H100_RUN / "steps_fp8.csv", tmp_path)
    _one_line_error(capsys, ["validate", "steps", str(tmp_path)])


def test_host_gap_runs_are_not_read_as_steps() -> None:
    """A ``--host-gaps`` run's period holds a host sleep after each step: pricing it as a
    step would charge the gap's idle energy to the step."""
    run = Path(__file__).resolve().parents[1] / "data/measurements/energylens-gpu/h100-sxm/2026-11-27-c"
    gaps = run / "steps_bf16_host_gaps.csv"
    with pytest.raises(MeasurementError, match="host gap"):
        load_step_files(path=gaps)
    files = load_step_files(path=run.parent)  # the folder: its runs' steps_<dtype>.csv only
    assert gaps not in {f.path for f in files} and len(files) == 2


def _k_shot_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_k_shot_zero_is_plain_validation(capsys):
    plain = validate_steps(path=H100_RUN)
    out = _k_shot_json(capsys, ["validate", "steps", str(H100_RUN), "--k-shot", "0", "--json"])
    assert out["fitted_on"] == [] and out["overlays"] == {}
    assert [r["error"] for r in out["rows"]] == [r.errors for r in plain.rows]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_k_shot_scores_only_the_rows_not_fitted_on(capsys, k):
    out = _k_shot_json(capsys, ["validate", "steps", str(H100_RUN), "--k-shot", str(k),
                                "--seed", "1", "--json"])
    assert len(out["fitted_on"]) == 2 * k  # two files: bf16 and fp8
    assert len(out["rows"]) == 22 - 2 * k
    assert sum(g["n"] for g in out["totals"]) == 22 - 2 * k
    held = {(r["dtype"], r["phase"], r["batch"], r["tokens"], r["context"]) for r in out["rows"]}
    fitted = {(r["dtype"], r["phase"], r["batch"], r["tokens"], r["context"])
              for r in out["fitted_on"]}
    assert not held & fitted


def test_k_shot_removes_a_uniform_scale_error(tmp_path):
    """Steps measured 40 % slower and costlier than the model prices them (same power):
    an overlay on 5 rows brings the other rows from 29 % low to within a few percent."""
    from energylens.validation.steps_kshot import k_shot_steps

    plain = validate_steps(path=H100_RUN / "steps_bf16.csv")
    price = {(r.phase, r.batch, r.tokens, r.context): r.predicted for r in plain.rows}
    lines = (H100_RUN / "steps_bf16.csv").read_text().splitlines()
    header = lines[0].split(",")
    out = [lines[0]]
    for line in lines[1:]:
        cells = dict(zip(header, line.split(","), strict=True))
        if cells["phase"] in ("decode", "prefill"):
            p = price[(cells["phase"], int(cells["batch"]), int(cells["tokens"]),
                       int(cells["context"]))]
            cells["step_time_s"] = repr(1.4 * p.latency_s)
            cells["energy_per_call_j"] = repr(1.4 * p.energy_j)
            cells["power_w"] = repr(p.power_w)
        out.append(",".join(cells[c] for c in header))
    run = tmp_path / "h100-sxm" / "run"
    run.mkdir(parents=True)
    (run / "steps_bf16.csv").write_text("\n".join(out) + "\n")
    # the kernel runs beside the steps, whose SDPA timings price the script's attention
    for kernels in H100_RUN.parent.iterdir():
        if (kernels / "attention.csv").is_file():
            shutil.copytree(kernels, tmp_path / "h100-sxm" / kernels.name)
    before = validate_steps(path=run).totals[0]
    assert before.time.mape == pytest.approx(1 - 1 / 1.4, rel=1e-6)  # predicted 29 % low
    after = k_shot_steps(path=run, k=5, seed=0)
    (total,) = after.report.totals
    assert total.n == 6 and after.overlays["H100-SXM/bf16"]
    assert total.time.mape < 0.08 and total.energy.mape < 0.08


def test_k_shot_report_scores_held_out_steps_per_gpu_and_dtype():
    from energylens.validation.kshot_report import step_group_errors

    groups = step_group_errors(path=DATA, k=3, seed=0)
    assert sorted(groups) == [f"gpu={g},dtype={d}" for g in ("H100-SXM", "H200-SXM")
                              for d in ("bf16", "fp8")]
    for rows, predicted, screened, ape, same in groups.values():
        assert (rows, predicted, screened, len(ape), len(same)) == (11, 11, 0, 8, 8)


def test_a_mixed_step_merges_its_groups_gemms() -> None:
    """A continuous batch's step (64 decode sequences and a 1,024-token prompt chunk in one
    pass) reads the weights once: shorter than the decode step and the prompt's own step
    one after the other, longer than either alone."""
    ctx = steps_context(gpu=H100, dtype="bf16", calibration=default_calibration())
    decode = price_step(ctx=ctx, phase="decode", batch=64, tokens=1, context=1024).latency_s
    prompt = price_step(ctx=ctx, phase="prefill", batch=1, tokens=1024, context=0).latency_s
    mixed = price_step(ctx=ctx, phase="mixed", batch=64, tokens=1, context=1024,
                       prefill_tokens=1024).latency_s
    assert max(decode, prompt) < mixed < decode + prompt


def test_mixed_rows_need_their_prompt_chunk(tmp_path) -> None:
    header = ("phase,batch,tokens,context,prefill_tokens,layers,step_time_s,time_per_call_s,"
              "power_w,energy_per_call_j\n")
    path = tmp_path / "steps_bf16.csv"
    path.write_text(header + "mixed,64,1,1024,512,32,0.02,0.02,600,12\n")
    (f,) = load_step_files(path=path)
    assert f.steps[0].prefill_tokens == 512
    report = validate_steps(path=path, gpu="H100-SXM")
    assert report.rows[0].shape == "b=64 ctx=1024 +prompt=512"
    for bad in ("mixed,64,1,1024,0,32,0.02,0.02,600,12\n", "decode,64,1,1024,512,32,0.02,0.02,600,12\n"):
        path.write_text(header + bad)
        with pytest.raises(MeasurementError, match="prefill_tokens"):
            load_step_files(path=path)
