"""An overlay factor that ends at a bound of its 0.2-5 range is flagged: in the fit, in the
written file's notes, and on ``calibrate --from``'s output."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from energylens.calibration.file import default_calibration
from energylens.calibration.overlay import (
    FitRow,
    Overlay,
    OverlayFit,
    apply_overlay,
    fit_overlay,
    overlay_document,
)
from energylens.cli.main import main
from energylens.deployment import Deployment, Workload
from energylens.measurements.user_csv import predicted_metrics
from energylens.predict import predict

GPU = "H100-SXM"


def _row(truth, batch: int) -> FitRow:  # type: ignore[no-untyped-def]
    workload = Workload(kind="batch", batch=batch, input_tokens=2048, output_tokens=128)

    def run(calibration):  # type: ignore[no-untyped-def]
        p = predict(model="llama-3.1-8b", gpu=GPU, deployment=Deployment(tp=1),
                    workload=workload, calibration=calibration)
        metrics = predicted_metrics(p, workload)
        return {k: metrics[k] for k in ("ttft_s", "tpot_s", "power_w")}

    return FitRow(gpu=GPU, measured=run(truth), predict=run)


def test_a_factor_beyond_its_range_is_fitted_to_the_bound_and_flagged() -> None:
    base = default_calibration()
    truth = apply_overlay(base, Overlay(factors={"compute_efficiency": 0.1}, gpus=(GPU,)))
    fit = fit_overlay(rows=[_row(truth, 64), _row(truth, 16)], base=base)
    assert fit.overlay.factors["compute_efficiency"] == pytest.approx(0.2, rel=1e-3)
    assert fit.at_bound == ("compute_efficiency",)


def test_the_written_notes_record_the_bound() -> None:
    fit = OverlayFit(overlay=Overlay(factors={"step_overhead": 5.0, "power": 1.1}, gpus=(GPU,)),
                     freed=("step_overhead", "power"), rms_log_before=0.5, rms_log_after=0.2,
                     at_bound=("step_overhead",))
    doc = overlay_document(fit=fit, base="shipped", fitted_on={"file": "x.csv", "rows": [1]},
                           generated_by="test")
    factors = doc["overlay"]["factors"]
    assert "at a bound of its range 0.2-5" in factors["step_overhead"]["note"]
    assert "bound" not in factors["power"]["note"]
    assert doc["overlay"]["note"].endswith("at a bound of its range: step_overhead")


def test_calibrate_from_warns_of_a_factor_at_a_bound(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Decode steps measured 20x slower than the shipped calibration predicts: no factor
    within 0.2-5 explains them."""
    path = tmp_path / "m.csv"
    path.write_text("model,gpu,num_gpus,workload,batch,input_tokens,output_tokens,tpot_s\n"
                    "llama-3.1-8b,H100,1,batch,16,512,128,0.2\n"
                    "llama-3.1-8b,H100,1,batch,64,256,128,0.28\n")
    out = tmp_path / "my.yaml"
    assert main(["calibrate", "--from", str(path), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    flagged = [line for line in captured.err.splitlines() if "at a bound of its range" in line]
    assert flagged and flagged[0].startswith("energylens: warning: ")
    assert "AT A BOUND" in captured.out
    notes = [f["note"] for f in yaml.safe_load(out.read_text())["overlay"]["factors"].values()]
    assert any("at a bound of its range" in note for note in notes)
