"""Hybrid Mamba-2 / attention models (NVIDIA Nemotron-H): the SSM mixer as einsums, the
layer pattern from the config, KV only for attention blocks, a constant-size state per
sequence.

The config below is NVIDIA-Nemotron-Nano-9B-v2 as the project's model_configs_more.yaml
records it (NVIDIA-NeMo/Megatron-Bridge nemotron_h_provider.py@160ccccb
NemotronNanoModelProvider9Bv2, with unnamed partial copies of the HF config.json
pinned to revision 6533e8de): published size 9B.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from energylens.cli.main import main
from energylens.cost.memory import memory_use
from energylens.cost.work import ACTIVATION_BYTES
from energylens.deployment import Deployment, Workload
from energylens.errors import ModelConfigError
from energylens.hardware import load_gpu
from energylens.model import build_graph, load_hf_config, parameter_count
from energylens.model.config import HybridConfig
from energylens.model.hf import write_hf_config
from energylens.model.zoo import get_model, parse_models_yaml
from energylens.predict import predict
from energylens.runtime import DEFAULT_RUNTIME, get_runtime

PATTERN_9B = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
NEMOTRON_NANO_9B_V2 = {
    "_name_or_path": "nvidia/NVIDIA-Nemotron-Nano-9B-v2", "model_type": "nemotron_h",
    "architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 56, "hidden_size": 4480,
    "intermediate_size": 15680, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 131072, "tie_word_embeddings": False,
    "mlp_hidden_act": "relu2", "rms_norm_eps": 1e-5, "hybrid_override_pattern": PATTERN_9B,
    "mamba_num_heads": 128, "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4,
}  # fmt: skip


@pytest.fixture
def nano(tmp_path: Path):
    path = tmp_path / "NVIDIA-Nemotron-Nano-9B-v2" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(NEMOTRON_NANO_9B_V2))
    return load_hf_config(path), path


def test_the_pattern_gives_the_blocks(nano) -> None:
    model, _ = nano
    assert model.hybrid is not None and model.hybrid.layer_pattern == PATTERN_9B
    counts = {g.name: g.count for g in build_graph(model).groups}
    assert counts == {"mamba": 27, "attention": 4, "mlp": 25}  # published: 27 M, 4 *, 25 -
    assert not model.gated_mlp and model.family == "dense"


def test_parameter_count_is_the_published_9b(nano) -> None:
    """Hand count: embeddings 2 x 131072 x 4480; per Mamba-2 block in_proj 4480 x (2 x 10240
    + 2 x 8 x 128 + 128), conv 5 x 12288, A/D/dt 3 x 128, gated norm 10240, out_proj
    10240 x 4480; per attention block 4480 x (5120 + 2 x 1024) + 5120 x 4480; per MLP block
    2 x 4480 x 15680; one norm per block and the final norm."""
    model, _ = nano
    mamba = 4480 * (2 * 10240 + 2048 + 128) + 5 * 12288 + 3 * 128 + 10240 + 10240 * 4480
    attention = 4480 * (5120 + 2048) + 5120 * 4480
    mlp = 2 * 4480 * 15680
    by_hand = 2 * 131072 * 4480 + 4480 + 56 * 4480 + 27 * mamba + 4 * attention + 25 * mlp
    total, active = parameter_count(model)
    assert total == active == by_hand
    assert total == pytest.approx(9e9, rel=0.02)


def test_graph_weights_add_up_to_the_count(nano) -> None:
    model, _ = nano
    graph = build_graph(model)
    weights = float(2 * model.vocab_size * model.hidden_size)
    for group in graph.groups:
        for op in group.layer.ops:
            for tensor in op.inputs:
                if tensor.name.startswith("W"):
                    weights += group.count * math.prod(group.sizes[r] for r in tensor.ranks)
    assert weights == pytest.approx(parameter_count(model)[0], rel=0.001)


def _memory(model, *, sequences: float, context: float, tp: int = 1):
    return memory_use(graph=build_graph(model), gpu=load_gpu("h100"),
                      runtime=get_runtime(DEFAULT_RUNTIME),
                      degrees={"tp": tp, "etp": tp, "ep": 1}, pp=1, weight_dtype="bf16",
                      kv_dtype="bf16", sequences=sequences, context_tokens=context)


def test_kv_only_in_attention_blocks_and_a_constant_state(nano) -> None:
    model, _ = nano
    one = _memory(model, sequences=1, context=1)
    assert one.kv_cache_bytes == 4 * 2 * 8 * 128 * ACTIVATION_BYTES  # 4 attention blocks
    state = 27 * (128 * 80 * 128 + 3 * (10240 + 2 * 8 * 128)) * ACTIVATION_BYTES
    assert one.state_bytes == state  # SSM state + the last 3 convolution inputs
    long = _memory(model, sequences=16, context=100_000)
    assert long.state_bytes == 16 * state
    assert long.kv_cache_bytes == 16 * 100_000 * one.kv_cache_bytes
    assert _memory(model, sequences=16, context=100_000, tp=8).state_bytes == 2 * state


def test_decode_reads_and_writes_the_state_every_step(nano) -> None:
    """Decode energy per token grows with the batch's state traffic but does not depend on
    how long the context is in the Mamba blocks; prefill and decode are finite."""
    model, _ = nano
    short = predict(model=model, gpu="h100", workload=Workload(batch=32, input_tokens=256,
                                                                output_tokens=64))
    assert short.feasible
    for phase in (short.prefill, short.decode):
        assert math.isfinite(phase.energy_j) and phase.energy_j > 0 and phase.latency_s > 0
    graph = build_graph(model)
    mamba = next(g for g in graph.groups if g.name == "mamba")
    assert not any("p" in op.ranks for op in mamba.layer.ops)  # no context rank
    small = predict(model=model, gpu="h100", workload=Workload(batch=1, input_tokens=256,
                                                                output_tokens=64))
    assert short.tpot_s > small.tpot_s  # 32 states to stream instead of 1


def test_an_fp32_ssm_state_doubles_its_bytes_and_slows_decode(nano, tmp_path: Path) -> None:
    """``mamba_ssm_cache_dtype: float32`` (vLLM's --mamba-ssm-cache-dtype, what the
    Nemotron-Nano-v2 card serves with): the SSM state is 4 bytes per element, the
    convolution inputs stay 2; decode streams twice the SSM state."""
    bf16, _ = nano
    path = tmp_path / "fp32" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**NEMOTRON_NANO_9B_V2, "mamba_ssm_cache_dtype": "float32"}))
    fp32 = load_hf_config(path)
    assert fp32.hybrid is not None and fp32.hybrid.ssm_state_dtype == "fp32"
    assert _memory(fp32, sequences=1, context=1).state_bytes == 27 * (
        128 * 80 * 128 * 4 + 3 * 12288 * 2)
    workload = Workload(kind="serving", batch=64, input_tokens=256, output_tokens=256)
    slow, fast = (predict(model=m, gpu="h100", workload=workload) for m in (fp32, bf16))
    assert slow.tpot_s > fast.tpot_s
    shipped = get_model("nemotron-nano-9b-v2").hybrid
    assert shipped is not None and shipped.ssm_state_dtype == "fp32"


def test_tensor_parallel_splits_the_heads_and_groups(nano) -> None:
    model, _ = nano
    workload = Workload(batch=8, input_tokens=512, output_tokens=32)
    one = predict(model=model, gpu="h100", workload=workload)
    two = predict(model=model, gpu="h100", deployment=Deployment(tp=2), workload=workload)
    assert two.memory_per_gpu_gb < one.memory_per_gpu_gb
    assert two.decode.communication_j > 0 == one.decode.communication_j


def test_round_trip_through_config_json(nano, tmp_path: Path) -> None:
    model, _ = nano
    path = tmp_path / "again" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(write_hf_config(model, model_type="nemotron_h")))
    again = load_hf_config(path)
    assert dataclasses.replace(again, name=model.name, notes=model.notes) == model


def test_models_show_a_hybrid_config(nano, capsys) -> None:
    _, path = nano
    assert main(["models", "show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["family"] == "hybrid"
    assert shown["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 2
    assert shown["state_bytes_per_sequence"] == 27 * (128 * 80 * 128 + 3 * 12288) * 2


@pytest.mark.parametrize(("change", "fragment"), [
    ({"hybrid_override_pattern": PATTERN_9B + "M"}, "57 blocks but num_layers = 56"),
    ({"hybrid_override_pattern": PATTERN_9B.replace("M", "X", 1)}, "layer_pattern must be"),
    ({"n_groups": 7}, "not a multiple of hybrid.ssm_groups"),
    ({"hybrid_override_pattern": None}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": PATTERN_9B.replace("-", "E", 1)}, "moe_intermediate_size"),
])
def test_a_bad_hybrid_config_is_one_line(tmp_path: Path, change: dict, fragment: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEMOTRON_NANO_9B_V2, **change}))
    with pytest.raises(ModelConfigError, match=fragment) as info:
        load_hf_config(path)
    assert "\n" not in str(info.value)


def test_a_models_yaml_entry_may_be_hybrid() -> None:
    entry = """
tiny-hybrid:
  hf_id: org/Tiny-H
  model_type: nemotron_h
  family: dense
  num_layers: 4
  hidden_size: 64
  num_heads: 4
  num_kv_heads: 2
  head_dim: 16
  ffn_size: 128
  gated_mlp: false
  vocab_size: 100
  tie_word_embeddings: false
  qkv_bias: false
  norm_type: rmsnorm
  attention: GQA
  sliding_window: null
  num_sliding_layers: 0
  moe: null
  mla: null
  hybrid: {layer_pattern: "M*M-", ssm_heads: 4, ssm_head_dim: 8, ssm_state_size: 16,
           ssm_groups: 2, conv_kernel: 4}
  params_total_published: null
  params_active_published: null
  verification: secondary (a test)
  source: ["tests/test_hybrid.py"]
  notes: "test entry"
"""
    model = parse_models_yaml(entry).models["tiny-hybrid"]
    assert model.hybrid == HybridConfig(layer_pattern="M*M-", ssm_heads=4, ssm_head_dim=8,
                                        ssm_state_size=16, ssm_groups=2, conv_kernel=4)
    assert [g.name for g in build_graph(model).groups] == ["mamba", "attention", "mlp"]
