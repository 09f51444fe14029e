"""``energylens calibrate``: bounded fits, the file it writes, and the shipped calibration."""

from __future__ import annotations

import hashlib
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import yaml

from energylens.calibration.file import (
    FORMAT_VERSION,
    default_calibration,
    load_calibration,
    parse_calibration,
)
from energylens.calibration.fit_kernels import fit_gpu_kernels
from energylens.calibration.fit_links import collective_cases, fit_link
from energylens.calibration.fitting import Param, fit_bounded
from energylens.calibration.run import CalibrationData, calibrate, discover, to_yaml
from energylens.cli import main
from energylens.cost.constants import KERNEL_FIELDS, LINK_FIELDS, RUNTIME_FIELDS, KernelConstants
from energylens.measurements.formats import load_measurements
from energylens.predict import predict
from energylens.runtime import get_runtime, runtime_names
from energylens.runtime.profile import legacy_runtime

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "measurements"
SHIPPED = ROOT / "energylens" / "data" / "calibration.yaml"
PHI2 = DATA / "vidur/compute/h100/microsoft/phi-2/mlp.csv"
H100_ALL_REDUCE = DATA / "vidur/network/h100_dgx/all_reduce.csv"


@pytest.mark.parametrize("log", [False, True])
def test_param_transform_round_trips_and_stays_in_bounds(log):
    p = Param("x", 3.0, 0.5, 40.0, log=log)
    for value in (0.6, 3.0, 39.0):
        assert p.to_bounded(p.to_unbounded(value)) == pytest.approx(value, rel=1e-6)
    for z in (-1e3, -5.0, 0.0, 5.0, 1e3):
        assert 0.5 <= p.to_bounded(z) <= 40.0


def test_fit_bounded_recovers_known_constants():
    x = np.linspace(1, 100, 50)
    truth = {"a": 2.5, "b": 0.03}
    y = truth["a"] * np.exp(-truth["b"] * x)
    values, rms, at_bound = fit_bounded(
        params=(Param("a", 1.0, 0.1, 10.0, log=True), Param("b", 0.1, 0.0, 1.0)),
        residuals=lambda v: np.log(v["a"] * np.exp(-v["b"] * x)) - np.log(y))
    assert values == pytest.approx(truth, rel=1e-4)
    assert rms < 1e-6 and at_bound == []


def test_kernel_fit_on_one_model_reaches_gemm_accuracy_within_bounds():
    result = fit_gpu_kernels(files=[PHI2], gpu_name="H100", leave_out=False)
    assert result.in_sample["gemm"].mape < 0.12
    assert 0.4 <= result.values["gemm_efficiency_max"] <= 0.98
    assert result.n_points > 1000 and result.fitted_on == [str(PHI2)]


def test_link_fit_on_h100_nvswitch_all_reduce():
    sets = [load_measurements(format="vidur-network", path=H100_ALL_REDUCE)]
    cases = collective_cases(sets)
    assert set(cases) == {"H100-SXM:nvswitch"}
    result = fit_link(key="H100-SXM:nvswitch", cases=cases["H100-SXM:nvswitch"], leave_out=True)
    assert result.in_sample["all_reduce"].mape < 0.12
    assert set(result.leave_out) >= {"all_reduce@2", "all_reduce@4", "all_reduce@8"}
    assert 0.0 < result.values["bus_bandwidth_fraction"] <= 1.0


def test_calibrate_writes_a_loadable_file_with_provenance(tmp_path):
    outcome = calibrate(data=CalibrationData(vidur_mlp=[PHI2], vidur_network=[H100_ALL_REDUCE]),
                        leave_out=False)
    text = to_yaml(outcome)
    doc = yaml.safe_load(text)
    assert doc["version"] == FORMAT_VERSION
    cal = parse_calibration(data=doc, source="test")
    assert cal.kernel("H100-SXM").gemm_efficiency_max == pytest.approx(
        outcome.calibration.kernel("H100-SXM").gemm_efficiency_max, rel=1e-5)
    entry = doc["kernels"]["H100-SXM"]["gemm_efficiency_max"]
    assert entry["kind"] == "fitted" and entry["fitted_on"] == [str(PHI2.relative_to(ROOT))]
    assert "rms_log" in entry["residual"] and entry["fit"] == "vidur-mlp/H100-SXM"
    assert doc["kernels"]["H100-SXM"]["voltage_floor"]["kind"] == "default"
    assert doc["links"]["H100-SXM:nvswitch"]["latency_s"]["kind"] == "fitted"
    assert {d["path"] for d in doc["data"]} == {str(PHI2.relative_to(ROOT)),
                                                 str(H100_ALL_REDUCE.relative_to(ROOT))}


