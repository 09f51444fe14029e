"""Price one forward step of a model replica: every layer group, the head, collectives.

A step serves one or more sequence groups at once (a decode batch, a prefill chunk, or
both under continuous batching). Kernels that touch the context rank ``p`` (attention)
run once per group; all other kernels see the step's tokens merged into one batch, so
weights are read once per step. Context lengths may be numpy arrays: one call prices
several decode steps.

Array-polymorphic over configurations too (:mod:`energylens.batch_predict`): sequence
counts, the clock (``StepContext.clock``) and ``overlap_sms`` may be numpy arrays over
configurations that share everything else (context points then lie on a leading axis).
``overlap_sms`` must be all zero or all positive: whether a collective overlaps decides
which kernels share SMs, not just how fast they run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from functools import lru_cache
from typing import cast

import numpy as np

from energylens.cost.comm import (
    CommCost,
    collective_cost,
    group_per_node,
    link_for_group,
    overlapped_time,
    point_to_point_energy_j,
    scale_out_cost,
)
from energylens.cost.constants import (
    Calibration,
    KernelConstants,
    LinkConstants,
    RuntimeConstants,
)
from energylens.cost.kernel_plan import quantised_activation_dtype
from energylens.cost.kernels import Collective, CompiledLayer, Kernel, compile_layer
from energylens.cost.memory import stage_layer_share
from energylens.cost.moe import Routing, attention_rank_sequences, expert_load_at
from energylens.cost.roofline import ClockState, KernelCost, kernel_cost
from energylens.cost.speculative import Speculation
from energylens.cost.work import ACTIVATION_BYTES, ACTIVE_EXPERTS, Size, tensor_bytes
from energylens.hardware import GPU
from energylens.model.families import LayerGroup, ModelGraph
from energylens.runtime.profile import RuntimeProfile


@dataclass(frozen=True, kw_only=True)
class SequenceGroup:
    """``sequences`` sequences each adding ``new_tokens`` to a context of ``context``."""

    sequences: Size
    new_tokens: Size
    context: Size
    #: Decode tokens checked in one pass (speculative decoding's drafts): attention keeps
    #: its decode form (MLA's absorbed latent), not the prompt form of ``new_tokens`` > 1.
    verifying: bool = False


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """Wall time of one step on a replica and its energy summed over the replica's GPUs."""

    latency_s: Size
    compute_energy_j: Size
    memory_energy_j: Size
    communication_energy_j: Size
    communication_s: Size  # exposed (not overlapped) communication time

    def __add__(self, other: StepCost) -> StepCost:
        return StepCost(**{k: getattr(self, k) + getattr(other, k) for k in self.__dict__})

    def scaled(self, factor: Size) -> StepCost:
        """Every field times ``factor``."""
        return StepCost(**{k: v * factor for k, v in self.__dict__.items()})


ZERO = StepCost(latency_s=0.0, compute_energy_j=0.0, memory_energy_j=0.0,
                communication_energy_j=0.0, communication_s=0.0)


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """Everything fixed across the steps of one prediction."""

    graph: ModelGraph
    gpu: GPU
    calibration: Calibration
    degrees: tuple[tuple[str, int], ...]
    fusion: frozenset[str]
    weight_dtype: str
    kv_dtype: str
    overlap_sms: int | np.ndarray
    clock: ClockState
    routing: Routing
    pp: int
    runtime: RuntimeProfile
    speculation: Speculation | None = None  # speculative decoding (None: one token a step)
    # the runtime's scheduler prepares step n + 1 on the CPU while the GPUs run step n
    # (RuntimeProfile.overlaps_cpu): its engine time runs beside a step, not after it
    cpu_overlapped: bool = False

    @property
    def tokens_per_decode_step(self) -> float:
        """Mean tokens a decoding sequence gains per step (1 without speculation)."""
        return 1.0 if self.speculation is None else self.speculation.tokens_per_step

    @property
    def draft_layers(self) -> int:
        """Decoder layers of the speculative-decoding draft head (0 without drafts)."""
        return 0 if self.speculation is None else self.speculation.draft_layers

    @property
    def constants(self) -> KernelConstants:
        """Kernel constants of this GPU."""
        return self.calibration.kernel(self.gpu.name)

    @property
    def runtime_constants(self) -> RuntimeConstants:
        """Constants of the runtime on this GPU."""
        return self.calibration.runtime(runtime=self.runtime.name, gpu=self.gpu.name)

    @property
    def activation_dtype(self) -> str | None:
        """The dtype the linear layers quantise their activations to (None: 16-bit)."""
        return quantised_activation_dtype(weight_dtype=self.weight_dtype, gpu=self.gpu)

    @property
    def attention_ranks(self) -> int:
        """Data-parallel attention ranks of one replica (1 without attention DP)."""
        return dict(self.degrees).get("adp", 1)

    @property
    def replica_gpus(self) -> int:
        """GPUs of one pipeline stage (a tensor/expert-parallel group)."""
        return dict(self.degrees)["tp"] * self.attention_ranks * self.pp


