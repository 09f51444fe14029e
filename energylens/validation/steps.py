"""Measured whole forward steps against the cost model's own price of each step:
``energylens validate steps PATH``. Validation only: nothing is fitted to the steps.

Each row of a ``steps_<dtype>.csv`` (``benchmarks/gpu/measure_decode_step.py``: all 32
layers and the LM head of Llama-3.1-8B, one CUDA graph per step, no serving engine) is
priced by :func:`energylens.cost.step.step_cost` in the step context a prediction builds
(:func:`energylens.predict.step_context`, one GPU, the row's weight dtype, a bf16 KV
cache): a decode step is ``batch`` sequences of ``tokens`` new tokens over ``context``
cached ones, a prefill step ``batch`` sequences of ``tokens`` new tokens over ``context +
tokens`` (the prompt sees itself). To that step the price adds the kernels the script
runs and an engine's layer does not (:mod:`energylens.validation.script_kernels`: eager
RMSNorm passes, SiLU apart from its multiply, FP8 pads), and prices the kernels it ran
where this project timed them on the same GPU (:func:`file_calibration`). No engine
overhead is added (the measured steps have none). The step's energy is its compute, memory and communication
energy plus the GPU's calibrated static power over its predicted time; its board power is
that energy over that time.

Measured: ``step_time_s`` (median graph replay), ``energy_per_call_j`` and ``power_w``
(NVML energy over back-to-back replays). Rows are grouped by (GPU, weight dtype, phase),
worst energy MAPE first; error = predicted / measured - 1.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.file import resolve_calibration
from energylens.calibration.fit_kv_attention import DecodeAttentionTable, fit_kv_attention
from energylens.calibration.fit_precision import COMPUTE_BOUND_DIM
from energylens.cost.constants import Calibration, KernelConstants
from energylens.cost.step import SequenceGroup, StepContext, step_cost
from energylens.deployment import Deployment
from energylens.errors import EnergyLensError, MeasurementError
from energylens.hardware import GPU, load_gpu
from energylens.measurements.energylens_gpu import (
    AttentionTime,
    KernelRun,
    StepFile,
    StepTime,
    load_kernel_run,
    load_step_files,
)
from energylens.model import ModelConfig, get_model
from energylens.predict import calibration_for_gpu, step_context
from energylens.validation.script_kernels import script_overhead
from energylens.validation.script_torch_ops import fit_torch_classes, torch_ops_file

#: The model ``measure_decode_step.py`` builds (its shapes, random weights).
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
METRICS = ("time", "energy", "power")
#: ``measure_kernels.py``'s decode-attention rows cycle through at most this many copies of
#: the KV cache, as many as fit in this many bytes (at least one).
_SDPA_COPIES = 8
_SDPA_CYCLE_BYTES = 256e6
#: The fusions ``measure_decode_step.py`` runs: one QKV and one gate/up GEMM, SDPA's fused
#: attention; its residual adds are kernels of their own before each RMSNorm (no
#: ``norm_residual``) and SiLU x mul is not in the GEMM's epilogue (no ``act``).
FUSIONS = frozenset({"attention", "qkv", "gate_up"})


@dataclass(frozen=True, kw_only=True)
class StepPrice:
    """The cost model's price of one step on one GPU (SI units)."""

    latency_s: float
    compute_energy_j: float
    memory_energy_j: float
    communication_energy_j: float
    static_energy_j: float  # static power x latency

    @property
    def energy_j(self) -> float:
        """The step's energy: the sum of its parts."""
        return (self.compute_energy_j + self.memory_energy_j + self.communication_energy_j
                + self.static_energy_j)

    @property
    def power_w(self) -> float:
        """Mean board power over the step."""
        return self.energy_j / self.latency_s


