"""Conformance suite every GPU file passes, parametrised over the database (never a list).

Adding a GPU is one YAML file in ``energylens/data/gpus`` (see
``energylens/hardware/README.md``); these tests pick it up on their own.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import pytest
import yaml

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.cost.constants import KernelConstants
from energylens.hardware import (
    GPU,
    GPU_DIR,
    default_database,
    list_gpus,
    load_gpu,
    load_gpu_file,
    resolve_gpu_name,
)
from energylens.runtime import DEFAULT_RUNTIME

KINDS = {"datasheet", "measured", "assumed", "derived"}
REQUIRED_DTYPES = {"bf16", "fp16", "int8", "fp32"}
ALL_GPUS = list_gpus()
SHIPPED = GPU_DIR.parent / "calibration.yaml"


def _ids(gpus: list[GPU]) -> list[str]:
    return [gpu.name for gpu in gpus]


def _numeric_keys(gpu: GPU) -> set[str]:
    """Dotted names of every numeric value a GPU holds."""
    keys = {
        f.name
        for f in dataclasses.fields(gpu)
        if isinstance(getattr(gpu, f.name), int | float)
        and not isinstance(getattr(gpu, f.name), bool)
    }
    keys |= {f"dense_flops_per_s.{dtype}" for dtype in gpu.dense_flops_per_s}
    for link in ("intra_node", "inter_node"):
        keys |= {f"{link}.bandwidth_bytes_per_s", f"{link}.latency_s"}
        if getattr(gpu, link).beyond_pair_bandwidth_bytes_per_s is not None:
            keys.add(f"{link}.beyond_pair_bandwidth_bytes_per_s")
    return keys


@cache
def _shipped_entries() -> dict[str, dict[str, Any]]:
    """``kernels`` section of the shipped calibration file, with each entry's kind."""
    return yaml.safe_load(SHIPPED.read_text())["kernels"]


def test_every_file_is_one_gpu_of_the_database() -> None:
    files = sorted(GPU_DIR.glob("*.yaml"))
    assert sorted(default_database().file_of(gpu.name) for gpu in ALL_GPUS) == files


gpus = pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))


@gpus
def test_file_loads_and_resolves_by_name_and_aliases(gpu: GPU) -> None:
    again = load_gpu_file(default_database().file_of(gpu.name))
    assert again.name == gpu.name and again.provenance == gpu.provenance
    assert load_gpu(gpu.name) is gpu  # parsed once, cached
    assert gpu.vendor.strip() and gpu.vendor == gpu.vendor.lower()
    for alias in (gpu.name, *gpu.aliases):
        assert resolve_gpu_name(alias) == gpu.name


@gpus
def test_every_numeric_field_has_provenance(gpu: GPU) -> None:
    assert set(gpu.provenance) == _numeric_keys(gpu)
    for key, prov in gpu.provenance.items():
        assert prov.kind in KINDS, key
        assert prov.source.strip(), key


@gpus
def test_dense_rates_are_positive_with_the_required_dtypes(gpu: GPU) -> None:
    rates = gpu.dense_flops_per_s
    assert set(rates) >= REQUIRED_DTYPES
    assert all(rate > 0 for rate in rates.values())
    assert rates["fp16"] == pytest.approx(rates["bf16"])
    if rates["int8"] < rates["bf16"]:  # Blackwell Ultra (B300, GB300) kept little INT8
        assert "blackwell ultra" in gpu.provenance["dense_flops_per_s.int8"].source.lower()
    assert rates["fp32"] < rates["bf16"]  # vector FP32, not a tensor rate
    if "fp8" in rates:
        assert rates["fp8"] == pytest.approx(2 * rates["bf16"], rel=0.01)
    assert gpu.sparsity_speedup in (1.0, 2.0)  # sparse rates are never stored as dense


@gpus
def test_counts_are_positive_integers(gpu: GPU) -> None:
    assert isinstance(gpu.sm_count, int) and gpu.sm_count > 0
    assert isinstance(gpu.gpus_per_node, int) and gpu.gpus_per_node > 0


@gpus
def test_clocks_are_ordered(gpu: GPU) -> None:
    assert 0 < gpu.min_clock_mhz <= gpu.base_clock_mhz <= gpu.boost_clock_mhz


@gpus
def test_memory_is_plausible_in_si_units(gpu: GPU) -> None:
    assert 16e9 <= gpu.hbm_capacity_bytes <= 512e9
    assert 0.2e12 <= gpu.hbm_bandwidth_bytes_per_s <= 20e12  # L4's GDDR6: 300 GB/s
    # A40 (GA102): 6 MB; Max 1550: 408 MB; SN40L's on-chip SRAM: 520 MiB
    assert 4 * 2**20 <= gpu.l2_bytes <= 1024 * 2**20


@gpus
def test_idle_power_is_a_small_fraction_of_tdp(gpu: GPU) -> None:
    assert 0 < gpu.idle_power_w < 0.25 * gpu.tdp_w


@gpus
def test_link_bandwidth_is_per_direction_and_plausible(gpu: GPU) -> None:
    for name in ("intra_node", "inter_node"):
        link = getattr(gpu, name)
        assert link.kind.strip()
        assert 1e-7 < link.latency_s < 1e-4
        assert 1e9 < link.bandwidth_bytes_per_s < 2e12
        assert link.bandwidth_bytes_per_s < gpu.hbm_bandwidth_bytes_per_s
        source = gpu.provenance[f"{name}.bandwidth_bytes_per_s"].source
        assert "per direction" in source.lower(), f"{name}: say the bandwidth is per direction"
    if gpu.intra_node.kind in {"nvswitch", "xgmi"}:
        assert gpu.inter_node.bandwidth_bytes_per_s < gpu.intra_node.bandwidth_bytes_per_s
        assert gpu.inter_node.latency_s > gpu.intra_node.latency_s


@gpus
def test_price_has_a_source(gpu: GPU) -> None:
    assert 0.1 <= gpu.price_per_hour <= 100.0  # US dollars per GPU-hour
    prov = gpu.provenance["price_per_hour"]
    assert prov.kind in KINDS and prov.source.strip()


@gpus
def test_borrows_name_a_known_relative_with_a_reason(gpu: GPU) -> None:
    if gpu.borrows_from is None:
        assert gpu.borrow_reason is None
        fitted = [n for n, e in _shipped_entries()[gpu.name].items() if e["kind"] == "fitted"]
        assert fitted, "a GPU that borrows nothing needs fitted constants of its own"
        return
    assert gpu.borrows_from in {other.name for other in ALL_GPUS} - {gpu.name}
    assert gpu.borrow_reason and gpu.borrow_reason.strip()
    for name, entry in _shipped_entries().get(gpu.name, {}).items():
        if entry["kind"] == "assumed":  # what calibrate borrowed came from the declared relative
            assert f"{gpu.borrows_from}'s value" in entry["note"], name


@gpus
def test_it_predicts_on_constants_of_its_own_or_borrowed(gpu: GPU) -> None:
    """Own (in the shipped calibration) or borrowed down its ``borrows:`` chain when the
    file is newer than the calibration: no GPU a study can pick runs on the defaults."""
    shipped = default_calibration()
    cal = require_constants(calibration=shipped, gpu=gpu)
    assert (cal is shipped) == (gpu.name in shipped.kernels)
    assert cal.runtime(runtime=DEFAULT_RUNTIME, gpu=gpu.name).step_overhead_s > 0
    assert cal.kernel(gpu.name).static_power_w != KernelConstants().static_power_w
