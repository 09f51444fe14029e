"""Tests for the model zoo: lookup, FP8 suffix, HF config loading, parameter counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from energylens.model.config import ModelConfig
from energylens.model.zoo import (
    UnknownModelError,
    get_model,
    list_models,
    load_hf_config,
    parameter_count,
    resolve_model_name,
)

EXPECTED_NAMES = {
    "llama-2-7b", "llama-2-70b", "codellama-34b", "qwen-72b", "llama-3.1-8b", "llama-3.1-70b",
    "llama-3.1-405b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b",
    "qwen3-coder-480b-a35b", "mixtral-8x7b", "llama-4-scout-17b-16e",
    "llama-4-maverick-17b-128e", "gpt-oss-20b", "gpt-oss-120b", "bloom-176b", "deepseek-v3",
    "gemma-3-12b", "gemma-3-27b", "qwen2.5-72b", "llama-3-8b", "llama-3-70b",
}  # fmt: skip


def test_zoo_has_every_model() -> None:
    names = [m.name for m in list_models()]
    assert set(names) == EXPECTED_NAMES
    assert len(names) == len(set(names))
    assert all(isinstance(m, ModelConfig) for m in list_models())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Llama-3.1-70B", "llama-3.1-70b"),
        ("Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("llama-2-70b-hf", "llama-2-70b"),
        ("llama2-70b", "llama-2-70b"),
        ("bloom-176b", "bloom-176b"),
        ("bigscience/bloom", "bloom-176b"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
        ("Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b"),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick-17b-128e"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout-17b-16e"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
        ("google/gemma-3-27b-it", "gemma-3-27b"),
        ("meta-llama/Meta-Llama-3-70B", "llama-3-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("Qwen/Qwen-72B", "qwen-72b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("QWEN3-8B", "qwen3-8b"),
    ],
)
def test_lookup(query: str, expected: str) -> None:
    assert resolve_model_name(query) == expected
    assert get_model(query).name == expected


def test_every_name_and_hf_id_resolves_to_itself() -> None:
    for model in list_models():
        assert resolve_model_name(model.name) == model.name
        assert resolve_model_name(model.hf_id) == model.name


def test_fp8_suffix_sets_weight_dtype() -> None:
    fp8 = get_model("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8")
    plain = get_model("qwen3-coder-480b-a35b")
    assert fp8.weight_dtype == "fp8"
    assert plain.weight_dtype == "bf16"
    assert dataclasses.replace(fp8, weight_dtype="bf16") == plain
    assert get_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8").weight_dtype == "fp8"


def test_get_model_is_cached() -> None:
    assert get_model("llama-3.1-70b") is get_model("llama-3.1-70b")


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model("nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    message = str(info.value)
    assert "NVIDIA-Nemotron-Nano-9B-v2" in message
    assert "\n" not in message
    assert info.value.suggestions
    with pytest.raises(UnknownModelError) as info:
        get_model("llama-3.1-7b")
    assert "llama-3.1-8b" in info.value.suggestions
    assert isinstance(info.value, ValueError)


def test_zoo_fields_are_consistent() -> None:
    for m in list_models():
        assert (m.moe is not None) == (m.family == "moe"), m.name
        assert (m.mla is not None) == (m.attention == "MLA"), m.name
        assert 0 <= m.num_sliding_layers <= m.num_layers, m.name
        assert (m.sliding_window is None) == (m.num_sliding_layers == 0), m.name
        assert m.num_heads % m.num_kv_heads == 0, m.name
        if m.moe is not None:
            assert 0 < m.moe.num_moe_layers <= m.num_layers, m.name
            assert (m.moe.dense_layer_ffn == 0) == (m.moe.num_moe_layers == m.num_layers)
        assert m.notes, m.name


def test_specific_mappings() -> None:
    assert get_model("qwen-72b").ffn_size == 24576  # Qwen-1: HF intermediate_size / 2
    bloom = get_model("bloom-176b")
    assert (bloom.gated_mlp, bloom.norm_type, bloom.ffn_size) == (False, "layernorm", 4 * 14336)
    mav = get_model("llama-4-maverick-17b-128e")
    assert mav.moe is not None and mav.moe.num_moe_layers == 24
    assert mav.moe.dense_layer_ffn == 16384 and mav.sliding_window == 8192
    ds = get_model("deepseek-v3")
    assert ds.mla is not None and ds.mla.kv_lora_rank == 512 and ds.head_dim == 192
    assert ds.moe is not None and ds.moe.num_moe_layers == 58
    assert get_model("gemma-3-12b").num_sliding_layers == 40
    assert get_model("gpt-oss-120b").num_sliding_layers == 18


# ---------------------------------------------------------------- parameter counts

# Published text-decoder counts (total, active) where the card's number includes a vision
# encoder that the zoo does not model and the card misses the 3% tolerance.
_TEXT_ONLY = {"gemma-3-12b": (11.77e9, 11.77e9)}  # keras-hub gemma3_12b_text; card 12.2B


@pytest.mark.parametrize("model", list_models(), ids=lambda m: m.name)
def test_parameter_count_matches_published(model: ModelConfig) -> None:
    total, active = parameter_count(model)
    assert model.params_total_published is not None
    assert model.params_active_published is not None
    want_total, want_active = _TEXT_ONLY.get(
        model.name, (model.params_total_published, model.params_active_published)
    )
    assert total == pytest.approx(want_total, rel=0.03)
    assert active <= total
    if model.moe is None:
        assert active == total
    if model.name.startswith("gpt-oss"):
        # OpenAI's active count leaves out the input embedding table (a lookup, no matmul).
        active -= model.vocab_size * model.hidden_size
    assert active == pytest.approx(want_active, rel=0.03)


# ---------------------------------------------------------------- HF config.json loading

_LLAMA = {
    "_name_or_path": "meta-llama/Llama-3.1-8B",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
}

_QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "sliding_window": None,
}


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _shapes(m: ModelConfig) -> dict:
    skip = {"name", "hf_id", "notes", "params_total_published", "params_active_published"}
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in skip}


def test_load_llama_config_matches_zoo(tmp_path: Path) -> None:
    path = _write(tmp_path, "Llama-3.1-8B", _LLAMA)
    loaded = load_hf_config(path)
    assert loaded.name == "Llama-3.1-8B"
    assert loaded.hf_id == "meta-llama/Llama-3.1-8B"
    assert _shapes(loaded) == _shapes(get_model("llama-3.1-8b"))
    assert get_model(str(path)) == loaded


def test_load_qwen3_moe_config_matches_zoo(tmp_path: Path) -> None:
    loaded = load_hf_config(_write(tmp_path, "Qwen3-30B-A3B", _QWEN3_MOE))
    assert loaded.family == "moe" and loaded.moe is not None
    assert loaded.moe.num_moe_layers == 48 and loaded.moe.expert_ffn == 768
    assert _shapes(loaded) == _shapes(get_model("qwen3-30b-a3b"))


def test_load_config_missing_field(tmp_path: Path) -> None:
    cfg = {k: v for k, v in _LLAMA.items() if k != "intermediate_size"}
    path = _write(tmp_path, "broken", cfg)
    with pytest.raises(ValueError, match="intermediate_size") as info:
        load_hf_config(path)
    assert str(path) in str(info.value)


def test_load_config_unsupported_type(tmp_path: Path) -> None:
    path = _write(tmp_path, "nemotron", {**_LLAMA, "model_type": "nemotron_h"})
    with pytest.raises(ValueError, match="nemotron_h"):
        load_hf_config(path)


def test_load_deepseek_llama4_gpt_oss_bloom(tmp_path: Path) -> None:
    deepseek = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }  # fmt: skip
    assert _shapes(load_hf_config(_write(tmp_path, "ds", deepseek))) == _shapes(
        get_model("deepseek-v3")
    )
    maverick_text = {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_hidden_layers": 48, "num_local_experts": 128,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 8192,
        "no_rope_layers": [], "vocab_size": 202048,
    }  # fmt: skip
    cfg = {"model_type": "llama4", "text_config": maverick_text, "tie_word_embeddings": False}
    assert _shapes(load_hf_config(_write(tmp_path, "mav", cfg))) == _shapes(
        get_model("llama-4-maverick-17b-128e")
    )
    gpt_oss = {
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_hidden_layers": 36, "num_local_experts": 128, "num_experts_per_tok": 4,
        "sliding_window": 128, "attention_bias": True, "vocab_size": 201088,
        "tie_word_embeddings": False,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
    }  # fmt: skip
    assert _shapes(load_hf_config(_write(tmp_path, "oss", gpt_oss))) == _shapes(
        get_model("gpt-oss-120b")
    )
    bloom = {"model_type": "bloom", "hidden_size": 14336, "n_layer": 70, "n_head": 112,
             "vocab_size": 250880, "n_inner": None}  # fmt: skip
    assert _shapes(load_hf_config(_write(tmp_path, "bloom", bloom))) == _shapes(
        get_model("bloom-176b")
    )
    llama4_missing = {"model_type": "llama4", "text_config": {**maverick_text}}
    del llama4_missing["text_config"]["num_local_experts"]
    with pytest.raises(ValueError, match=r"text_config\.num_local_experts"):
        load_hf_config(_write(tmp_path, "mav2", llama4_missing))