@lru_cache(maxsize=4096)
def _compiled(group: LayerGroup, degrees: tuple[tuple[str, int], ...],
              fusion: frozenset[str], activation_dtype: str | None) -> CompiledLayer:
    return compile_layer(layer=group.layer, sizes=group.sizes, degrees=dict(degrees),
                         fusion=fusion, activation_dtype=activation_dtype)


@lru_cache(maxsize=4096)
def _compiled_prompt(group: LayerGroup, degrees: tuple[tuple[str, int], ...],
                     fusion: frozenset[str]) -> CompiledLayer | None:
    if group.prompt_attention is None:
        return None
    return compile_layer(layer=group.prompt_attention, sizes=group.sizes,
                         degrees=dict(degrees), fusion=fusion)


def kernel_window(group: LayerGroup, kernel: Kernel) -> float | None:
    """Keys per query ``kernel`` reads at most: the group's sliding window, and where an
    indexer picks the keys (DSA), its top-k for every context kernel but the indexer's."""
    if group.sparse_keys is None or kernel.scans_all_keys:
        return group.window
    return group.sparse_keys if group.window is None else min(group.window, group.sparse_keys)


def _with_prompt_form(*, ctx: StepContext, group: LayerGroup, phase: dict[str, Size],
                      absorbed: KernelCost, first: bool) -> KernelCost:
    """``absorbed`` (a context kernel of the decode form) where the phase decodes (one new
    token), the prompt form's context kernels where it prefills (``first``: their sum on
    the layer's first context kernel, nothing on its other MLA ones; the indexer's keep
    their own)."""
    prompt = _compiled_prompt(group, ctx.degrees, ctx.fusion)
    assert prompt is not None
    prefill = np.asarray(phase["m"]) > 1.0
    if not np.any(prefill):
        return absorbed
    fields = [f.name for f in dataclass_fields(KernelCost)]
    total: dict[str, Size] = dict.fromkeys(fields, 0.0)
    if first:
        for kernel in prompt.kernels:
            if not kernel.touches_context:
                continue
            cost = kernel_cost(kernel=kernel, phase=phase, window=kernel_window(group, kernel),
                               gpu=ctx.gpu, constants=ctx.constants.for_prompt_attention(),
                               clock=ctx.clock, weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype,
                               compute_slowdown=1.0)
            total = {f: total[f] + getattr(cost, f) for f in fields}
    return KernelCost(**{f: np.where(prefill, total[f], getattr(absorbed, f)) if np.ndim(prefill)
                         else (total[f] if prefill else getattr(absorbed, f)) for f in fields})


def _decode_token_share(seqs: list[SequenceGroup]) -> Size:
    """The share of a step's new tokens that decode (one new token, or a verify pass of
    drafts) rather than prefill a prompt (an array where the groups' sizes are)."""
    total: Size = 0.0
    decode: Size = 0.0
    for s in seqs:
        tokens = s.sequences * s.new_tokens
        total = total + tokens
        if s.verifying:
            decode = decode + tokens
        elif isinstance(s.new_tokens, np.ndarray):
            decode = decode + np.where(s.new_tokens <= 1.0, tokens, 0.0)
        elif s.new_tokens <= 1.0:
            decode = decode + tokens
    if isinstance(total, np.ndarray) or isinstance(decode, np.ndarray):
        return np.where(np.asarray(total) > 0, decode / np.maximum(total, 1e-30), 1.0)
    return float(decode / total) if total > 0 else 1.0


