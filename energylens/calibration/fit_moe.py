"""How close fused-MoE kernels come to HBM peak, per GPU and expert-weight precision, from
measured kernel tables.

AIConfigurator's vLLM tables (``kernels/<gpu>/moe/vllm/<v>/moe_perf.parquet``) time the MoE
op (router logits given: top-k, the grouped gate/up GEMM, the activation, the grouped down
GEMM, the weighted sum) at ``num_tokens`` tokens for one GPU's share of an expert layer
(``hidden_size``, ``inter_size`` over ``moe_tp_size``, ``num_experts`` over ``moe_ep_size``,
``topk``), per ``moe_dtype`` and per kernel vLLM can pick (``kernel_source``). Each row is
priced with the cost model's own MoE kernels (family ``moe``, fusion ``gate_up``) and the
GPU's fitted kernel constants; one constant per (GPU, precision) is fitted by least squares
on log latency:

* ``expert_bandwidth_efficiency``: BF16 experts (the HBM share of a large expert stream);
* ``fp8_expert_bandwidth_ratio``: FP8 experts (128x128-block scales), relative to BF16;
* ``fp4_expert_bandwidth_ratio``: 4-bit float experts (NVFP4, MXFP4), relative to BF16.

and, applied where it predicts its held-out rows better than ratio 1, on top of the BF16
share in use (:func:`fit_int4_ratio`): ``int4_expert_bandwidth_ratio``, weight-only INT4
experts (Kimi-K2.5's compressed-tensors W4A16), which vLLM runs through Marlin's fused MoE
on every GPU, Blackwell included, where it was written for Ampere and Hopper.

Rows used: gated experts (:data:`NON_GATED_SHAPES` left out), the ``balanced`` routing
(token i picks experts ik..ik+k-1 mod E, so a rank reads min(E/ep, T k/ep) experts; the
power-law rows need the draws of the collector), at most :data:`MAX_TOKENS` tokens (the
memory-bound decode regime the constant describes), whose expert weights are at least
:data:`L2_MULTIPLE` times the GPU's L2 (AIConfigurator repeats one op: smaller weights stay
in L2 and stream faster than any served layer's) and whose weights, read once by the
experts the balanced routing reaches, would not need more than the GPU's HBM peak in the
measured time (144-186 decode rows per GPU do, up to 1.7x the peak on H100 and H200 and
3.8x on L40S, all of shapes with 128-512 experts: DeepSeek-V3's in FP8, 512- and 128-expert
ones in BF16; the collector's routing there reaches fewer experts than its columns say),
timed through vLLM's Triton fused-MoE
kernels (:data:`KERNEL_FAMILY`; per shape the fastest of them): the GPU's kernel constants
describe the vLLM release of its serving fit (0.11 for ML.ENERGY), whose default MoE path is
Triton on every GPU. The Blackwell tables time only the FlashInfer (CUTLASS, TensorRT-LLM-gen)
kernels of vLLM 0.24, which 0.11 did not run for BF16 and block-FP8 experts by default: those
GPUs are not fitted here, and their FlashInfer kernels enter as TensorRT-LLM's reference in
``fit_runtime``.

``energylens calibrate`` reports these fits without applying them yet
(``energylens.calibration.tables.MOE_NOT_APPLIED`` says why).

Two more constants are fitted, and applied where they predict held-out rows better than
none (:func:`floor_helps`): ``expert_extra_overhead_s``, the fixed time an expert GEMM of a
fused MoE takes beyond a dense GEMM's (``kernel_overhead_s``: sorting the routed tokens into
per-expert tiles, the tile scheduler's pass over the experts), and
``fp8_expert_extra_overhead_s``, what block-scaled FP8 experts add on top (activations
quantised to 128-wide groups before each grouped GEMM, the scales' loads). They are what is
left at decode sizes (at most :data:`FLOOR_TOKENS` tokens, a few experts' tiles per rank)
once the weights are streamed: AIConfigurator's tables time the whole op at one token 14-19
us more than the model's dense-GEMM floors gave it on H100 and H200 (BF16 and FP8 alike),
and on Blackwell ~11 us more on the FP8 path alone, which sixty MoE layers turn into up to
a millisecond per decode step. Fitted in :data:`FLOOR_FIELDS` order on the rows of their
experts of every size (small ones too: the floor is what they time), the fastest kernel vLLM
can pick per shape (Triton on Hopper, FlashInfer on Blackwell); OpenAI's MXFP4 kernels
(gpt-oss alone) run a floor of their own, 45-55 us more per op on Hopper, and are left out.

Honesty: shapes are split in two halves by hidden size (alternate values); each half's fit
predicts the other half, and that held-out error is reported beside the in-sample one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.fit_custom_allreduce import table_gpu
from energylens.calibration.fitting import ErrorStats, FitResult, Param, fit_bounded
from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import ACTIVE_EXPERTS, DTYPE_BYTES, Size
from energylens.hardware import GPU, load_gpu
from energylens.model.families import family_part, parse_layer

#: AIConfigurator ``moe_dtype`` -> the cost model's expert weight dtype.
#: Per-tensor ``fp8`` rows are left out: on Hopper they time one path only (FlashInfer
#: CUTLASS), at 10-15 % of HBM peak where the block-scaled rows of the same shapes reach
#: 60-80 %; public FP8 MoE checkpoints (DeepSeek-V3/R1, Qwen3, GLM, MiniMax) use blocks.
TABLE_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "nvfp4",
                "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4", "int4_wo": "int4"}
#: Fitted constant -> the weight dtypes whose rows fit it (BF16 first: the ratios use it).
FIELDS = {"expert_bandwidth_efficiency": ("bf16",),
          "fp8_expert_bandwidth_ratio": ("fp8",),
          "fp4_expert_bandwidth_ratio": ("nvfp4", "mxfp4")}
#: Range of each fitted constant: a share of HBM peak cannot pass 1 (weights > L2), nor can
#: a ratio take the low-precision share past it.
BOUNDS = {"expert_bandwidth_efficiency": (0.2, 1.0),
          "fp8_expert_bandwidth_ratio": (0.1, 1.0), "fp4_expert_bandwidth_ratio": (0.1, 1.0),
          "int4_expert_bandwidth_ratio": (0.1, 1.0)}
#: The kernels the GPU's constants describe: vLLM's Triton fused MoE (``kernel_source``
#: ``..._triton_tritonexperts``, and OpenAI's Triton MXFP4 kernels for gpt-oss).
KERNEL_FAMILY = "triton"
#: The decode regime: at most this many tokens per op.
MAX_TOKENS = 128
#: Expert weights read at least this many times the L2 capacity.
L2_MULTIPLE = 4.0
#: Shapes of non-gated MoEs (two expert matrices, squared-ReLU: Nemotron 3), which the gated
#: ``moe`` family would price at 3/2 their bytes: AIConfigurator times exactly these with
#: TensorRT-LLM's non-gated kernel (``moe_torch_flow_nongated``); vLLM's table does not say.
NON_GATED_SHAPES = frozenset({(2048, 5120, 22, 512), (2688, 1856, 6, 128), (8192, 5120, 22, 512)})
#: The fixed time of an expert GEMM beyond a dense GEMM's (applied where it helps).
FLOOR_FIELD = "expert_extra_overhead_s"
#: The launch-bound regime it is fitted in: at most this many tokens per op.
FLOOR_TOKENS = 8
#: What block-scaled FP8 expert GEMMs add on top of it (Blackwell's FlashInfer FP8 path).
FP8_FLOOR_FIELD = "fp8_expert_extra_overhead_s"
#: Each floor, fitted in this order, and the expert formats whose rows fit it (one fused-MoE
#: path per format and GPU; OpenAI's MXFP4 kernels for gpt-oss alone, 3x the others' floor
#: on Hopper, are left out).
FLOOR_FIELDS = {FLOOR_FIELD: ("bf16", "fp8", "nvfp4"), FP8_FLOOR_FIELD: ("fp8",)}
#: The error of the rows at a floor of 0, reported beside the fit's.
WITHOUT_FLOOR = "latency_without_floor"
#: Weight-only INT4 experts: their ratio, the kernels that time them (vLLM's
#: compressed-tensors WNA16 path, Marlin's fused MoE, on every GPU of the tables), and the
#: error of their rows at ratio 1, reported beside the fit's.
INT4_FIELD = "int4_expert_bandwidth_ratio"
INT4_FAMILY = "marlin"
AT_RATIO_1 = "latency_at_ratio_1"
BOUNDS[FLOOR_FIELD] = BOUNDS[FP8_FLOOR_FIELD] = (0.0, 60.0e-6)
#: Kernels of the ``moe`` family the table's op does not run (router logits are its input).
NOT_TIMED = ("router", "res2")
_SHAPE = ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")


@dataclass(frozen=True)
class MoeCase:
    """One shape of one weight dtype: its token counts and fastest measured times."""

    hidden: int
    inter: int  # the whole layer's expert FFN width (split over moe_tp)
    top_k: int
    experts: int
    moe_tp: int
    ep: int
    weight_dtype: str
    tokens: np.ndarray
    measured_s: np.ndarray


@dataclass(frozen=True)
class MoeTable:
    """The usable rows of one GPU's vLLM MoE table."""

    path: Path
    gpu: str
    cases: tuple[MoeCase, ...]
    faster_than_hbm: int = 0  # rows left out: their weights would stream above HBM peak


