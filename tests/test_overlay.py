"""Few-shot overlays: recovery of known scales, the k-row limit, the overlay file format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from energylens.calibration.file import default_calibration, load_calibration
from energylens.calibration.overlay import (
    FitRow,
    Overlay,
    apply_overlay,
    fit_overlay,
    overlay_document,
)
from energylens.cost.constants import Calibration
from energylens.deployment import Deployment, Workload
from energylens.errors import CalibrationFileError
from energylens.measurements.user_csv import predicted_metrics
from energylens.predict import predict
from energylens.runtime import get_runtime

GPU = "H100-SXM"
TRUE = {"compute_efficiency": 0.8, "memory_efficiency": 0.85, "step_overhead": 1.6,
        "kernel_overhead": 1.3, "power": 1.1}


def _predictor(batch: int, input_tokens: int):  # type: ignore[no-untyped-def]
    workload = Workload(kind="batch", batch=batch, input_tokens=input_tokens, output_tokens=128)

    def run(calibration: Calibration) -> dict[str, float]:
        p = predict(model="llama-3.1-8b", gpu=GPU, deployment=Deployment(tp=1),
                    workload=workload, calibration=calibration)
        metrics = predicted_metrics(p, workload)
        return {k: metrics[k] for k in ("ttft_s", "tpot_s", "power_w")}

    return run


def _rows(truth: Calibration, shapes: list[tuple[int, int]]) -> list[FitRow]:
    return [FitRow(gpu=GPU, measured=_predictor(*s)(truth), predict=_predictor(*s))
            for s in shapes]


def test_overlay_fitted_on_the_models_own_rows_recovers_the_scales() -> None:
    base = default_calibration()
    truth = apply_overlay(base, Overlay(factors=TRUE, gpus=(GPU,)))
    rows = _rows(truth, [(b, n) for b in (1, 4, 16, 64) for n in (128, 2048)])
    fit = fit_overlay(rows=rows, base=base, max_free=5)
    assert set(fit.overlay.factors) == set(TRUE)  # collective latency: no TP, not identified
    # The prior pulls a weakly identified factor (step overhead: ~1 ms of a step) toward 1.
    for name, value in TRUE.items():
        assert fit.overlay.factors[name] == pytest.approx(value, rel=0.05), name
    for name in ("compute_efficiency", "power"):
        assert fit.overlay.factors[name] == pytest.approx(TRUE[name], rel=0.01), name
    assert fit.rms_log_after < 0.01 < fit.rms_log_before


def test_k_rows_move_at_most_k_factors() -> None:
    base = default_calibration()
    truth = apply_overlay(base, Overlay(factors=TRUE, gpus=(GPU,)))
    for k in (1, 2):
        fit = fit_overlay(rows=_rows(truth, [(1, 128), (64, 2048)][:k]), base=base)
        assert 1 <= len(fit.overlay.factors) <= k


def test_rows_the_base_already_predicts_move_nothing() -> None:
    base = default_calibration()
    fit = fit_overlay(rows=_rows(base, [(1, 128), (16, 512), (64, 2048)]), base=base)
    assert fit.overlay.factors == {}


def test_rows_the_base_cannot_predict_add_no_gpu() -> None:
    """A row infeasible on the base is not fitted on: its GPU gets no factor."""
    base = default_calibration()
    truth = apply_overlay(base, Overlay(factors={"step_overhead": 1.8}, gpus=(GPU,)))
    rows = [*_rows(truth, [(1, 128), (64, 2048)]),
            FitRow(gpu="B200", measured={"tpot_s": 10.0}, predict=lambda calibration: None)]
    fit = fit_overlay(rows=rows, base=base)
    assert fit.overlay.gpus == (GPU,) and fit.overlay.factors


def test_an_empty_overlay_changes_no_prediction() -> None:
    base = default_calibration()
    same = apply_overlay(base, Overlay(factors={}, gpus=(GPU,)))
    assert _predictor(8, 512)(same) == _predictor(8, 512)(base)


def test_efficiencies_stop_at_one() -> None:
    scaled = apply_overlay(default_calibration(),
                           Overlay(factors={"memory_efficiency": 5.0}, gpus=(GPU,)))
    assert scaled.kernel(GPU).memory_efficiency_max == 1.0


def _write_overlay(tmp_path: Path, factors: dict[str, float]) -> Path:
    from energylens.calibration.overlay import OverlayFit

    fit = OverlayFit(overlay=Overlay(factors=factors, gpus=(GPU,)), freed=tuple(factors),
                     rms_log_before=0.1, rms_log_after=0.01)
    doc = overlay_document(fit=fit, base="shipped", fitted_on={"file": "x.csv", "rows": [1]},
                           generated_by="test")
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_overlay_file_loads_as_its_base_with_the_factors(tmp_path: Path) -> None:
    factors = {"compute_efficiency": 0.9, "step_overhead": 1.3}
    loaded = load_calibration(_write_overlay(tmp_path, factors))
    expected = apply_overlay(default_calibration(), Overlay(factors=factors, gpus=(GPU,)))
    assert _predictor(16, 1024)(loaded) == _predictor(16, 1024)(expected)
    assert _predictor(16, 1024)(loaded) != _predictor(16, 1024)(default_calibration())


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(kernels={}), "not allowed in an overlay file"),
    (lambda d: d.pop("base"), "needs 'base'"),
    (lambda d: d["overlay"].update(extra=1), "overlay.extra: unknown key"),
    (lambda d: d["overlay"]["factors"].update(compute_efficency=1.0), "did you mean 'compute_efficiency'"),
    (lambda d: d["overlay"]["factors"]["power"].update(value=-1.0), "expected a positive factor"),
    (lambda d: d["overlay"].update(gpus=["H999"]), "overlay.gpus"),
    (lambda d: d.update(base="other.yaml"), "no such calibration file"),
])
def test_bad_overlay_files_are_refused_in_one_line(tmp_path: Path, edit, message) -> None:  # type: ignore[no-untyped-def]
    path = _write_overlay(tmp_path, {"power": 1.2})
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationFileError, match=message):
        load_calibration(path)


def test_an_overlay_cannot_stack_on_an_overlay(tmp_path: Path) -> None:
    inner = _write_overlay(tmp_path, {"power": 1.2})
    doc = yaml.safe_load(inner.read_text())
    doc["base"] = inner.name
    outer = tmp_path / "outer.yaml"
    outer.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationFileError, match="is an overlay file"):
        load_calibration(outer)


def test_the_kernel_overhead_factor_scales_every_kernels_fixed_time() -> None:
    base = default_calibration()
    scaled = apply_overlay(base, Overlay(factors={"kernel_overhead": 2.0}, gpus=(GPU,)))
    for name in ("kernel_overhead_s", "norm_overhead_s", "elementwise_overhead_s",
                 "attention_tile_s"):
        before = getattr(base.kernel(GPU), name)
        assert getattr(scaled.kernel(GPU), name) == pytest.approx(2 * before), name
    assert scaled.kernel(GPU).gemm_efficiency_max == base.kernel(GPU).gemm_efficiency_max
    assert scaled.runtime(runtime="vllm", gpu=GPU) == base.runtime(runtime="vllm", gpu=GPU)


def test_the_step_overhead_factor_scales_an_earlier_releases_overheads_too() -> None:
    """vLLM before 0.8.0 reads its overheads from the ``vllm@legacy`` sections: an overlay
    fitted on such a user's rows must move those, or its step factor would act on nothing."""
    base = default_calibration().with_runtime(runtime="vllm@legacy", gpu=GPU,
                                              step_overhead_s=2e-3, per_sequence_overhead_s=6e-5)
    scaled = apply_overlay(base, Overlay(factors={"step_overhead": 1.5}, gpus=(GPU,)))
    v0 = get_runtime("vllm").calibration_for(calibration=scaled, gpu=GPU, version="0.6")
    priced = v0.runtime(runtime="vllm", gpu=GPU)
    assert (priced.step_overhead_s, priced.per_sequence_overhead_s) == pytest.approx((3e-3, 9e-5))
    now = scaled.runtime(runtime="vllm", gpu=GPU)
    assert now.step_overhead_s == pytest.approx(
        1.5 * base.runtime(runtime="vllm", gpu=GPU).step_overhead_s)


