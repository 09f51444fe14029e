"""GPUs without data borrow constants from a measured relative, scaled where physics says so.

The relatives are declared in the GPU files (``borrows:``); a GPU with neither constants
nor ``borrows:`` is refused, at prediction time and by ``energylens calibrate``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from energylens.calibration.coverage import (
    measured_gpus,
    require_constants,
    require_data_or_borrows,
)
from energylens.calibration.file import default_calibration
from energylens.calibration.fit_runtime import fill_priors
from energylens.calibration.run import CalibrationData, calibrate
from energylens.calibration.transfer import borrow_from_relatives
from energylens.cost.constants import KernelConstants, LinkConstants, RuntimeConstants
from energylens.errors import EnergyLensError, HardwareFileError, UncalibratedGPUError
from energylens.hardware import GPU_DIR, GPUDatabase, list_gpus, load_gpu

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "energylens" / "data" / "calibration.yaml"
PHI2 = ROOT / "data/measurements/vidur/compute/h100/microsoft/phi-2/mlp.csv"
BORROWERS = [gpu.name for gpu in list_gpus() if gpu.borrows_from is not None]


def _fitted(value: float) -> dict:
    return {"value": value, "kind": "fitted", "fit": "test"}


def _h100_only():
    kernels = {"H100-SXM": KernelConstants(static_power_w=150.0, busy_power_w=420.0,
                                           energy_per_tensor_flop_j=2.0e-13)}
    links = {"H100-SXM:nvswitch": LinkConstants(latency_s=2.5e-5, power_w=10.0)}
    runtimes = {"vllm/H100-SXM": RuntimeConstants(step_overhead_s=4.0e-4,
                                                  allreduce_latency_s=3.0e-6)}
    prov = {"kernels/H100-SXM": {"static_power_w": _fitted(150.0), "busy_power_w": _fitted(420.0),
                                 "energy_per_tensor_flop_j": _fitted(2.0e-13)},
            "links/H100-SXM:nvswitch": {"latency_s": _fitted(2.5e-5), "power_w": _fitted(10.0)},
            "runtimes/vllm/H100-SXM": {"step_overhead_s": _fitted(4.0e-4),
                                       "allreduce_latency_s": _fitted(3.0e-6)}}
    return kernels, links, runtimes, prov


def test_same_die_borrows_unchanged_and_other_generations_are_scaled():
    kernels, links, runtimes, prov = _h100_only()
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    h200 = kernels["H200-SXM"]
    assert (h200.static_power_w, h200.busy_power_w) == (150.0, 420.0)
    assert runtimes["vllm/H200-SXM"] == runtimes["vllm/H100-SXM"]  # same NVSwitch, same software
    a = kernels["A100-80GB-SXM"]
    assert a.static_power_w == pytest.approx(150.0 * 400.0 / 700.0)
    assert a.busy_power_w == pytest.approx(420.0 * 400.0 / 700.0)
    per_flop = (400.0 / 312e12) / (700.0 / 989.4e12)
    assert a.energy_per_tensor_flop_j == pytest.approx(2.0e-13 * per_flop, rel=0.01)
    assert runtimes["vllm/A100-80GB-SXM"].step_overhead_s == 4.0e-4  # software: unchanged
    # The runtime's own all-reduce runs over NVLink peer memory: not borrowed onto PCIe.
    pcie = runtimes["vllm/H100-PCIe"]
    assert pcie.step_overhead_s == 4.0e-4 and pcie.allreduce_latency_s == 0.0
    assert "allreduce_latency_s" not in prov["runtimes/vllm/H100-PCIe"]
    # A100-40GB borrows from A100-80GB, which borrowed first (same TDP and peak).
    assert kernels["A100-40GB-SXM"].busy_power_w == pytest.approx(a.busy_power_w)
    assert links["H200-SXM:nvswitch"].latency_s == 2.5e-5
    assert "L40S:nvswitch" not in links  # L40S has no NVSwitch: nothing to borrow
    assert kernels["H200-SXM"].static_power_w == 150.0
    entry = prov["kernels/H200-SXM"]["busy_power_w"]
    assert entry["kind"] == "assumed" and "H100-SXM" in entry["note"]


def test_a_precision_ratio_is_borrowed_only_where_the_precision_runs_natively_on_both():
    """H100 dequantises 4-bit experts and scales FP8 blocks in software: its ratios do not
    describe B200's kernels (FP4 units, block scaling in the tensor cores); they do describe
    H200's (the same die). A100 (INT8, no FP8 units) is another generation too."""
    kernels, links, runtimes, prov = _h100_only()
    ratios = {"fp8_expert_bandwidth_ratio": 0.9, "fp4_expert_bandwidth_ratio": 0.7,
              "fp4_gemm_efficiency_ratio": 0.6}
    kernels["H100-SXM"] = replace(kernels["H100-SXM"], **ratios)
    prov["kernels/H100-SXM"].update({k: _fitted(v) for k, v in ratios.items()})
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    b200, h200, a100 = kernels["B200"], kernels["H200-SXM"], kernels["A100-80GB-SXM"]
    assert (b200.fp8_expert_bandwidth_ratio, b200.fp4_expert_bandwidth_ratio,
            b200.fp4_gemm_efficiency_ratio) == (1.0, 1.0, 1.0)
    assert "fp4_expert_bandwidth_ratio" not in prov["kernels/B200"]
    assert (h200.fp8_expert_bandwidth_ratio, h200.fp4_expert_bandwidth_ratio) == (0.9, 0.7)
    assert (a100.fp8_expert_bandwidth_ratio, a100.fp4_expert_bandwidth_ratio) == (1.0, 1.0)