@cache
def _expert_kernels(hidden: int, inter: int, experts: int, moe_tp: int,
                    ep: int) -> tuple[Kernel, ...]:
    layer = parse_layer(name="moe", parts=[family_part("moe")], norm="rmsnorm")
    compiled = compile_layer(layer=layer, sizes={"d": hidden, "f": inter, "x": experts},
                             degrees={"etp": moe_tp, "ep": ep}, fusion=frozenset({"gate_up"}))
    return tuple(k for k in compiled.kernels if k.name not in NOT_TIMED)


def active_experts(case: MoeCase) -> np.ndarray:
    """Experts one rank reads under balanced routing."""
    return np.minimum(case.experts / case.ep, case.tokens * case.top_k / case.ep)


def case_latency_s(*, case: MoeCase, gpu: GPU, constants: KernelConstants) -> np.ndarray:
    """Predicted time of the MoE op at each of ``case.tokens``."""
    tokens = case.tokens
    phase: dict[str, Size] = {"b": tokens, "m": 1.0, "n": 1.0, "p": 1.0,
                              "t": tokens * case.top_k / case.experts,
                              ACTIVE_EXPERTS: active_experts(case)}
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    total = np.zeros_like(tokens)
    for kernel in _expert_kernels(case.hidden, case.inter, case.experts, case.moe_tp, case.ep):
        total = total + kernel_cost(kernel=kernel, phase=phase, window=None, gpu=gpu,
                                    constants=constants, clock=clock,
                                    weight_dtype=case.weight_dtype).latency_s
    return total


