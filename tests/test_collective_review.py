"""The head's tensor-parallel collectives and the speculative verify pass's logits, at
hand-computed sizes (Llama-3.1-8B: hidden 4096, vocabulary 128,256)."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.comm import link_for_group
from energylens.cost.kernels import Collective, compile_layer
from energylens.cost.step import (
    SequenceGroup,
    StepContext,
    _collective_cost,
    _head_cost,
    _phase_sizes,
)
from energylens.cost.work import tensor_bytes
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.predict import step_context
from energylens.runtime.registry import get_runtime

HIDDEN, VOCAB = 4096, 128_256


def _ctx(*, gpu: str = "H100", tp: int = 1) -> StepContext:
    return step_context(model=get_model("llama-3.1-8b"), gpu=load_gpu(gpu),
                        deployment=Deployment(num_gpus=tp, tp=tp),
                        calibration=default_calibration())


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


def test_the_embedding_is_vocab_parallel_with_one_all_reduce_of_its_output() -> None:
    """vLLM's and SGLang's VocabParallelEmbedding: each rank looks up its own rows and the
    group all-reduces X[b,m,d]: 256 x 4096 x 2 = 2,097,152 bytes a decode step, 8 x 128 x
    4096 x 2 = 8,388,608 for a prompt of 8 x 128 tokens; nothing on one GPU. The lookup
    reads and writes the same bytes at any TP (every token's row, zeros for the others')."""
    reduce = _head(8)["embed"]
    assert (reduce.kind, reduce.dim, reduce.tensor.name) == ("all_reduce", "tp", "X")
    assert reduce.overlap_kernel is None  # the head overlaps nothing: exposed
    assert _message(reduce, DECODE_256) == 256 * HIDDEN * 2 == 2_097_152
    prompt = {**DECODE_256, "b": 8.0, "m": 128.0}
    assert _message(reduce, prompt) == 8 * 128 * HIDDEN * 2 == 8_388_608
    assert "embed" not in _head(1)
    graph = build_graph(get_model("llama-3.1-8b"))
    one, eight = (next(k for k in compile_layer(
        layer=graph.head, sizes=graph.head_sizes, degrees={"tp": tp, "etp": tp, "ep": 1},
        fusion=frozenset()).kernels if k.name == "embed") for tp in (1, 8))
    assert one.io_sizes == eight.io_sizes


@pytest.mark.parametrize("runtime", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("ep", [1, 8])
def test_every_runtime_layout_keeps_the_head_collectives(runtime: str, ep: int) -> None:
    """The runtimes' layouts rewrite only the MoE layers' collectives: the head keeps its
    all-reduce and all-gather, with or without expert parallelism."""
    graph = build_graph(get_model("llama-3.1-8b"))
    degrees = {"tp": 8, "etp": 8 // ep, "ep": ep}
    compiled = compile_layer(layer=graph.head, sizes=graph.head_sizes, degrees=degrees,
                             fusion=frozenset())
    kept = get_runtime(runtime).collective_layout(compiled.collectives, layer=graph.head,
                                                  degrees=degrees)
    assert [(c.kind, c.after_op) for c in kept] == [("all_reduce", "embed"),
                                                   ("all_gather", "lm_head")]


def test_a_tp8_step_pays_both_head_collectives_at_their_full_messages() -> None:
    """Llama-3.1-8B TP8 on H100, 256 sequences decoding: the head's exposed communication
    is the all-reduce of 2,097,152 bytes plus the all-gather of 65,667,072 (priced at
    8,208,384 bytes and without the all-reduce before the fix)."""
    ctx = _ctx(tp=8)
    collectives = _head(8)
    kind, bandwidth = link_for_group(gpu=ctx.gpu, group_size=8)
    expected = sum(float(_collective_cost(ctx=ctx, collective=collectives[op], kind=kind,
                                          bandwidth=bandwidth, nbytes=nbytes,
                                          sms=None)[0].latency_s)
                   for op, nbytes in (("embed", 2_097_152.0), ("lm_head", 65_667_072.0)))
    seqs = [SequenceGroup(sequences=256.0, new_tokens=1.0, context=1024.0)]
    assert float(_head_cost(ctx=ctx, seqs=seqs).communication_s) == pytest.approx(expected)
    assert expected > 150e-6  # the gathered logits alone take ~180 us on NVLink


def test_a_verify_pass_needs_logits_for_every_checked_token() -> None:
    """k = 3 drafts: the target model scores 4 positions per sequence, n = 4; mixed with a
    prompt chunk (one logit row per sequence), n is the mean rows per sequence:
    (10 x 4 + 2 x 1) / 12 = 3.5; a plain decode step keeps n = 1."""
    ctx = _ctx(gpu="H200")
    head = ctx.graph.head_group
    verify = SequenceGroup(sequences=10.0, new_tokens=4.0, context=512.0, verifying=True)
    prompt = SequenceGroup(sequences=2.0, new_tokens=100.0, context=100.0)
    decode = SequenceGroup(sequences=10.0, new_tokens=1.0, context=512.0)
    for seqs, rows in (([verify], 4.0), ([verify, prompt], 3.5), ([decode, prompt], 1.0)):
        merged, local, _ = _phase_sizes(ctx=ctx, group=head, seqs=seqs, critical=True)
        assert merged["n"] == pytest.approx(rows) and local["n"] == pytest.approx(rows)


def test_a_verify_head_costs_what_one_token_each_of_as_many_sequences_does() -> None:
    """Llama-3.1-8B on H200, 128 sequences checking k + 1 = 4 tokens: embedding, final
    norm, LM head and sampling each see 512 rows, as for 512 sequences decoding one token
    (before the fix the LM head and sampling saw 128)."""
    ctx = _ctx(gpu="H200")
    verify = _head_cost(ctx=ctx, seqs=[SequenceGroup(sequences=128.0, new_tokens=4.0,
                                                     context=1024.0, verifying=True)])
    wide = _head_cost(ctx=ctx, seqs=[SequenceGroup(sequences=512.0, new_tokens=1.0,
                                                   context=1024.0)])
    assert float(verify.latency_s) == pytest.approx(float(wide.latency_s))
    assert float(verify.compute_energy_j) == pytest.approx(float(wide.compute_energy_j))
    assert float(verify.memory_energy_j) == pytest.approx(float(wide.memory_energy_j))
