"""What pricing one kernel reads that no step changes: built once per kernel and setting.

:func:`energylens.cost.roofline.kernel_cost` runs for every kernel of every layer group of
every step a prediction prices; its ops' compute dtypes, peak rates, energy scales, fusion
merge keys, launch floor, bandwidth class and weight bytes depend only on the compiled
kernel, the GPU, its constants and the dtypes, so they are looked up here once instead of
on every call. The numbers are the same ones the per-call code computed (same functions,
same operands): a plan changes how often they are computed, never their value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import Kernel
from energylens.cost.work import (
    ACTIVATION_QUANTISED_DTYPES,
    ACTIVE_EXPERTS,
    COMPUTE_DTYPE,
    KV_TENSORS,
    GemmRanks,
    activation_element_bytes,
    compute_dtype,
    gemm_ranks,
    grouped_expert,
    tensor_bytes,
    weight_dtype_of,
)
from energylens.hardware import GPU
from energylens.model.spec import STATE_TENSORS, Einsum, TensorRef

#: Function of a small memory-bound kernel's ops -> its class; the first op that names a
#: class decides (a fused add + norm is a norm kernel).
VECTOR_CLASSES: dict[str, str] = {"rmsnorm": "norm", "layernorm": "norm", "rope": "rope",
                                  "silu_mul": "activation", "gelu": "activation"}
#: Class of every other kernel without a contraction (adds, copies, routing gathers).
ELEMENTWISE = "elementwise"
#: The caches an attention's score and value contractions read, fused or not (the DSA
#: indexer's keys ``IC`` are read by a kernel of its own, priced as a GEMM).
ATTENTION_CACHES = tuple(name for name in KV_TENSORS if name != "IC")


def vector_class(kernel: Kernel) -> str | None:
    """Class of a kernel without a contraction (None for GEMM and attention kernels)."""
    if any(op.kind == "contraction" for op in kernel.ops):
        return None
    return next((VECTOR_CLASSES[op.function] for op in kernel.ops
                 if op.function in VECTOR_CLASSES), ELEMENTWISE)


def launch_floor_s(*, kernel: Kernel, constants: KernelConstants,
                   weight_dtype: str | None = None) -> float:
    """Fixed time of ``kernel``: its class's floor for small memory-bound kernels, a GEMM's
    for contractions, and more for a fused MoE's expert GEMMs (more again with block-scaled
    FP8 experts, ``weight_dtype`` fp8)."""
    klass = vector_class(kernel)
    if klass is not None:
        return float(getattr(constants, f"{klass}_overhead_s"))
    if kernel.is_expert:
        fp8 = constants.fp8_expert_extra_overhead_s if weight_dtype == "fp8" else 0.0
        return constants.kernel_overhead_s + constants.expert_extra_overhead_s + fp8
    return constants.kernel_overhead_s


def quantised_activation_dtype(*, weight_dtype: str, gpu: GPU) -> str | None:
    """The dtype ``weight_dtype``'s linear layers quantise their activations to on ``gpu``
    (W8A8 FP8/INT8, W4A4 NVFP4 where the GPU has that tensor-core rate), or None where they
    read 16-bit activations (weight-only formats, and FP8/FP4 dequantised on GPUs without
    those units)."""
    if weight_dtype not in ACTIVATION_QUANTISED_DTYPES:
        return None
    compute = COMPUTE_DTYPE.get(weight_dtype, weight_dtype)
    return weight_dtype if compute in gpu.dense_flops_per_s else None


def flop_energy_scale(*, dtype: str, gpu: GPU) -> float:
    """Energy of a ``dtype`` tensor FLOP relative to a BF16 one: the datasheet's BF16 rate
    over the ``dtype`` rate (FP8 and INT8 run at twice the BF16 rate, FP4 at four times,
    within the same board power, so each FLOP takes that much less energy; assumed
    proportional). 1 where the GPU has no native ``dtype`` rate (the GEMM runs in BF16)."""
    return gpu.peak_flops_per_s("bf16") / gpu.peak_flops_per_s(dtype)


def precision_efficiency_ratio(*, dtype: str, gpu: GPU, constants: KernelConstants) -> float:
    """How much less of its peak a ``dtype`` GEMM reaches than a BF16 GEMM of the BF16
    peak (1 for 16-bit GEMMs and where the GPU has no native ``dtype`` rate)."""
    if dtype not in gpu.dense_flops_per_s:
        return 1.0
    return {"fp8": constants.fp8_gemm_efficiency_ratio,
            "fp4": constants.fp4_gemm_efficiency_ratio}.get(dtype, 1.0)


def expert_bandwidth_efficiency(*, weight_dtype: str, constants: KernelConstants) -> float:
    """The HBM share of fused-MoE kernels whose experts are stored in ``weight_dtype``."""
    ratio = {"fp8": constants.fp8_expert_bandwidth_ratio,
             "nvfp4": constants.fp4_expert_bandwidth_ratio,
             "mxfp4": constants.fp4_expert_bandwidth_ratio,
             "int4": constants.int4_expert_bandwidth_ratio}.get(weight_dtype, 1.0)
    return constants.expert_bandwidth_efficiency * ratio


@dataclass(frozen=True, kw_only=True)
class OpPlan:
    """One op of a kernel: a contraction's compute dtype, its peak, FLOP-energy scale and
    precision ratio, and the key under which horizontally fused GEMMs merge."""

    op: Einsum
    local: dict[str, int]
    contraction: bool
    dtype: str = "bf16"
    peak_flops_per_s: float = 0.0
    energy_scale: float = 1.0
    precision_ratio: float = 1.0
    merge_key: tuple[str, tuple[str, ...]] = ("", ())
    grouped_expert: bool = False  # reads the expert rank: a grouped expert GEMM
    gemm: GemmRanks | None = None


@dataclass(frozen=True, kw_only=True)
class TensorPlan:
    """An external read or write; ``fixed_bytes``: the bytes of a weight that reads no
    phase rank (None for every other tensor, priced per call); ``element_bytes``: bytes
    per element of an activation whose bytes are its ranks' product (None for weights, a
    KV cache clipped to a window, and a recurrent state, whose dtype comes with its sizes)."""

    tensor: TensorRef
    sizes: dict[str, int]
    cache: bool  # a persistent output appended to the KV cache
    ranks: frozenset[str]
    expert_weight: bool  # a grouped expert GEMM's weight (only x_active experts read)
    fixed_bytes: float | None
    element_bytes: float | None


@dataclass(frozen=True, kw_only=True)
class KernelPlan:
    """Everything about pricing ``kernel`` that no phase size changes."""

    ops: tuple[OpPlan, ...]
    tensors: tuple[TensorPlan, ...]
    fused_attention: bool
    #: Reads the paged KV cache (a fused attention, or an unfused one's score or value
    #: contraction): its bytes stream at the KV cache's own share of HBM peak.
    reads_kv_cache: bool
    vector_rate: float  # fp32 peak x vector efficiency, FLOP/s
    klass: str | None
    klass_bandwidth_efficiency: float
    floor_s: float
    floor_sharpness: float  # 1: the floor adds to the rest (GEMMs, attention)
    expert_bandwidth_efficiency: float  # HBM share of the experts' dtype (expert kernels)
    #: The work tiles of a kernel that reads the KV cache: the cached keys' ranks that are
    #: neither the context nor contracted (GQA ``KC[b,p,g,e]``: b, g; MLA ``LC[b,p,l]``:
    #: b), and the local sizes of those no phase sets. Empty for every other kernel.
    tile_ranks: tuple[str, ...] = ()
    tile_sizes: dict[str, int] = field(default_factory=dict)


def _op_plan(*, op: Einsum, local: dict[str, int], gpu: GPU, constants: KernelConstants,
             weight_dtype: str, kv_dtype: str) -> OpPlan:
    if op.kind != "contraction":
        return OpPlan(op=op, local=local, contraction=False)
    weight = next((t for t in op.inputs if t.name.startswith("W")), None)
    dtype = "bf16" if weight is None else weight_dtype_of(weight, weight_dtype)
    if weight is None and op.causal and _kv_mma(gpu=gpu, constants=constants, kv_dtype=kv_dtype):
        dtype = kv_dtype
    dtype = compute_dtype(dtype)
    return OpPlan(op=op, local=local, contraction=True, dtype=dtype,
                  peak_flops_per_s=gpu.peak_flops_per_s(dtype),
                  energy_scale=flop_energy_scale(dtype=dtype, gpu=gpu),
                  precision_ratio=precision_efficiency_ratio(dtype=dtype, gpu=gpu,
                                                             constants=constants),
                  merge_key=((op.inputs[0].name, op.contracted_ranks) if weight is not None
                             else (op.name, ())),
                  grouped_expert=grouped_expert(op), gemm=gemm_ranks(op))


def _kv_mma(*, gpu: GPU, constants: KernelConstants, kv_dtype: str) -> bool:
    """Whether a context contraction's MMAs run in the KV cache's dtype on ``gpu``
    (``attention_kv_mma_from_cc``; only a narrower dtype the GPU has a rate for)."""
    return (bool(constants.attention_kv_mma_from_cc) and kv_dtype not in ("bf16", "fp16")
            and kv_dtype in gpu.dense_flops_per_s
            and (gpu.compute_capability or 0.0) >= constants.attention_kv_mma_from_cc)


def _tensor_plan(*, kernel: Kernel, tensor: TensorRef, appended: set[str], weight_dtype: str,
                 kv_dtype: str, window: float | None) -> TensorPlan:
    sizes = kernel.io_sizes[tensor.name]
    cache = tensor.name in appended
    fixed = element = None
    if tensor.name.startswith("W"):  # a weight's bytes read only its own ranks' sizes
        fixed = float(tensor_bytes(tensor=tensor, sizes=dict(sizes), weight_dtype=weight_dtype,
                                   window=window, kv_dtype=kv_dtype, cache=cache))
    elif not (tensor.name in KV_TENSORS and window is not None or tensor.name in STATE_TENSORS):
        element = activation_element_bytes(tensor=tensor, kv_dtype=kv_dtype, cache=cache)
    expert_weight = tensor.name.startswith("W") and any(
        grouped_expert(op) and tensor in op.inputs for op in kernel.ops)
    return TensorPlan(tensor=tensor, sizes=sizes, cache=cache, ranks=frozenset(tensor.ranks),
                      expert_weight=expert_weight, fixed_bytes=fixed, element_bytes=element)


def _attention_tiles(kernel: Kernel, *,
                     fused: bool) -> tuple[tuple[str, ...], dict[str, int]]:
    """The work-tile ranks of an attention kernel that reads the KV cache (``fused``, or an
    unfused one's score or value contraction, which walks the same tiles) and their local
    sizes (see :class:`KernelPlan`); ``((), {})`` for any other kernel. A fused kernel's
    keys may be a prompt's own (MLA's decompressed ``KD``), an unfused one's are cached."""
    for op, local in zip(kernel.ops, kernel.op_sizes, strict=True):
        if not op.causal or op.kind != "contraction":
            continue
        context = op.causal[1]
        cache = next((t for t in op.inputs
                      if context in t.ranks and (fused or t.name in ATTENTION_CACHES)), None)
        if cache is not None:  # a tile: the cache's ranks the other operand shares too,
            # neither the context nor contracted (the value contraction's head dim is not)
            shared = {r for t in op.inputs if t is not cache for r in t.ranks}
            ranks = tuple(r for r in cache.ranks if r != context
                          and r not in op.contracted_ranks and r in shared)
            return ranks, {r: local[r] for r in ranks if r in local}
    return (), {}


