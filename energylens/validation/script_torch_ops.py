"""The engine-free steps' small kernels at the speed PyTorch's own ran on the same GPU.

``benchmarks/gpu/measure_decode_step.py`` is plain PyTorch: its norms, residual adds,
SiLU, multiplies, pads and FP8 casts are PyTorch's generic kernels, not an engine's fused
ones. Where this project timed those ops one by one on the GPU
(``benchmarks/gpu/measure_torch_ops.py``: ``torch_ops.csv`` in a run folder beside the
steps file), the small-kernel classes the step is priced with (norm, elementwise,
activation) are fitted on them, each op priced as the kernel that stands for it in the
step: the layer's ``norm1`` for the norm's weight multiply, ``res1`` for the residual add,
``act`` for ``silu(gate) * up``'s multiply, an FP8 cast for the quantisation, and the
script's own passes (:mod:`energylens.validation.script_kernels`) for the rest. The
shipped constants describe an engine's kernels; the steps are a program of PyTorch's.
Validation only.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from energylens.calibration.fit_kernels import class_params
from energylens.calibration.fitting import fit_bounded
from energylens.cost.constants import KernelConstants
from energylens.cost.kernel_plan import vector_class
from energylens.cost.kernels import Kernel
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.errors import MeasurementError
from energylens.hardware import GPU
from energylens.measurements.vidur_ops import Geometry, layer_kernels
from energylens.validation.script_kernels import ROW, script_kernels, script_pass, script_tensor

FILE_NAME = "torch_ops.csv"
#: The measured op -> the kernel of the script's own passes it is.
SCRIPT_OPS = {"to_fp32": "to_fp32", "pow": "pow", "mean": "mean", "add_eps": "add_eps",
              "rsqrt": "rsqrt", "to_bf16": "to_bf16", "mul_rsqrt": "mul_rsqrt",
              "silu": "silu", "pad": "pad_N"}
#: The measured op -> the kernel of the model's layer that stands for it in the step.
LAYER_OPS = {"mul_weight": "norm1", "add": "res1", "mul_up": "act"}
CLASSES = ("norm", "elementwise", "activation")


@cache
def op_kernels(*, hidden: int, ffn: int, heads: int, kv_heads: int) -> dict[str, Kernel]:
    """Every measured op's kernel at these widths (a gated-MLP layer, one GPU)."""
    layer = layer_kernels(Geometry(n_head=heads, n_kv_head=kv_heads, n_embd=hidden,
                                   n_expanded_embd=ffn, use_gated_mlp=True, tp=1))
    script = {k.name: k for k in script_kernels(hidden=hidden, ffn=ffn, fp8=True)}
    cast = script_pass("cast_fp8", (script_tensor("N", ROW),), script_tensor("N8", ROW, "fp8"),
                       function="copy", sizes={"d": hidden, "f": ffn})
    return {**{op: script[name] for op, name in SCRIPT_OPS.items()},
            **{op: layer[name] for op, name in LAYER_OPS.items()}, "cast_fp8": cast}


def _latency(kernel: Kernel, tokens: np.ndarray, *, gpu: GPU,
             constants: KernelConstants) -> np.ndarray:
    cost = kernel_cost(kernel=kernel, phase={"b": tokens, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0},
                       window=None, gpu=gpu, constants=constants,
                       clock=ClockState(ratio=1.0, dynamic_scale=1.0), weight_dtype="bf16")
    return np.asarray(cost.latency_s, dtype=float)


def fit_torch_classes(*, path: Path, gpu: GPU, constants: KernelConstants, heads: int,
                      kv_heads: int) -> dict[str, float]:
    """The norm, elementwise and activation class constants that price ``path``'s ops
    (each op weighs the same within its class)."""
    frame = pd.read_csv(path)
    missing = {"op", "hidden", "ffn", "tokens", "time_s"} - set(frame.columns)
    if missing:
        raise MeasurementError(f"{path}: missing columns {sorted(missing)}")
    cases: dict[str, list[tuple[Kernel, np.ndarray, np.ndarray]]] = {k: [] for k in CLASSES}
    for _, rows in frame.groupby(["op", "hidden", "ffn"]):
        first = rows.iloc[0]
        kernels = op_kernels(hidden=int(first["hidden"]), ffn=int(first["ffn"]), heads=heads,
                             kv_heads=kv_heads)
        kernel = kernels.get(str(first["op"]))
        if kernel is None:  # the whole norm chain, timed as a cross-check
            continue
        klass = vector_class(kernel)
        assert klass in cases, (first["op"], klass)
        cases[klass].append((kernel, rows["tokens"].to_numpy(float),
                             np.log(rows["time_s"].to_numpy(float))))
    values: dict[str, float] = {}
    for klass, members in cases.items():
        if not members:
            continue

        def residuals(trial: dict[str, float],
                      members: list[tuple[Kernel, np.ndarray, np.ndarray]] = members) -> np.ndarray:
            priced = replace(constants, **trial)
            return np.concatenate([
                (np.log(_latency(k, t, gpu=gpu, constants=priced)) - y) / np.sqrt(y.size)
                for k, t, y in members])

        fitted, _, _ = fit_bounded(params=class_params(klass), residuals=residuals)
        values.update(fitted)
    return values


def torch_ops_file(steps_file: Path) -> Path | None:
    """The newest ``torch_ops.csv`` among the run folders of the steps file's GPU folder."""
    found = sorted(steps_file.parent.parent.glob(f"*/{FILE_NAME}"))
    return found[-1] if found else None
