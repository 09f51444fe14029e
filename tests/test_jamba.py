"""AI21 Jamba: Mamba-1 mixers, attention, dense MLPs and MoE read from a ``jamba``
config.json (``energylens/model/hf/builders/jamba.py``, ``families/mamba1.yaml``).

Jamba-v0.1 is tests/test_hf_review_models.py's JAMBA dict (ai21labs/Jamba-v0.1
config.json), copied. Published sizes: 51.6B parameters (the Hugging Face hub's safetensors count
for ai21labs/Jamba-v0.1; its model card: "12B active parameters and a total of 52B"),
Jamba-1.5-Large 398B total and 94B active (ai21labs/AI21-Jamba-1.5-Large model card).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from energylens.cli.catalog import footprint
from energylens.cli.main import main
from energylens.cost.kernels import compile_layer
from energylens.cost.memory import memory_use
from energylens.cost.step import SequenceGroup, step_cost
from energylens.deployment import Deployment, Workload
from energylens.errors import ModelConfigError
from energylens.hardware import load_gpu
from energylens.model import ModelConfig, build_graph, load_hf_config, parameter_count
from energylens.model.hf import write_hf_config
from energylens.predict import checked_context, predict
from energylens.runtime import DEFAULT_RUNTIME, get_runtime

#: Jamba-v0.1 (ai21labs/Jamba-v0.1 config.json), as tests/test_hf_review_models.py has it.
JAMBA = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "vocab_size": 65536, "num_experts": 16, "num_experts_per_tok": 2,
         "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2,
         "expert_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
         "mamba_dt_rank": 256, "hidden_act": "silu", "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False}

#: ai21labs/AI21-Jamba-1.5-Large config.json, its sizes as recalled (not re-read here); the
#: card's 398B / 94B, which the sum below meets within 0.2 %, corroborates them.
JAMBA_15_LARGE = {**JAMBA, "hidden_size": 8192, "num_hidden_layers": 72,
                  "num_attention_heads": 64, "intermediate_size": 24576, "mamba_dt_rank": 512}


def _load(tmp_path: Path, config: dict[str, Any], name: str = "Jamba-v0.1") -> ModelConfig:
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config))
    return load_hf_config(path)


@pytest.fixture
def jamba(tmp_path: Path) -> ModelConfig:
    return _load(tmp_path, JAMBA)


def test_the_periods_give_the_blocks(jamba: ModelConfig) -> None:
    """Attention in layers 4, 12, 20, 28 (i % 8 == 4), MoE in the odd layers (i % 2 == 1):
    each layer a mixer block then an FFN block, 64 blocks."""
    hybrid = jamba.hybrid
    assert hybrid is not None and hybrid.mixer == "mamba1" and jamba.num_layers == 64
    mixers, ffns = hybrid.layer_pattern[::2], hybrid.layer_pattern[1::2]
    assert [i for i, m in enumerate(mixers) if m == "*"] == [4, 12, 20, 28]
    assert [i for i, f in enumerate(ffns) if f == "E"] == list(range(1, 32, 2))
    assert (hybrid.ssm_heads, hybrid.ssm_head_dim, hybrid.ssm_groups) == (2 * 4096, 1, 1)
    assert (hybrid.ssm_state_size, hybrid.conv_kernel, hybrid.dt_rank) == (16, 4, 256)
    counts = {g.name: g.count for g in build_graph(jamba).groups}
    assert counts == {"mamba": 28, "attention": 4, "mlp": 16, "moe": 16}
    attention = next(g for g in build_graph(jamba).groups if g.name == "attention")
    assert "rope" not in {op.name for op in attention.layer.ops}  # no positional encoding
    assert jamba.moe is not None and jamba.moe.expert_ffn == jamba.ffn_size == 14336


def _by_hand(*, d: int, layers: int, heads: int, kv_heads: int, ffn: int, dt_rank: int,
             vocab: int, experts: int = 16, top_k: int = 2, state: int = 16,
             conv: int = 4) -> tuple[int, int]:
    """(total, active) of a Jamba summed by hand; attention every 8th layer, MoE every 2nd."""
    inner = 2 * d
    mamba = (d * 2 * inner  # in_proj (x, z), no bias
             + conv * inner + inner  # depthwise conv1d and its bias
             + inner * (dt_rank + 2 * state)  # x_proj (dt, B, C)
             + dt_rank * inner + inner  # dt_proj and its bias
             + inner * state + inner  # A_log, D
             + inner * d  # out_proj
             + dt_rank + 2 * state)  # RMSNorms of dt, B, C
    head = d // heads
    attention = d * (heads + 2 * kv_heads) * head + heads * head * d
    mlp = 3 * d * ffn
    router = d * experts
    fixed = 2 * vocab * d + (2 * layers + 1) * d  # embedding, lm_head, block norms, final
    attn_layers, moe_layers = layers // 8, layers // 2
    common = fixed + (layers - attn_layers) * mamba + attn_layers * attention \
        + (layers - moe_layers) * mlp + moe_layers * router
    return common + moe_layers * experts * mlp, common + moe_layers * top_k * mlp


def test_parameter_count_of_jamba_v0_1_by_hand(jamba: ModelConfig) -> None:
    """Per Mamba layer 4096 x 16384 + 5 x 8192 + 8192 x 288 + 257 x 8192 + 8192 x 16 + 8192
    + 8192 x 4096 + 288 = 105,308,448; per attention layer 4096 x 6144 + 4096 x 4096 =
    41,943,040; per MLP (and expert) 3 x 4096 x 14336 = 176,160,768; router 65,536;
    embedding + lm_head 2 x 65536 x 4096; 65 norms of 4096. 28 Mamba, 4 attention, 16 MLP,
    16 MoE layers: 51,570,323,328 total, 12,110,311,296 active."""
    mamba = 4096 * 16384 + 5 * 8192 + 8192 * 288 + 257 * 8192 + 8192 * 16 + 8192 \
        + 8192 * 4096 + 288
    assert mamba == 105_308_448
    attention, mlp, router = 4096 * 6144 + 4096 * 4096, 3 * 4096 * 14336, 4096 * 16
    fixed = 2 * 65536 * 4096 + 65 * 4096
    total = fixed + 28 * mamba + 4 * attention + 16 * mlp + 16 * (16 * mlp + router)
    active = fixed + 28 * mamba + 4 * attention + 16 * mlp + 16 * (2 * mlp + router)
    assert (total, active) == (51_570_323_328, 12_110_311_296)
    assert (total, active) == _by_hand(d=4096, layers=32, heads=32, kv_heads=8, ffn=14336,
                                       dt_rank=256, vocab=65536)
    assert parameter_count(jamba) == (total, active)
    assert total == pytest.approx(51.6e9, rel=0.02)
    assert active == pytest.approx(12e9, rel=0.02)


def test_parameter_count_of_jamba_1_5_large(tmp_path: Path) -> None:
    """72 layers of hidden 8192 (9 attention, 36 MoE), dt_rank 512: 398.6B and 94.1B
    against the card's 398B and 94B."""
    model = _load(tmp_path, JAMBA_15_LARGE, name="AI21-Jamba-1.5-Large")
    by_hand = _by_hand(d=8192, layers=72, heads=64, kv_heads=8, ffn=24576, dt_rank=512,
                       vocab=65536)
    assert parameter_count(model) == by_hand
    assert by_hand[0] == pytest.approx(398e9, rel=0.02)
    assert by_hand[1] == pytest.approx(94e9, rel=0.02)


