"""The engine-free steps as the serving fit's second power witness
(``energylens.calibration.step_energy``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_serving import FLOP_SHARE, apply, fit_rows
from energylens.calibration.fitting import Param
from energylens.calibration.step_energy import StepEnergy, gpu_steps, step_folders
from energylens.validation.steps import validate_steps

DATA = Path(__file__).resolve().parents[1] / "data/measurements"
H100_RUN = DATA / "energylens-gpu/h100-sxm/2026-11-27-b"
H200_RUN = DATA / "energylens-gpu/h200-sxm/2026-11-27-c"


def test_discovery_keeps_step_runs_only_and_maps_them_to_their_board():
    folders = step_folders(DATA)
    # h100-sxm/2026-11-27-c holds only steps_bf16_host_gaps.csv (host gaps, not steps)
    assert folders == [H100_RUN, H200_RUN]
    h100 = gpu_steps(folders, "NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.folders == (H100_RUN,)
    assert [f.name for f in h100.files()] == ["steps_bf16.csv", "steps_fp8.csv"]
    assert gpu_steps(folders, "B200") is None  # no step measured on it: nothing added


def test_residuals_are_the_log_energy_errors_of_the_prompt_steps():
    calibration = default_calibration()
    rows = [r for r in validate_steps(path=H100_RUN, calibration=calibration).rows
            if r.phase == "prefill"]
    expected = [np.log(r.predicted.energy_j / r.measured_energy_j) for r in rows]
    got = StepEnergy(folders=(H100_RUN,)).residuals(calibration)
    assert len(rows) == 6 and np.allclose(got, expected)  # 3 prompt lengths x bf16, fp8


def test_prompt_steps_identify_the_tensor_flop_energy():
    """A larger energy per tensor FLOP raises the compute-bound prompt steps' energy far
    more than a one-sequence decode step's (which reads weights): why the prompt steps pin
    the constant the decode-heavy serving rows leave free."""
    calibration = default_calibration()
    k = calibration.kernel("H100-SXM")
    raised = calibration.with_kernel("H100-SXM",
                                     energy_per_tensor_flop_j=10 * k.energy_per_tensor_flop_j)

    def rise(phase: str, batch: int | None = None) -> list[float]:
        before, after = (validate_steps(path=H100_RUN, calibration=c).rows
                         for c in (calibration, raised))
        return [np.log(a.predicted.energy_j / b.predicted.energy_j)
                for b, a in zip(before, after, strict=True)
                if b.phase == phase and (batch is None or b.batch == batch)]

    prompt, lone = rise("prefill"), rise("decode", batch=1)
    assert len(prompt) == 6 and len(lone) == 2
    assert min(prompt) > 0.0 and min(prompt) > 5 * max(lone)


def test_a_fit_with_no_serving_row_is_driven_by_the_steps():
    """With steps and no serving row, fitting the tensor share moves the steps' energy error
    toward zero: the steps reach the residuals the fit minimises."""
    base = default_calibration()
    steps = StepEnergy(folders=(H100_RUN,))
    start = 0.02  # the bottom of the share's range, where ML.ENERGY alone left it on H100
    param = Param(FLOP_SHARE, start, 0.02, 0.95)
    values, _ = fit_rows([], gpu_name="H100-SXM", base=base, params=(param,), max_nfev=10,
                         steps=steps)
    before = steps.residuals(apply(base, "H100-SXM", {FLOP_SHARE: start}))
    after = steps.residuals(apply(base, "H100-SXM", values))
    assert values[FLOP_SHARE] > 0.1
    assert np.sqrt(np.mean(after**2)) < 0.8 * np.sqrt(np.mean(before**2))

