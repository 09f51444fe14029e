"""llama.cpp's GGUF weight formats: the bytes a weight takes and which tensors a file type
keeps in more bits.

A GGUF file type (``llama-quantize ... Q4_K_M``) is a checkpoint dtype: most weights in
one block format, some in another. The block formats store a fixed number of bytes per
block of weights (ggml's ``block_q8_0``, ``block_q4_0``, ``block_q4_K``, ``block_q5_K``,
``block_q6_K`` in ``ggml-common.h``; recalled, not re-read here):

- Q8_0: 32 weights in 34 bytes (one fp16 scale, 32 int8): 8.5 bits a weight;
- Q4_0: 32 weights in 18 bytes (one fp16 scale, 32 nibbles): 4.5 bits;
- Q4_K: 256 weights in 144 bytes (fp16 scale and min, 12 bytes of 6-bit sub-block scales
  and mins, 128 bytes of nibbles): 4.5 bits;
- Q5_K: 256 weights in 176 bytes (Q4_K's plus 32 bytes of fifth bits): 5.5 bits;
- Q6_K: 256 weights in 210 bytes (128 low nibbles, 64 bytes of high bits, 16 int8 scales,
  one fp16 scale): 6.5625 bits.

What ``llama-quantize`` gives each tensor (``llama_tensor_get_type`` in
``src/llama-quant.cpp``; recalled, not re-read here): the output (LM head) in Q6_K unless
the type is Q8_0; for Q4_K_M and Q5_K_M, ``attn_v`` and every ``ffn_down`` (dense, routed
experts, shared expert) in Q6_K on the layers ``use_more_bits`` picks, the first and last
eighth of the layers and every third layer between, half of them, the rest in Q4_K / Q5_K;
the MoE router (``ffn_gate_inp``) left unquantised. A layer group prices its layers alike,
so a more-bits tensor is stored at the mean of its two formats (exact for the bytes summed
over the layers). The weights compute in fp16 (:data:`GGUF_COMPUTE_DTYPE`): llama.cpp's
MMQ kernels run int8 MMA on quantised activations where the GPU has them, which is not
modelled.
"""

from __future__ import annotations

#: Bytes a weight takes in each GGUF block format.
BLOCK_BYTES = {"q8_0": 34.0 / 32.0, "q4_0": 18.0 / 32.0, "q4_k": 144.0 / 256.0,
               "q5_k": 176.0 / 256.0, "q6_k": 210.0 / 256.0}
#: File types with a more-bits share: (most tensors' format, the more-bits tensors').
MIXES = {"q4_k_m": ("q4_k", "q6_k"), "q5_k_m": ("q5_k", "q6_k")}
#: The GGUF file types a deployment may choose as its weight dtype.
GGUF_DTYPES = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")
#: Family weights llama.cpp names ``attn_v`` and ``ffn_down`` / ``ffn_down_exps`` /
#: ``ffn_down_shexp``: the value projection and every FFN down projection.
MORE_BITS_WEIGHTS = ("WV", "WD", "WED", "WSD")
LM_HEAD = "WLM"
#: Storage of a more-bits tensor of a mix: half its layers in each format.
BLENDS = {f"{base}|{more}": (BLOCK_BYTES[base] + BLOCK_BYTES[more]) / 2.0
          for base, more in MIXES.values()}
#: Bytes per weight of every storage name :func:`gguf_tensor_type` returns.
STORAGE_BYTES = {**BLOCK_BYTES, **BLENDS}
#: The weight dtype "each tensor as its GGUF file stores it": a model read from a ``.gguf``
#: file carries each weight's bytes from the file's tensor types (``ModelConfig.
#: gguf_storage``), whatever its file type's name.
FILE_DTYPE = "gguf"
#: Tensor-core dtype every GGUF storage computes in (dequantised to fp16).
GGUF_COMPUTE_DTYPE = dict.fromkeys((*STORAGE_BYTES, *GGUF_DTYPES, FILE_DTYPE), "fp16")
#: Storage name of a weight of a GGUF file (:data:`FILE_DTYPE`): this prefix and the
#: digits its name's mark carries (``WD__gguf_615234375`` -> ``gguf_615234375``: 0.615234375
#: bytes a weight; energylens.model.spec.STORAGE_MARK).
STORAGE_PREFIX = "gguf_"


def storage_bytes(name: str) -> float | None:
    """Bytes a weight takes under storage ``name`` (:data:`STORAGE_PREFIX` and billionths
    of a byte); None for any other name."""
    digits = name.removeprefix(STORAGE_PREFIX)
    return int(digits) / 1e9 if digits != name and digits.isdigit() else None


def gguf_tensor_type(*, name: str, file_type: str, unquantised: bool) -> str:
    """Storage of weight ``name`` in a GGUF file of ``file_type``: a block format, a
    blend of two (a more-bits tensor of a mix), or ``bf16`` where llama-quantize leaves it
    unquantised (``unquantised``: a router or gate)."""
    if name == LM_HEAD:
        return "q8_0" if file_type == "q8_0" else "q6_k"
    if unquantised:
        return "bf16"
    base, more = MIXES.get(file_type, (file_type, file_type))
    if more != base and name in MORE_BITS_WEIGHTS:
        return f"{base}|{more}"
    return base