def _logit_rows(seqs: list[SequenceGroup]) -> Size:
    """Tokens of a step that need logits: one per sequence (its last prompt token, or the
    decoded one), every new token of a verify pass (the drafts and the token after them:
    the target model scores each checked position)."""
    rows: Size = 0.0
    for s in seqs:
        rows = rows + s.sequences * (s.new_tokens if s.verifying else 1.0)
    return rows


def _phase_sizes(*, ctx: StepContext, group: LayerGroup, seqs: list[SequenceGroup],
                 critical: bool,
                 ) -> tuple[dict[str, Size], dict[str, Size], list[dict[str, Size]]]:
    """Merged-token sizes for expert kernels, the same for one attention rank's linear
    kernels and collectives (the merged sizes but under data-parallel attention), and
    per-group sizes for attention kernels."""
    sequences = sum(s.sequences for s in seqs)
    tokens = sum(s.sequences * s.new_tokens for s in seqs)
    adp = ctx.attention_ranks
    rank_seqs, linear_seqs = seqs, seqs
    if adp > 1:  # each attention rank runs its own share of the sequences
        rank_seqs = [replace(s, sequences=attention_rank_sequences(
            sequences=s.sequences, attention_dp=adp, critical=critical)) for s in seqs]
        linear_seqs = rank_seqs
        if ctx.runtime.pads_attention_ranks:  # every rank runs the largest rank's tokens
            linear_seqs = [replace(s, sequences=attention_rank_sequences(
                sequences=s.sequences, attention_dp=adp, critical=True)) for s in seqs]
            tokens = adp * sum(s.sequences * s.new_tokens for s in linear_seqs)
    # Linear kernels depend on b*m only; n = logit rows per sequence (the head's).
    merged: dict[str, Size] = {"b": sequences, "m": tokens / sequences,
                               "n": _logit_rows(seqs) / sequences, "p": 1.0, "t": 1.0}
    moe = ctx.graph.model.moe
    if group.is_moe and moe is not None:
        ep = dict(ctx.degrees)["ep"]
        # Identical sequences route alike: the distinct tokens are one sequence's.
        repeats = sequences if ctx.routing.identical_sequences else 1.0
        load = expert_load_at(routing=ctx.routing, num_experts=moe.num_experts,
                              top_k=moe.top_k, ep=ep, tokens=tokens / repeats)
        per_rank = moe.num_experts / ep
        rank_tokens = repeats * (load.tokens_max_rank if critical else load.tokens_mean_rank)
        merged["t"] = rank_tokens / per_rank
        merged[ACTIVE_EXPERTS] = (load.active_experts_max_rank if critical
                                  else load.active_experts_mean_rank)
    local = merged
    if adp > 1:
        linear_sequences = sum(s.sequences for s in linear_seqs)
        local = {**merged, "b": linear_sequences,
                 "m": sum(s.sequences * s.new_tokens for s in linear_seqs) / linear_sequences,
                 "n": _logit_rows(linear_seqs) / linear_sequences}
    attention = [{"b": s.sequences, "m": s.new_tokens, "p": s.context, "n": 1.0, "t": 1.0}
                 for s in rank_seqs]
    return merged, local, attention


#: Where the steps priced inside :func:`energylens.cost.breakdown.step_breakdown` report,
#: for all of a group's layers together, each kernel's (a Kernel) and the rest's
#: ("communication": collectives, their exposed time; "expert-parallel layer": the
#: runtime's fixed time per EP MoE layer) time and dynamic energy on one GPU, from the
#: critical GPU's pass (``critical``) or the mean rank's (EP and data-parallel attention
#: price both: time comes from the first, energy from the second); None: not recorded.
STEP_RECORDER: ContextVar[Callable[[LayerGroup, Kernel | str, Size, Size, bool], None]
                          | None] = ContextVar("STEP_RECORDER", default=None)