@dataclass(frozen=True, kw_only=True)
class StepRow:
    """One measured step and its price."""

    gpu: str
    dtype: str
    phase: str
    batch: int
    tokens: int
    context: int
    power_capped: bool
    sm_clock_mhz: float | None
    measured_time_s: float
    measured_energy_j: float
    measured_power_w: float
    predicted: StepPrice
    prefill_tokens: int = 0

    @property
    def errors(self) -> dict[str, float]:
        """Signed relative errors by metric (+: predicted higher than measured)."""
        return {"time": self.predicted.latency_s / self.measured_time_s - 1.0,
                "energy": self.predicted.energy_j / self.measured_energy_j - 1.0,
                "power": self.predicted.power_w / self.measured_power_w - 1.0}

    @property
    def shape(self) -> str:
        """``b=.. ctx=..`` (decode; mixed adds ``+prompt=..``) or ``b=.. tokens=..``
        (prefill)."""
        if self.phase in ("decode", "mixed"):
            extra = f" t={self.tokens}" if self.tokens != 1 else ""
            prompt = f" +prompt={self.prefill_tokens}" if self.phase == "mixed" else ""
            return f"b={self.batch}{extra} ctx={self.context}{prompt}"
        cached = f" ctx={self.context}" if self.context else ""
        return f"b={self.batch} tokens={self.tokens}{cached}"

    def as_dict(self) -> dict[str, Any]:
        """The row's ``--json`` object (errors as fractions)."""
        p = self.predicted
        return {"gpu": self.gpu, "dtype": self.dtype, "phase": self.phase, "batch": self.batch,
                "tokens": self.tokens, "context": self.context,
                "prefill_tokens": self.prefill_tokens, "power_capped": self.power_capped,
                "sm_clock_mhz": self.sm_clock_mhz,
                "measured": {"time_s": self.measured_time_s, "energy_j": self.measured_energy_j,
                             "power_w": self.measured_power_w},
                "predicted": {"time_s": p.latency_s, "energy_j": p.energy_j,
                              "power_w": p.power_w, "compute_energy_j": p.compute_energy_j,
                              "memory_energy_j": p.memory_energy_j,
                              "communication_energy_j": p.communication_energy_j,
                              "static_energy_j": p.static_energy_j},
                "error": self.errors}


@dataclass(frozen=True, kw_only=True)
class MetricError:
    """Errors of one metric over a group (fractions, not percent)."""

    mape: float
    median_error: float  # signed: + predicted higher than measured
    max_ape: float


@dataclass(frozen=True, kw_only=True)
class StepGroup:
    """Errors over one (GPU, weight dtype, phase) group; ``phase`` "all" for a file total."""

    gpu: str
    dtype: str
    phase: str
    n: int
    time: MetricError
    energy: MetricError
    power: MetricError

    def as_dict(self) -> dict[str, Any]:
        """The group's ``--json`` object."""
        return {"gpu": self.gpu, "dtype": self.dtype, "phase": self.phase, "n": self.n,
                **{m: vars(getattr(self, m)) for m in METRICS}}


@dataclass(frozen=True, kw_only=True)
class IdleCheck:
    """A file's measured idle power (a CUDA context held) and the calibrated static power."""

    path: str
    gpu: str
    measured_w: tuple[float, ...]
    static_power_w: float


