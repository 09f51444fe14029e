"""The engine-free steps' PyTorch kernels priced at the speed measured for them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from energylens.cost.constants import KernelConstants
from energylens.cost.kernel_plan import vector_class
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.errors import MeasurementError
from energylens.hardware import load_gpu
from energylens.validation.script_torch_ops import (
    fit_torch_classes,
    op_kernels,
    torch_ops_file,
)

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "data/measurements/energylens-gpu"
WIDTHS = {"hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8}
TRUE = {"norm_overhead_s": 1.9e-6, "norm_bandwidth_efficiency": 0.35, "norm_floor_sharpness": 1.3,
        "elementwise_overhead_s": 1.4e-6, "elementwise_bandwidth_efficiency": 0.8,
        "elementwise_floor_sharpness": 1.5, "activation_overhead_s": 2.0e-6,
        "activation_bandwidth_efficiency": 0.4, "activation_floor_sharpness": 1.4}


def test_each_op_is_priced_by_the_kernel_class_that_stands_for_it() -> None:
    kernels = op_kernels(**WIDTHS)
    classes = {op: vector_class(k) for op, k in kernels.items()}
    assert classes["mul_weight"] == "norm"  # the layer's norm kernel: the weight multiply
    assert classes["mul_up"] == classes["silu"] == "activation"
    assert {classes[op] for op in ("add", "to_fp32", "pow", "mean", "add_eps", "rsqrt",
                                   "to_bf16", "mul_rsqrt", "pad", "cast_fp8")} == {"elementwise"}
    # the residual add reads two rows and writes one; the cast writes one byte per element
    assert [t.name for t in kernels["add"].reads] == ["Y", "X"]
    assert kernels["cast_fp8"].writes[0].name == "N8:fp8"


def test_fit_recovers_the_constants_that_priced_the_ops(tmp_path: Path) -> None:
    gpu = load_gpu("H200-SXM")
    base = replace(KernelConstants(), energy_per_tensor_flop_j=0.0,
                   energy_per_vector_flop_j=0.0, energy_per_hbm_byte_j=0.0)
    truth = replace(base, **TRUE)
    tokens = np.array([1, 8, 64, 512, 4096, 16384], dtype=float)
    rows = []
    for op, kernel in op_kernels(**WIDTHS).items():
        cost = kernel_cost(kernel=kernel, phase={"b": tokens, "m": 1.0, "n": 1.0, "p": 1.0,
                                                 "t": 1.0}, window=None, gpu=gpu,
                           constants=truth, clock=ClockState(ratio=1.0, dynamic_scale=1.0),
                           weight_dtype="bf16")
        rows += [{"op": op, "hidden": 4096, "ffn": 14336, "tokens": t, "time_s": s}
                 for t, s in zip(tokens, np.asarray(cost.latency_s), strict=True)]
    rows.append({"op": "rms_chain", "hidden": 4096, "ffn": 14336, "tokens": 1, "time_s": 1.0})
    path = tmp_path / "torch_ops.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    fitted = fit_torch_classes(path=path, gpu=gpu, constants=base, heads=32, kv_heads=8)
    for name, value in TRUE.items():
        assert fitted[name] == pytest.approx(value, rel=0.05), name


def test_a_file_without_its_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "torch_ops.csv"
    pd.DataFrame([{"op": "add", "tokens": 1}]).to_csv(path, index=False)
    with pytest.raises(MeasurementError, match="missing columns"):
        fit_torch_classes(path=path, gpu=load_gpu("H200-SXM"), constants=KernelConstants(),
                          heads=32, kv_heads=8)


def test_the_timings_are_found_beside_the_steps_of_their_gpu_only() -> None:
    h200 = torch_ops_file(RUNS / "h200-sxm/2026-11-27-c/steps_bf16.csv")
    assert h200 is not None and h200.parent.name == "2026-11-29-b"
    assert torch_ops_file(RUNS / "h100-sxm/2026-11-27-b/steps_bf16.csv") is None


def test_shipped_timings_say_pytorchs_generic_kernels_stream_slower_than_fused_ones() -> None:
    """On H200, PyTorch's broadcast multiply and strided SiLU reach well under half of HBM
    peak, where the fused Triton kernels of ``measure_elementwise.py`` reach ~0.9."""
    gpu = load_gpu("H200-SXM")
    path = RUNS / "h200-sxm/2026-11-29-b/torch_ops.csv"
    fitted = fit_torch_classes(path=path, gpu=gpu, constants=KernelConstants(), heads=32,
                               kv_heads=8)
    assert fitted["norm_bandwidth_efficiency"] < 0.5
    assert fitted["activation_bandwidth_efficiency"] < 0.5
    assert 1e-6 < fitted["elementwise_overhead_s"] < 3e-6
