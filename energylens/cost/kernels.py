"""Compile a layer spec into kernels: fusion groups, local shard sizes, derived collectives.

Collectives are derived from the sharding, never written by hand:
- a contraction over a rank split by a tensor-parallel dimension (``tp``/``etp``) leaves
  partial sums: all-reduce of its output (row-parallel);
- a norm over a split rank (MiniMax-M2's query/key RMSNorm over all heads) sees only its
  rank's share of the sum of squares: all-reduce of those statistics (one value per row
  of its output; 16-bit here, the engine's fp32 pair per token is as small), which also
  ends the norm's kernel: it is never fused with the ops after it;
- an output that keeps a split rank and feeds an op that is not split on it: all-gather
  (sized as the gathered tensor, the message :func:`energylens.cost.comm.collective_cost`
  prices: NCCL moves (n-1)/n of it per GPU);
- a lookup (``dispatch``) in a table that tensor parallelism splits by rows
  (:data:`VOCAB_PARALLEL_TABLES`: the embedding) finds only its rank's rows and leaves
  zeros for the rest: all-reduce of its output;
- an op that routes tokens onto an expert-parallel rank (``ep``) absent from its inputs:
  all-to-all dispatch; the op that brings them back: all-to-all combine.

Linear layers of a W8A8/W4A4 checkpoint read quantised activations: unless the kernel that
made the input quantises it on the way out (fusion ``quant`` for a norm or activation
kernel, or a GEMM with the activation in its epilogue; ``epilogue_quant`` for the output
of an attention kernel or of a plain GEMM), a quantisation kernel runs before the GEMM
(:func:`compile_layer`'s ``activation_dtype``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from energylens.cost.work import (
    EXPERT_WEIGHT_RANK,
    gemm_ranks,
    quantised_tensor,
    weight_dtype_of,
)
from energylens.model.spec import (
    FUNCTION_FLOPS_PER_ELEMENT,
    IN_PLACE_FUNCTIONS,
    Einsum,
    LayerSpec,
    TensorRef,
    split_sizes,
)

CollectiveKind = Literal["all_reduce", "all_gather", "all_to_all"]
TENSOR_PARALLEL_DIMS = ("tp", "etp")
#: Tables a lookup reads by rows that tensor parallelism (``tp``) splits by rows: the token
#: embedding, vocab / tp rows a rank, as :func:`energylens.cost.memory.memory_use` counts
#: it. vLLM's and SGLang's VocabParallelEmbedding (layers/vocab_parallel_embedding.py)
#: mask the tokens outside the rank's rows, look up the rest, zero the masked rows and
#: all-reduce X[b,m,d] over the TP group when tp > 1 (SGLang under data-parallel attention
#: over the attention-TP group, ``tp`` here); TensorRT-LLM's PyTorch backend
#: embeds Llama-style models with TensorParallelMode.COLUMN (a vocabulary split and the
#: same all-reduce). Each rank's lookup reads and writes the rows of every token, so its
#: bytes do not shrink with tp. The lookup has no vocabulary rank to shard in the spec, so
#: the split is keyed on the table's name.
VOCAB_PARALLEL_TABLES = frozenset({"EMB"})


@dataclass(frozen=True, kw_only=True)
class Collective:
    """A collective on ``tensor`` over the group of parallel dimension ``dim``."""

    kind: CollectiveKind
    dim: str
    tensor: TensorRef
    after_op: str
    #: fixed-rank sizes of the message :func:`energylens.cost.comm.collective_cost` prices:
    #: the tensor on one GPU (all-reduce, all-to-all), the gathered tensor (all-gather)
    sizes: dict[str, int]
    overlap_kernel: int | None = None  # index of the kernel it may overlap with


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """One launch: a single op or a fusion group, with its external reads and writes."""

    name: str
    ops: tuple[Einsum, ...]
    op_sizes: tuple[dict[str, int], ...]  # local fixed-rank sizes per op
    reads: tuple[TensorRef, ...]
    writes: tuple[TensorRef, ...]
    io_sizes: dict[str, dict[str, int]]  # local fixed-rank sizes per external tensor name
    is_expert: bool

    @cached_property  # kernels are immutable and compiled once per layer, split and fusion
    def touches_context(self) -> bool:
        """Whether an op runs over the context rank ``p`` (attention: once per sequence group)."""
        return any("p" in op.ranks for op in self.ops)

    @cached_property
    def scans_all_keys(self) -> bool:
        """Whether an op scans every cached key where attention reads only picked ones."""
        return any(op.all_keys for op in self.ops)

    @cached_property
    def decode_form_only(self) -> bool:
        """Whether an op runs only in a layer's decode form (MLA's absorb, value
        up-projection): prompt tokens take the prompt form's ops instead."""
        return any(op.decode_form for op in self.ops)

    @cached_property
    def per_expert(self) -> bool:
        """Whether an op reads the routed-token or expert ranks (``t``, ``x``)."""
        return any(rank in ("t", "x") for op in self.ops for rank in op.ranks)