@dataclass(frozen=True, kw_only=True)
class StepReport:
    """Everything ``energylens validate steps`` prints."""

    path: str
    calibration: str
    rows: tuple[StepRow, ...]
    groups: tuple[StepGroup, ...]  # (GPU, dtype, phase), worst energy MAPE first
    totals: tuple[StepGroup, ...]  # (GPU, dtype) over all phases, worst energy MAPE first
    idle: tuple[IdleCheck, ...]
    failed: int  # rows the script could not measure
    unpriced: dict[str, str]  # row -> why the model does not price it

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object (errors as fractions)."""
        return {"path": self.path, "calibration": self.calibration, "fitted": False,
                "failed_rows": self.failed, "unpriced": self.unpriced,
                "groups": [g.as_dict() for g in self.groups],
                "totals": [g.as_dict() for g in self.totals],
                "idle": [vars(i) for i in self.idle],
                "rows": [r.as_dict() for r in self.rows]}


@cache
def _model() -> ModelConfig:
    return get_model(MODEL)


def priceable_steps(file: StepFile, *, unpriced: dict[str, str]) -> list[StepTime]:
    """The file's steps of the model's depth; the others go to ``unpriced`` with why."""
    layers = _model().num_layers
    kept = []
    for step in file.steps:
        if step.layers is not None and step.layers != layers:
            unpriced[f"{file.path} row {step.row}"] = (
                f"{step.layers} layers; the model ({MODEL}) has {layers}")
        else:
            kept.append(step)
    return kept


def _kernel_runs(file: StepFile) -> list[KernelRun]:
    """The kernel run folders (``measure_kernels.py``) beside the steps file's folder."""
    runs: list[KernelRun] = []
    for folder in sorted(p for p in file.path.parent.parent.iterdir() if p.is_dir()):
        try:
            runs.append(load_kernel_run(path=folder))
        except MeasurementError:
            continue
    return runs


def script_fp8_ratio(*, file: StepFile, gpu: GPU) -> float | None:
    """The share of its FP8 peak a cuBLAS FP8 GEMM (``torch._scaled_mm``, what the script's
    FP8 linear layers run) reaches relative to BF16's of its own, measured by this project
    on the same GPU: the GEMM tables (``gemm.csv``) of the run folders beside the steps
    file's, median over the shapes timed in both dtypes with every dimension at least
    ``COMPUTE_BOUND_DIM`` (as ``calibrate`` reads the engines' tables); None without any.

    The shipped ratio describes an engine's FP8 linear layer (AIConfigurator's vLLM tables);
    the script is priced with the kernel it ran, as its other kernels are."""
    if "fp8" not in gpu.dense_flops_per_s or "bf16" not in gpu.dense_flops_per_s:
        return None
    peak_ratio = gpu.dense_flops_per_s["fp8"] / gpu.dense_flops_per_s["bf16"]
    ratios: list[float] = []
    for run in _kernel_runs(file):
        bf16 = {(g.m, g.n, g.k): g.time_s for g in run.gemm if g.dtype == "bf16"}
        ratios += [bf16[(g.m, g.n, g.k)] / g.time_s / peak_ratio for g in run.gemm
                   if g.dtype == "fp8" and min(g.m, g.n, g.k) >= COMPUTE_BOUND_DIM
                   and (g.m, g.n, g.k) in bf16]
    return float(np.median(ratios)) if ratios else None


