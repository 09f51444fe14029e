"""The functional forms calibration introduced into the cost model behave as documented."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from energylens.cost.comm import collective_cost
from energylens.cost.constants import Calibration, KernelConstants, LinkConstants
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import DTYPE_BYTES, tensor_bytes
from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime

H100 = load_gpu("H100")
CLOCK = ClockState(ratio=1.0, dynamic_scale=1.0)


def _kernels(model: str, fusion: frozenset[str], degrees=None, group: int = 0):
    g = build_graph(get_model(model)).groups[group]
    degrees = degrees or {"tp": 1, "etp": 1, "ep": 1}
    return g, {k.name: k for k in compile_layer(layer=g.layer, sizes=g.sizes, degrees=degrees,
                                                fusion=fusion).kernels}


def test_fused_qkv_is_priced_as_one_gemm_with_concatenated_columns():
    _, fused = _kernels("llama-3.1-70b", frozenset({"qkv"}))
    _, split = _kernels("llama-3.1-70b", frozenset())
    phase = {"b": 4096.0, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}
    k = KernelConstants(energy_per_tensor_flop_j=0.0, energy_per_hbm_byte_j=0.0)

    def t(kernel):
        return float(kernel_cost(kernel=kernel, phase=phase, window=None, gpu=H100, constants=k,
                                 clock=CLOCK, weight_dtype="bf16").latency_s)

    one = t(fused["q+k+v"])
    three = t(split["q"]) + t(split["k"]) + t(split["v"])
    assert one < three  # one launch, better waves for the narrow k and v projections


def test_expert_gemms_skip_experts_that_received_no_tokens():
    group, kernels = _kernels("gpt-oss-120b", frozenset({"gate_up"}), group=1)
    k = KernelConstants(energy_per_tensor_flop_j=0.0, energy_per_hbm_byte_j=0.0)
    # 8 tokens, top-4 of 128 experts: 0.25 token per expert on average, ~29 experts active
    phase = {"b": 8.0, "m": 1.0, "n": 1.0, "p": 1.0, "t": 0.25, "x_active": 28.6}
    cost = kernel_cost(kernel=kernels["egate+eup"], phase=phase, window=None, gpu=H100,
                       constants=k, clock=CLOCK, weight_dtype="bf16")
    assert cost.compute_s < cost.memory_s  # decode expert GEMMs are weight-bandwidth bound


def test_mxfp4_quantises_only_the_experts():
    graph = build_graph(get_model("gpt-oss-20b"))
    layer = graph.groups[0].layer
    sizes = {**graph.groups[0].sizes, "b": 1, "m": 1, "t": 1, "x_active": 32}
    wq = next(t for op in layer.ops for t in op.inputs if t.name == "WQ")
    weg = next(t for op in layer.ops for t in op.inputs if t.name == "WEG")
    assert tensor_bytes(tensor=wq, sizes=sizes, weight_dtype="mxfp4", window=None) == \
        tensor_bytes(tensor=wq, sizes=sizes, weight_dtype="bf16", window=None)
    ratio = (tensor_bytes(tensor=weg, sizes=sizes, weight_dtype="mxfp4", window=None)
             / tensor_bytes(tensor=weg, sizes=sizes, weight_dtype="bf16", window=None))
    assert ratio == pytest.approx(DTYPE_BYTES["mxfp4"] / 2.0)
    model = replace(get_model("gpt-oss-120b"), weight_dtype="mxfp4")
    assert predict(model=model, gpu="H100").feasible  # 120B fits one H100 in MXFP4


def test_ep_under_tp_attention_reduces_once_and_dispatches_locally():
    g = build_graph(get_model("llama-4-scout-17b-16e")).groups[-1]
    degrees = {"tp": 8, "etp": 1, "ep": 8}
    compiled = compile_layer(layer=g.layer, sizes=g.sizes, degrees=degrees, fusion=frozenset())
    priced = get_runtime("vllm").collective_layout(compiled.collectives, layer=g.layer, degrees=degrees)
    kinds = sorted((c.kind, c.after_op) for c in priced)
    assert ("all_to_all", "dispatch") not in kinds
    assert ("all_reduce", "combine") in kinds and ("all_reduce", "o") in kinds
    assert all(c.after_op != "sdown" for c in priced)  # shared expert folded into combine
    # without EP: the same one reduction after the combine, over the tensor-parallel group
    dense = {"tp": 8, "etp": 8, "ep": 1}
    plain = compile_layer(layer=g.layer, sizes=g.sizes, degrees=dense, fusion=frozenset())
    priced = get_runtime("vllm").collective_layout(plain.collectives, layer=g.layer,
                                                   degrees=dense)
    assert sorted((c.kind, c.after_op, c.dim) for c in priced) == [
        ("all_reduce", "combine", "tp"), ("all_reduce", "o", "tp")]


def test_collective_forms():
    link = LinkConstants(latency_s=20e-6, latency_per_hop_s=0.0, bus_bandwidth_fraction=0.7,
                         half_bandwidth_bytes=1e3, latency_sharpness=1.0, p2p_latency_s=7e-6,
                         p2p_bandwidth_fraction=0.8)
    sizes = np.array([2e3, 1e5, 1e6, 1e7, 6e7])
    ar = collective_cost(kind="all_reduce", message_bytes=sizes, group_size=8, bandwidth=450e9,
                         constants=link).latency_s
    assert np.all(np.diff(ar) > 0)
    sharp = collective_cost(kind="all_reduce", message_bytes=sizes, group_size=8, bandwidth=450e9,
                            constants=replace(link, latency_sharpness=8.0)).latency_s
    assert np.all(sharp <= ar) and np.all(sharp >= np.maximum(20e-6, ar - 20e-6) - 1e-12)
    p2p = collective_cost(kind="send_recv", message_bytes=sizes, group_size=2, bandwidth=450e9,
                          constants=link).latency_s
    assert p2p == pytest.approx(7e-6 + sizes / (450e9 * 0.8))
    assert collective_cost(kind="all_reduce", message_bytes=1e6, group_size=1, bandwidth=450e9,
                           constants=link).latency_s == 0.0


def test_runtime_all_reduce_replaces_nccl_latency_for_small_messages_only():
    base = Calibration(kernels={}, links={})
    fast = base.with_runtime(runtime="vllm", gpu="H100-SXM", allreduce_latency_s=2e-6)
    small = Workload(kind="serving", batch=8, input_tokens=256, output_tokens=256)
    a = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=4), workload=small,
                calibration=base)
    b = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=4), workload=small,
                calibration=fast)
    assert b.tpot_s < a.tpot_s



def test_tp_decode_pays_a_fixed_all_reduce_latency_per_layer_that_more_gpus_do_not_shrink():
    """A batch-1 decode step of Llama-3.1-70B (80 layers, two all-reduces each: attention
    output and MLP down projection, 16 KB messages) pays each all-reduce's fixed latency:
    the runtime's own all-reduce, latency + per-hop latency x log2(n). At TP8 that is at
    least 160 x (latency + 3 x per hop), and the exposed communication grows with the GPU
    count while the step shrinks (issue 10: costs that do not shrink with more GPUs)."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.step import SequenceGroup, step_cost
    from energylens.predict import step_context

    calibration = default_calibration()
    model, gpu = get_model("llama-3.1-70b"), load_gpu("H100")
    decode = [SequenceGroup(sequences=1, new_tokens=1, context=1024)]
    comm, step = {}, {}
    for tp in (1, 2, 4, 8):
        ctx = step_context(model=model, gpu=gpu, deployment=Deployment(tp=tp),
                           calibration=calibration)
        cost = step_cost(ctx=ctx, seqs=decode, pipelined=True)
        comm[tp], step[tp] = float(cost.communication_s), float(cost.latency_s)
    runtime = calibration.runtime(runtime="vllm", gpu=gpu.name)
    per_call = runtime.allreduce_latency_s + 3 * runtime.allreduce_latency_per_hop_s
    assert runtime.allreduce_latency_s > 0
    assert 2 * 80 * per_call <= comm[8] <= 1.5 * 2 * 80 * per_call
    assert comm[1] == 0.0 < comm[2] <= comm[4] <= comm[8]
    assert step[8] < step[4] < step[2] < step[1]

