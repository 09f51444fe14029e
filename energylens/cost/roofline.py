"""Latency and dynamic energy of one kernel: a roofline with fitted efficiency curves.

compute time = tensor FLOPs / (peak(dtype) x f/f_boost x eff_gemm)
             + vector FLOPs / (fp32 peak x f/f_boost x eff_vector)
memory time  = external bytes / (HBM peak x eff_mem(bytes)), barely clock dependent
               (fused attention reading the paged KV cache, grouped expert GEMMs and each
               class of small memory-bound kernel reach their own fractions of HBM peak)
latency      = (compute^q + memory^q)^(1/q) + launch floor   (q: roofline sharpness; the
               floor is the kernel overhead, or its class's floor for a small kernel,
               which joins the rest as a p-norm with the class's own p: its stream can
               hide under its fixed latency)
dynamic energy = e_flop x FLOPs x v(f)^2 + e_byte x bytes
                 + busy power x v(f)^2 f x (latency - kernel overhead)
A kernel whose power would exceed the board limit runs at the highest clock that keeps it
under the limit (and is stretched if even the minimum clock does not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from energylens.cost.constants import KernelConstants
from energylens.cost.kernel_plan import (
    ELEMENTWISE,
    VECTOR_CLASSES,
    KernelPlan,
    flop_energy_scale,
    kernel_plan,
    launch_floor_s,
    precision_efficiency_ratio,
    vector_class,
    weight_bytes_fixed,
)
from energylens.cost.kernels import Kernel
from energylens.cost.work import (
    ACTIVE_EXPERTS,
    GemmRanks,
    GemmShape,
    Size,
    gemm_shape,
    op_flops,
    pair_factor,
    rank_product,
    tensor_bytes,
)
from energylens.hardware import GPU

__all__ = ["ELEMENTWISE", "VECTOR_CLASSES", "ClockState", "KernelCost", "attention_efficiency",
           "dynamic_scale_at", "flop_energy_scale", "gemm_efficiency", "kernel_cost",
           "launch_floor_s", "memory_efficiency", "precision_efficiency_ratio", "vector_class"]

TILE = 128.0  # output tile edge used for wave quantisation


@dataclass(frozen=True, kw_only=True)
class ClockState:
    """GPU core clock relative to boost, and the dynamic-power scale it implies."""

    ratio: float  # f / f_boost
    dynamic_scale: float  # (V(f)/V(f_boost))^2

    @classmethod
    def at(cls, *, gpu: GPU, freq_mhz: float | None, constants: KernelConstants) -> ClockState:
        """Clock state at ``freq_mhz`` (boost clock when None)."""
        ratio = 1.0 if freq_mhz is None else freq_mhz / gpu.boost_clock_mhz
        return cls(ratio=ratio, dynamic_scale=float(
            dynamic_scale_at(ratio=ratio, gpu=gpu, constants=constants)))


def dynamic_scale_at(*, ratio: Size, gpu: GPU, constants: KernelConstants) -> Size:
    """(V(f)/V(f_boost))^2 at clock ratio f/f_boost: the voltage rises linearly from its
    floor at the minimum clock to 1 at boost."""
    floor = constants.voltage_floor
    low = gpu.min_clock_mhz / gpu.boost_clock_mhz
    voltage = floor + (1.0 - floor) * np.maximum(ratio - low, 0.0) / (1.0 - low)
    return voltage**2


@dataclass(frozen=True, kw_only=True)
class _Work:
    """A kernel's clock-independent parts: times at the boost clock (compute scales as
    1/f, memory barely), FLOP energy at boost voltage, byte energy, launch floor."""

    compute_s: Size
    memory_s: Size
    flop_energy_j: Size
    byte_energy_j: Size
    floor_s: float
    floor_sharpness: float


@dataclass(frozen=True, kw_only=True)
class _Clocked:
    """A kernel run at one clock ratio."""

    compute_s: Size
    memory_s: Size
    latency_s: Size
    dynamic_scale: Size
    busy_w: Size
    power_w: Size  # board power, static included, if nothing stretched the kernel


#: Bisection steps locating the clock at which a kernel meets the board power limit
#: (2^-16 of the clock range: far below any clock a GPU can set).
THROTTLE_STEPS = 16


def _at_clock(*, work: _Work, ratio: Size, gpu: GPU, constants: KernelConstants) -> _Clocked:
    if _scalar(work.compute_s, work.memory_s, work.flop_energy_j, work.byte_energy_j, ratio):
        parts = _at_clock_scalar(compute_s=cast(float, work.compute_s),
                                 memory_s=cast(float, work.memory_s),
                                 flop_energy_j=cast(float, work.flop_energy_j),
                                 byte_energy_j=cast(float, work.byte_energy_j),
                                 floor_s=work.floor_s, floor_sharpness=work.floor_sharpness,
                                 ratio=cast(float, ratio), gpu=gpu, constants=constants)
        return _Clocked(compute_s=parts[0], memory_s=parts[1], latency_s=parts[2],
                        dynamic_scale=parts[3], busy_w=parts[4], power_w=parts[5])
    compute_s = work.compute_s / ratio
    memory_s = work.memory_s * (1.0 + constants.memory_clock_sensitivity * (1.0 / ratio - 1.0))
    q = constants.roofline_sharpness
    bound = np.maximum(compute_s, memory_s)
    share = np.minimum(compute_s, memory_s) / np.maximum(bound, 1e-30)
    latency = _with_floor(bound * (1.0 + share**q) ** (1.0 / q),  # p-norm, no underflow
                          floor_s=work.floor_s, p=work.floor_sharpness)
    scale = dynamic_scale_at(ratio=ratio, gpu=gpu, constants=constants)
    busy_w = constants.busy_power_w * ratio * scale
    power = (constants.static_power_w + busy_w * (latency - work.floor_s) / latency
             + (work.flop_energy_j * scale + work.byte_energy_j) / latency)
    return _Clocked(compute_s=compute_s, memory_s=memory_s, latency_s=latency,
                    dynamic_scale=scale, busy_w=busy_w, power_w=power)


def _with_floor(run_s: Size, *, floor_s: float, p: float) -> Size:
    """A kernel's time from its compute/memory time and its launch floor: their p-norm
    (p = 1: the sum, as for every kernel but the small classes that fit another p)."""
    if p == 1.0:
        return run_s + floor_s
    return (run_s**p + floor_s**p) ** (1.0 / p)


def _scalar(*values: Size) -> bool:
    """Whether every value is a number (no array): the one-kernel path of a ``predict``."""
    for v in values:  # noqa: SIM110 - a plain loop: no generator frame per call
        if isinstance(v, np.ndarray):
            return False
    return True


def _ceil(x: Size) -> Size:
    """``np.ceil`` of a number, as a float, without numpy's scalar call."""
    return float(math.ceil(x)) if math.isfinite(x) else x