def _sdpa_cycled_bytes(time: AttentionTime) -> float:
    """KV bytes one timing of a decode row cycles through: ``measure_kernels.py`` keeps
    max(1, min(8, 256 MB // one copy)) copies of the row's keys and values."""
    one = 2.0 * time.batch * time.heads_kv * time.kv_len * time.head_dim * 2.0  # bf16 K and V
    return max(1, min(_SDPA_COPIES, int(_SDPA_CYCLE_BYTES // one))) * one


def script_decode_attention(*, file: StepFile, gpu: GPU,
                            constants: KernelConstants) -> dict[str, float] | None:
    """``kv_bandwidth_efficiency`` and ``attention_tile_s`` of the kernel the script's decode
    steps run, PyTorch SDPA over a contiguous bf16 cache, fitted (``fit_kv_attention``, the
    form and fit the engines' paged kernels get from their tables) on this project's SDPA
    decode timings on the same GPU (``attention.csv`` of the run folders beside the steps
    file), the rows whose cycled KV copies exceed the GPU's L2 (the others stream from
    cache); None without any. ``constants``: the GPU's other kernel constants."""
    rows = [a for run in _kernel_runs(file) for a in run.attention
            if a.phase == "decode" and a.q_len == 1 and _sdpa_cycled_bytes(a) >= gpu.l2_bytes]
    if not rows:
        return None
    table = DecodeAttentionTable(
        path=file.path.parent.parent, gpu=gpu.name,
        batch=np.array([a.batch for a in rows], dtype=float),
        context=np.array([a.kv_len for a in rows], dtype=float),
        heads=np.array([a.heads_q for a in rows]), kv_heads=np.array([a.heads_kv for a in rows]),
        head_dim=np.array([a.head_dim for a in rows]),
        latency_s=np.array([a.time_s for a in rows]))
    return fit_kv_attention(table=table, constants=constants, leave_out=False).values


def file_calibration(*, file: StepFile, gpu: GPU, calibration: Calibration) -> Calibration:
    """``calibration`` as the file's steps are priced with, the kernels the script ran
    where this project timed them on the same GPU: an FP8 file's GEMMs at the measured
    cuBLAS ratio (:func:`script_fp8_ratio`), decode attention at SDPA's measured streaming
    (:func:`script_decode_attention`), the small kernels at PyTorch's measured speed
    (:mod:`energylens.validation.script_torch_ops`). The shipped constants describe an
    engine's kernels (vLLM's FP8 linear layer, its paged decode attention, fused norms)."""
    resolved = calibration_for_gpu(calibration, gpu)
    torch_ops = torch_ops_file(file.path)
    if torch_ops is not None:
        model = _model()
        resolved = resolved.with_kernel(gpu.name, **fit_torch_classes(
            path=torch_ops, gpu=gpu, constants=resolved.kernel(gpu.name),
            heads=model.num_heads, kv_heads=model.num_kv_heads))
    ratio = script_fp8_ratio(file=file, gpu=gpu) if file.weight_dtype == "fp8" else None
    if ratio is not None:
        resolved = resolved.with_kernel(gpu.name, fp8_gemm_efficiency_ratio=ratio)
    attention = script_decode_attention(file=file, gpu=gpu, constants=resolved.kernel(gpu.name))
    if attention is not None:
        resolved = resolved.with_kernel(gpu.name, **attention)
    return resolved


def steps_context(*, gpu: GPU, dtype: str, calibration: Calibration) -> StepContext:
    """The step context the rows of one (GPU, weight dtype) file are priced in: one GPU,
    ``dtype`` weights, a bf16 KV cache, the fusions the script ran (:data:`FUSIONS`)."""
    return step_context(model=_model(), gpu=gpu,
                        deployment=Deployment(tp=1, weight_dtype=dtype, kv_dtype="bf16",
                                              fusion=FUSIONS),
                        calibration=calibration_for_gpu(calibration, gpu))


def price_step(*, ctx: StepContext, phase: str, batch: int, tokens: int,
               context: int, prefill_tokens: int = 0) -> StepPrice:
    """The cost model's price of one engine-free step and the script's own extra kernels
    (see the module docstring). A mixed step is the decode group and one prompt of
    ``prefill_tokens`` (no cached prefix) in one pass, as continuous batching prices it."""
    if phase in ("decode", "mixed"):
        seqs = [SequenceGroup(sequences=float(batch), new_tokens=float(tokens),
                              context=float(context))]
    else:
        seqs = [SequenceGroup(sequences=float(batch), new_tokens=float(tokens),
                              context=float(context + tokens))]
    if phase == "mixed":
        seqs.append(SequenceGroup(sequences=1.0, new_tokens=float(prefill_tokens),
                                  context=float(prefill_tokens)))
    cost = step_cost(ctx=ctx, seqs=seqs)
    extra_s, extra_compute_j, extra_memory_j = script_overhead(
        ctx=ctx, tokens=batch * tokens + (prefill_tokens if phase == "mixed" else 0))
    latency = float(cost.latency_s) + extra_s
    return StepPrice(latency_s=latency,
                     compute_energy_j=float(cost.compute_energy_j) + extra_compute_j,
                     memory_energy_j=float(cost.memory_energy_j) + extra_memory_j,
                     communication_energy_j=float(cost.communication_energy_j),
                     static_energy_j=ctx.constants.static_power_w * latency)


def resolve_gpu(*, file: StepFile, gpu: str | None) -> GPU:
    """``--gpu``, else the board's name next to the file, else the folder's name."""
    if gpu is not None:
        return load_gpu(gpu)
    for name in (file.device_name, file.folder_gpu):
        if name:
            try:
                return load_gpu(name)
            except EnergyLensError:
                continue
    names = " or ".join(repr(n) for n in (file.device_name, file.folder_gpu) if n)
    raise MeasurementError(f"{file.path}: no GPU of the hardware database is named {names}; "
                           f"give one with --gpu")


def validate_steps(*, path: str | Path, gpu: str | None = None,
                   calibration: Calibration | str | Path | None = None) -> StepReport:
    """Price every decode and prefill row of the steps file(s) at ``path``."""
    files = load_step_files(path=path)
    cal = resolve_calibration(calibration)
    rows: list[StepRow] = []
    idle: list[IdleCheck] = []
    unpriced: dict[str, str] = {}
    for file in files:
        spec = resolve_gpu(file=file, gpu=gpu)
        ctx = steps_context(gpu=spec, dtype=file.weight_dtype,
                            calibration=file_calibration(file=file, gpu=spec, calibration=cal))
        idle.append(IdleCheck(path=str(file.path), gpu=spec.name, measured_w=file.idle_power_w,
                              static_power_w=ctx.constants.static_power_w))
        for step in priceable_steps(file, unpriced=unpriced):
            rows.append(priced_row(step=step, gpu=spec, ctx=ctx))
    return StepReport(path=str(path), calibration=cal.source, rows=tuple(rows),
                      groups=group_errors(rows=rows, by_phase=True),
                      totals=group_errors(rows=rows, by_phase=False), idle=tuple(idle),
                      failed=sum(f.failed for f in files), unpriced=unpriced)


def priced_row(*, step: StepTime, gpu: GPU, ctx: StepContext) -> StepRow:
    return StepRow(gpu=gpu.name, dtype=step.weight_dtype, phase=step.phase, batch=step.batch,
                   tokens=step.tokens, context=step.context, power_capped=step.power_capped,
                   sm_clock_mhz=step.sm_clock_mhz, measured_time_s=step.step_time_s,
                   measured_energy_j=step.energy_per_call_j, measured_power_w=step.power_w,
                   prefill_tokens=step.prefill_tokens,
                   predicted=price_step(ctx=ctx, phase=step.phase, batch=step.batch,
                                        tokens=step.tokens, context=step.context,
                                        prefill_tokens=step.prefill_tokens))


def _metric(errors: list[float]) -> MetricError:
    e = np.asarray(errors)
    return MetricError(mape=float(np.mean(np.abs(e))), median_error=float(np.median(e)),
                       max_ape=float(np.max(np.abs(e))))


def group_errors(*, rows: list[StepRow], by_phase: bool = True) -> tuple[StepGroup, ...]:
    """MAPE, median signed error and worst error of time, energy and power per (GPU, dtype,
    phase) (``by_phase`` False: per (GPU, dtype), phase "all"), worst energy MAPE first."""
    groups: dict[tuple[str, str, str], list[StepRow]] = defaultdict(list)
    for row in rows:
        groups[(row.gpu, row.dtype, row.phase if by_phase else "all")].append(row)
    out = [StepGroup(gpu=gpu, dtype=dtype, phase=phase, n=len(members),
                     time=_metric([r.errors["time"] for r in members]),
                     energy=_metric([r.errors["energy"] for r in members]),
                     power=_metric([r.errors["power"] for r in members]))
           for (gpu, dtype, phase), members in groups.items()]
    return tuple(sorted(out, key=lambda g: -g.energy.mape))
