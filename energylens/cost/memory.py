"""Memory per GPU: weights + KV cache + recurrent state + activations + the runtime's reserve.

The cache is what the layers' persistent outputs keep: outputs with a token rank ``m``
(K and V, the MLA latent) grow with the context; outputs without one (the state of a
recurrent mixer such as Mamba-2) are a constant size per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np

from energylens.cost.gguf import FILE_DTYPE, GGUF_DTYPES, LM_HEAD, MIXES, gguf_tensor_type
from energylens.cost.kernels import local_sizes
from energylens.cost.work import (
    ACTIVATION_BYTES,
    DTYPE_BYTES,
    EMBEDDING_BYTES,
    Size,
    activation_element_bytes,
    storage_bytes,
    weight_dtype_of,
)
from energylens.hardware import GPU
from energylens.model.families import LayerGroup, ModelGraph
from energylens.model.spec import STATE_ELEMENT_BYTES, STATE_TENSORS
from energylens.runtime.profile import RuntimeProfile


@dataclass(frozen=True, kw_only=True)
class MemoryUse:
    """Bytes per GPU on the most loaded pipeline stage (arrays over configurations when
    the sequences are)."""

    weights_bytes: Size
    kv_cache_bytes: Size
    activation_bytes: Size
    reserve_bytes: float
    capacity_bytes: float
    usable_bytes: Size  # what the runtime may use of the capacity
    default_share: float = 1.0  # the runtime's memory share by default on this GPU and layout
    state_bytes: Size = 0.0  # recurrent-mixer state of the sequences (constant per sequence)

    @property
    def total_bytes(self) -> Size:
        """Everything that must fit."""
        return (self.weights_bytes + self.kv_cache_bytes + self.state_bytes
                + self.activation_bytes + self.reserve_bytes)

    @property
    def fits(self) -> bool | np.ndarray:
        """Whether it fits in the usable share of HBM."""
        return self.total_bytes <= self.usable_bytes

    def shortfall(self, *, gpu_name: str) -> str | None:
        """Why it does not fit (one line), or None when it does."""
        if self.fits:
            return None
        state = f", state {self.state_bytes / 1e9:.1f}" if self.state_bytes else ""
        return (f"needs {self.total_bytes / 1e9:.1f} GB per GPU (weights "
                f"{self.weights_bytes / 1e9:.1f}, KV {self.kv_cache_bytes / 1e9:.1f}{state}, "
                f"activations "
                f"{self.activation_bytes / 1e9:.1f}, reserve {self.reserve_bytes / 1e9:.1f}) but "
                f"{gpu_name} has {self.capacity_bytes / 1e9:.0f} GB, of which "
                f"{self.usable_bytes / 1e9:.0f} GB usable")


    def shortfalls(self, *, gpu_name: str) -> list[str | None]:
        """:meth:`shortfall` of each configuration of an array-valued use."""
        shape = np.shape(self.total_bytes)
        names = [f.name for f in fields(self)]
        stacked = np.stack([np.broadcast_to(getattr(self, name), shape).ravel()
                            for name in names], axis=1)
        reasons: list[str | None] = [None] * stacked.shape[0]
        short = np.flatnonzero(~np.broadcast_to(self.fits, shape).ravel())
        if short.size:  # one message per distinct use
            distinct, inverse = np.unique(stacked[short], axis=0, return_inverse=True)
            messages = [MemoryUse(**dict(zip(names, map(float, row), strict=True)))
                        .shortfall(gpu_name=gpu_name) for row in distinct]
            for position, which in zip(short, inverse.ravel(), strict=True):
                reasons[position] = messages[which]
        return reasons


def _layer_weight_bytes(*, group: LayerGroup, degrees: dict[str, int], weight_dtype: str) -> float:
    total = 0.0
    for op in group.layer.ops:
        local = local_sizes(layer=group.layer, op=op, sizes=group.sizes, degrees=degrees)
        for tensor in op.inputs:
            if tensor.name.startswith("W"):
                elements = 1.0
                for rank in tensor.ranks:
                    elements *= local[rank]
                total += elements * storage_bytes(weight_dtype_of(tensor, weight_dtype))
    return total


def kv_bytes_per_token(*, group: LayerGroup, degrees: dict[str, int], kv_dtype: str) -> float:
    """Cache bytes one token adds to this layer: the persistent outputs with a token rank
    (K and V, or the MLA latent), at their local shard sizes."""
    total = 0.0
    for op in group.layer.ops:
        if op.persistent_output and "m" in op.output.ranks:
            local = local_sizes(layer=group.layer, op=op, sizes=group.sizes, degrees=degrees)
            elements = 1.0
            for rank in op.output.ranks:
                if rank not in ("b", "m"):
                    elements *= local[rank]
            total += elements * activation_element_bytes(tensor=op.output, kv_dtype=kv_dtype,
                                                         cache=True)
    return total


def _state_bytes_per_sequence(*, group: LayerGroup, degrees: dict[str, int]) -> float:
    """Recurrent state one sequence keeps in this layer: the persistent outputs without a
    token rank (a Mamba-2 mixer's SSM and convolution state), at their local shard sizes."""
    total = 0.0
    for op in group.layer.ops:
        if op.persistent_output and "m" not in op.output.ranks:
            local = local_sizes(layer=group.layer, op=op, sizes=group.sizes, degrees=degrees)
            elements = 1.0
            for rank in op.output.ranks:
                if rank != "b":
                    elements *= local[rank]
            element_bytes = (local.get(STATE_ELEMENT_BYTES, ACTIVATION_BYTES)
                             if op.output.name in STATE_TENSORS else ACTIVATION_BYTES)
            total += elements * element_bytes
    return total


@lru_cache(maxsize=4096)
def _layer_bytes(group: LayerGroup, degrees: tuple[tuple[str, int], ...], weight_dtype: str,
                 kv_dtype: str) -> tuple[float, float, float]:
    """(weight bytes, KV bytes per token, state bytes per sequence) of one layer of
    ``group`` on one GPU: fixed by the model and the split, computed once."""
    split = dict(degrees)
    return (_layer_weight_bytes(group=group, degrees=split, weight_dtype=weight_dtype),
            kv_bytes_per_token(group=group, degrees=split, kv_dtype=kv_dtype),
            _state_bytes_per_sequence(group=group, degrees=split))


def stage_layer_share(*, graph: ModelGraph, pp: int) -> float:
    """Share of the model's decoder layers on its most loaded pipeline stage, ceil(L / pp)
    / L: vLLM's ``get_pp_indices`` splits L layers into whole layers, the remainder going
    to stages before the last (Llama-3.1-8B's 32 over 3 stages: 11, 11, 10)."""
    if pp <= 1:
        return 1.0
    layers = round(sum(group.count for group in graph.groups))
    return math.ceil(layers / pp) / layers


def memory_use(*, graph: ModelGraph, gpu: GPU, runtime: RuntimeProfile, degrees: dict[str, int],
               pp: int, weight_dtype: str, kv_dtype: str, sequences: Size,
               context_tokens: float, token_budget: float | None = None,
               draft_layers: int = 0) -> MemoryUse:
    """Memory of one GPU of a replica holding ``sequences`` sequences of up to
    ``context_tokens``. The activations are those of one forward pass of ``token_budget``
    tokens per attention rank (None: :func:`startup_tokens` of the runtime's server), the
    workspace an engine sizes at start-up for its token budget whatever batch then runs
    (vLLM profiles a ``max_num_batched_tokens`` pass before it sizes the KV pool,
    TensorRT-LLM builds for ``max_num_tokens``, SGLang and llama.cpp for their chunk and
    ubatch): the KV space is the same for every batch, so asking for more sequences never
    runs fewer. Under data-parallel attention (``degrees["adp"]``) each attention rank
    holds its share of the sequences, and its own copy of the attention and dense weights
    (the degrees already split only the experts over them).

    The runtime's memory share is its default on the GPU and layout
    (``RuntimeProfile.memory_share_on``: ``memory_utilization``, or SGLang's formula), except where that
    share cannot hold what the engine loads before it serves (the weights; under an
    ``hbm`` share also its start-up pass's activations and reserve): such an engine refuses
    to start until its user raises the share, so the share is taken as raised to the whole
    board. A deployment is then infeasible only when the board cannot hold the weights and
    the working set (issue 10: no measured configuration is refused). ``draft_layers``: a
    speculative-decoding draft head's decoder layers (each ``graph.draft_group``: a
    transformer's last layer, a hybrid's attention and FFN), with their weights and their
    own cache of every token."""
    weights = 0.0
    kv: Size = 0.0
    state: Size = 0.0
    split = tuple(sorted(degrees.items()))
    layers = [(group, group.count) for group in graph.groups]
    if draft_layers:
        layers.append((graph.draft_group, float(draft_layers)))
    for group, count in layers:
        layer_weights, layer_kv, layer_state = _layer_bytes(group, split, weight_dtype, kv_dtype)
        weights += count * layer_weights
        kept = min(context_tokens, group.window) if group.window else context_tokens
        kv += count * sequences * kept * layer_kv
        state += count * sequences * layer_state
    ranks = degrees.get("adp", 1)
    stage = stage_layer_share(graph=graph, pp=pp)  # the most loaded stage's layers
    weights *= stage
    kv *= stage / ranks
    state *= stage / ranks
    model = graph.model
    vocab_shard = model.vocab_size * model.hidden_size / degrees["tp"]
    head_bytes = DTYPE_BYTES[weight_dtype] if weight_dtype in ("bf16", "fp16") else EMBEDDING_BYTES
    # one stage holds the embedding and the LM head (one table if tied); over stages the
    # first holds the embedding and the last the LM head, one table each
    tables = 1 if model.tie_word_embeddings or pp > 1 else 2
    if weight_dtype == FILE_DTYPE:  # each table as the model's GGUF file stores it
        stored = dict(model.gguf_storage)
        lm_head, embedding = stored.get("WLM", EMBEDDING_BYTES), stored.get("EMB", EMBEDDING_BYTES)
        weights += vocab_shard * (lm_head if tables == 1 else lm_head + embedding)
    elif weight_dtype in GGUF_DTYPES:  # the output table's own format (a tied one's too), the
        # embedding's the file's base format (cost/gguf.py)
        lm_head = DTYPE_BYTES[gguf_tensor_type(name=LM_HEAD, file_type=weight_dtype,
                                               unquantised=False)]
        embedding = DTYPE_BYTES[MIXES.get(weight_dtype, (weight_dtype,))[0]]
        weights += vocab_shard * (lm_head if tables == 1 else lm_head + embedding)
    else:
        weights += vocab_shard * head_bytes * tables
    widest = max(max(g.sizes.get("f", 0), g.sizes.get("s", 0)) for g in graph.groups)
    per_token = (4 * model.hidden_size + 3 * widest / degrees["tp"]) * ACTIVATION_BYTES
    if token_budget is None:
        token_budget = startup_tokens(runtime=runtime, gpu=gpu, attention_ranks=ranks)
    activations = token_budget * per_token
    capacity = gpu.hbm_capacity_bytes
    outside = activations + runtime.reserve_bytes
    default = runtime.memory_share_on(gpu=gpu, tp=degrees["tp"], pp=pp, attention_dp=ranks,
                                      speculative=draft_layers > 0)
    share = capacity * default
    if runtime.memory_share_of == "free":  # a share of what weights and activations leave
        fixed = weights + outside
        # never more than the board: weights beyond it leave no share to take
        usable = np.minimum(fixed + default * np.maximum(capacity - fixed, 0.0), capacity)
    elif runtime.memory_share_of == "static":  # weights and KV within the share
        # weights beyond the default share: the engine does not start until its user
        # raises the share (--mem-fraction-static); raised, the share is what the board
        # leaves outside it
        usable = np.where(weights > share, capacity, share + np.minimum(outside, capacity - share))
    else:  # everything within the share; likewise raised (--gpu-memory-utilization) where
        # the weights and the activations of the engine's start-up profiling pass and its
        # reserve exceed it, to the most the engine starts with
        raised = max(share, capacity * raised_hbm_share(capacity_bytes=capacity))
        usable = np.where(weights + outside > share, raised, share)
    usable = float(usable) if np.ndim(usable) == 0 else np.asarray(usable, dtype=float)
    return MemoryUse(weights_bytes=weights, kv_cache_bytes=kv, state_bytes=state,
                     activation_bytes=activations, reserve_bytes=runtime.reserve_bytes,
                     capacity_bytes=capacity, usable_bytes=usable, default_share=default)


def startup_tokens(*, runtime: RuntimeProfile, gpu: GPU, attention_ranks: int,
                   budget: int | None = None, offline: bool = False) -> int:
    """Tokens of one attention rank's forward pass that the engine sizes its activations
    for: ``budget`` (a deployment's token budget), else its server's default on ``gpu``
    (``offline``: its offline API's prefill chunk, vLLM's ``LLM`` class), divided among the
    ranks where the runtime splits it (SGLang's chunked-prefill size under data-parallel
    attention)."""
    if budget is not None:
        tokens = budget
    elif offline:
        tokens = runtime.prefill_chunk_on(gpu=gpu)
    else:
        tokens = runtime.server_limits_on(gpu=gpu)[0]
    if attention_ranks > 1 and runtime.attention_dp_limits == "split":
        return max(1, tokens // attention_ranks)
    return tokens


#: What the CUDA context, the driver's reservation and the communicators' buffers hold
#: outside an ``hbm`` share by the time the engine checks it: 1.5 GiB, about 0.5 GiB each
#: (assumed, not measured).
HELD_OUTSIDE_SHARE_BYTES = 1.5 * 2**30


def raised_hbm_share(*, capacity_bytes: float) -> float:
    """The largest ``hbm`` share an engine starts with on a board of ``capacity_bytes``:
    the board less :data:`HELD_OUTSIDE_SHARE_BYTES`, rounded down to a thousandth (0.981
    on an 80 GB H100, 79.6 GiB).

    A share of 1 never starts: vLLM V1 refuses to start when the memory free at start-up
    is below the share x the total (``Worker.init_device``, after its NCCL communicators are
    set up: vllm/v1/worker/gpu_worker.py of the 0.11.0 sdist)."""
    return math.floor((1.0 - HELD_OUTSIDE_SHARE_BYTES / capacity_bytes) * 1000.0) / 1000.0


def engine_share(*, runtime: RuntimeProfile, use: MemoryUse) -> float:
    """The value of the runtime's memory-share flag that ``use`` (one configuration) was
    priced with: its default, or where :func:`memory_use` raised it (the default could not
    hold what the engine loads at start-up), the whole board less what lives outside the
    share (``static``), or (``hbm``) :func:`raised_hbm_share`."""
    default = use.default_share
    if runtime.memory_share_of == "free" or default >= 1.0:
        return default
    if runtime.memory_share_of == "static":
        if float(use.usable_bytes) < use.capacity_bytes:
            return default
        share = 1.0 - (float(use.activation_bytes) + use.reserve_bytes) / use.capacity_bytes
        return math.floor(share * 1000.0) / 1000.0
    if float(use.usable_bytes) <= default * use.capacity_bytes:
        return default
    return raised_hbm_share(capacity_bytes=use.capacity_bytes)
