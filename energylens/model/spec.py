"""Einsum specification: ops in named-rank notation, fusion groups, sharding, overlap.

An op reads like ``Q[b,m,g,r,e] = N[b,m,d] * WQ[d,g,r,e]`` (a contraction: every rank of
the inputs that is not on the output is summed over) or
``A[b,m,p,g,r] = softmax_p(S[b,m,p,g,r])`` (a named elementwise/reduction function; the
ranks after the underscore are those it reduces over, several for a norm over all heads:
``rmsnorm_gre``).
FLOPs and bytes follow from the rank sizes; see :mod:`energylens.cost.work`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from energylens.errors import SpecError

OpKind = Literal["contraction", "elementwise", "reduction", "softmax", "copy", "gather"]

#: FLOPs per output element of the named functions (vector-unit work, not tensor cores).
FUNCTION_FLOPS_PER_ELEMENT: dict[str, tuple[OpKind, float]] = {
    "rmsnorm": ("reduction", 4.0),
    "layernorm": ("reduction", 6.0),
    "softmax": ("softmax", 5.0),
    "silu_mul": ("elementwise", 5.0),
    "sigmoid_mul": ("elementwise", 5.0),  # an output gate: x * sigmoid(g)
    "gelu": ("elementwise", 8.0),
    "add": ("elementwise", 1.0),
    "rope": ("elementwise", 3.0),
    "copy": ("copy", 0.0),
    "dispatch": ("gather", 0.0),
    "combine": ("gather", 1.0),
    "topk": ("reduction", 2.0),
    # a fast Walsh-Hadamard transform over the reduced rank (log2(128) = 7 butterflies
    # and a scale per element at width 128; DSA's indexer rotates q and k before FP8)
    "hadamard": ("reduction", 8.0),
    # a tensor times a broadcast vector or scalar (DSA's head weights x query scales)
    "scale": ("elementwise", 1.0),
    # dynamic activation quantisation before an FP8/INT8/FP4 GEMM: |x|, the row's (or
    # block's) max and the scaled cast (assumed 3 per element)
    "quant": ("reduction", 3.0),
    # Mamba-2: causal depthwise convolution of width 4 (2 FLOP per tap) and its SiLU (4);
    # the state update S * decay + sum of x (x) B (2 per state element)
    "conv": ("elementwise", 12.0),
    "ssm_update": ("elementwise", 2.0),
}

#: Functions that update their inputs in place: the output is the first input updated, and
#: the others are written back too. Rotary embeddings rotate q and k in one kernel and
#: write both back (vLLM's ``rotary_embedding`` op takes query and key in place).
IN_PLACE_FUNCTIONS = frozenset({"rope"})

#: Recurrent-state tensors of the Mamba-2 mixer (read and written every step), and the size
#: key under which a layer's sizes give their element bytes (the engine's SSM-state dtype;
#: other activations are 16-bit).
STATE_TENSORS = ("S", "SN")
STATE_ELEMENT_BYTES = "state_element_bytes"

#: What a weight's name carries when a model's published low-bit checkpoints keep it in 16
#: bits (``ModelConfig.held_16bit``): ``WQA__16_nvfp4`` is ``WQA``, 16-bit in the NVFP4
#: checkpoint (the dtypes joined by ``_``).
HELD_MARK = "__16_"
#: What a weight's name carries when the model was read from a GGUF file
#: (``ModelConfig.gguf_storage``): the bytes the file stores a weight in, in billionths
#: (``WD__gguf_615234375``: 0.615234375 bytes, 14 of 32 layers' down projections in Q6_K
#: and the rest in Q4_K), exact to nine digits for a mean over layers.
STORAGE_MARK = "__gguf_"


def stored_weight_name(weight: str, bytes_per_weight: float) -> str:
    """``weight``'s name marked with the bytes its GGUF file stores a weight in."""
    return f"{weight}{STORAGE_MARK}{round(bytes_per_weight * 1e9)}"

_TENSOR = r"([A-Za-z][A-Za-z0-9_]*)\[([a-z0-9_, ]*)\]"
_CONTRACTION = re.compile(rf"^\s*{_TENSOR}\s*=\s*{_TENSOR}(?:\s*\*\s*{_TENSOR})?\s*$")
_FUNCTION = re.compile(rf"^\s*{_TENSOR}\s*=\s*([a-z_]+)\((.*)\)\s*$")