def _at_clock_scalar(*, compute_s: float, memory_s: float, flop_energy_j: float,
                     byte_energy_j: float, floor_s: float, floor_sharpness: float,
                     ratio: float, gpu: GPU,
                     constants: KernelConstants,
                     ) -> tuple[float, float, float, float, float, float]:
    """:func:`_at_clock` for numbers: the same operations in the same order, on Python
    floats (numpy's scalar ufunc calls cost more than the arithmetic). Returns (compute s,
    memory s, latency s, dynamic scale, busy W, power W)."""
    compute_s = compute_s / ratio
    memory_s = memory_s * (1.0 + constants.memory_clock_sensitivity * (1.0 / ratio - 1.0))
    q = constants.roofline_sharpness
    bound = max(compute_s, memory_s)
    share = min(compute_s, memory_s) / max(bound, 1e-30)
    latency = cast(float, _with_floor(bound * (1.0 + share**q) ** (1.0 / q), floor_s=floor_s,
                                      p=floor_sharpness))
    floor = constants.voltage_floor
    low = gpu.min_clock_mhz / gpu.boost_clock_mhz
    scale = (floor + (1.0 - floor) * max(ratio - low, 0.0) / (1.0 - low)) ** 2
    busy_w = constants.busy_power_w * ratio * scale
    power = (constants.static_power_w + busy_w * (latency - floor_s) / latency
             + (flop_energy_j * scale + byte_energy_j) / latency)
    return compute_s, memory_s, latency, scale, busy_w, power