def test_an_engine_below_the_reference_is_scaled_to_the_engines_cap() -> None:
    """llama.cpp's kernels stream H100's HBM at 0.60 of the reference's share (its fitted
    memory scale): a memory factor of 1.5 takes the share its kernels reach 1.5 times up,
    though the kernel constant itself is already at its cap, while vLLM's share stays at
    the cap it was at. Before, the factor stopped at the kernel constant and llama.cpp
    could not be scaled at all on this GPU."""
    base = default_calibration()
    scaled = apply_overlay(base, Overlay(factors={"memory_efficiency": 1.5}, gpus=(GPU,)))

    def reached(calibration: Calibration, runtime: str) -> tuple[float, float, float]:
        k = get_runtime(runtime).calibration_for(calibration=calibration, gpu=GPU).kernel(GPU)
        return k.memory_efficiency_max, k.kv_bandwidth_efficiency, k.expert_bandwidth_efficiency

    before, after = reached(base, "llama.cpp"), reached(scaled, "llama.cpp")
    assert before[0] < 0.65
    assert after == pytest.approx(tuple(min(1.5 * b, 0.98) for b in before), rel=1e-9)
    assert reached(scaled, "vllm") == pytest.approx(
        tuple(min(1.5 * b, 0.98) for b in reached(base, "vllm")), rel=1e-9)
