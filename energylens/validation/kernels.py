"""Measured kernel times against the cost model's own price of each kernel: ``energylens
validate kernels RUN_FOLDER``. Validation only: nothing here is fitted.

Each timed GEMM is the one contraction ``Y[m,n] = X[m,k] * W[k,n]`` (weights in the row's
dtype, bf16 activations) priced by :func:`energylens.cost.roofline.kernel_cost` at the boost
clock, as the ``llmcompass-matmul`` validation prices a GEMM; each SDPA call is the
attention family's fused ``qk+soft+av`` kernel (prefill: ``m = p = q_len``; decode: ``m = 1``,
``p = kv_len``), as :mod:`energylens.calibration.fit_kv_attention` prices it. Both with the
GPU's calibrated kernel constants (its own, or those it borrows).

The small kernels of an ``elementwise.csv`` (RMSNorm, rope, SiLU x mul, the residual add;
``benchmarks/gpu/measure_elementwise.py``, hot rows) are priced as the layer's kernels of
their class (:mod:`energylens.calibration.fit_elementwise`), memory-bound.

Rows are grouped by (kernel, dtype, regime); the regime is the datasheet roofline on the
cost model's own FLOP and byte counts: compute-bound when FLOPs / peak(dtype) >= bytes /
HBM peak, memory-bound otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.file import resolve_calibration
from energylens.cost.constants import Calibration, KernelConstants
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, KernelCost, kernel_cost
from energylens.cost.single_gemm import gemm_cost
from energylens.cost.work import Size
from energylens.hardware import GPU, load_gpu
from energylens.measurements.energylens_gpu import KernelRun
from energylens.model.families import family_part, parse_layer
from energylens.predict import calibration_for_gpu

COMPUTE_BOUND = "compute-bound"
MEMORY_BOUND = "memory-bound"


@dataclass(frozen=True, kw_only=True)
class KernelRow:
    """One timed kernel and its predicted time."""

    kernel: str  # gemm, attention prefill, attention decode
    dtype: str
    regime: str
    shape: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (+: predicted slower)."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True, kw_only=True)
class GroupError:
    """Errors over one (kernel, dtype, regime) group (fractions, not percent)."""

    kernel: str
    dtype: str
    regime: str
    n: int
    mape: float
    median_error: float  # signed: + predicted slower than measured
    max_ape: float


@dataclass(frozen=True, kw_only=True)
class KernelReport:
    """Everything ``energylens validate kernels`` prints."""

    path: str
    gpu: str
    calibration: str
    rows: tuple[KernelRow, ...]
    groups: tuple[GroupError, ...]  # worst MAPE first
    untimed: int
    unpriced: dict[str, str]  # shape -> why the model does not price it

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object (errors as fractions)."""
        return {"path": self.path, "gpu": self.gpu, "calibration": self.calibration,
                "untimed_rows": self.untimed, "unpriced": self.unpriced,
                "groups": [vars(g) for g in self.groups],
                "rows": [{**vars(r), "error": r.error} for r in self.rows]}


