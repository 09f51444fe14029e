"""Price single Vidur-profiled operators with the cost model's own kernels.

Vidur (``mlp.csv``) times each op of one transformer layer on ONE GPU at the shape it
has under tensor parallelism ``num_tensor_parallel_workers``, with ``num_tokens`` tokens
in flight. Each Vidur op is exactly one kernel of our family spec, built from the
geometry columns alone (``n_head, n_kv_head, n_embd, n_expanded_embd, use_gated_mlp``):

==========================  =======================================================
Vidur op                    our kernel (family spec, fusions ``qkv`` + ``gate_up``)
==========================  =======================================================
``attn_pre_proj``           ``q+k+v`` (fused QKV GEMM)
``attn_post_proj``          ``o``
``mlp_up_proj``             ``gate+up`` (gated MLP) or ``up`` (plain MLP)
``mlp_down_proj``           ``down``
``mlp_act``                 ``act`` (SiLU x mul, or GELU)
``input_layernorm``         ``norm1``
``post_attention_layernorm`` ``norm2``
``attn_rope``               ``rope``
``add``                     ``res1``
==========================  =======================================================

Predicted, never fitted: ``emb`` (the vocabulary-parallel embedding gather) is the head's
``embed`` kernel (it reads and writes one row per token; each rank gathers every token's
row, masked to its vocabulary shard), priced with the elementwise constants fitted on
``add``. It is 77-83 % fast on every profile: the profiled gather moves a 4,096-wide
fp16 row per ~30 ns (about 0.3 TB/s on H100, a tenth of the copy rate the model gives it).
No fit reads it; in a step it is under 1 % of a prefill. Phase sizes are
``{b: num_tokens, m: 1, n: 1, p: 1, t: 1}``; fp16 runs at the bf16 rate. ``num_tokens`` may
be a numpy array (one call per op and shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import Size
from energylens.hardware import GPU
from energylens.model.families import family_part, parse_layer

#: Vidur op -> kernel name for (gated, plain) MLPs.
VIDUR_OPS: dict[str, tuple[str, str]] = {
    "attn_pre_proj": ("q+k+v", "q+k+v"),
    "attn_post_proj": ("o", "o"),
    "mlp_up_proj": ("gate+up", "up"),
    "mlp_down_proj": ("down", "down"),
    "mlp_act": ("act", "act"),
    "input_layernorm": ("norm1", "norm1"),
    "post_attention_layernorm": ("norm2", "norm2"),
    "attn_rope": ("rope", "rope"),
    "add": ("res1", "res1"),
}
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: Vidur ops predicted by a kernel of the model's head, never fitted (``VIDUR_OPS`` are).
HEAD_OPS: dict[str, str] = {"emb": "embed"}
VIDUR_FUSIONS = frozenset({"qkv", "gate_up"})


@dataclass(frozen=True)
class Geometry:
    """The shape columns of one Vidur ``mlp.csv`` row (without ``num_tokens``)."""

    n_head: int
    n_kv_head: int
    n_embd: int
    n_expanded_embd: int
    use_gated_mlp: bool
    tp: int

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Geometry:
        """From a loaded row's ``input`` dict."""
        return cls(n_head=int(values["n_head"]), n_kv_head=int(values["n_kv_head"]),
                   n_embd=int(values["n_embd"]), n_expanded_embd=int(values["n_expanded_embd"]),
                   use_gated_mlp=bool(values["use_gated_mlp"]),
                   tp=int(values["num_tensor_parallel_workers"]))


@cache
def layer_kernels(geometry: Geometry) -> dict[str, Kernel]:
    """Kernels of one layer at the sharded shape, by kernel name."""
    g = geometry
    mlp = family_part("mlp_gated" if g.use_gated_mlp else "mlp_plain")
    layer = parse_layer(name="vidur", parts=[family_part("attention"), mlp], norm="rmsnorm")
    sizes = {"d": g.n_embd, "g": g.n_kv_head, "r": g.n_head // g.n_kv_head,
             "e": g.n_embd // g.n_head, "f": g.n_expanded_embd}
    compiled = compile_layer(layer=layer, sizes=sizes, degrees={"tp": g.tp}, fusion=VIDUR_FUSIONS)
    # the head's gather does not depend on the vocabulary: one row per TP rank stands in
    head = parse_layer(name="head", parts=[family_part("head")], norm="rmsnorm")
    heads = compile_layer(layer=head, sizes={"d": g.n_embd, "v": g.tp}, degrees={"tp": g.tp},
                          fusion=frozenset())
    return {k.name: k for k in (*compiled.kernels, *heads.kernels)}


def kernel_for(*, op: str, geometry: Geometry) -> Kernel:
    """The kernel that Vidur op ``op`` times; KeyError if the op is not modelled."""
    name = HEAD_OPS[op] if op in HEAD_OPS else VIDUR_OPS[op][0 if geometry.use_gated_mlp else 1]
    return layer_kernels(geometry)[name]


def op_latency_s(*, op: str, geometry: Geometry, num_tokens: float | np.ndarray, gpu: GPU,
                 constants: KernelConstants) -> float | np.ndarray:
    """Predicted kernel time (s) of Vidur op ``op`` at ``num_tokens`` tokens."""
    kernel = kernel_for(op=op, geometry=geometry)
    tokens = np.asarray(num_tokens, dtype=float)
    phase: dict[str, Size] = {"b": tokens, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}
    clock = ClockState(ratio=1.0, dynamic_scale=1.0)
    cost = kernel_cost(kernel=kernel, phase=phase, window=None, gpu=gpu, constants=constants,
                       clock=clock, weight_dtype="fp16")
    return cost.latency_s
