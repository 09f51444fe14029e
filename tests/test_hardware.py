"""Hardware database: every GPU file loads, numbers carry provenance and match datasheets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from energylens.hardware import (
    GPU,
    UnknownGPUError,
    list_gpus,
    load_gpu,
    load_gpu_file,
    resolve_gpu_name,
)

GPU_DIR = Path(__file__).resolve().parents[1] / "energylens" / "data" / "gpus"
CANONICAL = {
    "A100-40GB-SXM",
    "A100-80GB-SXM",
    "H100-SXM",
    "H100-PCIe",
    "H200-SXM",
    "B200",
    "L40S",
    "MI300X",
}
KINDS = {"datasheet", "measured", "assumed", "derived"}
ALL_GPUS = list_gpus()


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
    return keys


def test_database_holds_the_eight_gpus() -> None:
    assert {gpu.name for gpu in ALL_GPUS} == CANONICAL
    assert len(list(GPU_DIR.glob("*.yaml"))) == len(CANONICAL)


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_every_gpu_loads_by_its_name(name: str) -> None:
    gpu = load_gpu(name)
    assert gpu.name == name
    assert gpu.vendor in {"nvidia", "amd"}
    assert load_gpu(name) is gpu  # cached


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_every_numeric_field_has_provenance(gpu: GPU) -> None:
    assert set(gpu.provenance) == _numeric_keys(gpu)
    for key, prov in gpu.provenance.items():
        assert prov.kind in KINDS, key
        assert prov.source.strip(), key


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_values_are_positive_and_counts_integral(gpu: GPU) -> None:
    assert all(rate > 0 for rate in gpu.dense_flops_per_s.values())
    assert isinstance(gpu.sm_count, int) and gpu.sm_count > 0
    assert isinstance(gpu.gpus_per_node, int) and gpu.gpus_per_node > 0
    assert {"bf16", "fp16", "int8", "fp32"} <= set(gpu.dense_flops_per_s)


def test_h100_sxm_dense_bf16_is_the_datasheet_dense_figure() -> None:
    h100 = load_gpu("H100-SXM")
    assert h100.dense_flops_per_s["bf16"] == pytest.approx(989e12, rel=0.01)
    assert h100.peak_flops_per_s("bf16") == pytest.approx(989e12, rel=0.01)
    assert h100.provenance["dense_flops_per_s.bf16"].kind == "datasheet"


# Datasheet "with sparsity" BF16 tensor rates (TFLOP/s), see REFERENCE.md.
SPARSE_BF16_TFLOPS = {
    "A100-40GB-SXM": 624,
    "A100-80GB-SXM": 624,
    "H100-SXM": 1979,
    "H100-PCIe": 1513,
    "H200-SXM": 1979,
    "B200": 4500,
    "L40S": 733,
    "MI300X": 2615,
}


@pytest.mark.parametrize(("name", "sparse_tflops"), sorted(SPARSE_BF16_TFLOPS.items()))
def test_sparse_rate_is_not_stored_as_dense(name: str, sparse_tflops: float) -> None:
    gpu = load_gpu(name)
    dense = gpu.dense_flops_per_s["bf16"]
    assert gpu.sparsity_speedup == pytest.approx(2.0)
    assert dense * gpu.sparsity_speedup == pytest.approx(sparse_tflops * 1e12, rel=0.01)
    assert dense == pytest.approx(sparse_tflops * 1e12 / 2, rel=0.01)


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_dtype_rates_are_ordered(gpu: GPU) -> None:
    rates = gpu.dense_flops_per_s
    assert rates["fp16"] == pytest.approx(rates["bf16"])
    assert rates["int8"] >= rates["bf16"]
    assert rates["fp32"] < rates["bf16"]  # vector FP32, not a tensor rate
    if "fp8" in rates:
        assert rates["fp8"] == pytest.approx(2 * rates["bf16"], rel=0.01)


def test_fp8_falls_back_to_bf16_without_fp8_units() -> None:
    a100 = load_gpu("a100")
    assert "fp8" not in a100.dense_flops_per_s
    assert a100.peak_flops_per_s("fp8") == a100.peak_flops_per_s("bf16")


# Scale-up link bandwidth per direction per GPU (bytes/s) and link kind.
INTRA_NODE = {
    "A100-40GB-SXM": ("nvswitch", 300e9),
    "A100-80GB-SXM": ("nvswitch", 300e9),
    "H100-SXM": ("nvswitch", 450e9),
    "H100-PCIe": ("pcie", 64e9),
    "H200-SXM": ("nvswitch", 450e9),
    "B200": ("nvswitch", 900e9),
    "L40S": ("pcie", 32e9),
    "MI300X": ("xgmi", 448e9),
}


@pytest.mark.parametrize(("name", "expected"), sorted(INTRA_NODE.items()))
def test_link_bandwidth_is_per_direction(name: str, expected: tuple[str, float]) -> None:
    kind, bandwidth = expected
    link = load_gpu(name).intra_node
    assert link.kind == kind
    assert link.bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=0.01)


def test_h100_nvlink_is_450_not_the_bidirectional_900() -> None:
    assert load_gpu("h100").intra_node.bandwidth_bytes_per_s == pytest.approx(450e9)


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_links_are_plausible(gpu: GPU) -> None:
    for link in (gpu.intra_node, gpu.inter_node):
        assert 1e-7 < link.latency_s < 1e-4
        assert 1e9 < link.bandwidth_bytes_per_s < 2e12
    if gpu.intra_node.kind in {"nvswitch", "xgmi"}:
        assert gpu.inter_node.bandwidth_bytes_per_s < gpu.intra_node.bandwidth_bytes_per_s
        assert gpu.inter_node.latency_s > gpu.intra_node.latency_s


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_idle_power_is_a_small_fraction_of_tdp(gpu: GPU) -> None:
    assert 0 < gpu.idle_power_w < gpu.tdp_w
    assert gpu.idle_power_w < 0.25 * gpu.tdp_w


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_clocks_are_ordered(gpu: GPU) -> None:
    assert 0 < gpu.min_clock_mhz <= gpu.base_clock_mhz <= gpu.boost_clock_mhz


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_memory_is_in_gigabyte_units(gpu: GPU) -> None:
    assert 32e9 <= gpu.hbm_capacity_bytes <= 256e9
    assert 0.5e12 <= gpu.hbm_bandwidth_bytes_per_s <= 10e12
    assert 16 * 2**20 <= gpu.l2_bytes <= 256 * 2**20


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("h100", "H100-SXM"),
        ("H100", "H100-SXM"),
        ("h100-sxm", "H100-SXM"),
        ("h100-80gb", "H100-SXM"),
        ("h100_sxm5", "H100-SXM"),
        ("H100 SXM", "H100-SXM"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("Nvidia H100 GPU", "H100-SXM"),
        ("h100-pcie", "H100-PCIe"),
        ("a100", "A100-80GB-SXM"),
        ("A100", "A100-80GB-SXM"),
        ("a100-80gb", "A100-80GB-SXM"),
        ("a100-sxm4-80gb", "A100-80GB-SXM"),
        ("Nvidia A100 GPU", "A100-80GB-SXM"),
        ("a100-40gb", "A100-40GB-SXM"),
        ("h200", "H200-SXM"),
        ("B200", "B200"),
        ("l40s", "L40S"),
        ("mi300x", "MI300X"),
        ("AMD MI300X GPU", "MI300X"),
    ],
)
def test_alias_resolution(alias: str, canonical: str) -> None:
    assert resolve_gpu_name(alias) == canonical
    assert load_gpu(alias) is load_gpu(canonical)


@pytest.mark.parametrize("gpu", ALL_GPUS, ids=_ids(ALL_GPUS))
def test_every_listed_alias_resolves_to_its_gpu(gpu: GPU) -> None:
    for alias in (gpu.name, *gpu.aliases):
        assert resolve_gpu_name(alias) == gpu.name


def test_unknown_name_raises_with_suggestion() -> None:
    with pytest.raises(UnknownGPUError) as err:
        load_gpu("h1000")
    message = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "'h1000'" in message
    assert "did you mean" in message and "H100-SXM" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad", ["", "GH200", "tpu-v5e", "a10"])
def test_other_unknown_names_raise(bad: str) -> None:
    with pytest.raises(UnknownGPUError, match=repr(bad)):
        resolve_gpu_name(bad)


def _write_variant(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((GPU_DIR / "h100-sxm.yaml").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_valid_file_round_trips(tmp_path: Path) -> None:
    gpu = load_gpu_file(_write_variant(tmp_path, lambda data: None))
    assert gpu.__dict__ == load_gpu("H100-SXM").__dict__  # GPU hashes by identity


@pytest.mark.parametrize(
    ("edit", "key_path"),
    [
        (lambda d: d["specs"].pop("tdp_w"), "specs.tdp_w"),
        (lambda d: d["specs"]["idle_power_w"].pop("source"), "specs.idle_power_w.source"),
        (lambda d: d["specs"]["idle_power_w"].pop("kind"), "specs.idle_power_w"),
        (lambda d: d["specs"]["hbm_bandwidth_bytes_per_s"].update(kind="guess"), "specs.hbm"),
        (lambda d: d["specs"]["dense_flops_per_s"].pop("bf16"), "dense_flops_per_s.bf16"),
        (lambda d: d["specs"]["dense_flops_per_s"]["fp8"].update(source=" "), "fp8.source"),
        (lambda d: d["specs"]["sm_count"].update(value=132.5), "specs.sm_count"),
        (lambda d: d["specs"]["l2_bytes"].update(value="lots"), "specs.l2_bytes"),
        (lambda d: d["intra_node"]["latency_s"].pop("value"), "intra_node.latency_s"),
        (lambda d: d.pop("inter_node"), "inter_node"),
        (lambda d: d["specs"].update(tdp=700), "specs"),
    ],
)
def test_invalid_file_names_file_and_key(tmp_path: Path, edit, key_path: str) -> None:
    path = _write_variant(tmp_path, edit)
    with pytest.raises(ValueError) as err:
        load_gpu_file(path)
    assert str(path) in str(err.value)
    assert key_path in str(err.value)