def test_graph_weights_are_the_count_less_biases_d_and_norms(jamba: ModelConfig) -> None:
    """The einsums read every weight matrix, A and the dt/B/C norm weights; what they leave
    out is exactly the conv and dt biases and D (3 x 8192 per Mamba layer) and the 65
    RMSNorm weights of the blocks and the final norm."""
    weights = 2 * 65536 * 4096
    for group in build_graph(jamba).groups:
        for op in group.layer.ops:
            weights += int(group.count) * sum(
                math.prod(group.sizes[r] for r in t.ranks) for t in op.inputs
                if t.name.startswith("W"))
    assert parameter_count(jamba)[0] - weights == 28 * 3 * 8192 + 65 * 4096


def test_kv_only_in_the_four_attention_layers_and_a_constant_state(jamba: ModelConfig) -> None:
    """KV: 4 attention layers x (K, V) x 8 KV heads x 128 x 2 bytes = 16,384 a token.
    State: 28 Mamba layers x (8192 x 16 SSM state + 3 x 8192 convolution inputs) x 2 bytes
    = 8,716,288 a sequence; halved on each GPU at TP 2 (the channels split)."""
    sizes = footprint(jamba)
    assert sizes["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 2 == 16_384
    state = 28 * (8192 * 16 + 3 * 8192) * 2
    assert sizes["state_bytes_per_sequence"] == state == 8_716_288

    def use(tp: int, sequences: float, context: float) -> Any:
        return memory_use(graph=build_graph(jamba), gpu=load_gpu("H100"),
                          runtime=get_runtime(DEFAULT_RUNTIME),
                          degrees={"tp": tp, "etp": tp, "ep": 1}, pp=1, weight_dtype="bf16",
                          kv_dtype="bf16", sequences=sequences, context_tokens=context)

    long = use(1, 8, 100_000)
    assert long.state_bytes == 8 * state  # not a byte more for a longer context
    assert long.kv_cache_bytes == 8 * 100_000 * 16_384
    assert use(2, 8, 100_000).state_bytes == 8 * state / 2


def test_an_fp32_state_doubles_the_ssm_state_only(tmp_path: Path) -> None:
    """``mamba_ssm_cache_dtype: float32``: 4 bytes per SSM state element, the convolution
    inputs stay 2."""
    model = _load(tmp_path, {**JAMBA, "mamba_ssm_cache_dtype": "float32"})
    assert footprint(model)["state_bytes_per_sequence"] == 28 * (8192 * 16 * 4 + 3 * 8192 * 2)


def test_x_proj_and_out_proj_are_row_parallel(jamba: ModelConfig) -> None:
    """Under TP the channels split: x_proj contracts them, so its dt/B/C outputs (256 + 2 x
    16 = 288 a token) are all-reduced, then out_proj's (4096): two all-reduces per Mamba
    layer, as vLLM's MambaMixer (x_proj and out_proj RowParallelLinear). None at TP 1."""
    mamba = next(g for g in build_graph(jamba).groups if g.name == "mamba")
    fusion = frozenset({"attention", "qkv", "conv"})
    one = compile_layer(layer=mamba.layer, sizes=mamba.sizes, fusion=fusion,
                        degrees={"tp": 1, "etp": 1, "ep": 1})
    assert one.collectives == ()
    two = compile_layer(layer=mamba.layer, sizes=mamba.sizes, fusion=fusion,
                        degrees={"tp": 2, "etp": 2, "ep": 1})
    reduced = {(c.after_op, c.kind): c for c in two.collectives}
    assert set(reduced) == {("x_proj", "all_reduce"), ("o", "all_reduce")}
    assert reduced[("x_proj", "all_reduce")].sizes["q"] == 288
    assert reduced[("x_proj", "all_reduce")].sizes["i"] == 4096  # the GEMM's local half
    scan = next(k for k in two.kernels if k.name == "state+update+out+gate")
    assert scan.io_sizes["S"]["i"] == 4096  # each GPU keeps half the channels' state


def test_predicts_at_tp_1_and_2(jamba: ModelConfig) -> None:
    """bf16 weights are 103 GB (51.57B x 2 bytes): more than one 80 GB H100, so TP 1 needs
    the FP8 checkpoint (52 GB); TP 2 holds bf16. Both predict finite, positive latency and
    energy; only TP 2 communicates."""
    workload = Workload(batch=8, input_tokens=1024, output_tokens=128)
    assert not predict(model=jamba, gpu="H100", workload=workload).feasible
    fp8 = dataclasses.replace(jamba, weight_dtype="fp8")
    one = predict(model=fp8, gpu="H100", workload=workload)
    two = predict(model=jamba, gpu="H100", deployment=Deployment(tp=2), workload=workload)
    for result in (one, two):
        assert result.feasible
        for phase in (result.prefill, result.decode):
            assert math.isfinite(phase.latency_s) and phase.latency_s > 0
            assert math.isfinite(phase.energy_j) and phase.energy_j > 0
    assert one.decode.communication_j == 0 < two.decode.communication_j


def _decode_step(jamba: ModelConfig, *, group: str, sequences: float,
                 context: float) -> tuple[float, float]:
    """(latency, energy) of one decode step through ``group``'s layers and the head alone."""
    _, ctx = checked_context(model=jamba, gpu="H100", deployment=Deployment(tp=2))
    only = tuple(g for g in ctx.graph.groups if g.name == group)
    ctx = dataclasses.replace(ctx, graph=dataclasses.replace(ctx.graph, groups=only))
    cost = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=sequences, new_tokens=1,
                                                  context=context)])
    energy = cost.compute_energy_j + cost.memory_energy_j + cost.communication_energy_j
    return float(cost.latency_s), float(energy)


