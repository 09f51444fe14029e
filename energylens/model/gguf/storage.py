"""Each weight's bytes as a GGUF file stores it: the ggml types of its tensors, read from
the header and summed over the layers per family weight (``ModelConfig.gguf_storage``).

A file's type name (``general.file_type``: Q4_K_M, IQ4_XS...) says only which format most
tensors take; llama-quantize gives some tensors more bits by rules that differ between
types and releases, and other quantisers (imatrix mixes, per-tensor overrides) follow their
own. The header lists every tensor's type, so the bytes a weight takes are read, not
inferred: exact for every type ggml knows, whatever the file's name.
"""

from __future__ import annotations

import re

from energylens.model.gguf.reader import GGUFHeader

#: ggml's tensor types (``enum ggml_type`` in ``ggml.h``): name, weights per block and bytes
#: per block (``type_traits`` in ``ggml.c``, the block structs of ``ggml-common.h``;
#: recalled, not re-read here). Types ggml removed (4, 5, 31-33, 36-38) and the integer and
#: Q8_K/Q8_1 intermediate types no weight is stored in are left out.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 28: ("F64", 1, 8),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 22: ("IQ2_S", 256, 82),
    18: ("IQ3_XXS", 256, 98), 21: ("IQ3_S", 256, 110), 19: ("IQ1_S", 256, 50),
    29: ("IQ1_M", 256, 56), 20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17)}
#: llama.cpp's tensor names (``blk.N.<role>.weight``, ``llama-arch.cpp``; recalled) -> the
#: family weights each one is. A fused ``attn_qkv`` (Phi-3) is all three projections; MLA's
#: ``attn_kv_b`` both up-projections (files since llama.cpp stores MLA absorbed split it
#: into ``attn_k_b`` and ``attn_v_b``).
LAYER_ROLES = {
    "attn_q": ("WQ",), "attn_k": ("WK",), "attn_v": ("WV",), "attn_qkv": ("WQ", "WK", "WV"),
    "attn_output": ("WO",), "attn_q_a": ("WQA",), "attn_q_b": ("WQB",),
    "attn_kv_a_mqa": ("WKVA",), "attn_kv_b": ("WUK", "WUV"), "attn_k_b": ("WUK",),
    "attn_v_b": ("WUV",), "ffn_gate": ("WG",), "ffn_up": ("WU",), "ffn_down": ("WD",),
    "ffn_gate_inp": ("WR",), "ffn_gate_exps": ("WEG",), "ffn_up_exps": ("WEU",),
    "ffn_down_exps": ("WED",), "ffn_gate_shexp": ("WSG",), "ffn_up_shexp": ("WSU",),
    "ffn_down_shexp": ("WSD",)}
#: Tensors outside the layers: the LM head and the embedding table (``EMB``, which the
#: LM head reads too where the file has no ``output.weight``).
TOP_ROLES = {"output": "WLM", "token_embd": "EMB"}
#: A layer tensor: ``blk.<layer>.<role>.weight``; the first MoE files stored each expert
#: apart, ``blk.<layer>.ffn_up.<expert>.weight`` (read as the stacked ``ffn_up_exps``).
_LAYER_TENSOR = re.compile(r"^blk\.\d+\.([a-z_]+?)(?:\.(\d+))?\.weight$")


def gguf_storage(header: GGUFHeader) -> tuple[tuple[str, float], ...]:
    """Bytes per weight of each family weight (and ``EMB``) as ``header``'s file stores
    it, summed over its layers; empty where the header lists no attention output
    projection (a file of tensors not read as a decoder's). ModelConfigError naming the
    tensor for a ggml type not known."""
    totals: dict[str, list[float]] = {}  # weight -> [bytes, elements]
    fused_gate_up = not any(".ffn_gate." in name for name in header.tensors)
    for name, (dims, code) in header.tensors.items():
        weights = _weights_of(name, fused_gate_up=fused_gate_up)
        if not weights:
            continue
        if code not in GGML_TYPES:
            raise header.error(f"tensor {name} is of ggml type {code}, which is not priced "
                               f"(priced: {', '.join(t for t, _, _ in GGML_TYPES.values())})")
        _, block, size = GGML_TYPES[code]
        elements = 1.0
        for dim in dims:
            elements *= dim
        for weight in weights:
            total = totals.setdefault(weight, [0.0, 0.0])
            total[0] += elements * size / block
            total[1] += elements
    if "WO" not in totals:
        return ()
    if "WLM" not in totals and "EMB" in totals:  # tied: the LM head reads the embedding
        totals["WLM"] = totals["EMB"]
    return tuple(sorted((w, b / n) for w, (b, n) in totals.items() if n > 0))


def _weights_of(name: str, *, fused_gate_up: bool) -> tuple[str, ...]:
    """The family weights tensor ``name`` is (none for norms, biases, rotary tables)."""
    top = name.removesuffix(".weight")
    if top in TOP_ROLES:
        return (TOP_ROLES[top],)
    match = _LAYER_TENSOR.match(name)
    if match is None:
        return ()
    role, expert = match.groups()
    if expert is not None:
        role = f"{role}_exps"
    if role == "ffn_up" and fused_gate_up:  # Phi-3: gate and up one tensor
        return ("WG", "WU")
    return LAYER_ROLES.get(role, ())