def _layer_cost(*, ctx: StepContext, group: LayerGroup, seqs: list[SequenceGroup],
                critical: bool, shared: dict[tuple[int, int], KernelCost] | None = None,
                ) -> tuple[Size, Size, Size, Size, Size]:
    """Per-GPU (latency, compute J, memory J, comm J, exposed comm s) of one layer.

    ``shared`` holds the costs of kernels that read no expert rank (the same on every EP
    rank): filled by the first pass over a layer, reused by the second."""
    compiled = _compiled(group, ctx.degrees, ctx.fusion, ctx.activation_dtype)
    merged, local, attention = _phase_sizes(ctx=ctx, group=group, seqs=seqs,
                                            critical=critical)
    degrees = dict(ctx.degrees)
    constants = ctx.constants
    overlapping = ({c.overlap_kernel for c in compiled.collectives
                    if c.overlap_kernel is not None}
                   if compiled.collectives and _overlaps(ctx) else set())
    slowdown = ctx.gpu.sm_count / np.maximum(ctx.gpu.sm_count - ctx.overlap_sms, 1)
    latencies: dict[int, Size] = {}
    record = STEP_RECORDER.get()
    energies: dict[int, Size] = {}  # per kernel (a recorder's, and an overlap's power limit)
    compute_j: Size = 0.0
    memory_j: Size = 0.0
    first_context = next((i for i, k in enumerate(compiled.kernels)
                          if k.touches_context and not k.scans_all_keys), -1)
    # a decode-form-only kernel (MLA's absorb, value up-projection) runs on the decode
    # tokens of the step: prompts take the prompt form's ops instead
    decode_share = _decode_token_share(seqs) if group.prompt_attention is not None else 1.0
    for index, kernel in enumerate(compiled.kernels):
        context = kernel.touches_context
        phases = attention if context else [merged if _all_tokens(kernel) else local]
        runs: np.ndarray | None = None  # 0 where a decode-form kernel has no decode token
        if kernel.decode_form_only:
            if isinstance(decode_share, np.ndarray):
                runs = (decode_share > 0.0).astype(float)
                share = np.maximum(decode_share, 1e-9)
                phases = [{**phase, "m": phase["m"] * share} for phase in phases]
            elif decode_share <= 0.0:  # a prompt-only step: the kernel does not run
                latencies[index] = 0.0
                energies[index] = 0.0
                continue
            elif decode_share < 1.0:
                phases = [{**phase, "m": phase["m"] * decode_share} for phase in phases]
        same_on_every_rank = shared is not None and (context or not kernel.per_expert)
        for position, phase in enumerate(phases):
            cost = shared.get((index, position)) if same_on_every_rank and shared else None
            if cost is None:
                # MLA's context kernels: the decode (absorbed) form's own constants, the
                # prompt form substituted where a phase prefills
                mla = context and ctx.graph.model.mla is not None \
                    and not kernel.scans_all_keys
                cost = kernel_cost(kernel=kernel, phase=phase, window=kernel_window(group, kernel),
                                   gpu=ctx.gpu,
                                   constants=constants.for_mla_decode() if mla else constants,
                                   clock=ctx.clock,
                                   weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype,
                                   compute_slowdown=slowdown if index in overlapping else 1.0)
                if mla and group.prompt_attention is not None \
                        and not seqs[position].verifying:
                    cost = _with_prompt_form(ctx=ctx, group=group, phase=phase, absorbed=cost,
                                             first=index == first_context)
                if same_on_every_rank and shared is not None:
                    shared[(index, position)] = cost
            if runs is not None:
                cost = KernelCost(**{f.name: getattr(cost, f.name) * runs
                                     for f in dataclass_fields(KernelCost)})
            latencies[index] = latencies.get(index, 0.0) + cost.latency_s
            energies[index] = energies.get(index, 0.0) + cost.compute_energy_j \
                + cost.memory_energy_j
            compute_j = compute_j + cost.compute_energy_j
            memory_j = memory_j + cost.memory_energy_j
    comm_j: Size = 0.0
    exposed: Size = 0.0
    for collective in ctx.runtime.collective_layout(compiled.collectives, layer=group.layer,
                                                    degrees=degrees):
        kind, bandwidth = link_for_group(
            gpu=ctx.gpu, group_size=degrees[collective.dim],
            per_node=group_per_node(dim=collective.dim, degrees=degrees,
                                    gpus_per_node=ctx.gpu.gpus_per_node))
        nbytes = tensor_bytes(tensor=collective.tensor, sizes={**collective.sizes, **local},
                              weight_dtype=ctx.weight_dtype, window=None)
        overlapped = collective.overlap_kernel in overlapping
        sms = ctx.overlap_sms if overlapped else None
        comm, sync_s = _collective_cost(ctx=ctx, collective=collective, kind=kind,
                                        bandwidth=bandwidth, nbytes=nbytes, sms=sms)
        comm_j = comm_j + comm.energy_j
        if overlapped and collective.overlap_kernel is not None:
            index = collective.overlap_kernel
            together = overlapped_time(compute_s=latencies[index], comm_s=comm.latency_s,
                                       sync_s=sync_s)
            latencies[index] = _within_board_limit(ctx=ctx, seconds=together,
                                                   dynamic_j=energies[index] + comm.energy_j)
        else:
            exposed = exposed + comm.latency_s
    latency = sum(latencies.values()) + exposed
    if record is not None:
        for index, kernel in enumerate(compiled.kernels):
            record(group, kernel, latencies[index] * group.count,
                   energies[index] * group.count, critical)
        record(group, "communication", exposed * group.count, comm_j * group.count, critical)
    return latency, compute_j, memory_j, comm_j, exposed


