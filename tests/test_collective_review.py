"""The head's tensor-parallel all-gather at hand-computed sizes (Llama-3.1-8B: vocabulary
128,256)."""

from __future__ import annotations

from energylens.cost.kernels import Collective, compile_layer
from energylens.cost.work import tensor_bytes
from energylens.model.families import build_graph
from energylens.model.zoo import get_model

VOCAB = 128_256


def _head(tp: int) -> dict[str, Collective]:
    graph = build_graph(get_model("llama-3.1-8b"))
    compiled = compile_layer(layer=graph.head, sizes=graph.head_sizes,
                             degrees={"tp": tp, "etp": tp, "ep": 1}, fusion=frozenset())
    return {c.after_op: c for c in compiled.collectives}


def _message(collective: Collective, phase: dict[str, float]) -> float:
    return float(tensor_bytes(tensor=collective.tensor, sizes={**collective.sizes, **phase},
                              weight_dtype="bf16", window=None))


DECODE_256 = {"b": 256.0, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}


def test_the_logits_all_gather_is_sized_as_the_gathered_tensor() -> None:
    """collective_cost takes the full tensor of an all-gather (NCCL moves (n-1)/n of it
    per GPU): the logits of 256 sequences over the whole vocabulary, 256 x 128,256 x 2 =
    65,667,072 bytes at TP8, not one rank's shard of vocab / 8 (8,208,384)."""
    gather = _head(8)["lm_head"]
    assert gather.kind == "all_gather" and gather.dim == "tp"
    assert gather.sizes["v"] == VOCAB
    assert _message(gather, DECODE_256) == 256 * VOCAB * 2 == 65_667_072
    assert _message(gather, DECODE_256) == _message(_head(2)["lm_head"], DECODE_256)
