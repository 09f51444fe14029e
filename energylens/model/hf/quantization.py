"""The weight format a checkpoint declares: ``quantization_config`` in its ``config.json``
or, for NVIDIA ModelOpt releases, the ``hf_quant_config.json`` beside it.

Formats map onto the weight dtypes of :mod:`energylens.cost.work`: FP8 (``fp8``; any
block or tensor scaling), AWQ/GPTQ and other 4-bit integer weights (``int4``), NVFP4
(``nvfp4``) and MXFP4 (``mxfp4``, routed experts only). Anything else is read as 16-bit
weights with a warning saying so. The KV-cache precision a checkpoint declares
(``kv_cache_quant_algo``, ``kv_cache_scheme``) is read too: FP8 or none.
"""

from __future__ import annotations

from typing import Any

from energylens.model.hf.reader import HFConfig

_FP8_ALGOS = ("FP8", "FP8_BLOCK", "FP8_PER_CHANNEL_PER_TOKEN", "W8A8_FP8")


def quantization_section(*sections: HFConfig | None) -> HFConfig | None:
    """The first of ``sections`` that is present: the one a checkpoint's quantisation is
    read from."""
    return next((s for s in sections if s is not None), None)


def declared_weight_dtype(*sections: HFConfig | None) -> tuple[str | None, str | None]:
    """(weight dtype, warning) from the first of ``sections`` that is present: a
    ``quantization_config`` object or the ``quantization`` object of an
    ``hf_quant_config.json``. (None, None) when none is present."""
    section = quantization_section(*sections)
    return (None, None) if section is None else _dtype_of(section)


def _dtype_of(q: HFConfig) -> tuple[str | None, str | None]:
    method = (q.text("quant_method") or "").lower()
    algo = (q.text("quant_algo") or "").upper()
    if method == "fp8" or algo in _FP8_ALGOS:
        return "fp8", None
    if algo == "NVFP4":
        return "nvfp4", None
    if method == "mxfp4" or algo == "MXFP4":
        return "mxfp4", None
    if algo.startswith("W4A16") or method in ("awq", "gptq"):
        bits = q.integer("bits", "w_bit", default=4)
        if bits == 4:
            return "int4", None
        return None, f"{bits}-bit {method or algo} weights are not modelled: read as 16-bit"
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    what = method or algo or "quantization_config"
    return None, f"{what!r} weights are not modelled: read as 16-bit"


def _compressed_tensors(q: HFConfig) -> tuple[str | None, str | None]:
    """The weights of the first config group: 8-bit float, 4-bit float per 16, 4-bit int."""
    groups = q.raw("config_groups")
    weights: Any = None
    if isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                weights = group["weights"]
                break
    if weights is None:
        return None, "compressed-tensors without weight settings: read as 16-bit"
    bits, kind = weights.get("num_bits"), weights.get("type")
    if bits == 8 and kind == "float":
        return "fp8", None
    if bits == 4 and kind == "float":
        return "nvfp4", None
    if bits == 4 and kind == "int":
        return "int4", None
    return None, f"compressed-tensors {bits}-bit {kind} weights are not modelled: read as 16-bit"


def declared_kv_dtype(*sections: HFConfig | None) -> str | None:
    """``fp8`` where the first present section declares an 8-bit float KV cache
    (ModelOpt ``kv_cache_quant_algo: FP8``, compressed-tensors ``kv_cache_scheme`` of 8-bit
    floats), else None (the cache in the activations' 16 bits)."""
    for section in sections:
        if section is None:
            continue
        algo = (section.text("kv_cache_quant_algo") or "").upper()
        scheme = section.raw("kv_cache_scheme")
        if algo == "FP8" or (isinstance(scheme, dict) and scheme.get("num_bits") == 8
                             and scheme.get("type") == "float"):
            return "fp8"
        return None
    return None