def _within_board_limit(*, ctx: StepContext, seconds: Size, dynamic_j: Size) -> Size:
    """A kernel and the collective hidden under it, stretched where their dynamic energy
    over ``seconds`` plus static power would exceed the board's limit (each alone was
    held under it by its own clock; together the GPU's power management slows them)."""
    headroom_w = ctx.gpu.tdp_w - ctx.constants.static_power_w
    return np.maximum(seconds, dynamic_j / headroom_w) if headroom_w > 0 else seconds


def _all_tokens(kernel: Kernel) -> bool:
    """Whether a kernel computes on every attention rank's routed tokens (the experts'
    GEMMs), not on one rank's own tokens (attention, dense layers, router, dispatch and
    combine, whose routed side is sized by ``t``)."""
    return kernel.is_expert and all(op.kind != "gather" for op in kernel.ops)


def _overlaps(ctx: StepContext) -> bool:
    """Whether communication kernels hold SMs (and so overlap with compute)."""
    positive = np.asarray(ctx.overlap_sms) > 0
    if positive.ndim and positive.any() != positive.all():
        raise ValueError("overlap_sms must be all zero or all positive within one StepContext")
    return bool(positive.all())


def _collective_cost(*, ctx: StepContext, collective: Collective, kind: str, bandwidth: float,
                     nbytes: Size, sms: Size | None) -> tuple[CommCost, Size]:
    """One collective of ``nbytes`` over its group, and the sync cost of overlapping it.

    An all-reduce may run on the runtime's own algorithm up to a message size: with an
    array of messages, each is priced on the link the runtime picks for its size."""
    link = ctx.calibration.link(gpu=ctx.gpu.name, kind=kind)
    if collective.kind != "all_reduce":
        return _on_link(ctx=ctx, collective=collective, bandwidth=bandwidth, nbytes=nbytes,
                        sms=sms, link=link), link.overlap_sync_s
    comm, sync_s = _all_reduce_cost(ctx=ctx, collective=collective, kind=kind, link=link,
                                    bandwidth=bandwidth, nbytes=nbytes, sms=sms)
    arrival_s = ctx.runtime_constants.collective_sync_s
    if arrival_s and dict(ctx.degrees)[collective.dim] > 1:
        # in a real step the ranks reach an all-reduce apart, the last one setting its start
        comm = replace(comm, latency_s=comm.latency_s + arrival_s)
    return comm, sync_s


