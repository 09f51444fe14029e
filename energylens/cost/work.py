"""FLOPs, bytes and GEMM shape of one op at given rank sizes (scalars or numpy arrays).

Phase ranks (``b, m, p, t, n``) may be numpy arrays, so one call prices an op at several
context lengths at once. Under a causal mask over (m, p) the op visits
sum_{i=1..m} min(p - m + i, window) query-key pairs instead of m * p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from energylens.cost import gguf
from energylens.model.spec import (
    HELD_MARK,
    STATE_ELEMENT_BYTES,
    STATE_TENSORS,
    STORAGE_MARK,
    Einsum,
    TensorRef,
)

Size = float | np.ndarray
ACTIVATION_BYTES = 2.0  # bf16 activations (and the KV cache unless its dtype says otherwise)
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp32": 4.0,
               "mxfp4": 4.25 / 8.0,  # OCP MX: 4-bit elements + one 8-bit scale per 32
               # AWQ/GPTQ releases: 4-bit integers + a 16-bit scale and a 4-bit zero point
               # per group of 128 (the group size both methods' releases use)
               "int4": (4.0 + 20.0 / 128.0) / 8.0,
               # NVFP4: 4-bit E2M1 elements + one FP8 E4M3 scale per 16 (NVIDIA's format)
               "nvfp4": 4.5 / 8.0,
               **gguf.STORAGE_BYTES}  # llama.cpp's block formats (cost/gguf.py)
#: Checkpoint formats that quantise only the routed experts (gpt-oss: MXFP4 experts,
#: bf16 attention, router, embeddings); other weights stay bf16.
EXPERT_ONLY_DTYPES = ("mxfp4",)
#: Tensor-core dtype a weight dtype computes in (MXFP4 weights are dequantised to bf16
#: in the GEMM on GPUs without FP4 units, and vLLM 0.11 keeps bf16 activations; AWQ/GPTQ
#: are weight-only formats).
COMPUTE_DTYPE = {"mxfp4": "bf16",
                 "int4": "bf16",  # weight-only: dequantised in the GEMM, 16-bit activations
                 "nvfp4": "fp4",  # FP4 tensor cores (bf16 where a GPU has none)
                 **gguf.GGUF_COMPUTE_DTYPE}
KV_TENSORS = ("KC", "VC", "LC", "IC")  # GQA keys/values; MLA latent; DSA index keys
#: DeepSeek Sparse Attention's index keys (the cache IC and the keys appended to it, IKC)
#: and quantised index queries (IQ8): FP8 E4M3 with one fp32 scale per 128-element block
#: whatever the KV cache's dtype (DeepSeek-V3.2's reference code, act_quant with block
#: 128; vLLM's and SGLang's indexer caches store the keys so: 132 bytes a token of a
#: 128-wide index head; recalled, not re-read here).
FP8_BLOCK_TENSORS = ("IC", "IKC", "IQ8")
FP8_BLOCK_BYTES = 1.0 + 4.0 / 128.0
EXPERT_WEIGHT_RANK = "x"
ACTIVE_EXPERTS = "x_active"  # size key: distinct experts whose weights are read


@dataclass(frozen=True, kw_only=True)
class GemmShape:
    """Rows (tokens), columns, reduction length and independent batch of a contraction."""

    m: Size
    n: Size
    k: Size
    batch: Size


def causal_pairs(*, m: Size, p: Size, window: float | None) -> Size:
    """Query-key pairs visited by m new queries at the end of a context of p keys."""
    first = p - m + 1  # keys visible to the first new query
    if window is None:
        return m * (first + p) / 2
    w = window
    full = m * (first + p) / 2
    saturated = m * w
    partial = (w * (w + 1) / 2 - (first - 1) * first / 2) + (p - w) * w
    return np.where(p <= w, full, np.where(first >= w, saturated, partial))


def rank_product(ranks: tuple[str, ...], sizes: dict[str, Size]) -> Size:
    """Product of ``sizes`` over ``ranks``, multiplied in rank order from 1.0."""
    out: Size = 1.0
    for rank in ranks:
        out = out * sizes[rank]
    return out


def pair_factor(op: Einsum, sizes: dict[str, Size], window: float | None) -> Size:
    """Visited (m, p) pairs relative to the full m * p rectangle (1 without a mask)."""
    if op.causal is None:
        return 1.0
    q, k = op.causal
    return causal_pairs(m=sizes[q], p=sizes[k], window=window) / (sizes[q] * sizes[k])


def op_flops(*, op: Einsum, sizes: dict[str, Size], window: float | None) -> Size:
    """FLOPs of ``op``: 2 x all ranks for a contraction, per-element cost otherwise."""
    factor = pair_factor(op, sizes, window)
    if op.kind == "contraction":
        return 2.0 * rank_product(op.ranks, sizes) * factor
    return op.flops_per_element * rank_product(op.output.ranks, sizes) * factor


def tensor_bytes(*, tensor: TensorRef, sizes: dict[str, Size], weight_dtype: str,
                 window: float | None, kv_dtype: str = "bf16", cache: bool = False,
                 expert_weight: bool = False) -> Size:
    """Bytes of ``tensor``: weights in the weight dtype (``expert_weight``: a grouped
    expert GEMM's, of which only the ``x_active`` experts' matrices are read); the KV cache
    (the cached tensors read by attention, and ``cache`` = a persistent output appended to
    it) in the KV dtype, clipped to the window; a recurrent SSM state in its own dtype;
    other activations in bf16."""
    if tensor.name.startswith("W"):
        ranks = sizes
        if expert_weight and ACTIVE_EXPERTS in sizes:
            ranks = {**sizes, EXPERT_WEIGHT_RANK: sizes[ACTIVE_EXPERTS]}
        return rank_product(tensor.ranks, ranks) * storage_bytes(weight_dtype_of(tensor, weight_dtype))
    element: Size = activation_element_bytes(tensor=tensor, kv_dtype=kv_dtype, cache=cache)
    if tensor.name in STATE_TENSORS:
        element = sizes.get(STATE_ELEMENT_BYTES, ACTIVATION_BYTES)
    if tensor.name in KV_TENSORS and window is not None:
        kv_len = np.minimum(sizes["p"], window + sizes["m"] - 1)
        return rank_product(tensor.ranks, {**sizes, "p": kv_len}) * element
    return rank_product(tensor.ranks, sizes) * element


def activation_element_bytes(*, tensor: TensorRef, kv_dtype: str, cache: bool) -> float:
    """Bytes per element of non-weight ``tensor``: the KV dtype for the cache, the dtype
    of a quantised activation (:func:`quantised_tensor`), else bf16."""
    if tensor.name in FP8_BLOCK_TENSORS:
        return FP8_BLOCK_BYTES
    if cache or tensor.name in KV_TENSORS:
        return DTYPE_BYTES[kv_dtype]
    _, mark, dtype = tensor.name.partition(QUANTISED_MARK)
    return DTYPE_BYTES[dtype] if mark else ACTIVATION_BYTES


#: Separates an activation's name from the dtype it was quantised to (``N:fp8``); no name
#: in a layer spec contains it.
QUANTISED_MARK = ":"
#: Storage dtypes whose GEMMs read quantised activations where the GPU computes in them
#: (W8A8 and W4A4): every other format keeps 16-bit activations (weight-only).
ACTIVATION_QUANTISED_DTYPES = ("fp8", "int8", "nvfp4")


def quantised_tensor(tensor: TensorRef, dtype: str) -> TensorRef:
    """``tensor`` quantised to ``dtype`` (an FP8/INT8/FP4 GEMM's input)."""
    return TensorRef(name=f"{tensor.name}{QUANTISED_MARK}{dtype}", ranks=tensor.ranks)


#: Weights a quantised checkpoint keeps in 16 bits: the LM head and the MoE router. Their
#: quantisation configs exclude them (Qwen3-30B-A3B-FP8 ``modules_to_not_convert``: lm_head
#: and every ``mlp.gate``; MiniMax-M2.5 and GLM-5-FP8 likewise; NVIDIA's Llama-3.1-70B-FP8
#: and Qwen3-235B-A22B-NVFP4 ``exclude_modules``: lm_head, the routers; DeepSeek-V3's card:
#: embedding, output head and MoE gating stay in higher precision). The embedding table is a
#: lookup, not a linear layer, and stays 16-bit too (:data:`EMBEDDING_BYTES`). A Gated
#: DeltaNet mixer's b and a projections (``WGB``, ``WGA``: one output per value head, 64 in
#: Qwen3.5, below one 128-wide block of its FP8 release's block scales) are assumed kept in
#: 16 bits (NVIDIA's Qwen3.5-397B-A17B-NVFP4 ``ignore`` list keeps every linear-attention
#: projection so).
UNQUANTISED_WEIGHTS = ("WLM", "WR", "WGB", "WGA")
EMBEDDING_BYTES = 2.0


def weight_dtype_of(tensor: TensorRef, weight_dtype: str) -> str:
    """Storage dtype of weight ``tensor`` under checkpoint dtype ``weight_dtype`` (16 bits
    where the checkpoint keeps it so: :data:`UNQUANTISED_WEIGHTS`, and the weights a model's
    ``held_16bit`` marks for that dtype; a GGUF file type's format for it, cost/gguf.py;
    under ``gguf`` the bytes the model's file stores it in, which its name carries)."""
    if weight_dtype in ("bf16", "fp16"):
        return weight_dtype
    unmarked, _, stored = tensor.name.partition(STORAGE_MARK)
    if weight_dtype == gguf.FILE_DTYPE:  # as the model's GGUF file stores it
        return gguf.STORAGE_PREFIX + stored if stored else "fp16"
    name, _, held = unmarked.partition(HELD_MARK)
    if weight_dtype in gguf.GGUF_DTYPES:  # a GGUF file type: its format for this tensor
        return gguf.gguf_tensor_type(name=name, file_type=weight_dtype,
                                     unquantised=name in UNQUANTISED_WEIGHTS)
    if name in UNQUANTISED_WEIGHTS or weight_dtype in held.split("_"):
        return "bf16"
    if weight_dtype in EXPERT_ONLY_DTYPES and EXPERT_WEIGHT_RANK not in tensor.ranks:
        return "bf16"
    return weight_dtype


def storage_bytes(storage: str) -> float:
    """Bytes a weight takes in ``storage`` (a :func:`weight_dtype_of` result)."""
    known = DTYPE_BYTES.get(storage)  # every storage but a GGUF file's own
    if known is not None:
        return known
    stored = gguf.storage_bytes(storage)
    if stored is None:
        raise KeyError(storage)
    return stored


def compute_dtype(storage: str) -> str:
    """The tensor-core dtype a weight of ``storage`` computes in."""
    if gguf.storage_bytes(storage) is not None:
        return gguf.GGUF_COMPUTE_DTYPE[gguf.FILE_DTYPE]
    return COMPUTE_DTYPE.get(storage, storage)


@dataclass(frozen=True, kw_only=True)
class GemmRanks:
    """Which ranks of a contraction are its GEMM's rows, columns, reduction and batch."""

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    red: tuple[str, ...]
    batch: tuple[str, ...]


def gemm_ranks(op: Einsum) -> GemmRanks:
    """Batch = ranks on all three tensors; M = output x first input; N = output x second."""
    first, second = op.inputs
    out = set(op.output.ranks)
    batch = [r for r in op.output.ranks if r in first.ranks and r in second.ranks]
    return GemmRanks(
        rows=tuple(r for r in op.output.ranks if r in first.ranks and r not in batch),
        cols=tuple(r for r in op.output.ranks if r in second.ranks and r not in first.ranks),
        red=tuple(r for r in op.ranks if r not in out), batch=tuple(batch))


def grouped_expert(op: Einsum) -> bool:
    """Whether ``op`` is a grouped expert GEMM: one weight matrix per expert, the expert
    rank a batch rank (the router's ``WR[d,x]`` holds one column per expert, read whole)."""
    return op.kind == "contraction" and EXPERT_WEIGHT_RANK in gemm_ranks(op).batch


def gemm_shape(*, op: Einsum, sizes: dict[str, Size], window: float | None,
               ranks: GemmRanks | None = None) -> GemmShape:
    """GEMM shape of contraction ``op`` (``ranks``: its :func:`gemm_ranks`, if known)."""
    ranks = ranks or gemm_ranks(op)
    n = rank_product(ranks.cols, sizes)
    k = rank_product(ranks.red, sizes)
    if op.causal and op.causal[1] in ranks.cols:
        n = n * pair_factor(op, sizes, window)
    elif op.causal and op.causal[1] in ranks.red:
        k = k * pair_factor(op, sizes, window)
    return GemmShape(m=rank_product(ranks.rows, sizes), n=n, k=k, batch=rank_product(ranks.batch, sizes))