def build_plan(*, kernel: Kernel, gpu: GPU, constants: KernelConstants, weight_dtype: str,
               kv_dtype: str, window: float | None) -> KernelPlan:
    """The plan of ``kernel`` on ``gpu`` (uncached: see :func:`kernel_plan`)."""
    # appended to the KV cache (in its dtype); a recurrent state (no token rank) is not
    appended = {op.output.name for op in kernel.ops
                if op.persistent_output and "m" in op.output.ranks}
    klass = vector_class(kernel)
    fused = sum(1 for op in kernel.ops if op.causal) > 1  # score, softmax and value
    tile_ranks, tile_sizes = _attention_tiles(kernel, fused=fused)
    return KernelPlan(
        ops=tuple(_op_plan(op=op, local=local, gpu=gpu, constants=constants,
                           weight_dtype=weight_dtype, kv_dtype=kv_dtype)
                  for op, local in zip(kernel.ops, kernel.op_sizes, strict=True)),
        tensors=tuple(_tensor_plan(kernel=kernel, tensor=t, appended=appended,
                                   weight_dtype=weight_dtype, kv_dtype=kv_dtype, window=window)
                      for t in (*kernel.reads, *kernel.writes)),
        fused_attention=fused,
        reads_kv_cache=any(op.causal and op.kind == "contraction"
                           and any(t.name in ATTENTION_CACHES for t in op.inputs)
                           for op in kernel.ops),
        vector_rate=gpu.peak_flops_per_s("fp32") * constants.vector_efficiency,
        klass=klass,
        klass_bandwidth_efficiency=(0.0 if klass is None else
                                    float(getattr(constants, f"{klass}_bandwidth_efficiency"))),
        floor_s=launch_floor_s(kernel=kernel, constants=constants, weight_dtype=weight_dtype),
        floor_sharpness=(1.0 if klass is None else
                         float(getattr(constants, f"{klass}_floor_sharpness"))),
        expert_bandwidth_efficiency=expert_bandwidth_efficiency(
            weight_dtype=weight_dtype, constants=constants),
        tile_ranks=tile_ranks, tile_sizes=tile_sizes,
    )