def _all_reduce_cost(*, ctx: StepContext, collective: Collective, kind: str,
                     link: LinkConstants, bandwidth: float, nbytes: Size,
                     sms: Size | None) -> tuple[CommCost, Size]:
    """One all-reduce as an isolated benchmark times it, on the link (or the runtime's own
    algorithm) the runtime picks for each message size."""

    def chosen(message: Size) -> LinkConstants:
        return ctx.runtime.allreduce_link(link=link, constants=ctx.runtime_constants,
                                          scale_up=kind == ctx.gpu.intra_node.kind,
                                          message_bytes=message)

    if np.ndim(nbytes) == 0:
        picked = chosen(nbytes)
        return _on_link(ctx=ctx, collective=collective, bandwidth=bandwidth, nbytes=nbytes,
                        sms=sms, link=picked), picked.overlap_sync_s
    # the runtime's own algorithm runs up to a message size: the smallest and the largest
    # message on the same link put every message between them on it
    smallest, largest = chosen(float(np.min(nbytes))), chosen(float(np.max(nbytes)))
    if smallest == largest:
        return _on_link(ctx=ctx, collective=collective, bandwidth=bandwidth, nbytes=nbytes,
                        sms=sms, link=largest), largest.overlap_sync_s
    sizes, inverse = np.unique(np.asarray(nbytes), return_inverse=True)
    links: list[LinkConstants] = []
    which = np.empty(len(sizes), dtype=int)
    for i, size in enumerate(sizes):
        picked = chosen(float(size))
        if picked not in links:
            links.append(picked)
        which[i] = links.index(picked)
    per_config = which[inverse].reshape(np.shape(nbytes))
    costs = [_on_link(ctx=ctx, collective=collective, bandwidth=bandwidth, nbytes=nbytes,
                      sms=sms, link=one) for one in links]
    comm, sync_s = costs[0], np.full(np.shape(nbytes), links[0].overlap_sync_s)
    for index in range(1, len(links)):
        use = per_config == index
        comm = CommCost(**{f: np.where(use, getattr(costs[index], f), getattr(comm, f))
                           for f in ("latency_s", "energy_j", "wire_s")})
        sync_s = np.where(use, links[index].overlap_sync_s, sync_s)
    return comm, sync_s


def _on_link(*, ctx: StepContext, collective: Collective, bandwidth: float, nbytes: Size,
             sms: Size | None, link: LinkConstants) -> CommCost:
    degrees = dict(ctx.degrees)
    size = degrees[collective.dim]
    per_node = group_per_node(dim=collective.dim, degrees=degrees,
                              gpus_per_node=ctx.gpu.gpus_per_node)
    if size > per_node:  # crosses scale-up domains: hierarchical
        return scale_out_cost(
            kind=collective.kind, message_bytes=nbytes, group_size=size,
            gpus_per_node=per_node,
            intra_bandwidth=ctx.gpu.intra_node.bandwidth_bytes_per_s,
            intra=ctx.calibration.link(gpu=ctx.gpu.name, kind=ctx.gpu.intra_node.kind),
            inter_bandwidth=bandwidth, inter=link, sms=sms)
    return collective_cost(kind=collective.kind, message_bytes=nbytes, group_size=size,
                           bandwidth=bandwidth, constants=link, sms=sms)


def _group_cost(*, ctx: StepContext, group: LayerGroup, seqs: list[SequenceGroup]) -> StepCost:
    """All ``group.count`` layers: latency of the critical GPU, energy of the whole stage."""
    degrees = dict(ctx.degrees)
    adp = degrees.get("adp", 1)  # data-parallel attention ranks: sequences differ by rank
    expert_parallel = group.is_moe and degrees["ep"] > 1
    shared: dict[tuple[int, int], KernelCost] | None = (
        {} if expert_parallel and adp == 1 else None)
    latency, compute_j, memory_j, comm_j, exposed = _layer_cost(
        ctx=ctx, group=group, seqs=seqs, critical=True, shared=shared)
    if expert_parallel or adp > 1:
        # Energy of the mean rank; latency of the critical one plus the engine's fixed time.
        _, compute_j, memory_j, comm_j, _ = _layer_cost(ctx=ctx, group=group, seqs=seqs,
                                                        critical=False, shared=shared)
    if expert_parallel:
        latency = latency + ctx.runtime_constants.ep_moe_layer_overhead_s
        record = STEP_RECORDER.get()
        if record is not None:  # the GPUs idle through it: no dynamic energy
            record(group, "expert-parallel layer",
                   ctx.runtime_constants.ep_moe_layer_overhead_s * group.count, 0.0, True)
    gpus = degrees["tp"] * adp
    return StepCost(latency_s=latency * group.count,
                    compute_energy_j=compute_j * gpus * group.count,
                    memory_energy_j=memory_j * gpus * group.count,
                    communication_energy_j=comm_j * gpus * group.count,
                    communication_s=exposed * group.count)