@dataclass(frozen=True, kw_only=True)
class CompiledLayer:
    """Kernels in execution order and the collectives issued after them."""

    kernels: tuple[Kernel, ...]
    collectives: tuple[Collective, ...]


def local_sizes(*, layer: LayerSpec, op: Einsum, sizes: dict[str, int],
                degrees: dict[str, int]) -> dict[str, int]:
    """Fixed-rank sizes that ``op`` sees on one GPU."""
    local = dict(sizes)
    for dim, degree in degrees.items():
        composite = layer.sharded_rank(dim=dim, op_name=op.name)
        if composite and degree > 1:
            local.update(split_sizes(composite=composite, sizes=sizes, degree=degree))
    return local


def _split_ranks(*, layer: LayerSpec, op_name: str, dim: str, sizes: dict[str, int],
                 degree: int) -> set[str]:
    composite = layer.sharded_rank(dim=dim, op_name=op_name)
    if not composite or degree <= 1:
        return set()
    return set(split_sizes(composite=composite, sizes=sizes, degree=degree))


def fusion_groups(*, layer: LayerSpec, enabled: frozenset[str]) -> list[list[str]]:
    """Enabled fusion groups of ``layer``, merged where they share ops, in op order."""
    order = [op.name for op in layer.ops]
    groups: list[set[str]] = []
    for name, members in layer.fusion.items():
        if name not in enabled:
            continue
        merged = set(members)
        for other in [g for g in groups if g & merged]:
            merged |= other
            groups.remove(other)
        groups.append(merged)
    return [sorted(g, key=order.index) for g in groups]


def compile_layer(*, layer: LayerSpec, sizes: dict[str, int], degrees: dict[str, int],
                  fusion: frozenset[str], activation_dtype: str | None = None) -> CompiledLayer:
    """Group ops into kernels and derive the collectives that the sharding implies.

    ``activation_dtype``: the dtype the linear layers' GEMMs quantise their activations to
    (None: they read 16-bit activations); the quantisation kernels the fusion leaves
    standalone run before their GEMMs."""
    cut = {op.name for op in layer.ops if _reduces_across_ranks(layer=layer, op=op, sizes=sizes,
                                                                 degrees=degrees)}
    groups = [kept for group in fusion_groups(layer=layer, enabled=fusion)
              for kept in ([n for n in group if n not in cut],) if len(kept) > 1]
    group_of = {name: i for i, g in enumerate(groups) for name in g}
    consumers: dict[str, list[str]] = {}
    for op in layer.ops:
        for tensor in op.inputs:
            consumers.setdefault(tensor.name, []).append(op.name)
    kernels: list[Kernel] = []
    kernel_of: dict[str, int] = {}
    quantised: set[str] = set()
    for op in layer.ops:
        if op.name in kernel_of:
            continue
        members = groups[group_of[op.name]] if op.name in group_of else [op.name]
        kernel = _make_kernel(layer=layer, members=members, sizes=sizes, degrees=degrees,
                              consumers=consumers)
        if activation_dtype is not None:
            for tensor, local in _unfused_quantisations(layer=layer, kernel=kernel,
                                                        kernels=kernels, kernel_of=kernel_of,
                                                        fusion=fusion, dtype=activation_dtype):
                if tensor.name not in quantised:
                    quantised.add(tensor.name)
                    kernels.append(_quantisation_kernel(tensor=tensor, local=local,
                                                        dtype=activation_dtype))
        for name in members:
            kernel_of[name] = len(kernels)
        kernels.append(kernel)
    collectives = [
        _with_overlap(layer=layer, collective=c, kernel_of=kernel_of)
        for op in layer.ops
        for c in _derive_collectives(layer=layer, op=op, sizes=sizes, degrees=degrees,
                                     consumers=consumers)
    ]
    return CompiledLayer(kernels=tuple(kernels), collectives=tuple(collectives))