def test_a_decode_step_of_the_mamba_layers_grows_with_the_batch_not_the_context(
        jamba: ModelConfig) -> None:
    """The Mamba layers read and write a fixed state per sequence: a decode step costs the
    same at 1,000 and 200,000 tokens of context, and more for 64 sequences than for 1;
    the attention layers' step grows with the context (the KV cache they read)."""
    mamba = next(g for g in build_graph(jamba).groups if g.name == "mamba")
    assert not any("p" in op.ranks for op in mamba.layer.ops)  # no context rank
    short = _decode_step(jamba, group="mamba", sequences=8, context=1_000)
    assert _decode_step(jamba, group="mamba", sequences=8, context=200_000) == short
    one = _decode_step(jamba, group="mamba", sequences=1, context=1_000)
    many = _decode_step(jamba, group="mamba", sequences=64, context=1_000)
    assert many[0] > one[0] and many[1] > one[1]
    near = _decode_step(jamba, group="attention", sequences=8, context=1_000)
    far = _decode_step(jamba, group="attention", sequences=8, context=200_000)
    assert far[0] > near[0] and far[1] > near[1]


def test_an_exclude_list_holds_the_mamba_projections_16_bit(tmp_path: Path) -> None:
    """An FP8 checkpoint that keeps the Mamba blocks unquantised (``modules_to_not_convert:
    ["mamba"]``, as AI21's cards skip them loading in 8 bits: llm_int8_skip_modules,
    recalled) holds in_proj, x_proj, dt_proj and out_proj 16-bit in the 28 mixers and
    nothing of attention's (out_proj's weight is not attention's WO): one byte more per
    weight, 28 x (4096 x 16384 + 8192 x 288 + 256 x 8192 + 8192 x 4096) bytes; written
    back, the list names those modules only."""
    quantised = {**JAMBA, "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["mamba"]}}
    model = _load(tmp_path, quantised)
    assert model.held_16bit == (("fp8", ("WDT", "WOM", "WX", "WXP", "WZ")),)
    plain = dataclasses.replace(model, held_16bit=())
    extra = footprint(model)["weight_bytes"]["fp8"] - footprint(plain)["weight_bytes"]["fp8"]
    assert extra == 28 * (4096 * 16384 + 8192 * 288 + 256 * 8192 + 8192 * 4096)
    listed = write_hf_config(model, model_type="jamba")["quantization_config"]
    assert {m.split(".")[-1] for m in listed["modules_to_not_convert"]} == {
        "in_proj", "x_proj", "dt_proj", "out_proj"}
    assert all(".mamba." in m for m in listed["modules_to_not_convert"])


def test_round_trip_through_config_json(jamba: ModelConfig, tmp_path: Path) -> None:
    written = write_hf_config(jamba, model_type="jamba")
    assert (written["attn_layer_period"], written["attn_layer_offset"]) == (8, 4)
    assert (written["expert_layer_period"], written["expert_layer_offset"]) == (2, 1)
    assert (written["num_hidden_layers"], written["mamba_expand"]) == (32, 2)
    again = _load(tmp_path / "again", written)
    assert dataclasses.replace(again, name=jamba.name, notes=jamba.notes) == jamba


def test_one_expert_is_a_dense_mlp_and_round_trips(tmp_path: Path) -> None:
    """``num_experts: 1`` (JambaMLP in every layer): no MoE blocks, written back the same."""
    dense = _load(tmp_path, {**JAMBA, "num_experts": 1})
    assert dense.moe is None and dense.family == "dense" and dense.hybrid is not None
    assert dense.hybrid.layer_pattern.count("-") == 32
    again = _load(tmp_path / "again", write_hf_config(dense, model_type="jamba"))
    assert dataclasses.replace(again, name=dense.name, notes=dense.notes) == dense


def test_dt_rank_auto_is_the_ceiling_of_hidden_over_16(tmp_path: Path) -> None:
    """``"auto"`` (JambaConfig's default) = ceil(hidden / 16): 63 for hidden 1000, not 62."""
    model = _load(tmp_path, {**JAMBA, "hidden_size": 1000, "num_attention_heads": 8,
                             "num_key_value_heads": 2, "mamba_dt_rank": "auto"})
    assert model.hybrid is not None and model.hybrid.dt_rank == 63


def test_a_pattern_without_periods_cannot_be_written(jamba: ModelConfig) -> None:
    assert jamba.hybrid is not None
    pattern = "*-" + jamba.hybrid.layer_pattern[2:]  # attention in layers 0, 4, 12, ...
    odd = dataclasses.replace(jamba, hybrid=dataclasses.replace(jamba.hybrid,
                                                                layer_pattern=pattern))
    with pytest.raises(ModelConfigError, match="not every n-th layer"):
        write_hf_config(odd, model_type="jamba")


@pytest.mark.parametrize(("change", "fragment"), [
    ({"attn_layer_offset": 8}, "attn_layer_offset = 8 must be below"),
    ({"mamba_dt_rank": 0}, "mamba_dt_rank"),
    ({"num_experts_per_tok": 17}, "top_k = 17 exceeds"),
])
def test_a_bad_jamba_config_is_one_line(tmp_path: Path, change: dict, fragment: str) -> None:
    with pytest.raises(ModelConfigError, match=fragment) as info:
        _load(tmp_path, {**JAMBA, **change})
    assert "\n" not in str(info.value)


def test_models_show_reads_a_jamba_config(tmp_path: Path, capsys) -> None:
    path = tmp_path / "Jamba-v0.1" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(JAMBA))
    assert main(["models", "show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["family"] == "hybrid" and shown["model_type"] == "jamba"
    assert shown["kv_bytes_per_token"] == 16_384
    assert "28 Mamba-1" in shown["attention"]