@dataclass(frozen=True, kw_only=True)
class TensorRef:
    """A tensor as an op sees it: name and ordered ranks."""

    name: str
    ranks: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Einsum:
    """One op of a layer. ``persistent`` outputs (KV-cache appends) always reach HBM."""

    name: str
    output: TensorRef
    inputs: tuple[TensorRef, ...]
    kind: OpKind
    function: str | None = None
    reduced_ranks: tuple[str, ...] = ()  # ranks a reduction function reduces over
    flops_per_element: float = 0.0
    persistent_output: bool = False
    causal: tuple[str, str] | None = None  # (query rank, key rank) under a causal mask
    #: Scans every cached key where the layer's attention reads only the keys an indexer
    #: picks (DSA's indexer); the same op in prompt and decode steps.
    all_keys: bool = False
    #: Runs only in the decode (weight-absorbed) form of a layer with a prompt form (MLA's
    #: absorb and value up-projection): a prompt's tokens take the prompt form's ops instead.
    decode_form: bool = False

    @cached_property  # an op is immutable; the cost model asks for its ranks per kernel price
    def ranks(self) -> tuple[str, ...]:
        """All ranks the op iterates over, output ranks first."""
        seen = list(self.output.ranks)
        for tensor in self.inputs:
            seen.extend(r for r in tensor.ranks if r not in seen)
        return tuple(seen)

    @cached_property
    def contracted_ranks(self) -> tuple[str, ...]:
        """Ranks read by the op that do not appear on its output."""
        return tuple(r for r in self.ranks if r not in self.output.ranks)


def _tensor(name: str, ranks: str) -> TensorRef:
    return TensorRef(name=name, ranks=tuple(r.strip() for r in ranks.split(",") if r.strip()))


def parse_einsum(
    *, name: str, text: str, persistent_output: bool = False, causal: str | None = None,
    all_keys: bool = False, decode_form: bool = False,
) -> Einsum:
    """Parse one op from named-rank notation; raises :class:`SpecError` naming the op."""
    causal_pair = _parse_causal(name=name, causal=causal)
    match = _FUNCTION.match(text)
    function = _function_name(match.group(3)) if match else None
    if match and function is not None:
        out = _tensor(match.group(1), match.group(2))
        args = [_tensor(n, r) for n, r in re.findall(_TENSOR, match.group(4))]
        if not args:
            raise SpecError(f"op {name!r}: function {function} has no tensor argument")
        kind, flops = FUNCTION_FLOPS_PER_ELEMENT[function]
        op = Einsum(
            name=name, output=out, inputs=tuple(args), kind=kind, function=function,
            reduced_ranks=tuple(match.group(3)[len(function) + 1:]), flops_per_element=flops,
            persistent_output=persistent_output, causal=causal_pair, all_keys=all_keys,
            decode_form=decode_form,
        )
    else:
        match = _CONTRACTION.match(text)
        if not match:
            raise SpecError(f"op {name!r}: cannot parse {text!r} (expected 'Y[..] = A[..] * B[..]')")
        groups = match.groups()
        out = _tensor(groups[0], groups[1])
        inputs = [_tensor(groups[2], groups[3])]
        if groups[4]:
            inputs.append(_tensor(groups[4], groups[5]))
        kind = "contraction" if len(inputs) == 2 else "copy"
        op = Einsum(name=name, output=out, inputs=tuple(inputs), kind=kind,
                    persistent_output=persistent_output, causal=causal_pair, all_keys=all_keys,
                    decode_form=decode_form)
    _check_ranks(op)
    return op


def _function_name(called: str) -> str | None:
    """The function of ``called`` (``silu_mul``, ``softmax_p``: ``softmax`` reducing over
    p), or None when it names none."""
    if called in FUNCTION_FLOPS_PER_ELEMENT:
        return called
    function, _, ranks = called.rpartition("_")
    return function if function in FUNCTION_FLOPS_PER_ELEMENT and ranks.isalpha() else None


def _parse_causal(*, name: str, causal: str | None) -> tuple[str, str] | None:
    if causal is None:
        return None
    parts = [p.strip() for p in causal.split(",")]
    if len(parts) != 2:
        raise SpecError(f"op {name!r}: causal must name two ranks 'query,key', got {causal!r}")
    return parts[0], parts[1]


