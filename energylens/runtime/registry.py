"""Runtimes by name, registered once by their modules."""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from energylens.errors import UnknownRuntimeError

if TYPE_CHECKING:
    from energylens.runtime.profile import RuntimeProfile

_RUNTIMES: dict[str, RuntimeProfile] = {}


def register(profile: RuntimeProfile) -> RuntimeProfile:
    """Add a runtime profile under its name (once)."""
    if profile.name in _RUNTIMES:
        raise ValueError(f"runtime {profile.name!r} registered twice")
    _RUNTIMES[profile.name] = profile
    return profile


def get_runtime(name: str) -> RuntimeProfile:
    """The profile of runtime ``name`` (a registry name or another spelling of it,
    :data:`SPELLINGS`); one-line error with the known names otherwise."""
    key = runtime_name(name)
    if key in FRONT_ENDS:
        raise UnknownRuntimeError(f"{name!r} is not an engine of its own: {FRONT_ENDS[key]}")
    if key not in _RUNTIMES:
        close = difflib.get_close_matches(key, list(_RUNTIMES), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UnknownRuntimeError(f"unknown runtime {name!r}; {hint}known: {', '.join(_RUNTIMES)}")
    return _RUNTIMES[key]


#: Other spellings of runtimes (published files, engines' own names) -> registry names.
SPELLINGS = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm",
             "deepspeed": "deepspeed-mii", "mii": "deepspeed-mii",
             # FastGen is the engine MII serves with (its blog and README name it so)
             "deepspeed-fastgen": "deepspeed-mii", "fastgen": "deepspeed-mii",
             # LMDeploy's own engine; llama.cpp's server binary
             "turbomind": "lmdeploy", "llama-server": "llama.cpp", "llamacpp": "llama.cpp",
             "llama-cpp": "llama.cpp", "llama_cpp": "llama.cpp",
             "text-generation-inference": "tgi", "hf-tgi": "tgi",
             # vLLM's V1 engine, the one the profile describes (the default since 0.8);
             # its OpenAI-compatible server (the vllm/vllm-openai image)
             "vllm-v1": "vllm", "vllm-openai": "vllm",
             # the engines the trtllm and lmdeploy profiles describe, named with it
             "trtllm-pytorch": "trtllm", "tensorrt-llm-pytorch": "trtllm",
             "lmdeploy-turbomind": "lmdeploy"}
#: Servers that run one of the engines rather than an engine of their own -> what to give
#: instead (each one's documentation, recalled).
FRONT_ENDS = {
    "nim": "NVIDIA NIM serves a model through TensorRT-LLM, vLLM or SGLang (its profile "
           "says which): give that engine (--runtime trtllm|vllm|sglang)",
    "dynamo": "NVIDIA Dynamo routes requests to TensorRT-LLM, vLLM or SGLang workers: give "
              "the workers' engine (--runtime trtllm|vllm|sglang); its router and front end "
              "are not priced",
    "triton": "Triton Inference Server runs a model through its TensorRT-LLM or vLLM backend: "
              "give that engine (--runtime trtllm|vllm)",
    "ollama": "Ollama runs ggml's kernels as llama.cpp does, behind a server of its own: "
              "--runtime llama.cpp prices the kernels (Ollama's scheduler is not modelled)"}


def runtime_name(spelling: str) -> str:
    """The registry name of a runtime spelled ``spelling`` (``tensorrt-llm``, ``TensorRT
    LLM`` -> ``trtllm``; spaces and underscores read as hyphens); anything else lower-cased
    as it is."""
    key = spelling.strip().lower()
    joined = re.sub(r"[\s_]+", "-", key)
    for name in (key, joined):
        if name in SPELLINGS:
            return SPELLINGS[name]
        if name in _RUNTIMES or name in FRONT_ENDS:
            return name
    return key


def runtime_names() -> tuple[str, ...]:
    """Every registered runtime, in registration order."""
    return tuple(_RUNTIMES)


def runtimes_storing(*, weight_dtype: str | None = None,
                     kv_dtype: str | None = None) -> tuple[str, ...]:
    """The registered runtimes that run ``weight_dtype`` weights and store a ``kv_dtype``
    KV cache (each where given)."""
    return tuple(name for name, p in _RUNTIMES.items()
                 if (weight_dtype is None or weight_dtype in p.weight_dtypes)
                 and (kv_dtype is None or kv_dtype in p.kv_dtypes))


def runtime_names_on(*, vendor: str) -> tuple[str, ...]:
    """The registered runtimes that run on GPUs of ``vendor`` (``habana``)."""
    return tuple(name for name, profile in _RUNTIMES.items() if vendor in profile.gpu_vendors)