def read_table(*, path: Path, max_tokens: int = MAX_TOKENS, family: str | None = KERNEL_FAMILY,
               l2_multiple: float = L2_MULTIPLE) -> MoeTable:
    """The balanced, larger-than-L2, no-faster-than-HBM Triton rows of ``path`` with at most
    ``max_tokens`` tokens (the default: the memory-bound decode rows the bandwidth fits use),
    the fastest kernel per shape; ``family`` None keeps every kernel, ``l2_multiple`` 0 every
    size (the floor fit's rows)."""
    import pandas as pd

    gpu = load_gpu(table_gpu(path))
    try:
        frame = pd.read_parquet(path, columns=["moe_dtype", "kernel_source", "num_tokens",
                                               "distribution", "latency", *_SHAPE])
    except (OSError, ValueError, KeyError) as exc:
        raise CalibrationDataError(f"{path}: not a MoE kernel table ({exc})") from None
    frame["weight_dtype"] = frame["moe_dtype"].astype(str).map(TABLE_DTYPES)
    frame = frame[(frame["distribution"] == "balanced") & frame["weight_dtype"].notna()
                  & (frame["kernel_source"].astype(str).str.contains(family) if family
                     else True)
                  & (frame["num_tokens"] <= max_tokens) & (frame["latency"] > 0)
                  & (frame["num_experts"] % frame["moe_ep_size"] == 0)
                  & (frame["inter_size"] % frame["moe_tp_size"] == 0)]
    active = np.minimum(frame["num_experts"] / frame["moe_ep_size"],
                        frame["num_tokens"] * frame["topk"] / frame["moe_ep_size"])
    weight_bytes = (active * 3 * frame["hidden_size"] * frame["inter_size"]
                    / frame["moe_tp_size"] * frame["weight_dtype"].map(DTYPE_BYTES).astype(float))
    possible = weight_bytes / (frame["latency"] * 1e-3) <= gpu.hbm_bandwidth_bytes_per_s
    faster_than_hbm = int((~possible & (weight_bytes >= l2_multiple * gpu.l2_bytes)).sum())
    frame = frame[(weight_bytes >= l2_multiple * gpu.l2_bytes) & possible]
    gated = np.array([(int(h), int(i), int(k), int(e)) not in NON_GATED_SHAPES for h, i, k, e in
                      zip(frame["hidden_size"], frame["inter_size"], frame["topk"],
                          frame["num_experts"], strict=True)], dtype=bool)
    frame = frame[gated]
    fastest = frame.groupby(["weight_dtype", *_SHAPE, "num_tokens"], as_index=False)[
        "latency"].min()
    cases = []
    for (dtype, *shape), rows in fastest.groupby(["weight_dtype", *_SHAPE]):
        hidden, inter, top_k, experts, moe_tp, ep = (int(v) for v in shape)
        cases.append(MoeCase(hidden=hidden, inter=inter, top_k=top_k, experts=experts,
                             moe_tp=moe_tp, ep=ep, weight_dtype=str(dtype),
                             tokens=rows["num_tokens"].to_numpy(dtype=float),
                             measured_s=rows["latency"].to_numpy(dtype=float) * 1e-3))
    return MoeTable(path=path, gpu=gpu.name, cases=tuple(cases), faster_than_hbm=faster_than_hbm)