def _check_ranks(op: Einsum) -> None:
    input_ranks = {r for t in op.inputs for r in t.ranks}
    for rank in op.output.ranks:
        if rank not in input_ranks and op.kind not in ("gather",):
            raise SpecError(
                f"op {op.name!r}: output rank {rank!r} of {op.output.name} is missing from its inputs"
            )
    for rank in op.reduced_ranks:
        if rank not in input_ranks:
            raise SpecError(f"op {op.name!r}: reduced rank {rank!r} is not an input rank")
    if op.causal:
        for rank in op.causal:
            if rank not in op.ranks:
                raise SpecError(f"op {op.name!r}: causal rank {rank!r} is not a rank of the op")


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """Communication of ``comm_of`` runs concurrently with the compute of ``with_ops``."""

    comm_of: str
    with_ops: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class FusionGroups:
    """A layer's fusion groups, each under the fusion name that turns it on (a runtime's
    switch). Parts of a layer may use one name for groups of their own ops (the routed and
    the shared experts' ``gate_up``): each stays a group, and a kernel, of its own."""

    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def items(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(fusion name, member ops) of each group, a name once per part that uses it."""
        return self.groups

    def members(self, name: str) -> tuple[tuple[str, ...], ...]:
        """The member ops of each group called ``name``."""
        return tuple(members for group, members in self.groups if group == name)


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (cached objects)
class LayerSpec:
    """The ops of one transformer layer (or the model head), with fusion/sharding/overlap."""

    name: str
    ops: tuple[Einsum, ...]
    fusion: FusionGroups = field(default_factory=FusionGroups)
    sharding: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    overlap: tuple[Overlap, ...] = ()

    def op(self, name: str) -> Einsum:
        """The op called ``name``."""
        for op in self.ops:
            if op.name == name:
                return op
        raise SpecError(f"layer {self.name!r}: unknown op {name!r}")

    def sharded_rank(self, *, dim: str, op_name: str) -> str | None:
        """The rank that parallel dimension ``dim`` splits in op ``op_name`` (or None)."""
        for rank, ops in self.sharding.get(dim, {}).items():
            if op_name in ops:
                return rank
        return None


def validate_layer(*, layer: LayerSpec, sizes: dict[str, object]) -> None:
    """Check a layer against rank sizes: known ranks, consistent tensors, known op names."""
    op_names = {op.name for op in layer.ops}
    tensor_ranks: dict[str, tuple[str, ...]] = {}
    for op in layer.ops:
        for rank in op.ranks:
            if rank not in sizes:
                raise SpecError(f"op {op.name!r}: unknown rank {rank!r} (no size given)")
        for tensor in (op.output, *op.inputs):
            known = tensor_ranks.setdefault(tensor.name, tensor.ranks)
            if known != tensor.ranks:
                raise SpecError(
                    f"op {op.name!r}: size mismatch for tensor {tensor.name}: ranks "
                    f"{list(tensor.ranks)} here but {list(known)} elsewhere"
                )
    for group, members in layer.fusion.items():
        for member in members:
            if member not in op_names:
                raise SpecError(f"fusion group {group!r}: unknown op {member!r}")
    for dim, ranks in layer.sharding.items():
        for rank, ops in ranks.items():
            for op_name in ops:
                if op_name not in op_names:
                    raise SpecError(f"sharding {dim}.{rank}: unknown op {op_name!r}")
                if rank.split("*")[0] not in layer.op(op_name).ranks:
                    raise SpecError(
                        f"op {op_name!r}: sharded rank {rank!r} ({dim}) is not a rank of the op"
                    )
    for item in layer.overlap:
        for op_name in (item.comm_of, *item.with_ops):
            if op_name not in op_names:
                raise SpecError(f"overlap: unknown op {op_name!r}")


#: Ranks an engine pads until they divide: the vocabulary (vLLM and SGLang pad it to a
#: multiple of 64 before splitting the LM head and embedding, VocabParallelEmbedding's
#: padding_size; TensorRT-LLM to a multiple of the TP degree; recalled). A shard is priced
#: at ceil(size / degree) rows, the slowest rank's; the 64-row padding adds under 0.2 % of
#: any released vocabulary and is not priced.
PADDED_RANKS = frozenset({"v"})


def split_sizes(*, composite: str, sizes: dict[str, int], degree: int) -> dict[str, int]:
    """Local sizes after splitting ``composite`` (``"f"`` or ``"g*r"``) over ``degree`` ranks.

    A composite splits its first rank as far as it goes and the next one for the rest
    (``g*r`` under TP: KV heads first; with more ranks than KV heads, KV heads are
    replicated and query heads split further, as vLLM does); a rank engines pad
    (:data:`PADDED_RANKS`) takes ceil(size / degree). Raises :class:`SpecError` when the
    degree does not divide otherwise.
    """
    local: dict[str, int] = {}
    remaining = degree
    for rank in composite.split("*"):
        size = sizes[rank]
        if remaining == 1:
            break
        if size % remaining == 0:
            local[rank] = size // remaining
            remaining = 1
        elif remaining % size == 0:
            local[rank] = 1
            remaining //= size
        elif rank in PADDED_RANKS:
            local[rank] = -(-size // remaining)
            remaining = 1
        else:
            raise SpecError(f"rank {rank!r} of size {size} does not divide by {remaining}")
    if remaining != 1:
        raise SpecError(f"ranks {composite!r} of sizes {[sizes[r] for r in composite.split('*')]}"
                        f" do not divide by {degree}")
    return local


def check_divisible(*, layer: LayerSpec, sizes: dict[str, int], degrees: dict[str, int]) -> None:
    """Every sharded rank must divide by its parallel degree; names the op and rank if not."""
    for dim, ranks in layer.sharding.items():
        degree = degrees.get(dim, 1)
        if degree <= 1:
            continue
        for rank, ops in ranks.items():
            try:
                split_sizes(composite=rank, sizes=sizes, degree=degree)
            except SpecError as exc:
                raise SpecError(f"op {ops[0]!r}: {exc} ({dim}={degree})") from None
