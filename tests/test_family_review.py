"""Family review: fusion groups stay within their part, a recurrent mixer's input projection
is one GEMM in every engine, a hybrid's draft head is a decoder layer, the mixers' tensors
keep clear of the KV cache's names, and each hybrid block has one pre-norm."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

import pytest

from energylens.cost.kernels import compile_layer
from energylens.cost.memory import kv_bytes_per_token, memory_use
from energylens.cost.step import STEP_RECORDER, SequenceGroup, step_cost
from energylens.cost.work import ACTIVATION_BYTES, KV_TENSORS, tensor_bytes
from energylens.deployment import FUSIONS, Deployment
from energylens.hardware import load_gpu
from energylens.model import build_graph
from energylens.model.families import LayerGroup, family_part, parse_layer
from energylens.model.spec import parse_einsum
from energylens.model.zoo import get_model
from energylens.predict import checked_context
from energylens.runtime import get_runtime, runtime_names

DSV3 = "deepseek-v3"
QWEN = "qwen3.5-397b-a17b"
NEMOTRON = "nemotron-nano-9b-v2"
ONE = {"b": 1, "m": 1, "p": 1, "t": 1, "n": 1}


def _group(model: str, name: str) -> LayerGroup:
    return next(g for g in build_graph(get_model(model)).groups if g.name == name)


def _kernels(group: LayerGroup, fusion: frozenset[str], **degrees: int) -> list[str]:
    compiled = compile_layer(layer=group.layer, sizes={**group.sizes, **ONE},
                             degrees=degrees or {"tp": 1}, fusion=fusion)
    return [kernel.name for kernel in compiled.kernels]


# --- 1. a fusion name two parts use: a kernel per part ---------------------------------------

def test_routed_and_shared_experts_keep_a_gate_up_kernel_each() -> None:
    """moe.yaml's gate_up/act and shared_expert.yaml's are groups of their own parts: the
    routed experts' GEMM (an expert kernel) and the shared experts' (a dense one)."""
    layer = parse_layer(name="moe", parts=[family_part("moe"), family_part("shared_expert")],
                        norm="rmsnorm")
    assert layer.fusion.members("gate_up") == (("egate", "eup"), ("sgate", "sup"))
    compiled = compile_layer(layer=_group(DSV3, "moe").layer,
                             sizes={**_group(DSV3, "moe").sizes, **ONE},
                             degrees={"tp": 1, "ep": 8, "etp": 1},
                             fusion=frozenset({"gate_up", "act"}))
    experts = {k.name: k.is_expert for k in compiled.kernels if "up" in k.name}
    assert experts == {"egate+eup+eact": True, "sgate+sup+sact": False}
    # without act: two gate/up GEMMs, and each activation a kernel of its own
    assert [k for k in _kernels(_group(DSV3, "moe"), frozenset({"gate_up"}))
            if "up" in k or "act" in k] == ["egate+eup", "eact", "sgate+sup", "sact"]


def _shared_seconds(*, ranks: int) -> float:
    """Seconds of the shared experts' gate/up GEMM in one DeepSeek-V3 prefill step of one
    2,048-token prompt on each of ``ranks`` attention-DP ranks (SGLang, EP = ranks, H200)."""
    _, ctx = checked_context(model=DSV3, gpu="H200",
                             deployment=Deployment(runtime="sglang", attention_dp=ranks,
                                                   ep=ranks, num_gpus=ranks))
    seconds: dict[str, float] = {}

    def record(group, item, latency, energy, critical):  # type: ignore[no-untyped-def]
        if critical and group.is_moe and not isinstance(item, str):
            seconds[item.name] = seconds.get(item.name, 0.0) + float(latency)

    token = STEP_RECORDER.set(record)
    try:
        step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=float(ranks), new_tokens=2048.0,
                                               context=2048.0)])
    finally:
        STEP_RECORDER.reset(token)
    return seconds["sgate+sup"]


def test_attention_dp_ranks_run_the_shared_experts_on_their_own_tokens() -> None:
    """Each rank runs the shared experts on its own 2,048 tokens, however many ranks route
    tokens to its experts: the same seconds with 4 ranks as with 8 (merged into the routed
    experts' kernel, they were priced on every rank's tokens)."""
    assert _shared_seconds(ranks=8) == pytest.approx(_shared_seconds(ranks=4), rel=1e-9)


# --- 2. a recurrent mixer's input projection ------------------------------------------------

@pytest.mark.parametrize("runtime", runtime_names())
def test_every_engine_runs_the_mixer_input_projection_as_one_gemm(runtime: str) -> None:
    """Mamba-2's in_proj (z, x, B, C, dt) and Gated DeltaNet's in_proj_qkv are one tensor in
    the checkpoint: one GEMM whatever the engine's attention q/k/v fusion (llama.cpp has
    none)."""
    assert "mixer_in" in FUSIONS
    fusion = get_runtime(runtime).fusions_at()
    assert "mixer_in" in fusion
    mamba = [k for k in _kernels(_group(NEMOTRON, "mamba"), fusion) if k.startswith("in_")]
    assert mamba == ["in_z+in_x+in_b+in_c+in_dt"]
    deltanet = [k for k in _kernels(_group(QWEN, "mamba"), fusion) if k.startswith("in_")]
    assert deltanet[0].startswith("in_q+in_k+in_v")


def test_llama_cpp_nemotron_h_decode_has_four_fewer_kernels_a_mixer() -> None:
    """27 Mamba-2 mixers, each one projection GEMM instead of five; the step is faster."""
    _, ctx = checked_context(model=NEMOTRON, gpu="H200",
                             deployment=Deployment(runtime="llama.cpp"))
    mixer = _group(NEMOTRON, "mamba")
    assert len(_kernels(mixer, ctx.fusion - {"mixer_in"})) - len(_kernels(mixer, ctx.fusion)) \
        == 4
    seqs = [SequenceGroup(sequences=8.0, new_tokens=1.0, context=1024.0)]
    split = step_cost(ctx=replace(ctx, fusion=ctx.fusion - {"mixer_in"}), seqs=seqs).latency_s
    assert float(step_cost(ctx=ctx, seqs=seqs).latency_s) < float(split)


# --- 3. a hybrid's draft head ---------------------------------------------------------------

@pytest.mark.parametrize(("model", "ffn", "kv_bytes"), [
    # Qwen3.5-397B: 2 KV heads x 256 wide, K and V in bf16; its MTP layer's FFN is the MoE
    (QWEN, "egate", 2 * 2 * 256 * 2),
    # Nemotron-Nano-9B-v2: 8 KV heads x 128; attention blocks feed MLP blocks
    (NEMOTRON, "up", 2 * 8 * 128 * 2),
])
def test_a_hybrid_draft_head_is_attention_and_its_ffn(model: str, ffn: str,
                                                      kv_bytes: int) -> None:
    draft = build_graph(get_model(model)).draft_group
    ops = [op.name for op in draft.layer.ops]
    assert {"norm1", "qk", "soft", "av", "o", "res1", "norm2", ffn, "res2"} <= set(ops)
    assert ops.count("norm1") == ops.count("norm2") == 1
    assert draft.is_moe == (ffn == "egate") and draft.count == 1.0
    assert kv_bytes_per_token(group=draft, degrees={"tp": 1}, kv_dtype="bf16") == kv_bytes


def test_a_hybrid_draft_head_keeps_its_own_kv_cache() -> None:
    """The draft's cache: 64 sequences x 4,096 tokens x 4,096 bytes (Nemotron-Nano-9B-v2)."""
    graph = build_graph(get_model(NEMOTRON))
    gpu = load_gpu("H200")
    kwargs: dict[str, Any] = dict(graph=graph, gpu=gpu, runtime=get_runtime("vllm"),
                                  degrees={"tp": 1, "etp": 1, "ep": 1}, pp=1,
                                  weight_dtype="bf16", kv_dtype="bf16", sequences=64.0,
                                  context_tokens=4096.0)
    extra = memory_use(**kwargs, draft_layers=1).kv_cache_bytes \
        - memory_use(**kwargs).kv_cache_bytes
    assert float(extra) == 64 * 4096 * 2 * 8 * 128 * 2