@cache
def _attention_kernel(*, heads_q: int, heads_kv: int, head_dim: int) -> Kernel:
    layer = parse_layer(name="attention", parts=[family_part("attention")], norm="rmsnorm")
    sizes = {"d": heads_q * head_dim, "g": heads_kv, "r": heads_q // heads_kv, "e": head_dim}
    compiled = compile_layer(layer=layer, sizes=sizes, degrees={},
                             fusion=frozenset({"attention"}))
    return next(k for k in compiled.kernels if k.name == "qk+soft+av")


def attention_cost(*, batch: int, q_len: int, kv_len: int, heads_q: int, heads_kv: int,
                   head_dim: int, gpu: GPU, constants: KernelConstants) -> KernelCost:
    """The cost model's price of one fused causal attention call (bf16 KV): ``batch``
    sequences of ``q_len`` new queries at the end of ``kv_len`` keys."""
    kernel = _attention_kernel(heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim)
    phase: dict[str, Size] = {"b": float(batch), "m": float(q_len), "p": float(kv_len)}
    return kernel_cost(kernel=kernel, phase=phase, window=None, gpu=gpu, constants=constants,
                       clock=ClockState.at(gpu=gpu, freq_mhz=None, constants=constants),
                       weight_dtype="bf16")


def roofline_regime(*, cost: KernelCost, dtype: str, gpu: GPU) -> str:
    """Compute- or memory-bound by the datasheet roofline on the kernel's FLOPs and bytes."""
    compute_s = float(cost.flops) / gpu.peak_flops_per_s(dtype)
    memory_s = float(cost.bytes) / gpu.hbm_bandwidth_bytes_per_s
    return COMPUTE_BOUND if compute_s >= memory_s else MEMORY_BOUND


def validate_kernels(*, run: KernelRun, gpu: str | None = None,
                     calibration: Calibration | str | Path | None = None) -> KernelReport:
    """Predict every timed kernel of ``run`` on ``gpu`` (default: the run's device name)."""
    spec = load_gpu(gpu or run.device_name)
    cal = resolve_calibration(calibration)
    constants = calibration_for_gpu(cal, spec).kernel(spec.name)
    rows: list[KernelRow] = []
    for g in run.gemm:
        cost = gemm_cost(m=g.m, n=g.n, k=g.k, dtype=g.dtype, gpu=spec, constants=constants)
        rows.append(KernelRow(kernel="gemm", dtype=g.dtype,
                              regime=roofline_regime(cost=cost, dtype=g.dtype, gpu=spec),
                              shape=f"{g.layer} m={g.m} n={g.n} k={g.k}", measured_s=g.time_s,
                              predicted_s=float(cost.latency_s)))
    unpriced: dict[str, str] = {}
    for a in run.attention:
        shape = (f"b={a.batch} q={a.q_len} kv={a.kv_len} heads={a.heads_q}/{a.heads_kv} "
                 f"d={a.head_dim}")
        if a.q_len > a.kv_len or (a.q_len > 1 and not a.causal):
            unpriced[f"{a.phase} {shape}"] = "the model prices causal attention over the last " \
                                             "q_len of kv_len keys only"
            continue
        cost = attention_cost(batch=a.batch, q_len=a.q_len, kv_len=a.kv_len, heads_q=a.heads_q,
                              heads_kv=a.heads_kv, head_dim=a.head_dim, gpu=spec,
                              constants=constants)
        rows.append(KernelRow(kernel=f"attention {a.phase}", dtype="bf16",
                              regime=roofline_regime(cost=cost, dtype="bf16", gpu=spec),
                              shape=shape, measured_s=a.time_s, predicted_s=float(cost.latency_s)))
    if run.elementwise is not None:
        rows += small_kernel_rows(path=run.elementwise, gpu=spec, constants=constants)
    return KernelReport(path=str(run.path), gpu=spec.name, calibration=cal.source,
                        rows=tuple(rows), groups=group_errors(rows=rows), untimed=run.untimed,
                        unpriced=unpriced)


#: The Vidur op a small kernel is priced as -> the name its rows are grouped under.
SMALL_KERNELS = {"input_layernorm": "rmsnorm", "attn_rope": "rope", "mlp_act": "silu x mul",
                 "add": "residual add"}


def small_kernel_rows(*, path: Path, gpu: GPU, constants: KernelConstants) -> list[KernelRow]:
    """The hot rows of an ``elementwise.csv`` (each call on the same tensors, as a forward
    pass hands an activation on), each priced as the layer's kernel of its class."""
    from energylens.calibration.fit_elementwise import elementwise_cases
    from energylens.calibration.fit_kernels import predict_cases

    cases = elementwise_cases(path)
    rows = []
    for case, predicted in zip(cases, predict_cases(cases, gpu=gpu, constants=constants),
                               strict=True):
        for tokens, measured, price in zip(case.num_tokens, case.measured_s,
                                           np.broadcast_to(predicted, case.num_tokens.shape),
                                           strict=True):
            rows.append(KernelRow(kernel=SMALL_KERNELS[case.op], dtype="bf16",
                                  regime=MEMORY_BOUND, shape=f"{case.model} tokens={int(tokens)}",
                                  measured_s=float(measured), predicted_s=float(price)))
    return rows


def group_errors(*, rows: list[KernelRow]) -> tuple[GroupError, ...]:
    """MAPE, median signed error and worst error per (kernel, dtype, regime), worst MAPE first."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for row in rows:
        groups[(row.kernel, row.dtype, row.regime)].append(row.error)
    out = []
    for (kernel, dtype, regime), errors in groups.items():
        e = np.asarray(errors)
        out.append(GroupError(kernel=kernel, dtype=dtype, regime=regime, n=int(e.size),
                              mape=float(np.mean(np.abs(e))), median_error=float(np.median(e)),
                              max_ape=float(np.max(np.abs(e)))))
    return tuple(sorted(out, key=lambda g: -g.mape))
