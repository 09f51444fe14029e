"""LLM-Inference-Bench leave-one-model-out refits the whole group fit in each fold: the
kernel-scale rounds and the share choice on the other models' rows only, the held-out
model predicted with the fold's constants as the in-sample figure predicts its rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_runtime_fit import _generated

from energylens.calibration import fit_runtime
from energylens.calibration.file import default_calibration
from energylens.calibration.fit_runtime import RuntimeFits, _priced, fit_bench


def _three_models(tmp_path: Path) -> Path:
    """A bench file of llama.cpp rows on H100 generated from known overheads and scales:
    three models, two batches, two output lengths."""
    truth = default_calibration().with_runtime(runtime="llama.cpp", gpu="H100-SXM",
                                               step_overhead_s=1.5e-3,
                                               memory_efficiency_scale=0.6,
                                               kv_bandwidth_scale=0.6)
    grid = [(m, g, b, t) for m, g in (("llama-2-7b", 1), ("llama-3-8b", 1), ("llama-2-70b", 4))
            for b in (16, 64) for t in (128, 512)]
    return _generated(tmp_path, framework="llama.cpp", runtime="llama.cpp", truth=truth,
                      grid=grid)


def test_each_fold_refits_rounds_and_scales_on_the_other_models_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _three_models(tmp_path)
    calls: list[tuple[set[str], object]] = []
    real = fit_runtime._bench_fit

    def recording(rows, **kwargs):  # type: ignore[no-untyped-def]
        found = real(rows, **kwargs)
        calls.append(({r.model for r in rows}, found))
        return found

    monkeypatch.setattr(fit_runtime, "_bench_fit", recording)
    fits = RuntimeFits()
    fit_bench(files=[path], base=default_calibration(), fits=fits)
    models = {"llama-2-7b", "llama-3-8b", "llama-2-70b"}
    assert calls[0][0] == models  # the full fit, then one fold per model
    assert sorted(tuple(sorted(m)) for m, _ in calls[1:]) == sorted(
        tuple(sorted(models - {held})) for held in models)
    full = calls[0][1]
    # the kernel scale re-priced in each fold's own rounds (the old held-out figure kept
    # the full fit's scales and refitted the linear coefficients only)
    scales = [fold.values["memory_efficiency_scale"] for _, fold in calls[1:]]
    assert all(s != full.values["memory_efficiency_scale"] for s in scales)
    # the held-out figure: each model's rows priced with its fold's calibration
    rows = fit_runtime.bench_rows([path])[0][("llama.cpp", "H100-SXM")]
    ape = []
    for held in sorted(models):
        fold = next(f for m, f in calls[1:] if held not in m)
        for row in (r for r in rows if r.model == held):
            p = _priced(row, fold.calibration, counts=False)
            ape.append(abs((p[0] + p[1]) / row.latency_s - 1))
    report = fits.fits["llm-inference-bench/llama.cpp/H100-SXM"]["leave_one_model_out"]
    assert report["latency_s"]["n"] == len(ape) == len(rows)
    assert report["latency_s"]["mape"] == pytest.approx(sum(ape) / len(ape), abs=1e-5)


def test_the_folds_on_two_processes_give_the_same_held_out_figure(tmp_path: Path) -> None:
    """calibrate --jobs 2 runs a group's folds in forked processes: the same figure."""
    path = _three_models(tmp_path)
    reports = []
    for jobs in (1, 2):
        fits = RuntimeFits()
        fit_bench(files=[path], base=default_calibration(), fits=fits, jobs=jobs)
        reports.append(fits.fits["llm-inference-bench/llama.cpp/H100-SXM"]["leave_one_model_out"])
    assert reports[0] == reports[1] and reports[0]["latency_s"]["n"] > 0