def test_calibrate_cli_on_a_small_data_folder(tmp_path, capsys):
    root = tmp_path / "data"
    for src in (PHI2, H100_ALL_REDUCE):
        dst = root / src.relative_to(DATA)
        dst.parent.mkdir(parents=True)
        dst.write_bytes(src.read_bytes())
    out = tmp_path / "cal.yaml"
    # One model's per-op profile cannot identify every kernel constant: the file is written,
    # and calibrate exits 2 naming what ended at a bound, unless told to accept it.
    assert main(["calibrate", "--data", str(root), "--output", str(out), "--no-leave-out",
                 "--quiet"]) == 2
    error = capsys.readouterr().err
    assert out.is_file() and "ended at a bound" in error and "vidur-mlp/H100-SXM/" in error
    assert main(["calibrate", "--data", str(root), "--output", str(out), "--no-leave-out",
                 "--quiet", "--force", "--allow-unidentified"]) == 0
    cal = load_calibration(out)
    assert "H100-SXM" in cal.kernels and "H100-SXM:nvswitch" in cal.links
    assert main(["calibrate", "--data", str(tmp_path / "nowhere"), "--output", str(out)]) == 2
    assert "no such data folder" in capsys.readouterr().err


def test_discover_finds_the_repository_copies():
    data = discover(DATA)
    assert len(data.vidur_mlp) == 8 and len(data.mlenergy) == 3
    assert any(p.name == "all_reduce.csv" for p in data.vidur_network)


# --- the shipped calibration -------------------------------------------------------------


def test_shipped_calibration_is_the_default_and_loads():
    assert SHIPPED.is_file()
    cal = default_calibration()
    assert cal.source.endswith("calibration.yaml")
    for gpu in ("H100-SXM", "A100-80GB-SXM", "B200"):
        assert gpu in cal.kernels
    assert "H100-SXM:nvswitch" in cal.links
    p = predict(model="llama-3.1-8b", gpu="H100")
    q = predict(model="llama-3.1-8b", gpu="H100", calibration=SHIPPED)
    assert p.energy_per_request_j == pytest.approx(q.energy_per_request_j)


def test_shipped_calibration_records_every_constant_with_its_provenance():
    doc = yaml.safe_load(SHIPPED.read_text())
    assert doc["version"] == FORMAT_VERSION
    sections = [(key, constants, KERNEL_FIELDS) for key, constants in doc["kernels"].items()]
    sections += [(key, constants, LINK_FIELDS) for key, constants in doc["links"].items()]
    sections += [(f"{runtime}/{gpu}", constants, RUNTIME_FIELDS)
                 for runtime, by_gpu in doc["runtimes"].items()
                 for gpu, constants in by_gpu.items()]
    # every runtime section is a runtime's, or the earlier-release overheads of one that
    # keeps them apart (legacy_overheads_until)
    legacy = {legacy_runtime(r) for r in runtime_names() if get_runtime(r).legacy_overheads_until}
    assert {key.split("/")[0] for key, _, names in sections if names == RUNTIME_FIELDS} <= set(
        runtime_names()) | legacy
    for key, constants, names in sections:
        assert set(constants) == set(names), key
        for name, entry in constants.items():
            assert entry["kind"] in ("fitted", "measured", "assumed", "default"), (key, name)
            if entry["kind"] == "measured":  # this project's NVML runs (fit_power)
                fit = entry["note"].split(", ", 1)[1].split(" ", 1)[0]
                assert fit.startswith("energylens-gpu/") and fit in doc["fits"], (key, name)
            if entry["kind"] == "fitted":
                assert entry["fitted_on"] and "rms_log" in entry["residual"], (key, name)
                assert entry["fit"] in doc["fits"], (key, name)
            if entry["kind"] == "assumed":
                assert entry["note"], (key, name)


def test_shipped_calibration_was_fitted_on_the_unedited_repository_copies():
    doc = yaml.safe_load(SHIPPED.read_text())
    assert doc["data"]
    for item in doc["data"]:
        path = ROOT / item["path"]
        assert path.is_file(), item["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == item["sha256"], item["path"]


def test_shipped_power_constants_are_physical():
    cal = default_calibration()
    for gpu in ("H100-SXM", "B200"):
        k = cal.kernel(gpu)
        from energylens.hardware import load_gpu

        spec = load_gpu(gpu)
        assert 0.5 * spec.idle_power_w <= k.static_power_w <= spec.idle_power_w + 80
        assert k.static_power_w + k.busy_power_w < spec.tdp_w
        assert 0 < k.energy_per_tensor_flop_j < 2e-12
        assert 0 < k.energy_per_hbm_byte_j < 150e-12


def test_kernel_constants_fields_are_all_serialisable():
    # every field of the dataclass is a float the file format can carry
    for f in fields(KernelConstants):
        assert isinstance(getattr(KernelConstants(), f.name), float)


def test_a_constant_no_row_depends_on_keeps_its_initial_value():
    """Fold fits without rows that exercise a constant (no EP rows for the EP overhead) must
    not move it: the trust-region solver drifts along such directions to a bound."""
    from energylens.calibration.fitting import Param, fit_bounded

    params = (Param("used", 1.0, 0.1, 10.0), Param("unused", 2.0, 0.1, 10.0, log=True))
    values, rms, at_bound = fit_bounded(
        params=params, residuals=lambda v: np.array([v["used"] - 3.0, 2 * (v["used"] - 3.0)]))
    assert values["used"] == pytest.approx(3.0, rel=1e-4)
    assert values["unused"] == pytest.approx(2.0, rel=1e-12)
    assert not at_bound and rms < 1e-4