def _make_kernel(*, layer: LayerSpec, members: list[str], sizes: dict[str, int],
                 degrees: dict[str, int], consumers: dict[str, list[str]]) -> Kernel:
    ops = tuple(layer.op(n) for n in members)
    op_sizes = tuple(local_sizes(layer=layer, op=op, sizes=sizes, degrees=degrees) for op in ops)
    produced = {op.output.name for op in ops}
    reads: dict[str, TensorRef] = {}
    io_sizes: dict[str, dict[str, int]] = {}
    for op, local in zip(ops, op_sizes, strict=True):
        for tensor in op.inputs:
            if tensor.name not in produced and tensor.name not in reads:
                reads[tensor.name] = tensor
                io_sizes[tensor.name] = local
    writes: list[TensorRef] = []
    for op, local in zip(ops, op_sizes, strict=True):
        outside = [c for c in consumers.get(op.output.name, []) if c not in members]
        if op.persistent_output or outside or not consumers.get(op.output.name):
            writes.append(op.output)
            io_sizes[op.output.name] = local
        if op.function in IN_PLACE_FUNCTIONS:  # the output is the first input updated;
            writes.extend(t for t in op.inputs[1:] if t.name in reads)  # the rest too
    return Kernel(
        name="+".join(members) if len(members) > 1 else members[0],
        ops=ops,
        op_sizes=op_sizes,
        reads=tuple(reads.values()),
        writes=tuple(writes),
        io_sizes=io_sizes,
        is_expert=any("x" in op.output.ranks and "t" in op.output.ranks for op in ops),
    )


def _quantises_activation(op: Einsum, dtype: str) -> bool:
    """Whether ``op`` is a linear layer whose GEMM reads ``dtype`` activations under a
    W8A8/W4A4 checkpoint of that dtype: a contraction with a weight the checkpoint
    quantises, no expert rank (fused MoE kernels quantise inside, and their kernel tables
    time them so) and no batch rank (batched GEMMs such as MLA's absorbed projections run
    in 16 bits)."""
    weight = next((t for t in op.inputs if t.name.startswith("W")), None)
    return (op.kind == "contraction" and weight is not None
            and weight_dtype_of(weight, dtype) == dtype
            and EXPERT_WEIGHT_RANK not in weight.ranks and not gemm_ranks(op).batch)


def _unfused_quantisations(*, layer: LayerSpec, kernel: Kernel, kernels: list[Kernel],
                           kernel_of: dict[str, int], fusion: frozenset[str], dtype: str,
                           ) -> list[tuple[TensorRef, dict[str, int]]]:
    """Activations ``kernel``'s linear layers read that no earlier kernel quantised on its
    way out, with their local sizes. A kernel with a vector op (norm, activation, add) can
    quantise its output under ``quant``; attention kernels (their softmax is a vector op
    but the output leaves through the MMA epilogue) and plain GEMMs under
    ``epilogue_quant``. An input made outside the layer comes from the previous layer's
    residual add or norm (a vector kernel)."""
    producer = {op.output.name: op.name for op in layer.ops}
    out = []
    for op, local in zip(kernel.ops, kernel.op_sizes, strict=True):
        if not _quantises_activation(op, dtype):
            continue
        for tensor in op.inputs:
            if tensor.name.startswith("W") or tensor not in kernel.reads:
                continue
            made_by = producer.get(tensor.name)
            maker = None if made_by is None else kernels[kernel_of[made_by]]
            vector = maker is None or not maker.touches_context and any(
                made.kind != "contraction" for made in maker.ops)
            if ("quant" if vector else "epilogue_quant") not in fusion:
                out.append((tensor, local))
    return out