def _throttled(*, work: _Work, clock: ClockState, gpu: GPU,
               constants: KernelConstants) -> _Clocked:
    """The kernel at the requested clock, or, where that would draw more than the board
    limit, at the highest clock that does not (the GPU's power management lowers the clock;
    power rises with the clock, so bisection finds it). Where even the minimum clock draws
    too much, the kernel is also stretched until its power fits. The throttle clock does
    not depend on the requested one, so a higher requested clock is never slower."""
    requested = _at_clock(work=work, ratio=clock.ratio, gpu=gpu, constants=constants)
    over = requested.power_w > gpu.tdp_w
    if not (over.any() if isinstance(over, np.ndarray) else over):
        return requested
    low = np.full_like(np.asarray(requested.power_w, dtype=float),
                       gpu.min_clock_mhz / gpu.boost_clock_mhz)
    high = np.ones_like(low)
    for _ in range(THROTTLE_STEPS):
        middle = (low + high) / 2.0
        fits = _at_clock(work=work, ratio=middle, gpu=gpu, constants=constants).power_w <= gpu.tdp_w
        low, high = np.where(fits, middle, low), np.where(fits, high, middle)
    ratio = np.where(over, np.minimum(low, clock.ratio), clock.ratio)
    run = _at_clock(work=work, ratio=ratio, gpu=gpu, constants=constants)
    # Still over the limit at the minimum clock: stretch until
    # (flop + byte + busy_w (t - floor)) / t + static <= TDP.
    headroom_w = np.maximum(gpu.tdp_w - constants.static_power_w - run.busy_w, 1.0)
    stretched = (work.flop_energy_j * run.dynamic_scale + work.byte_energy_j
                 - run.busy_w * work.floor_s) / headroom_w
    latency = np.maximum(run.latency_s, stretched)
    if np.ndim(requested.power_w) == 0:
        return _Clocked(compute_s=float(run.compute_s), memory_s=float(run.memory_s),
                        latency_s=float(latency), dynamic_scale=float(run.dynamic_scale),
                        busy_w=float(run.busy_w), power_w=float(run.power_w))
    return _Clocked(compute_s=run.compute_s, memory_s=run.memory_s, latency_s=latency,
                    dynamic_scale=run.dynamic_scale, busy_w=run.busy_w, power_w=run.power_w)


@dataclass(frozen=True, kw_only=True)
class KernelCost:
    """Latency and dynamic energy of one kernel (arrays over the phase's context points)."""

    latency_s: Size
    compute_s: Size
    memory_s: Size
    compute_energy_j: Size  # FLOP energy + busy power while compute-bound
    memory_energy_j: Size  # byte energy + busy power while memory-bound
    flops: Size
    bytes: Size


def gemm_efficiency(*, m: Size, n: Size, k: Size, batch: Size, gpu: GPU,
                    constants: KernelConstants) -> Size:
    """Fraction of dense peak for an (M x K) @ (K x N) GEMM batch: waves, K ramp, small M."""
    ceil = _ceil if _scalar(m, n, batch) else np.ceil
    tiles = ceil(m / TILE) * ceil(n / TILE) * batch
    waves = ceil(tiles / gpu.sm_count)
    wave_eff = tiles / (waves * gpu.sm_count)
    return (constants.gemm_efficiency_max * wave_eff**constants.wave_exponent
            * k / (k + constants.gemm_k_half) * m / (m + constants.gemm_m_half))


def attention_efficiency(*, rows: Size, queries: Size, keys: Size, window: float | None,
                         constants: KernelConstants) -> Size:
    """Fraction of dense peak of fused causal attention's tensor FLOPs. ``rows``, the GEMM
    rows of ``qk`` and ``av`` (new tokens per sequence x query heads per KV head, m x r),
    fill tensor-core tiles as a GEMM's rows do (``gemm_m_half``). With ``attention_m_half``
    set, a prefill (``queries``, m > 1) also amortises its per-tile prologue, softmax
    rescaling and causal diagonal over the keys its query rows see: X / (X +
    attention_m_half), X = r x ``keys`` (p, clipped to the window), which is m x r for a
    prompt without cached prefix. Decode (m = 1) runs a split-KV kernel whose fixed work
    per tile is ``attention_tile_s``: no ramp."""
    if constants.attention_row_tile:  # rows padded to whole tiles (MLA decode)
        tiles = _ceil(rows / constants.attention_row_tile) if _scalar(rows) \
            else np.ceil(rows / constants.attention_row_tile)
        return constants.attention_efficiency_max * rows / (tiles * constants.attention_row_tile)
    eff = constants.attention_efficiency_max * rows / (rows + constants.gemm_m_half)
    if not constants.attention_m_half:
        return eff
    if _scalar(rows, queries, keys):
        if queries <= 1.0:
            return eff
        if window is not None:
            keys = min(keys, window)
    elif window is not None:
        keys = np.minimum(keys, window)
    packed = rows * keys / queries
    ramp = packed / (packed + constants.attention_m_half)
    return eff * (ramp if _scalar(ramp) else np.where(np.asarray(queries) > 1.0, ramp, 1.0))