def _param(name: str, constants: KernelConstants) -> Param:
    low, high = BOUNDS[name]
    if name.endswith("_ratio"):  # a ratio keeps the share it scales below 1
        high = high / constants.expert_bandwidth_efficiency
    return Param(name, min(max(float(getattr(constants, name)), low * 1.01), high * 0.99),
                 low, high)


def _fit_one(*, name: str, cases: list[MoeCase], gpu: GPU,
             constants: KernelConstants) -> tuple[dict[str, float], list[str]]:

    def residuals(values: dict[str, float]) -> np.ndarray:
        trial = replace(constants, **values)
        return np.concatenate([np.log(case_latency_s(case=c, gpu=gpu, constants=trial)
                                      / c.measured_s) for c in cases])

    values, _, at_bound = fit_bounded(params=[_param(name, constants)], residuals=residuals)
    return values, at_bound


def _fitted(*, name: str, cases: list[MoeCase], table: MoeTable, gpu: GPU,
            constants: KernelConstants, leave_out: bool, note: str,
            halves: tuple[list[MoeCase], list[MoeCase]] | None = None) -> FitResult:
    """``name`` fitted on ``cases``, with its error in sample and on each of two halves of
    them fitted on the other: ``halves``, else alternate hidden sizes where the cases span
    more than one."""
    values, at_bound = _fit_one(name=name, cases=cases, gpu=gpu, constants=constants)
    fitted_constants = replace(constants, **values)
    measured = np.concatenate([c.measured_s for c in cases])
    fitted = np.concatenate([case_latency_s(case=c, gpu=gpu, constants=fitted_constants)
                             for c in cases])
    result = FitResult(values=values,
                       rms_log_residual=float(np.sqrt(np.mean(np.log(fitted / measured)**2))),
                       in_sample={"latency": ErrorStats.of(fitted, measured)},
                       fitted_on=[str(table.path)], n_points=int(measured.size),
                       at_bound=at_bound, notes=[note])
    hiddens = sorted({c.hidden for c in cases})
    if halves is None and len(hiddens) > 1:
        first = set(hiddens[::2])
        halves = ([c for c in cases if c.hidden in first],
                  [c for c in cases if c.hidden not in first])
    if leave_out and halves is not None and all(halves):
        held = []
        for train, test in (halves, halves[::-1]):
            other, _ = _fit_one(name=name, cases=train, gpu=gpu, constants=constants)
            trial = replace(constants, **other)
            held += [(case_latency_s(case=c, gpu=gpu, constants=trial), c.measured_s)
                     for c in test]
        result.leave_out["latency"] = ErrorStats.of(np.concatenate([p for p, _ in held]),
                                                    np.concatenate([m for _, m in held]))
    return result