def _quantisation_kernel(*, tensor: TensorRef, local: dict[str, int], dtype: str) -> Kernel:
    """One dynamic-quantisation kernel: reads ``tensor`` in 16 bits, writes it in ``dtype``."""
    kind, flops = FUNCTION_FLOPS_PER_ELEMENT["quant"]
    out = quantised_tensor(tensor, dtype)
    op = Einsum(name=f"quant_{tensor.name}", output=out, inputs=(tensor,), kind=kind,
                function="quant", flops_per_element=flops)
    return Kernel(name=op.name, ops=(op,), op_sizes=(dict(local),), reads=(tensor,),
                  writes=(out,), io_sizes={tensor.name: dict(local), out.name: dict(local)},
                  is_expert=False)


def _reduces_across_ranks(*, layer: LayerSpec, op: Einsum, sizes: dict[str, int],
                          degrees: dict[str, int]) -> bool:
    """Whether ``op`` is a reduction over a rank that a tensor-parallel dimension splits."""
    return op.kind == "reduction" and any(
        set(op.reduced_ranks) & _split_ranks(layer=layer, op_name=op.name, dim=dim,
                                             sizes=sizes, degree=degrees.get(dim, 1))
        for dim in TENSOR_PARALLEL_DIMS)


def _derive_collectives(*, layer: LayerSpec, op: Einsum, sizes: dict[str, int],
                        degrees: dict[str, int],
                        consumers: dict[str, list[str]]) -> list[Collective]:
    found: list[Collective] = []
    out_sizes = local_sizes(layer=layer, op=op, sizes=sizes, degrees=degrees)
    if (op.kind == "gather" and degrees.get("tp", 1) > 1
            and any(t.name in VOCAB_PARALLEL_TABLES for t in op.inputs)):
        found.append(Collective(kind="all_reduce", dim="tp", tensor=op.output,
                                after_op=op.name, sizes=out_sizes))
    for dim in TENSOR_PARALLEL_DIMS:
        split = _split_ranks(layer=layer, op_name=op.name, dim=dim, sizes=sizes,
                             degree=degrees.get(dim, 1))
        if not split:
            continue
        if op.kind == "contraction" and split & set(op.contracted_ranks):
            found.append(Collective(kind="all_reduce", dim=dim, tensor=op.output,
                                    after_op=op.name, sizes=out_sizes))
            continue
        if op.kind == "reduction" and split & set(op.reduced_ranks):
            statistics = TensorRef(name=f"{op.output.name}_stats", ranks=tuple(
                r for r in op.output.ranks if r not in op.reduced_ranks))
            found.append(Collective(kind="all_reduce", dim=dim, tensor=statistics,
                                    after_op=op.name, sizes=out_sizes))
            continue
        kept = split & set(op.output.ranks)
        for consumer in consumers.get(op.output.name, []):
            theirs = _split_ranks(layer=layer, op_name=consumer, dim=dim, sizes=sizes,
                                  degree=degrees.get(dim, 1))
            if kept - theirs:  # the message is the gathered tensor: this dim unsplit
                gathered = local_sizes(layer=layer, op=op, sizes=sizes,
                                       degrees={**degrees, dim: 1})
                found.append(Collective(kind="all_gather", dim=dim, tensor=op.output,
                                        after_op=op.name, sizes=gathered))
                break
    ep_split = _split_ranks(layer=layer, op_name=op.name, dim="ep", sizes=sizes,
                            degree=degrees.get("ep", 1))
    if ep_split and op.kind == "gather":
        # Dispatch: tokens without the expert rank land on expert-split shards; combine: back.
        if ep_split & set(op.output.ranks):
            if any(not ep_split & set(t.ranks) for t in op.inputs):
                found.append(Collective(kind="all_to_all", dim="ep", tensor=op.output,
                                        after_op=op.name, sizes=out_sizes))
        else:
            routed = next(t for t in op.inputs if ep_split & set(t.ranks))
            found.append(Collective(kind="all_to_all", dim="ep", tensor=routed,
                                    after_op=op.name, sizes=out_sizes))
    return found


def _with_overlap(*, layer: LayerSpec, collective: Collective,
                  kernel_of: dict[str, int]) -> Collective:
    for item in layer.overlap:
        if item.comm_of == collective.after_op:
            return replace(collective, overlap_kernel=kernel_of[item.with_ops[0]])
    return collective