def memory_efficiency(*, nbytes: Size, constants: KernelConstants) -> Size:
    """Fraction of HBM peak reached when streaming ``nbytes``."""
    return constants.memory_efficiency_max * nbytes / (nbytes + constants.memory_half_bytes)


def kernel_cost(*, kernel: Kernel, phase: dict[str, Size], window: float | None, gpu: GPU,
                constants: KernelConstants, clock: ClockState, weight_dtype: str,
                kv_dtype: str = "bf16",
                compute_slowdown: Size = 1.0) -> KernelCost:
    """Price one kernel. ``compute_slowdown`` > 1 when overlapped communication holds SMs."""
    plan = kernel_plan(kernel=kernel, gpu=gpu, constants=constants, weight_dtype=weight_dtype,
                       kv_dtype=kv_dtype, window=window)
    if _scalar(compute_slowdown, clock.ratio, *phase.values()):
        return _scalar_kernel_cost(plan=plan, kernel=kernel, phase=phase, window=window,
                                   gpu=gpu, constants=constants, clock=clock,
                                   weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                   compute_slowdown=compute_slowdown)
    tensor_time: Size = 0.0
    vector_time: Size = 0.0
    tensor_flops: Size = 0.0
    tensor_energy_flops: Size = 0.0  # in BF16-FLOP equivalents (flop_energy_scale)
    vector_flops: Size = 0.0
    # Horizontally fused GEMMs (q+k+v, gate+up) run as ONE GEMM: contractions of a kernel
    # that read the same activation over the same reduction ranks share rows and K, and
    # their columns concatenate (wave quantisation and efficiency of the merged shape).
    merged: dict[tuple[str, tuple[str, ...]], list] = {}
    for item in plan.ops:
        op = item.op
        sizes = {**item.local, **phase}
        flops = op_flops(op=op, sizes=sizes, window=window)
        if not item.contraction:
            vector_flops = vector_flops + flops
            vector_time = vector_time + flops / plan.vector_rate
            continue
        shape = gemm_shape(op=op, sizes=sizes, window=window, ranks=item.gemm)
        tensor_flops = tensor_flops + flops
        tensor_energy_flops = tensor_energy_flops + flops * item.energy_scale
        if (plan.fused_attention or plan.reads_kv_cache) and op.causal:
            # the cache's MMAs on the same query rows, fused or not
            eff = attention_efficiency(rows=shape.m, queries=sizes[op.causal[0]],
                                       keys=sizes[op.causal[1]], window=window,
                                       constants=constants)
            tensor_time = tensor_time + flops / (item.peak_flops_per_s * eff)
            continue
        if item.grouped_expert and ACTIVE_EXPERTS in sizes:
            # Grouped expert GEMM: only experts that received tokens run (fused MoE kernels
            # skip empty experts), each with its share of the tokens as rows.
            active = np.maximum(np.minimum(sizes[ACTIVE_EXPERTS], shape.batch), 1e-9)
            shape = GemmShape(m=shape.m * shape.batch / active, n=shape.n, k=shape.k, batch=active)
        entry = merged.setdefault(item.merge_key, [item, shape, 0.0])
        if entry[1] is not shape:
            entry[1] = GemmShape(m=shape.m, n=entry[1].n + shape.n, k=shape.k, batch=shape.batch)
        entry[2] = entry[2] + flops
    for first, shape, flops in merged.values():
        eff = gemm_efficiency(m=shape.m, n=shape.n, k=shape.k, batch=shape.batch, gpu=gpu,
                              constants=constants) * first.precision_ratio
        tensor_time = tensor_time + flops / (first.peak_flops_per_s * eff)
    nbytes = _kernel_bytes(plan=plan, phase=phase, window=window, weight_dtype=weight_dtype,
                           kv_dtype=kv_dtype)
    work = _Work(compute_s=_compute_s(plan=plan, tensor_s=tensor_time, vector_s=vector_time)
                 * compute_slowdown,
                 memory_s=_memory_s(plan=plan, kernel=kernel, phase=phase, nbytes=nbytes,
                                    gpu=gpu, constants=constants),
                 flop_energy_j=(tensor_energy_flops * constants.energy_per_tensor_flop_j
                                + vector_flops * constants.energy_per_vector_flop_j),
                 byte_energy_j=nbytes * constants.energy_per_hbm_byte_j,
                 floor_s=plan.floor_s, floor_sharpness=plan.floor_sharpness)
    at = _throttled(work=work, clock=clock, gpu=gpu, constants=constants)
    floor_s = work.floor_s
    compute_s, memory_s, latency = at.compute_s, at.memory_s, at.latency_s
    flop_energy = work.flop_energy_j * at.dynamic_scale
    byte_energy = work.byte_energy_j
    busy_w = at.busy_w
    larger = max if _scalar(compute_s, memory_s, latency) else np.maximum
    compute_share = compute_s / larger(compute_s + memory_s, 1e-30)
    # Busy power is drawn while a kernel streams or computes; during its fixed overhead
    # (launch, prologue, tail, waits between small kernels) the GPU draws static power only.
    busy_energy = busy_w * larger(latency - floor_s, 0.0)
    return KernelCost(
        latency_s=latency,
        compute_s=compute_s,
        memory_s=memory_s,
        compute_energy_j=flop_energy + busy_energy * compute_share,
        memory_energy_j=byte_energy + busy_energy * (1.0 - compute_share),
        flops=tensor_flops + vector_flops,
        bytes=nbytes,
    )