def _head_cost(*, ctx: StepContext, seqs: list[SequenceGroup]) -> StepCost:
    return _group_cost(ctx=ctx, group=ctx.graph.head_group, seqs=seqs)


def pipeline_send(*, ctx: StepContext, tokens: Size) -> tuple[Size, Size]:
    """(seconds, joules) to pass one micro-batch's activations to the next pipeline stage:
    the link's transfer and the runtime's own hand-off time; the energy is the transfer's
    over both GPUs (:func:`point_to_point_energy_j`; the hand-off is host time)."""
    if ctx.pp <= 1:
        return 0.0, 0.0
    kind, bandwidth = link_for_group(gpu=ctx.gpu, group_size=ctx.replica_gpus)
    link = ctx.calibration.link(gpu=ctx.gpu.name, kind=kind)
    message = tokens * ctx.graph.model.hidden_size * ACTIVATION_BYTES
    cost = collective_cost(kind="send_recv", message_bytes=message, group_size=2,
                           bandwidth=bandwidth, constants=link)
    return (cost.latency_s + ctx.runtime_constants.stage_handoff_s,
            point_to_point_energy_j(cost=cost, constants=link))


def micro_batches(*, ctx: StepContext, seqs: list[SequenceGroup]) -> Size:
    """Micro-batches a step of ``seqs`` is split into: up to one per pipeline stage, never
    fewer than one sequence each."""
    batch = sum(s.sequences for s in seqs)
    return np.maximum(1.0, np.minimum(float(ctx.pp), np.floor(batch))) if ctx.pp > 1 else 1.0


def step_cost(*, ctx: StepContext, seqs: list[SequenceGroup], pipelined: bool = False) -> StepCost:
    """One step through the whole model, pipelined over ``pp`` micro-batches when possible.

    A one-shot pass (``pipelined`` False: a static batch's prefill) fills and drains the
    pipeline: micro + pp - 1 stage times. Steps of a running engine (``pipelined``: decode,
    continuous batching) keep pp micro-batches in flight, as vLLM's pipeline-parallel
    scheduler does: every stage is busy and a step, in which each micro-batch passes every
    stage once, takes pp stage times (fewer micro-batches than stages leave stages idle, the
    step is still pp stage times)."""
    micro = micro_batches(ctx=ctx, seqs=seqs)
    micro_seqs = [replace(s, sequences=s.sequences / micro) for s in seqs]
    total = _head_cost(ctx=ctx, seqs=micro_seqs)
    for group in ctx.graph.groups:
        total = total + _group_cost(ctx=ctx, group=group, seqs=micro_seqs)
    prompts = [s for s in micro_seqs if _prefills(s) and not s.verifying]
    if ctx.draft_layers and prompts:  # the draft head reads the prompt too (its own cache)
        total = total + _group_cost(ctx=ctx, group=ctx.graph.draft_group, seqs=prompts) \
            + _head_cost(ctx=ctx, seqs=prompts)
    stages = float(ctx.pp)
    send, send_j = pipeline_send(ctx=ctx,
                                 tokens=sum(s.sequences * s.new_tokens for s in micro_seqs))
    # Stage time = the most loaded stage's share of a micro-batch's whole-model time
    # (ceil(L / pp) of L layers: stages wait for it); fill + drain = micro + pp - 1 stages.
    rounds = stages if pipelined else micro + stages - 1.0
    stage_s = total.latency_s * stage_layer_share(graph=ctx.graph, pp=ctx.pp)
    wall = rounds * (stage_s + send)
    # each micro-batch crosses every stage boundary (a running engine's also the last one,
    # back to the first stage, as the wall time charges)
    sends = micro * (stages if pipelined else stages - 1.0)
    return StepCost(latency_s=wall,
                    compute_energy_j=total.compute_energy_j * micro,
                    memory_energy_j=total.memory_energy_j * micro,
                    communication_energy_j=total.communication_energy_j * micro + sends * send_j,
                    communication_s=total.communication_s * micro / stages + rounds * send)