def fit_expert_floor(*, table: MoeTable, constants: KernelConstants, field: str = FLOOR_FIELD,
                     leave_out: bool = True) -> FitResult | None:
    """``field`` (a key of :data:`FLOOR_FIELDS`) on its experts' rows of ``table`` (read
    with ``max_tokens=FLOOR_TOKENS, family=None, l2_multiple=0``), on top of ``constants``;
    None without such rows."""
    cases = [c for c in table.cases if c.weight_dtype in FLOOR_FIELDS[field]]
    if not cases:
        return None
    gpu = load_gpu(table.gpu)
    dtypes = ", ".join(sorted({c.weight_dtype for c in cases}))
    result = _fitted(name=field, cases=cases, table=table, gpu=gpu,
                     constants=constants, leave_out=leave_out,
                     note=f"{len(cases)} shapes of {dtypes} experts at <= {FLOOR_TOKENS} tokens")
    result.in_sample[WITHOUT_FLOOR] = _error_at(cases=cases, gpu=gpu,
                                                constants=replace(constants, **{field: 0.0}))
    return result


def _error_at(*, cases: list[MoeCase], gpu: GPU, constants: KernelConstants) -> ErrorStats:
    """The error of ``cases`` priced with ``constants`` (a fit's baseline)."""
    return ErrorStats.of(
        np.concatenate([case_latency_s(case=c, gpu=gpu, constants=constants) for c in cases]),
        np.concatenate([c.measured_s for c in cases]))


def _beats(result: FitResult, baseline: str) -> bool:
    """Whether ``result`` predicts the rows it was not fitted on (in sample where none were
    held out) better than its ``baseline`` error."""
    held = result.leave_out.get("latency") or result.in_sample["latency"]
    return held.mape < result.in_sample[baseline].mape


def fit_int4_ratio(*, table: MoeTable, constants: KernelConstants,
                   leave_out: bool = True) -> FitResult | None:
    """:data:`INT4_FIELD` on the INT4 experts' rows of ``table`` (read with
    ``family=INT4_FAMILY``), on top of ``constants`` (the BF16 share in use); None without
    such rows."""
    cases = [c for c in table.cases if c.weight_dtype == "int4"]
    if not cases:
        return None
    gpu = load_gpu(table.gpu)
    # The tables time one INT4 shape (Kimi-K2's experts) split over tensor- or expert-
    # parallel ranks: where there is no second hidden size, each kind of split is
    # predicted from a fit on the other.
    halves = None if len({c.hidden for c in cases}) > 1 else (
        [c for c in cases if c.moe_tp > 1], [c for c in cases if c.moe_tp == 1])
    result = _fitted(name=INT4_FIELD, cases=cases, table=table, gpu=gpu, constants=constants,
                     leave_out=leave_out, halves=halves,
                     note=f"{len(cases)} shapes of weight-only INT4 experts (Marlin)")
    result.in_sample[AT_RATIO_1] = _error_at(cases=cases, gpu=gpu,
                                             constants=replace(constants, **{INT4_FIELD: 1.0}))
    return result


def int4_ratio_helps(result: FitResult) -> bool:
    """Whether the fitted ratio predicts the rows it was not fitted on (each hidden-size
    half, or each kind of split, from the other) better than the BF16 share alone (ratio
    1)."""
    return _beats(result, AT_RATIO_1)


def floor_helps(result: FitResult) -> bool:
    """Whether a fitted floor predicts the rows it was not fitted on (each hidden-size half
    from the other) better than no floor at all: where one number does not describe the
    GPU's MoE kernels (Blackwell's FP8 path pays 11 us per op more than its BF16 and NVFP4
    ones), it is reported, not applied."""
    return _beats(result, WITHOUT_FLOOR)


def fit_moe(*, table: MoeTable, constants: KernelConstants,
            leave_out: bool = True) -> dict[str, FitResult]:
    """Each constant of :data:`FIELDS` that ``table`` has rows for, fitted in order (the
    ratios on top of the fitted BF16 efficiency)."""
    gpu = load_gpu(table.gpu)
    results: dict[str, FitResult] = {}
    for name, dtypes in FIELDS.items():
        cases = [c for c in table.cases if c.weight_dtype in dtypes]
        if not cases or (name != "expert_bandwidth_efficiency"
                         and "expert_bandwidth_efficiency" not in results):
            continue
        result = _fitted(name=name, cases=cases, table=table, gpu=gpu, constants=constants,
                         leave_out=leave_out,
                         note=f"{len(cases)} shapes of {', '.join(dtypes)} experts")
        constants = replace(constants, **result.values)
        results[name] = result
    return results
