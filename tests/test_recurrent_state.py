"""A recurrent mixer's state (a persistent output without a token rank) is held once per
sequence, whatever the context; K/V (with a token rank) grow with every token."""

from __future__ import annotations

import dataclasses

import pytest

from energylens.cost.memory import memory_use
from energylens.cost.work import ACTIVATION_BYTES
from energylens.hardware import load_gpu
from energylens.model import build_graph, get_model
from energylens.model.families import LayerGroup, parse_layer
from energylens.runtime import DEFAULT_RUNTIME, get_runtime

# A toy recurrent mixer: its state S[b,h,s] is rewritten every step.
_PART = {"ops": {
    "norm1": "N[b,m,d] = rmsnorm_d(X[b,m,d])",
    "inp": "U[b,m,h,s] = N[b,m,d] * WU[d,h,s]",
    "scan": {"einsum": "SN[b,h,s] = add(S[b,h,s], U[b,m,h,s])", "persistent": True},
    "out": "Y[b,m,d] = U[b,m,h,s] * WO[h,s,d]",
}}


def _memory(graph, *, sequences: float, context: float) -> tuple[float, float]:
    use = memory_use(graph=graph, gpu=load_gpu("h100"), runtime=get_runtime(DEFAULT_RUNTIME),
                     degrees={"tp": 1, "etp": 1, "ep": 1}, pp=1, weight_dtype="bf16",
                     kv_dtype="bf16", sequences=sequences, context_tokens=context)
    return use.kv_cache_bytes, use.state_bytes


def test_state_is_per_sequence_and_kv_per_token() -> None:
    graph = build_graph(get_model("llama-3.2-1b"))
    mixer = LayerGroup(name="mixer", layer=parse_layer(name="mixer", parts=[_PART], norm="rmsnorm"),
                       count=3.0, window=None, sizes={"d": 2048, "h": 4, "s": 16}, is_moe=False)
    hybrid = dataclasses.replace(graph, groups=(*graph.groups, mixer))
    kv_short, state_short = _memory(hybrid, sequences=2, context=10)
    kv_long, state_long = _memory(hybrid, sequences=2, context=1000)
    assert state_short == state_long == pytest.approx(3 * 2 * 4 * 16 * ACTIVATION_BYTES)
    assert kv_long == pytest.approx(100 * kv_short)  # only the attention layers' K and V
    assert (kv_long, 0.0) == _memory(graph, sequences=2, context=1000)