def _prefills(group: SequenceGroup) -> bool:
    """Whether ``group`` reads prompt tokens (more than one new token per sequence); an
    array of new-token counts (a price grid's axis) must lie on one side of one."""
    prefill = np.asarray(group.new_tokens) > 1.0
    if np.all(prefill) or not np.any(prefill):
        return bool(np.all(prefill))
    raise ValueError("a grid of new-token counts mixes decode (1) and prompt (> 1) steps")


def decode_step_cost(*, ctx: StepContext, seqs: list[SequenceGroup],
                     pipelined: bool = False) -> StepCost:
    """A step in which every group decodes, per token each sequence gains.

    Without speculation that is :func:`step_cost`. With it (``ctx.speculation``), the
    draft head (one decoder layer, ``graph.draft_group``, and the LM head) runs
    ``draft_tokens`` times on one token per sequence, then the model checks ``draft_tokens
    + 1`` tokens per sequence in one pass (decode-form attention), and the step's time and
    energy are shared over the ``tokens_per_decode_step`` tokens each sequence gains."""
    spec = ctx.speculation
    if spec is None or spec.draft_tokens == 0:
        return step_cost(ctx=ctx, seqs=seqs, pipelined=pipelined)
    drafts = spec.draft_tokens
    checked = [replace(s, new_tokens=s.new_tokens + drafts, context=s.context + drafts,
                       verifying=True) for s in seqs]
    draft = (_group_cost(ctx=ctx, group=ctx.graph.draft_group, seqs=seqs)
             + _head_cost(ctx=ctx, seqs=seqs))
    total = step_cost(ctx=ctx, seqs=checked, pipelined=pipelined) + draft.scaled(float(drafts))
    return total.scaled(1.0 / spec.tokens_per_step)


def engine_cost(*, ctx: StepContext, sequences: Size) -> StepCost:
    """The runtime's own time in one step on a replica: a fixed part the GPUs idle through
    (static power only, charged by the caller over the wall time) and a part per running
    sequence during which they draw busy power, at the step's clock as a kernel's busy
    power is (x f/f_boost x (V(f)/V(f_boost))^2). Join it to the GPUs' step with
    :func:`with_engine`."""
    # the runtime hooks are written for a number; their arithmetic broadcasts over arrays
    idle_s, busy_s = ctx.runtime.step_overhead_s(constants=ctx.runtime_constants,
                                                 sequences=cast(float, sequences))
    busy_w = ctx.constants.busy_power_w * ctx.clock.ratio * ctx.clock.dynamic_scale
    busy_j = busy_w * busy_s * ctx.replica_gpus
    return StepCost(latency_s=idle_s + busy_s, compute_energy_j=busy_j, memory_energy_j=0.0,
                    communication_energy_j=0.0, communication_s=0.0)


def join_engine_s(*, ctx: StepContext, gpu_s: Size, engine_s: Size) -> Size:
    """Wall time of a step whose GPUs work ``gpu_s`` and whose runtime works ``engine_s`` on
    the CPU: one after the other, or, under an overlap scheduler (``ctx.cpu_overlapped``),
    side by side, so that the longer of the two sets the step (a host-bound engine at a
    large batch of a small model)."""
    if ctx.cpu_overlapped:
        return cast(Size, np.maximum(gpu_s, engine_s))
    return gpu_s + engine_s


def with_engine(*, ctx: StepContext, cost: StepCost, engine: StepCost) -> StepCost:
    """The GPUs' ``cost`` of a step joined with the runtime's ``engine`` cost of it
    (:func:`join_engine_s`); overlapped, the engine's CPU work adds no GPU energy (the GPUs
    draw static power while they wait for a host-bound step, charged over the wall time by
    the caller)."""
    if not ctx.cpu_overlapped:
        return cost + engine
    return replace(cost, latency_s=join_engine_s(ctx=ctx, gpu_s=cost.latency_s,
                                                 engine_s=engine.latency_s))