def _compute_s(*, plan: KernelPlan, tensor_s: Size, vector_s: Size) -> Size:
    """A kernel's compute time from its tensor-core and vector work: a fused attention
    kernel runs its softmax while other warps run the MMAs (FlashAttention-2's warp
    specialisation, FlashAttention-3's ping-pong scheduling; Dao 2023, Shah et al. 2024),
    so it takes the slower of the two; any other kernel runs them one after another."""
    if not plan.fused_attention:
        return tensor_s + vector_s
    return max(tensor_s, vector_s) if _scalar(tensor_s, vector_s) else np.maximum(tensor_s,
                                                                                   vector_s)


def _kernel_bytes(*, plan: KernelPlan, phase: dict[str, Size], window: float | None,
                  weight_dtype: str, kv_dtype: str) -> Size:
    """External bytes the kernel reads and writes under ``phase``."""
    nbytes: Size = 0.0
    for tensor in plan.tensors:
        if weight_bytes_fixed(tensor, phase):
            nbytes = nbytes + cast(float, tensor.fixed_bytes)
            continue
        if tensor.element_bytes is not None:  # what tensor_bytes computes for it
            nbytes = nbytes + rank_product(tensor.tensor.ranks,
                                           {**tensor.sizes, **phase}) * tensor.element_bytes
            continue
        nbytes = nbytes + tensor_bytes(tensor=tensor.tensor, sizes={**tensor.sizes, **phase},
                                       weight_dtype=weight_dtype, window=window,
                                       kv_dtype=kv_dtype, cache=tensor.cache,
                                       expert_weight=tensor.expert_weight)
    return nbytes


def _memory_s(*, plan: KernelPlan, kernel: Kernel, phase: dict[str, Size], nbytes: Size,
              gpu: GPU, constants: KernelConstants) -> Size:
    """The kernel's memory time: its bytes at its share of HBM peak, plus a KV-cache
    attention's fixed time per (sequence, KV head) work tile."""
    bandwidth_eff = _bandwidth_efficiency(plan=plan, kernel=kernel, nbytes=nbytes,
                                          constants=constants)
    time = nbytes / (gpu.hbm_bandwidth_bytes_per_s * bandwidth_eff)
    if plan.tile_ranks and constants.attention_tile_s:
        tiles = rank_product(plan.tile_ranks, {**plan.tile_sizes, **phase})
        if constants.attention_row_tile:  # each work tile's rows in whole row tiles
            tiles = tiles * _row_tiles(plan=plan, phase=phase, tile=constants.attention_row_tile)
        time = time + tiles * constants.attention_tile_s
    if plan.fused_attention and plan.tile_ranks and constants.v1_kv_bandwidth_share:
        time = _unsplit_decode_s(plan=plan, phase=phase, nbytes=nbytes, gpu=gpu,
                                 constants=constants, split_s=time)
    return time


