"""The family variants the LLM-Inference-Bench models need: a parallel block (GPT-J,
Phi-2), positions without a rope op (BLOOM's ALiBi, OPT's learned table), per-layer KV
heads (DeciLM). Counts below are computed by hand from the shapes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from energylens.deployment import Deployment, Workload
from energylens.errors import ModelConfigError
from energylens.model import build_graph, get_model, parameter_count
from energylens.model.config import check_model_config
from energylens.model.hf import load_hf_config
from energylens.model.hf.write import write_hf_config
from energylens.predict import predict


def _ops(name: str) -> dict[str, object]:
    return {op.name: op for op in build_graph(get_model(name)).groups[0].layer.ops}


def test_a_parallel_block_feeds_the_mlp_from_the_attention_norm() -> None:
    ops = _ops("gpt-j-6b")
    assert "norm2" not in ops
    assert [t.name for t in ops["up"].inputs] == ["N", "WU"]  # the tensor q reads
    assert "N" in [t.name for t in ops["q"].inputs]
    assert [t.name for t in ops["res2"].inputs] == ["D", "H"]  # x + attention + MLP
    # 2 x 50400 x 4096 embeddings + final norm + 28 x (4 x 4096^2 + one LayerNorm + 2 x 4096 x 16384)
    expected = 2 * 50400 * 4096 + 2 * 4096 + 28 * (4 * 4096**2 + 2 * 4096 + 2 * 4096 * 16384)
    assert parameter_count(get_model("gpt-j-6b")) == (expected, expected)


def test_alibi_and_learned_positions_have_no_rope_op() -> None:
    for name in ("bloom-7b1", "bloom-176b", "opt-6.7b"):
        ops = _ops(name)
        assert "rope" not in ops
        assert [t.name for t in ops["qk"].inputs][0] == "Q"
    assert "rope" in _ops("llama-2-7b")
    # BLOOM-7b1's card count (7,069,016,064) less the biases the zoo does not count (the
    # attention output's and the MLP's, 30 x (4096 + 16384 + 4096)) and the embedding norm
    assert parameter_count(get_model("bloom-7b1"))[0] == 7_069_016_064 - 30 * 24576 - 8192


def test_per_layer_kv_heads_make_one_group_per_count() -> None:
    model = get_model("decilm-7b")
    groups = build_graph(model).groups
    assert {g.sizes["g"]: g.count for g in groups} == {4: 7.0, 2: 15.0, 1: 10.0}
    # one KV head of K and V per layer costs 2 x 4096 x 128 parameters
    uniform = dataclasses.replace(model, kv_heads_per_layer=None)
    saved = parameter_count(uniform)[0] - parameter_count(model)[0]
    assert saved == (32 * 4 - 68) * 2 * 4096 * 128


def test_fewer_kv_heads_read_less_cache_in_decode() -> None:
    model = get_model("decilm-7b")
    uniform = dataclasses.replace(model, kv_heads_per_layer=None)
    workload = Workload(batch=32, input_tokens=4096, output_tokens=64)
    fewer, more = (predict(model=m, gpu="h100", deployment=Deployment(tp=1), workload=workload)
                   for m in (model, uniform))
    assert fewer.decode.latency_s < more.decode.latency_s


@pytest.mark.parametrize("change", [
    {"kv_heads_per_layer": (4,) * 31},            # one short
    {"kv_heads_per_layer": (4,) * 31 + (3,)},     # 3 does not divide 32 heads
    {"kv_heads_per_layer": (2,) * 32},            # largest is not num_kv_heads (4)
    {"position_encoding": "sinusoidal"},
])
def test_bad_variants_are_refused(change: dict) -> None:
    with pytest.raises(ModelConfigError):
        check_model_config(dataclasses.replace(get_model("decilm-7b"), **change), where="test")


def test_the_per_layer_list_survives_a_config_json(tmp_path: Path) -> None:
    model = get_model("decilm-7b")
    fields = write_hf_config(model, model_type="deci")
    assert sum(fields["num_key_value_heads_per_layer"]) == 68
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    assert load_hf_config(path).kv_heads_per_layer == model.kv_heads_per_layer
    path.write_text(json.dumps({**fields, "num_key_value_heads_per_layer": [4, 2]}))
    with pytest.raises(ModelConfigError, match="must list 32 positive KV head counts"):
        load_hf_config(path)