def test_serving_median_itl_never_exceeds_the_mean_step():
    for batch, out in ((8, 2000), (64, 400), (512, 300)):
        p = predict(model="llama-3.1-8b", gpu="H100",
                    workload=Workload(kind="serving", batch=batch, input_tokens=400,
                                      output_tokens=out))
        mean_step = batch / p.output_tokens_per_s
        assert p.tpot_s <= mean_step * (1 + 1e-9)
        assert p.tpot_s < mean_step  # prompts admitted in some steps lengthen the mean


def test_serving_memory_uses_the_mean_context():
    # 64 sequences of a reasoning task (long outputs) fit: running sequences are, on
    # average, halfway through their outputs.
    p = predict(model="qwen3-8b", gpu="H100",
                workload=Workload(kind="serving", batch=64, input_tokens=256, output_tokens=8000))
    assert p.feasible


def test_rope_writes_q_and_k_back_in_place():
    """Rotary embeddings rotate q and k in one kernel and write both back: Llama-3.1-8B
    (32 query heads, 8 KV heads of 128) moves 2 x (4,096 + 1,024) elements per token, not
    2 x 4,096 + 1,024 (q read and written, k only read)."""
    _, kernels = _kernels("llama-3.1-8b", frozenset())
    rope = kernels["rope"]
    assert {t.name for t in rope.writes} >= {"QR", "K"}
    phase = {"b": 1.0, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}
    moved = sum(float(tensor_bytes(tensor=t, sizes={**rope.io_sizes[t.name], **phase},
                                   weight_dtype="bf16", window=None))
                for t in (*rope.reads, *rope.writes))
    assert moved == 2 * (4096 + 1024) * 2


def test_the_embedding_gather_reads_the_rows_it_writes():
    """The head's embedding lookup reads one table row per token and writes it: Llama-3.1-8B
    (hidden 4,096, bf16) moves 2 x 4,096 x 2 bytes per token, plus its 16-bit token id."""
    graph = build_graph(get_model("llama-3.1-8b"))
    group = graph.head_group
    kernels = {k.name: k for k in compile_layer(layer=group.layer, sizes=group.sizes,
                                                degrees={"tp": 1}, fusion=frozenset()).kernels}
    embed = kernels["embed"]
    phase = {"b": 1.0, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}
    moved = sum(float(tensor_bytes(tensor=t, sizes={**embed.io_sizes[t.name], **phase},
                                   weight_dtype="bf16", window=None))
                for t in (*embed.reads, *embed.writes))
    assert moved == 2 * 4096 * 2 + 2