def test_engine_fits_of_the_same_die_come_before_the_relatives():
    """A100 80 GB borrows from H100, but names the 40 GB card (same die, same hosts) for
    its engines: a runtime fitted there (TensorRT-LLM, on the bench's 40 GB rows) gives its
    constants first; what the 40 GB card itself only assumed is not taken, H100's fills
    the rest."""
    kernels, links, runtimes, prov = _h100_only()
    runtimes["trtllm/A100-40GB-SXM"] = RuntimeConstants(step_overhead_s=1.6e-3)
    prov["runtimes/trtllm/A100-40GB-SXM"] = {"step_overhead_s": _fitted(1.6e-3)}
    runtimes["trtllm/H100-SXM"] = RuntimeConstants(step_overhead_s=1.3e-3)
    prov["runtimes/trtllm/H100-SXM"] = {"step_overhead_s": _fitted(1.3e-3)}
    runtimes["vllm/A100-40GB-SXM"] = RuntimeConstants(step_overhead_s=9.0e-3)
    prov["runtimes/vllm/A100-40GB-SXM"] = {"step_overhead_s": {
        "value": 9.0e-3, "kind": "assumed", "note": "a guess"}}
    assert load_gpu("A100-80GB-SXM").engines_from == "A100-40GB-SXM"
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    assert runtimes["trtllm/A100-80GB-SXM"].step_overhead_s == 1.6e-3
    entry = prov["runtimes/trtllm/A100-80GB-SXM"]["step_overhead_s"]
    assert entry["kind"] == "assumed" and "A100-40GB-SXM" in entry["note"]
    assert runtimes["vllm/A100-80GB-SXM"].step_overhead_s == 4.0e-4  # H100's, not the guess
    assert runtimes["vllm/A100-40GB-SXM"].step_overhead_s == 9.0e-3  # its own stays


@pytest.mark.parametrize(("value", "message"), [
    ("no-such-gpu", "borrows.engines_from: unknown GPU"),
    ("x100-test", "borrows.engines_from: names the GPU itself")])
def test_engines_from_must_name_another_known_gpu(tmp_path, value, message):
    folder = _new_gpu_dir(tmp_path, borrows={"from": "h100", "reason": "test copy",
                                             "engines_from": value, "engines_reason": "test"})
    with pytest.raises(HardwareFileError, match=message) as err:
        GPUDatabase.from_dirs(GPU_DIR, folder)
    assert "\n" not in str(err.value)


def test_own_measurements_are_never_overwritten():
    kernels, links, runtimes, prov = _h100_only()
    kernels["B200"] = KernelConstants(static_power_w=219.0)
    prov["kernels/B200"] = {"static_power_w": _fitted(219.0)}
    runtimes["vllm/B200"] = RuntimeConstants(step_overhead_s=1.2e-3)
    prov["runtimes/vllm/B200"] = {"step_overhead_s": _fitted(1.2e-3)}
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    assert runtimes["vllm/B200"].step_overhead_s == 1.2e-3
    assert runtimes["vllm/B200"].allreduce_latency_s == 3.0e-6  # lacked: borrowed
    assert kernels["B200"].static_power_w == 219.0
    assert prov["kernels/B200"]["static_power_w"]["kind"] == "fitted"
    assert kernels["B200"].busy_power_w == pytest.approx(420.0 * 1000.0 / 700.0)


