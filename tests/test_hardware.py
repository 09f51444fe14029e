"""Hardware database: datasheet numbers of specific GPUs, name resolution, file errors.

Checks every GPU file must pass live in ``test_gpu_conformance.py`` (parametrised over
the database); here are hand-computed values and the loader's error messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from energylens.errors import ConfigError, EnergyLensError, HardwareFileError
from energylens.hardware import (
    GPU_DIR,
    GPUDatabase,
    UnknownGPUError,
    load_gpu,
    load_gpu_file,
    resolve_gpu_name,
)


def test_h100_sxm_dense_bf16_is_the_datasheet_dense_figure() -> None:
    h100 = load_gpu("H100-SXM")
    assert h100.dense_flops_per_s["bf16"] == pytest.approx(989e12, rel=0.01)
    assert h100.peak_flops_per_s("bf16") == pytest.approx(989e12, rel=0.01)
    assert h100.provenance["dense_flops_per_s.bf16"].kind == "datasheet"


# Datasheet "with sparsity" BF16 tensor rates (TFLOP/s): NVIDIA A100/H100/H200/HGX B200/L40S/
# HGX B300/GB200 NVL72/GB300 NVL72 (rack / 72)/H20/L4 and AMD Instinct MI300X/MI325X/MI355X
# datasheets.
SPARSE_BF16_TFLOPS = {
    "A100-40GB-SXM": 624,
    "A100-80GB-SXM": 624,
    "H100-SXM": 1979,
    "H100-PCIe": 1513,
    "H200-SXM": 1979,
    "B200": 4500,
    "L40S": 733,
    "MI300X": 2615,
    "B300": 4500,
    "GB200": 5000,
    "GB300": 5000,
    "H20": 296,
    "L4": 242,
    "MI325X": 2615,
    "MI355X": 5033,
}


@pytest.mark.parametrize(("name", "sparse_tflops"), sorted(SPARSE_BF16_TFLOPS.items()))
def test_sparse_rate_is_not_stored_as_dense(name: str, sparse_tflops: float) -> None:
    gpu = load_gpu(name)
    dense = gpu.dense_flops_per_s["bf16"]
    assert gpu.sparsity_speedup == pytest.approx(2.0)
    assert dense * gpu.sparsity_speedup == pytest.approx(sparse_tflops * 1e12, rel=0.01)
    assert dense == pytest.approx(sparse_tflops * 1e12 / 2, rel=0.01)


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
    "MI300X": ("xgmi", 448e9),  # summed over its 7 links
}


@pytest.mark.parametrize(("name", "expected"), sorted(INTRA_NODE.items()))
def test_link_bandwidth_is_per_direction(name: str, expected: tuple[str, float]) -> None:
    kind, bandwidth = expected
    link = load_gpu(name).intra_node
    assert link.kind == kind
    assert link.bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=0.01)


def test_h100_nvlink_is_450_not_the_bidirectional_900() -> None:
    assert load_gpu("h100").intra_node.bandwidth_bytes_per_s == pytest.approx(450e9)


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
        # an alias written with its vendor ("NVIDIA GH200 480GB") also answers without it
        ("GH200 480GB", "GH200"),
        ("A100-SXM-80GB", "A100-80GB-SXM"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
        ("A100-PCIE-40GB", "A100-40GB-PCIe"),
    ],
)
def test_alias_resolution(alias: str, canonical: str) -> None:
    assert resolve_gpu_name(alias) == canonical
    assert load_gpu(alias) is load_gpu(canonical)


def test_unknown_name_raises_with_suggestion() -> None:
    with pytest.raises(UnknownGPUError) as err:
        load_gpu("h1000")
    message = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "'h1000'" in message
    assert "did you mean" in message and "H100-SXM" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad", ["", "GH100", "tpu-v5e", "a1000"])
def test_other_unknown_names_raise(bad: str) -> None:
    with pytest.raises(UnknownGPUError, match=repr(bad)):
        resolve_gpu_name(bad)


def _write_variant(tmp_path: Path, edit, *, name: str = "broken.yaml") -> Path:
    data = yaml.safe_load((GPU_DIR / "h100-sxm.yaml").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / name
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
        (lambda d: d.pop("price_per_hour"), "price_per_hour"),
        (lambda d: d["price_per_hour"].update(kind="quote"), "price_per_hour"),
        (lambda d: d["price_per_hour"].pop("source"), "price_per_hour.source"),
        (lambda d: d.update(borrows={"from": "A100"}), "borrows.reason"),
        (lambda d: d.update(borrows={"from": "A100", "reason": " "}), "borrows.reason"),
        (lambda d: d.update(borrows={"reason": "no data"}), "borrows.from"),
        (lambda d: d.update(borrows={"from": "A100", "reason": "x", "scale": 2}), "borrows"),
        (lambda d: d.update(borrows="A100"), "borrows"),
    ],
)
def test_invalid_file_names_file_and_key(tmp_path: Path, edit, key_path: str) -> None:
    path = _write_variant(tmp_path, edit)
    with pytest.raises(HardwareFileError) as err:
        load_gpu_file(path)
    assert str(path) in str(err.value)
    assert key_path in str(err.value)
    assert isinstance(err.value, EnergyLensError) and "\n" not in str(err.value)


def test_a_file_that_is_not_yaml_is_a_hardware_file_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed", encoding="utf-8")
    with pytest.raises(HardwareFileError, match="bad.yaml"):
        load_gpu_file(path)


def _renamed(name: str, **changes: Any):
    def edit(data: dict[str, Any]) -> None:
        data.update({"name": name, "aliases": [], **changes})
    return edit


def test_extra_folder_adds_gpus_without_touching_the_shipped_database(tmp_path: Path) -> None:
    _write_variant(tmp_path, _renamed("X100", borrows={"from": "h100 sxm", "reason": "copy"}),
                   name="x100.yaml")
    db = GPUDatabase.from_dirs(GPU_DIR, tmp_path)
    x100 = db.get("x100")
    assert x100.borrows_from == "H100-SXM" and x100.borrow_reason == "copy"  # canonical name
    assert db.file_of("X100") == tmp_path / "x100.yaml"
    assert "X100" in [g.name for g in db.borrow_order()]
    with pytest.raises(UnknownGPUError):
        load_gpu("X100")


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({"x.yaml": _renamed("X100", borrows={"from": "Z900", "reason": "r"})},
         r"x\.yaml: borrows\.from: unknown GPU 'Z900'"),
        ({"x.yaml": _renamed("X100", borrows={"from": "X100", "reason": "r"})},
         r"x\.yaml: borrows\.from: .*circle \(X100 -> X100\)"),
        ({"x.yaml": _renamed("X100", borrows={"from": "Y100", "reason": "r"}),
          "y.yaml": _renamed("Y100", borrows={"from": "X100", "reason": "r"})},
         r"borrows\.from: .*circle \((X100 -> Y100 -> X100|Y100 -> X100 -> Y100)\)"),
        ({"x.yaml": _renamed("H100-SXM")}, r"x\.yaml: name: 'H100-SXM' is also the name in .*h100"),
        ({"x.yaml": _renamed("X100", aliases=["h100"])}, r"x\.yaml: aliases: 'h100' also names"),
    ],
)
def test_database_errors_name_the_file_and_key(tmp_path: Path, files, match: str) -> None:
    for name, edit in files.items():
        _write_variant(tmp_path, edit, name=name)
    paths = [*sorted(GPU_DIR.glob("*.yaml")), *sorted(tmp_path.glob("*.yaml"))]
    with pytest.raises(HardwareFileError, match=match):
        GPUDatabase.from_files(paths)


def test_a_dtype_without_a_rate_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="A100-80GB-SXM has no tensor rate for dtype 'int4'"):
        load_gpu("a100").peak_flops_per_s("int4")


def test_fp4_falls_back_to_bf16_without_fp4_units() -> None:
    """NVFP4 weights on a GPU without FP4 tensor cores are dequantised: a 16-bit GEMM."""
    for name in ("a100", "h100"):
        gpu = load_gpu(name)
        assert "fp4" not in gpu.dense_flops_per_s
        assert gpu.peak_flops_per_s("fp4") == gpu.peak_flops_per_s("bf16")
    b200 = load_gpu("b200")
    assert b200.peak_flops_per_s("fp4") == pytest.approx(4 * b200.peak_flops_per_s("bf16"))


def test_an_nvl72_rack_is_one_scale_up_domain() -> None:
    """GB200/GB300 NVL72: 72 GPUs on NVLink; an 8-GPU HGX board is a domain of 8."""
    from energylens.cost.comm import link_for_group

    for name in ("GB200", "GB300"):
        gpu = load_gpu(name)
        assert gpu.gpus_per_node == 72
        assert link_for_group(gpu=gpu, group_size=64) == ("nvswitch", 900e9)
        assert link_for_group(gpu=gpu, group_size=144)[0] == gpu.inter_node.kind
    assert link_for_group(gpu=load_gpu("B200"), group_size=16) == ("infiniband", 50e9)


def test_tensor_parallel_16_is_cheaper_inside_an_nvl72_domain() -> None:
    """The same TP 16 all-reduces stay on NVLink on GB200 but cross the NICs on B200."""
    from energylens.deployment import Deployment, Workload
    from energylens.predict import predict

    workload = Workload(batch=32, input_tokens=1024, output_tokens=32)
    runs = {gpu: predict(model="llama-3.1-405b", gpu=gpu, deployment=Deployment(tp=16),
                         workload=workload) for gpu in ("B200", "GB200")}
    assert all(r.feasible for r in runs.values())
    assert runs["GB200"].decode.communication_j < runs["B200"].decode.communication_j


def test_bridged_pairs_give_larger_groups_the_link_beyond_the_pair() -> None:
    """A40s bridged two by two: a pair all-reduces over NVLink (the calibration's fitted
    A40:nvlink-pairwise constants), four or eight cards as pairs joined over PCIe Gen4 x16
    (a kind of its own: the pairs-over-PCIe hosts measured, not a PCIe host's cards)."""
    from energylens.cost.comm import link_for_group

    gpu = load_gpu("A40")
    assert link_for_group(gpu=gpu, group_size=2) == ("nvlink-pairwise", 56.25e9)
    assert link_for_group(gpu=gpu, group_size=4) == ("nvlink-pairwise/pcie-between-pairs", 31.5e9)
    assert gpu.link_kinds == ("nvlink-pairwise", "nvlink-pairwise/pcie-between-pairs",
                              gpu.inter_node.kind)


@pytest.mark.parametrize("edit", [
    lambda d: d["intra_node"].update(topology="ring"),
    lambda d: d["intra_node"].update(topology="pairs"),
    lambda d: d["intra_node"].update(beyond_pair_kind="pcie"),
])
def test_a_topology_is_checked_where_it_is_read(tmp_path: Path, edit) -> None:
    path = _write_variant(tmp_path, edit)
    with pytest.raises(HardwareFileError, match="intra_node") as err:
        load_gpu_file(path)
    assert "\n" not in str(err.value)
