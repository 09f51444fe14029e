"""GPUs without data borrow constants from a measured relative, scaled where physics says so."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.transfer import RELATIVE, borrow_from_relatives
from energylens.cost.constants import KernelConstants, LinkConstants
from energylens.hardware import load_gpu


def _fitted(value: float) -> dict:
    return {"value": value, "kind": "fitted", "fit": "test"}


def _h100_only():
    kernels = {"H100-SXM": KernelConstants(static_power_w=150.0, busy_power_w=420.0,
                                           energy_per_tensor_flop_j=2.0e-13,
                                           engine_step_overhead_s=4.0e-4)}
    links = {"H100-SXM:nvswitch": LinkConstants(latency_s=2.5e-5, power_w=10.0)}
    prov = {"kernels/H100-SXM": {"static_power_w": _fitted(150.0), "busy_power_w": _fitted(420.0),
                                 "energy_per_tensor_flop_j": _fitted(2.0e-13),
                                 "engine_step_overhead_s": _fitted(4.0e-4)},
            "links/H100-SXM:nvswitch": {"latency_s": _fitted(2.5e-5), "power_w": _fitted(10.0)}}
    return kernels, links, prov


def test_same_die_borrows_unchanged_and_other_generations_are_scaled():
    kernels, links, prov = _h100_only()
    borrow_from_relatives(kernels=kernels, links=links, prov=prov)
    h200 = kernels["H200-SXM"]
    assert (h200.static_power_w, h200.busy_power_w, h200.engine_step_overhead_s) == (150.0, 420.0, 4.0e-4)
    a = kernels["A100-80GB-SXM"]
    assert a.static_power_w == pytest.approx(150.0 * 400.0 / 700.0)
    assert a.busy_power_w == pytest.approx(420.0 * 400.0 / 700.0)
    per_flop = (400.0 / 312e12) / (700.0 / 989.4e12)
    assert a.energy_per_tensor_flop_j == pytest.approx(2.0e-13 * per_flop, rel=0.01)
    assert a.engine_step_overhead_s == 4.0e-4  # software overhead: unchanged
    # A100-40GB borrows from A100-80GB, which borrowed first (same TDP and peak).
    assert kernels["A100-40GB-SXM"].busy_power_w == pytest.approx(a.busy_power_w)
    assert links["H200-SXM:nvswitch"].latency_s == 2.5e-5
    assert "L40S:nvswitch" not in links  # L40S has no NVSwitch: nothing to borrow
    assert kernels["H200-SXM"].static_power_w == 150.0
    entry = prov["kernels/H200-SXM"]["busy_power_w"]
    assert entry["kind"] == "assumed" and "H100-SXM" in entry["note"]


def test_own_measurements_are_never_overwritten():
    kernels, links, prov = _h100_only()
    kernels["B200"] = KernelConstants(static_power_w=219.0)
    prov["kernels/B200"] = {"static_power_w": _fitted(219.0)}
    borrow_from_relatives(kernels=kernels, links=links, prov=prov)
    assert kernels["B200"].static_power_w == 219.0
    assert prov["kernels/B200"]["static_power_w"]["kind"] == "fitted"
    assert kernels["B200"].busy_power_w == pytest.approx(420.0 * 1000.0 / 700.0)


@pytest.mark.parametrize("gpu", sorted(RELATIVE))
def test_shipped_calibration_covers_every_gpu_of_the_database(gpu):
    """No GPU a study can pick runs on the built-in defaults for its power constants."""
    constants = default_calibration().kernel(load_gpu(gpu).name)
    assert constants.engine_step_overhead_s > 0
    assert constants.static_power_w != KernelConstants().static_power_w


@pytest.mark.parametrize("gpu", sorted(RELATIVE))
def test_borrowed_power_never_caps_a_gemm_at_the_fitted_efficiency(gpu):
    """Static + busy + FLOP power of a GEMM at gemm_efficiency_max stays under TDP."""
    spec = load_gpu(gpu)
    k = default_calibration().kernel(spec.name)
    flop_w = k.energy_per_tensor_flop_j * spec.peak_flops_per_s("bf16") * k.gemm_efficiency_max
    assert k.static_power_w + k.busy_power_w + flop_w < spec.tdp_w