def test_a_transformer_draft_head_is_still_its_last_layer() -> None:
    graph = build_graph(get_model(DSV3))
    assert graph.draft_group.layer is graph.groups[-1].layer


# --- 4. the KV cache's tensor names ---------------------------------------------------------

def _family_tensors() -> list[tuple[str, str, tuple[str, ...]]]:
    """(part, tensor, ranks) of every tensor the family parts name."""
    out = []
    folder = resources.files("energylens.data.families")
    for entry in folder.iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        part = entry.name.removesuffix(".yaml")
        for name, body in family_part(part).get("ops", {}).items():
            text = body if isinstance(body, str) else body["einsum"]
            text = text.replace("{norm}", "rmsnorm").replace("{qk_norm}", "e")
            op = parse_einsum(name=name, text=text)
            out.extend((part, t.name, t.ranks) for t in (op.output, *op.inputs))
    return out


def test_only_caches_over_the_context_carry_kv_cache_names() -> None:
    """KC, VC, LC and IC are priced at the KV-cache dtype: every tensor so named is a cache
    over the context rank p."""
    misnamed = [(part, name) for part, name, ranks in _family_tensors()
                if name in KV_TENSORS and "p" not in ranks]
    assert misnamed == []


def test_deltanet_keys_stay_16_bit_under_an_fp8_kv_cache() -> None:
    """The convolved keys (16 key heads x 128 a token) are activations: 2 bytes each."""
    conv_k = _group(QWEN, "mamba").layer.op("conv_k")
    sizes = {**_group(QWEN, "mamba").sizes, "b": 1, "m": 1}
    assert tensor_bytes(tensor=conv_k.output, sizes=sizes, weight_dtype="fp8", window=None,
                        kv_dtype="fp8") == 16 * 128 * ACTIVATION_BYTES