@pytest.mark.parametrize("gpu", BORROWERS)
def test_borrowed_power_never_caps_a_gemm_at_the_fitted_efficiency(gpu):
    """Static + busy + FLOP power of a GEMM at gemm_efficiency_max stays under TDP (the
    constants a prediction uses: shipped, or borrowed at prediction time for a GPU file
    newer than the shipped calibration)."""
    spec = load_gpu(gpu)
    k = require_constants(calibration=default_calibration(), gpu=spec).kernel(spec.name)
    flop_w = k.energy_per_tensor_flop_j * spec.peak_flops_per_s("bf16") * k.gemm_efficiency_max
    assert k.static_power_w + k.busy_power_w + flop_w < spec.tdp_w


# --- borrowing declared in the GPU files --------------------------------------------------


def _shipped_doc() -> dict[str, Any]:
    return yaml.safe_load(SHIPPED.read_text())


def _sections(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every section of a calibration file by provenance key (``kernels/H100-SXM``,
    ``links/H100-SXM:nvswitch``, ``runtimes/vllm/H100-SXM``)."""
    out = {f"{section}/{key}": constants for section in ("kernels", "links")
           for key, constants in doc[section].items()}
    out.update({f"runtimes/{runtime}/{gpu}": constants
                for runtime, by_gpu in doc["runtimes"].items() for gpu, constants in by_gpu.items()})
    return out


def test_borrowing_from_the_files_reproduces_the_shipped_calibration():
    """Fitted and measured entries of the shipped file + the files' ``borrows:`` (+ the
    runtime profiles' priors) give back every assumed entry it records, value and note (moving the relatives
    into the GPU files changed nothing)."""
    doc = _shipped_doc()
    sections = _sections(doc)
    prov: dict[str, dict[str, dict[str, Any]]] = {}
    for key, constants in sections.items():
        # the roots of borrowing: fitted constants and those measured by this project, the
        # constants a fit's form fixes, and a link kind's own entry (one host measured it)
        kind_entry = key.startswith("links/") and ":" not in key
        fitted = {name: dict(e) for name, e in constants.items()
                  if (kind_entry and e["kind"] != "default") or e["kind"] in ("fitted", "measured")
                  or e.get("note", "").startswith("fixed by the form of")}
        if fitted:
            prov[key] = fitted

    def values(prefix: str, kind: type) -> dict[str, Any]:
        return {key.removeprefix(prefix): kind(**{n: e["value"] for n, e in v.items()})
                for key, v in prov.items() if key.startswith(prefix)}

    kernels = values("kernels/", KernelConstants)
    links = values("links/", LinkConstants)
    runtimes = values("runtimes/", RuntimeConstants)
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    fill_priors(runtimes=runtimes, prov=prov)  # then the runtime priors, as calibrate does
    expected = {key: {n: e for n, e in constants.items() if e["kind"] != "default"}
                for key, constants in sections.items()}
    # GPU files and runtime profiles newer than the shipped calibration borrow and take
    # their priors at prediction time instead (require_constants, RuntimeProfile.with_priors).
    calibrated, runtimes_then = set(doc["kernels"]), set(doc["runtimes"])
    assert {k: v for k, v in prov.items()
            if (_gpu_of(k) in calibrated or (k.startswith("links/") and ":" not in k))
            and (not k.startswith("runtimes/") or k.split("/")[1] in runtimes_then)} == {
        k: v for k, v in expected.items() if v}


def _gpu_of(key: str) -> str:
    """GPU of a provenance key (``kernels/G``, ``links/G:kind``, ``runtimes/r/G``)."""
    section, rest = key.split("/", 1)
    return rest.split("/", 1)[1] if section == "runtimes" else rest.split(":")[0]


def test_relatives_are_filled_before_their_borrowers():
    order = [gpu.name for gpu in GPUDatabase.from_dirs(GPU_DIR).borrow_order()]
    assert sorted(order) == sorted(BORROWERS)
    for position, name in enumerate(order):
        relative = load_gpu(name).borrows_from
        assert relative not in order[position:]


def _without(cal, name: str):
    return replace(cal, kernels={k: v for k, v in cal.kernels.items() if k != name},
                   links={k: v for k, v in cal.links.items() if k.split(":")[0] != name},
                   runtimes={k: v for k, v in cal.runtimes.items() if k.split("/")[1] != name})


def _has_no_data(name: str) -> bool:
    entries = [e for key, constants in _sections(_shipped_doc()).items()
               if key.split("/")[-1].split(":")[0] == name for e in constants.values()]
    return bool(entries) and all(e["kind"] != "fitted" for e in entries)


@pytest.mark.parametrize("gpu", [name for name in BORROWERS if _has_no_data(name)])
def test_a_borrower_missing_from_a_calibration_borrows_at_prediction_time(gpu):
    """Adding a GPU that borrows is one file: without recalibrating, its constants are
    those ``energylens calibrate`` would have recorded."""
    cal = default_calibration()
    got = require_constants(calibration=_without(cal, gpu), gpu=load_gpu(gpu))
    assert got.kernels[gpu] == cal.kernels[gpu]
    assert {k: v for k, v in got.links.items() if k.startswith(f"{gpu}:")} == {
        k: v for k, v in cal.links.items() if k.startswith(f"{gpu}:")}
    assert got.runtime(runtime="vllm", gpu=gpu) == cal.runtime(runtime="vllm", gpu=gpu)


def test_a_calibration_without_any_gpu_is_the_defaults_tier_and_passes():
    empty = replace(default_calibration(), kernels={}, links={})
    assert require_constants(calibration=empty, gpu=load_gpu("H100")) is empty


def _new_gpu_dir(tmp_path: Path, *, borrows: dict[str, str] | None) -> Path:
    """A folder with one extra GPU file, a renamed copy of H100 SXM."""
    data = yaml.safe_load((GPU_DIR / "h100-sxm.yaml").read_text(encoding="utf-8"))
    data.update(name="X100", aliases=["x100-test"])
    data.pop("borrows", None)
    if borrows is not None:
        data["borrows"] = borrows
    folder = tmp_path / "gpus"
    folder.mkdir()
    (folder / "x100.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def test_a_gpu_with_neither_constants_nor_borrows_is_refused(tmp_path):
    db = GPUDatabase.from_dirs(GPU_DIR, _new_gpu_dir(tmp_path, borrows=None))
    with pytest.raises(UncalibratedGPUError) as err:
        require_constants(calibration=default_calibration(), gpu=db.get("x100"), database=db)
    message = str(err.value)
    assert isinstance(err.value, EnergyLensError) and "\n" not in message
    assert "X100" in message and "x100.yaml" in message
    assert "borrows:" in message and "calibrate" in message
    with pytest.raises(UncalibratedGPUError, match="X100.*declares no `borrows:`"):
        require_data_or_borrows(measured={"H100-SXM"}, database=db)


def test_the_same_gpu_with_borrows_runs_on_its_relatives_constants(tmp_path):
    folder = _new_gpu_dir(tmp_path, borrows={"from": "h100", "reason": "test copy of H100"})
    db = GPUDatabase.from_dirs(GPU_DIR, folder)
    cal = default_calibration()
    got = require_constants(calibration=cal, gpu=db.get("X100"), database=db)
    assert got.kernels["X100"] == cal.kernels["H100-SXM"]  # same TDP and peak: no scaling
    assert got.links["X100:nvswitch"] == cal.links["H100-SXM:nvswitch"]
    assert got.runtime(runtime="vllm", gpu="X100") == cal.runtime(runtime="vllm", gpu="H100-SXM")
    require_data_or_borrows(measured={"H100-SXM"}, database=db)


def test_a_relative_without_constants_is_refused_naming_the_chain():
    cal = _without(_without(default_calibration(), "A100-40GB-SXM"), "A100-80GB-SXM")
    cal = _without(cal, "H100-SXM")
    with pytest.raises(UncalibratedGPUError, match="A100-80GB-SXM -> H100-SXM"):
        require_constants(calibration=cal, gpu=load_gpu("A100-40GB-SXM"))


def test_calibrate_refuses_a_gpu_with_no_data_and_no_borrows_before_fitting():
    """The shipped H100 SXM declares no borrows: calibrating on A100 files alone is refused."""
    a100 = sorted((ROOT / "data/measurements/vidur/compute/a100").glob("*/*/mlp.csv"))
    assert measured_gpus(vidur_mlp=a100, mlenergy=[]) == {"A100-80GB-SXM"}
    with pytest.raises(UncalibratedGPUError, match="H100-SXM has no measurements"):
        calibrate(data=CalibrationData(vidur_mlp=a100), leave_out=False)
    assert measured_gpus(vidur_mlp=[PHI2], mlenergy=[]) == {"H100-SXM"}