def _row_tiles(*, plan: KernelPlan, phase: dict[str, Size], tile: float) -> Size:
    """Row tiles of ``tile`` rows the first context contraction's GEMM rows (new tokens x
    query heads per KV head) take in one work tile."""
    item = next(i for i in plan.ops if i.contraction and i.op.causal)
    rows = rank_product(cast(GemmRanks, item.gemm).rows, {**item.local, **phase})
    return _ceil(rows / tile) if _scalar(rows) else np.ceil(rows / tile)


def _unsplit_decode_s(*, plan: KernelPlan, phase: dict[str, Size], nbytes: Size, gpu: GPU,
                      constants: KernelConstants, split_s: Size) -> Size:
    """A decode step's fused attention where the runtime switches to its unsplit kernel
    (sequences x query heads per GPU above ``v1_query_tiles_above``): one work-group per
    sequence and query head, the cache read once per query head (``r`` times a grouped KV
    head's bytes) at ``v1_kv_bandwidth_share`` of HBM peak; ``split_s`` elsewhere."""
    group = next((item.local["r"] for item in plan.ops if item.op.causal and "r" in item.local),
                 1)
    query_tiles = rank_product(plan.tile_ranks, {**plan.tile_sizes, **phase}) * group
    unsplit_s = nbytes * group / (gpu.hbm_bandwidth_bytes_per_s
                                  * constants.v1_kv_bandwidth_share)
    decode = phase.get("m", 1.0)
    if _scalar(decode, query_tiles, split_s):
        use = decode <= 1.0 and query_tiles > constants.v1_query_tiles_above
        return unsplit_s if use else split_s
    use_v1 = (np.asarray(decode) <= 1.0) & (np.asarray(query_tiles)
                                             > constants.v1_query_tiles_above)
    return np.where(use_v1, unsplit_s, split_s)


def _bandwidth_efficiency(*, plan: KernelPlan, kernel: Kernel, nbytes: Size,
                          constants: KernelConstants) -> Size:
    """Fraction of HBM peak the kernel's ``nbytes`` stream at."""
    if plan.klass is not None:  # small memory-bound kernel: its class's share of HBM peak
        return plan.klass_bandwidth_efficiency
    bandwidth_eff = memory_efficiency(nbytes=nbytes, constants=constants)
    if plan.fused_attention or plan.reads_kv_cache:
        # paged KV-cache reads, fused or not: own efficiency (block gathers, split-KV)
        return bandwidth_eff * (constants.kv_bandwidth_efficiency
                                / constants.memory_efficiency_max)
    if kernel.is_expert:  # grouped expert GEMMs (fused MoE kernels): own efficiency
        return bandwidth_eff * (plan.expert_bandwidth_efficiency
                                / constants.memory_efficiency_max)
    return bandwidth_eff


