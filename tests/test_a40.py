"""A40: Vidur's a40_pairwise_nvlink network profile predicts with its own fitted link."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.calibration.fit_links import fit_links
from energylens.hardware import load_gpu
from energylens.validation.predictors import validate

SEND_RECV = (Path(__file__).resolve().parents[1] / "data" / "measurements" / "vidur" / "network"
             / "a40_pairwise_nvlink" / "send_recv.csv")


def test_the_tensor_rate_is_the_sm_count_at_the_boost_clock():
    """84 SMs x 1,024 dense FP16 FLOP per clock x 1.74 GHz = 149.7 TFLOPS (datasheet)."""
    gpu = load_gpu("A40")
    assert gpu.peak_flops_per_s("bf16") == pytest.approx(84 * 1024 * 1.74e9, rel=0.01)
    assert gpu.peak_flops_per_s("fp8") == gpu.peak_flops_per_s("bf16")  # no FP8 units


def test_every_row_of_the_a40_profile_predicts():
    report = validate(format="vidur-network", path=SEND_RECV)
    assert report.rows and all(r.error is None for r in report.rows)


def test_the_fitted_a40_links_reproduce_the_profile():
    fits = fit_links(files=[SEND_RECV], leave_out=False)
    assert set(fits) == {"A40:nvlink-pairwise", "A40:nvlink-pairwise/inter-node"}
    for result in fits.values():
        assert not result.at_bound
        assert result.in_sample["send_recv"].mape < 0.2
