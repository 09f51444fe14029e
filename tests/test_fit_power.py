"""Board-power constants from this project's NVML runs (energylens.calibration.fit_power)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_power import APPLIED, fit_power, folder_gpu, voltage_at
from energylens.calibration.run import discover
from energylens.calibration.tables import fit_power_folder
from energylens.cost.constants import KernelConstants
from energylens.hardware import load_gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
RUNS = DATA / "energylens-gpu"


def _row(kernel: str, *, power_w: float, t: float, flops: float = 0.0, nbytes: float = 0.0,
         clock: float = 1980.0, gap: int = 0) -> dict:
    window = 2.0
    calls = window / t if t else 0
    return {"kernel": kernel, "window_s": window, "calls": calls, "energy_j": power_w * window,
            "time_per_call_s": t, "flops_per_call": flops, "dram_bytes_per_call": nbytes,
            "sm_clock_mhz": clock, "gap_cycles": gap}


def _synthetic(tmp_path: Path, *, idle: float, e_byte: float, e_flop: float, floor: float,
               e_vec: float) -> Path:
    """A run whose rows follow P = idle + (FLOPs e_flop V(r)^2 + bytes e_byte) / t exactly."""
    gpu = load_gpu("H100-SXM")
    ratio = 1485.0 / gpu.boost_clock_mhz
    scale = voltage_at(ratio=ratio, floor=floor, gpu=gpu) ** 2
    f, b, t = 1.0e12, 4.0e8, 1.5e-3

    def power(flops: float, nbytes: float, tt: float, s: float = 1.0, e: float = e_flop) -> float:
        return idle + (flops * e * s + nbytes * e_byte) / tt

    rows = [
        _row("idle_with_context", power_w=idle, t=0.0),
        _row("copy_2GiB", power_w=power(0, 4.3e9, 1.4e-3), t=1.4e-3, nbytes=4.3e9),
        _row("gemm_bf16_8192x8192x8192", power_w=power(f, b, t), t=t, flops=f, nbytes=b, gap=6_000_000),
        _row("gemm_bf16_8192x8192x8192", power_w=power(f, b, t, scale), t=t, flops=f, nbytes=b,
             clock=1485.0),
        _row("triton_fp32_fma", power_w=power(7e10, 3.5e7, 1.1e-3, e=e_vec), t=1.1e-3,
             flops=7e10, nbytes=3.5e7),
    ]
    run = tmp_path / "h100-sxm" / "2026-01-01-a"
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "power.csv", index=False)
    return run.parent


def test_synthetic_constants_are_recovered_exactly(tmp_path: Path) -> None:
    folder = _synthetic(tmp_path, idle=120.0, e_byte=1.3e-10, e_flop=1.0e-12, floor=0.62, e_vec=5e-12)
    fit = fit_power(folder=folder, gpu_name="H100-SXM")
    assert fit.values["static_power_w"] == pytest.approx(120.0, rel=1e-9)
    assert fit.values["energy_per_hbm_byte_j"] == pytest.approx(1.3e-10, rel=1e-9)
    assert fit.values["energy_per_tensor_flop_j"] == pytest.approx(1.0e-12, rel=1e-9)
    assert fit.values["voltage_floor"] == pytest.approx(0.62, rel=1e-9)
    assert fit.values["energy_per_vector_flop_j"] == pytest.approx(5e-12, rel=1e-9)


def test_a_run_without_copies_cannot_identify_the_byte_energy(tmp_path: Path) -> None:
    folder = _synthetic(tmp_path, idle=120.0, e_byte=1.3e-10, e_flop=1.0e-12, floor=0.62, e_vec=5e-12)
    path = next(folder.glob("*/power.csv"))
    frame = pd.read_csv(path)
    frame[~frame["kernel"].str.startswith("copy")].to_csv(path, index=False)
    with pytest.raises(CalibrationDataError, match="byte energy"):
        fit_power(folder=folder, gpu_name="H100-SXM")


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm"])
def test_measured_constants_are_physical_and_predict_other_kernels(gpu: str) -> None:
    folder = RUNS / gpu
    name = folder_gpu(folder)
    spec = load_gpu(name)
    fit = fit_power(folder=folder, gpu_name=name)
    v = fit.values
    # idle with a CUDA context lies above the board's idle without one, far below its limit
    assert spec.idle_power_w < v["static_power_w"] < 0.3 * spec.tdp_w
    # a large GEMM at the full clock would draw more than the board limit: that is why
    # such GEMMs throttle (the measured clock of every back-to-back 8192^3 GEMM is lower)
    rate = spec.peak_flops_per_s("bf16") * 0.75
    assert v["static_power_w"] + rate * v["energy_per_tensor_flop_j"] > spec.tdp_w
    # the datasheet's 2x FP8 rate at the same power: half the energy per FLOP (+-15 %)
    assert fit.fp8_flop_energy_ratio == pytest.approx(0.5, abs=0.075)
    assert 0.4 < v["voltage_floor"] < 0.9
    # kernels no constant was taken from (fill, SiLU x mul, GEMV, SDPA, smaller GEMMs)
    held = np.abs(np.array(list(fit.held_out.values())))
    assert held.size >= 10 and held.mean() < 0.15


def test_calibrate_takes_the_applied_constants_as_measured() -> None:
    data = discover(DATA)
    folders = sorted({p.parents[1] for p in data.power_tables})
    assert [f.name for f in folders] == ["h100-sxm", "h200-sxm"]
    kernels: dict[str, KernelConstants] = {}
    prov: dict = {}
    fits: dict = {}
    fit_power_folder(folder=folders[0], kernels=kernels, prov=prov, fits=fits, log=lambda _: None)
    entry = fits["energylens-gpu/H100-SXM"]
    for name in APPLIED:
        assert getattr(kernels["H100-SXM"], name) == pytest.approx(entry["measured"][name], rel=1e-5)
        assert prov["kernels/H100-SXM"][name]["kind"] == "measured"
    for name in set(entry["measured"]) - set(APPLIED):  # left to the serving fit
        assert getattr(kernels["H100-SXM"], name) == getattr(KernelConstants(), name)


def test_static_power_is_measured_never_fitted_on_serving_rows() -> None:
    """Steady-state serving rows cannot tell static from busy power (fitted, static ended at
    a bound on B200 and H100): the serving fit leaves it out, and the shipped H100 value is
    the measured board power with a CUDA context and nothing running."""
    import yaml

    from energylens.calibration.fit_serving import serving_params

    assert "static_power_w" in APPLIED
    for gpu in ("H100-SXM", "B200"):
        assert "static_power_w" not in {p.name for p in serving_params(gpu)}
    measured = fit_power(folder=RUNS / "h100-sxm", gpu_name="H100-SXM").values["static_power_w"]
    shipped = Path(__file__).resolve().parents[1] / "energylens" / "data" / "calibration.yaml"
    entry = yaml.safe_load(shipped.read_text("utf-8"))["kernels"]["H100-SXM"]["static_power_w"]
    assert entry["kind"] == "measured"
    assert float(entry["value"]) == pytest.approx(measured, rel=1e-5)