def _scalar_kernel_cost(*, plan: KernelPlan, kernel: Kernel, phase: dict[str, Size],
                        window: float | None, gpu: GPU, constants: KernelConstants,
                        clock: ClockState, weight_dtype: str, kv_dtype: str,
                        compute_slowdown: Size) -> KernelCost:
    """:func:`kernel_cost` where every size, the clock and the slowdown are numbers (one
    ``predict``): the same operations in the same order, on numbers in tuples instead of
    GEMM-shape and clock records (their construction cost more than the arithmetic)."""
    # every value below is a number: Size only because the helpers also take arrays
    tensor_time: Size = 0.0
    vector_time: Size = 0.0
    tensor_flops: Size = 0.0
    tensor_energy_flops: Size = 0.0
    vector_flops: Size = 0.0
    # merge key -> [first op, m, n, k, batch, FLOPs] (see kernel_cost)
    merged: dict[tuple[str, tuple[str, ...]], list] = {}
    for item in plan.ops:
        op = item.op
        sizes = {**item.local, **phase}
        flops = op_flops(op=op, sizes=sizes, window=window)
        if not item.contraction:
            vector_flops = vector_flops + flops
            vector_time = vector_time + flops / plan.vector_rate
            continue
        ranks = cast(GemmRanks, item.gemm)
        n = rank_product(ranks.cols, sizes)
        k = rank_product(ranks.red, sizes)
        if op.causal and op.causal[1] in ranks.cols:
            n = n * pair_factor(op, sizes, window)
        elif op.causal and op.causal[1] in ranks.red:
            k = k * pair_factor(op, sizes, window)
        m = rank_product(ranks.rows, sizes)
        batch = rank_product(ranks.batch, sizes)
        tensor_flops = tensor_flops + flops
        tensor_energy_flops = tensor_energy_flops + flops * item.energy_scale
        if (plan.fused_attention or plan.reads_kv_cache) and op.causal:
            # the cache's MMAs on the same query rows, fused or not
            eff = attention_efficiency(rows=m, queries=sizes[op.causal[0]],
                                       keys=sizes[op.causal[1]], window=window,
                                       constants=constants)
            tensor_time = tensor_time + flops / (item.peak_flops_per_s * eff)
            continue
        if item.grouped_expert and ACTIVE_EXPERTS in sizes:
            active = max(min(sizes[ACTIVE_EXPERTS], batch), 1e-9)
            m, batch = m * batch / active, active
        entry = merged.get(item.merge_key)
        if entry is None:
            merged[item.merge_key] = [item, m, n, k, batch, 0.0 + flops]
        else:
            entry[1:] = [m, entry[2] + n, k, batch, entry[5] + flops]
    for first, m, n, k, batch, flops in merged.values():
        eff = gemm_efficiency(m=m, n=n, k=k, batch=batch, gpu=gpu,
                              constants=constants) * first.precision_ratio
        tensor_time = tensor_time + flops / (first.peak_flops_per_s * eff)
    nbytes = _kernel_bytes(plan=plan, phase=phase, window=window, weight_dtype=weight_dtype,
                           kv_dtype=kv_dtype)
    work_compute_s = _compute_s(plan=plan, tensor_s=tensor_time,
                                vector_s=vector_time) * compute_slowdown
    work_memory_s = _memory_s(plan=plan, kernel=kernel, phase=phase, nbytes=nbytes, gpu=gpu,
                              constants=constants)
    flop_energy_j = (tensor_energy_flops * constants.energy_per_tensor_flop_j
                     + vector_flops * constants.energy_per_vector_flop_j)
    byte_energy = nbytes * constants.energy_per_hbm_byte_j
    floor_s = plan.floor_s
    compute_s, memory_s, latency, scale, busy_w, power = _at_clock_scalar(
        compute_s=cast(float, work_compute_s), memory_s=cast(float, work_memory_s),
        flop_energy_j=cast(float, flop_energy_j), byte_energy_j=cast(float, byte_energy),
        floor_s=floor_s, floor_sharpness=plan.floor_sharpness, ratio=clock.ratio, gpu=gpu,
        constants=constants)
    if power > gpu.tdp_w:  # over the board limit: throttled (or stretched)
        at = _throttled(work=_Work(compute_s=work_compute_s, memory_s=work_memory_s,
                                   flop_energy_j=flop_energy_j, byte_energy_j=byte_energy,
                                   floor_s=floor_s, floor_sharpness=plan.floor_sharpness),
                        clock=clock, gpu=gpu, constants=constants)
        compute_s, memory_s, latency = (cast(float, at.compute_s), cast(float, at.memory_s),
                                        cast(float, at.latency_s))
        scale, busy_w = cast(float, at.dynamic_scale), cast(float, at.busy_w)
    compute_share = compute_s / max(compute_s + memory_s, 1e-30)
    busy_energy = busy_w * max(latency - floor_s, 0.0)
    return KernelCost(
        latency_s=latency,
        compute_s=compute_s,
        memory_s=memory_s,
        compute_energy_j=flop_energy_j * scale + busy_energy * compute_share,
        memory_energy_j=byte_energy + busy_energy * (1.0 - compute_share),
        flops=tensor_flops + vector_flops,
        bytes=nbytes,
    )
