"""The family variants the LLM-Inference-Bench models need: a parallel block (GPT-J,
Phi-2), positions without a rope op (BLOOM's ALiBi, OPT's learned table), per-layer KV
heads (DeciLM). Counts below are computed by hand from the shapes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from energylens.cost.memory import kv_bytes_per_token
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


#: A NAS-derived Nemotron layout, eight layers of hidden 8192 and 64 heads: (KV heads or 0
#: for no attention, ffn_mult or None for no FFN).
NAS_LAYERS = [(8, 1.3), (8, 2.625), (0, 2.625), (0, None), (4, 1.95), (8, None), (8, 2.625),
              (0, 0.5)]


def _nas_config(tmp_path: Path, layers: list[tuple[int, float | None]] = NAS_LAYERS,
                **attention: object) -> Path:
    blocks = [{"attention": {"no_op": True} if not kv else
               {"n_heads_in_group": 64 // kv, "no_op": False, **attention},
               "ffn": {"no_op": True} if mult is None else {"ffn_mult": mult, "no_op": False}}
              for kv, mult in layers]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "nemotron-nas", "architectures": ["DeciLMForCausalLM"],
        "hidden_size": 8192, "num_attention_heads": 64, "num_hidden_layers": len(layers),
        "vocab_size": 128256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "block_configs": blocks}))
    return path


def test_a_nemotron_nas_config_gives_each_layer_its_attention_and_ffn(tmp_path: Path) -> None:
    """DeciLM's widths: int(2 x mult x 8192 / 3) up to a multiple of 256 (1.3 -> 7,099 ->
    7,168; 1.95 -> 10,649 -> 10,752; 0.5 -> 2,730 -> 2,816); parameters by hand; a layer
    without attention holds no KV; the config survives a write and a read."""
    model = load_hf_config(_nas_config(tmp_path))
    assert model.kv_heads_per_layer == (8, 8, 0, 0, 4, 8, 8, 0)
    assert model.ffn_per_layer == (7168, 14336, 14336, 0, 10752, 0, 14336, 2816)
    assert (model.num_kv_heads, model.ffn_size) == (8, 14336)
    attention = {8: 2 * 8192**2 + 2 * 8192 * 1024, 4: 2 * 8192**2 + 2 * 8192 * 512}
    norms = 8192 * (1 + 2 * 8 - 3 - 2)  # final norm; no pre-norm for 3 attentions, 2 FFNs
    expected = (2 * 128256 * 8192 + norms + 4 * attention[8] + attention[4]
                + 3 * 8192 * (7168 + 3 * 14336 + 10752 + 2816))
    assert parameter_count(model) == (expected, expected)
    groups = build_graph(model).groups
    kv_bytes = sum(g.count * kv_bytes_per_token(group=g, degrees={}, kv_dtype="bf16")
                   for g in groups)
    assert kv_bytes == (4 * 8 + 4) * 128 * 2 * 2  # K and V of 36 heads, 16-bit
    assert sum(g.count for g in groups) == 7  # the layer with neither part adds nothing
    path = tmp_path / "written.json"
    path.write_text(json.dumps(write_hf_config(model, model_type="nemotron-nas")))
    again = load_hf_config(path)
    assert (again.kv_heads_per_layer, again.ffn_per_layer) == (model.kv_heads_per_layer,
                                                               model.ffn_per_layer)


def test_a_layer_without_attention_costs_less_and_holds_no_cache(tmp_path: Path) -> None:
    every = [(8, 2.625)] * 4
    skipped = [(8, 2.625), (0, 2.625), (8, 2.625), (0, 2.625)]
    workload = Workload(batch=32, input_tokens=4096, output_tokens=64)
    full, fewer = (predict(model=load_hf_config(_nas_config(tmp_path, layers)), gpu="h100",
                           deployment=Deployment(tp=1), workload=workload)
                   for layers in (every, skipped))
    assert fewer.decode.latency_s < full.decode.latency_s
    assert fewer.prefill.latency_s < full.prefill.latency_s
    assert fewer.memory_per_gpu_gb < full.memory_per_gpu_gb


@pytest.mark.parametrize(("change", "message"), [
    ({"replace_with_linear": True}, "replace_with_linear: a block replaced by one linear"),
    ({"n_heads_in_group": 7}, "n_heads_in_group = 7 does not divide"),
])
def test_a_nemotron_nas_block_the_model_cannot_price_is_refused(tmp_path: Path, change: dict,
                                                                message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        load_hf_config(_nas_config(tmp_path, **change))