def weight_bytes_fixed(plan: TensorPlan, phase: Mapping[str, object]) -> bool:
    """Whether ``plan.fixed_bytes`` holds under ``phase``: no phase size replaces one of
    the weight's ranks, and no active-expert count replaces its expert rank."""
    return plan.fixed_bytes is not None and plan.ranks.isdisjoint(phase) and not (
        plan.expert_weight and ACTIVE_EXPERTS in phase)


_PlanKey = tuple[int, int, int, str, str, float | None]
#: Plans by identity of (kernel, GPU, constants) and the dtypes and window; the objects are
#: kept beside the plan so that a recycled id never returns another kernel's plan.
_PLANS: dict[_PlanKey, tuple[Kernel, GPU, KernelConstants, KernelPlan]] = {}
_PLANS_LIMIT = 65536


def kernel_plan(*, kernel: Kernel, gpu: GPU, constants: KernelConstants, weight_dtype: str,
                kv_dtype: str, window: float | None) -> KernelPlan:
    """The plan of ``kernel`` on ``gpu`` with ``constants`` (built once, then cached)."""
    key = (id(kernel), id(gpu), id(constants), weight_dtype, kv_dtype, window)
    found = _PLANS.get(key)
    if found is not None and found[0] is kernel and found[1] is gpu and found[2] is constants:
        return found[3]
    plan = build_plan(kernel=kernel, gpu=gpu, constants=constants, weight_dtype=weight_dtype,
                      kv_dtype=kv_dtype, window=window)
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[key] = (kernel, gpu, constants, plan)
    return plan