# --- 5. one pre-norm per hybrid block --------------------------------------------------------

@pytest.mark.parametrize("model", [QWEN, NEMOTRON, "nemotron-nano-12b-v2"])
def test_each_hybrid_block_has_one_hidden_norm(model: str) -> None:
    """Qwen3.5: 120 blocks (60 mixer or attention, 60 MoE), 120 norms over the hidden
    width; Nemotron-Nano 9B and 12B: 56 and 62."""
    graph = build_graph(get_model(model))
    hybrid = graph.model.hybrid
    assert hybrid is not None
    norms = sum(g.count * sum(op.function in ("rmsnorm", "layernorm")
                              and op.reduced_ranks == ("d",) for op in g.layer.ops)
                for g in graph.groups)
    assert norms == len(hybrid.layer_pattern)


def test_a_hybrid_attention_block_writes_its_residual_once() -> None:
    """With every fusion on, the attention block's residual add ends it and writes H (d
    values a token); the FFN block after it reads H for its norm and its residual."""
    attention = _group(QWEN, "attention")
    compiled = compile_layer(layer=attention.layer, sizes={**attention.sizes, **ONE},
                             degrees={"tp": 1}, fusion=frozenset(FUSIONS))
    writes = [t.name for k in compiled.kernels for t in k.writes]
    assert writes.count("H") == 1 and compiled.kernels[-1].name == "res1"
    assert "N2" not in writes
    moe = _group(QWEN, "moe").layer
    assert [op.name for op in moe.ops if "H" in {t.name for t in op.inputs}] == ["norm2", "res2"]
