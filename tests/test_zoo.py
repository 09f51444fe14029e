"""The model zoo and HF config.json loading: lookup, FP8 suffix, hand-checked mappings, the
builder registry, and one-line errors for malformed models.yaml entries and config.json files.

Checks that every zoo model must pass are in test_model_conformance.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from energylens.cli.main import main
from energylens.errors import ModelConfigError, UnknownModelError
from energylens.model import (
    ModelConfig,
    get_model,
    list_models,
    load_hf_config,
    resolve_model_name,
    supported_model_types,
)
from energylens.model.hf import hf_builder, registered_builders
from energylens.model.zoo import parse_models_yaml, resolve


def test_zoo_names_are_unique_configs() -> None:
    names = [m.name for m in list_models()]
    assert names and len(names) == len(set(names))
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
        # the first tries, and checkpoints that share another entry's shapes
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-coder-30b-a3b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "llama-3.1-8b"),
        ("nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "llama-3.1-70b"),
        ("Qwen/Qwen2-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen2-7B", "qwen2.5-7b"),
        ("google/gemma-2-9b", "gemma-2-9b"),
        # release words anywhere after the first word, a trailing -v0.1
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b-v0.1"),
        ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"),
        ("Qwen/Qwen3-4B-Instruct-2507", "qwen3-4b"),
        ("Qwen/Qwen3-4B-Thinking-2507", "qwen3-4b"),
        ("CohereForAI/c4ai-command-r-v01", "command-r-v01"),
        ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k"),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2-instruct"),
        ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-24b-2501"),
        # widely used checkpoints added with recalled shapes (verification secondary)
        ("meta-llama/Llama-2-13b-chat-hf", "llama-2-13b"),
        ("lmsys/vicuna-13b-v1.5", "llama-2-13b"),
        ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-12b"),
        ("01-ai/Yi-34B-Chat", "yi-34b"),
        ("google/gemma-7b", "gemma-7b"),
        ("google/gemma-3-1b-it", "gemma-3-1b"),
        ("facebook/opt-66b", "opt-66b"),
        ("CohereForAI/c4ai-command-r-plus", "command-r-plus"),
        ("NousResearch/Hermes-3-Llama-3.1-8B", "llama-3.1-8b"),
        ("databricks/dbrx-instruct", "dbrx"),
        ("zai-org/GLM-4.5", "glm-4.5"),
        ("zai-org/GLM-4.6", "glm-4.5"),
        ("ai21labs/AI21-Jamba-1.5-Mini", "jamba-1.5-mini"),
        ("ai21labs/Jamba-v0.1", "jamba-1.5-mini"),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2-exp"),
        ("deepseek-ai/DeepSeek-V3.2-Exp-Base", "deepseek-v3.2-exp"),
        ("deepseek-ai/DeepSeek-V3.2", "deepseek-v3.2-exp"),
        ("Qwen/Qwen2-VL-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen2.5-VL-72B-Instruct", "qwen2.5-72b"),
        ("THUDM/glm-4-9b-chat", "glm-4-9b"),
        ("THUDM/glm-4-9b", "glm-4-9b"),
        ("baichuan-inc/Baichuan2-7B-Chat", "baichuan2-7b"),
        ("baichuan-inc/Baichuan2-13B-Chat", "baichuan2-13b"),
        ("baichuan-inc/Baichuan2-13B-Base", "baichuan2-13b"),
        ("Snowflake/snowflake-arctic-instruct", "snowflake-arctic"),
        ("Snowflake/snowflake-arctic-base", "snowflake-arctic"),
        ("baidu/ERNIE-4.5-21B-A3B-PT", "ernie-4.5-21b-a3b"),
        ("baidu/ERNIE-4.5-21B-A3B-Base-PT", "ernie-4.5-21b-a3b"),
        ("baidu/ERNIE-4.5-300B-A47B-PT", "ernie-4.5-300b-a47b"),
        ("facebook/opt-13b", "opt-13b"),
        ("facebook/opt-30b", "opt-30b"),
        ("01-ai/Yi-1.5-34B-Chat", "yi-34b"),
        ("01-ai/Yi-1.5-9B-Chat", "yi-1.5-9b"),
        ("01-ai/Yi-1.5-6B", "yi-1.5-6b"),
        ("deepseek-ai/deepseek-llm-67b-chat", "deepseek-llm-67b"),
        ("deepseek-ai/deepseek-llm-7b-base", "deepseek-llm-7b"),
        ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "smollm2-1.7b"),
        ("HuggingFaceTB/SmolLM2-135M", "smollm2-135m"),
        ("allenai/OLMo-2-1124-7B-Instruct", "olmo-2-7b"),
        ("google/gemma-2-2b-it", "gemma-2-2b"),
        ("ibm-granite/granite-3.1-8b-base", "granite-3.1-8b"),
        ("ibm-granite/granite-3.2-8b-instruct", "granite-3.1-8b"),
        ("mistralai/Codestral-22B-v0.1", "codestral-22b"),
        ("mistralai/Ministral-8B-Instruct-2410", "ministral-8b-2410"),
        ("microsoft/Phi-3.5-mini-instruct", "phi-3.5-mini"),
        ("microsoft/Phi-3-mini-128k-instruct", "phi-3.5-mini"),
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral-small-24b-2501"),
        ("mistralai/Mistral-Small-3.1-24B-Base-2503", "mistral-small-24b-2501"),
        ("MiniMaxAI/MiniMax-M2", "minimax-m2.5"),
        ("nvidia/Llama-3.1-Nemotron-Nano-8B-v1", "llama-3.1-8b"),
        ("tiiuae/falcon-7b-instruct", "falcon-7b"),
        ("deepseek-ai/DeepSeek-V2-Chat", "deepseek-v2"),
        ("deepseek-ai/DeepSeek-V2.5", "deepseek-v2"),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-v2-lite"),
        ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "qwen1.5-moe-a2.7b"),
        ("Qwen/Qwen2-57B-A14B-Instruct", "qwen2-57b-a14b"),
        ("deepseek-ai/deepseek-moe-16b-chat", "deepseek-moe-16b"),
    ],
)
def test_lookup(query: str, expected: str) -> None:
    assert resolve_model_name(query) == expected
    assert get_model(query).name == expected


def test_fp8_suffix_sets_weight_dtype() -> None:
    fp8 = get_model("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8")
    plain = get_model("qwen3-coder-480b-a35b")
    assert fp8.weight_dtype == "fp8"
    assert plain.weight_dtype == "bf16"
    assert fp8.hf_id == "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"
    assert dataclasses.replace(fp8, weight_dtype="bf16", hf_id=plain.hf_id) == plain
    assert get_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8").weight_dtype == "fp8"


@pytest.mark.parametrize(
    ("query", "expected", "dtype"),
    [
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-Dynamic", "llama-3.1-8b", "fp8"),
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "llama-3.1-70b", "fp8"),
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b", "fp8"),
        ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", "fp8"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b", "int4"),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "qwen2.5-72b", "int4"),
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b", "int4"),
        ("TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ", "mixtral-8x7b", "int4"),
        ("nvidia/Llama-3.3-70B-Instruct-NVFP4", "llama-3.1-70b", "nvfp4"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8", "qwen3-30b-a3b", "fp8"),
    ],
)
def test_precision_words_set_the_weight_dtype(query: str, expected: str, dtype: str) -> None:
    found = resolve(query)
    assert (found.name, found.weight_dtype) == (expected, dtype)
    model = get_model(query)
    assert model.weight_dtype == dtype
    # NVIDIA's Model Optimizer releases also declare an FP8 KV cache; the checkpoint is the
    # one asked for (what a launch command serves); nothing else differs
    assert model.kv_dtype == ("fp8" if query.startswith("nvidia/") else None)
    assert model.hf_id == query
    # another checkpoint's context is its own: known only for an alias that records it
    # (Qwen3-30B-A3B-Instruct-2507 serves 262,144 tokens, the entry's checkpoint 40,960)
    assert model.max_context_tokens == {"Qwen/Qwen3-235B-A22B-FP8": 40960}.get(query)
    base = get_model(expected)
    assert dataclasses.replace(model, weight_dtype="bf16", kv_dtype=None, hf_id=base.hf_id,
                               max_context_tokens=base.max_context_tokens) == base
    assert dtype in found.describe() and expected in found.describe()


def test_a_name_without_precision_keeps_the_checkpoint_dtype() -> None:
    assert resolve("llama-3.1-70b").weight_dtype is None
    assert get_model("deepseek-ai/DeepSeek-R1").weight_dtype == "fp8"  # released in FP8
    assert get_model("deepseek-ai/DeepSeek-R1-AWQ").weight_dtype == "int4"


def test_predict_says_which_weights_the_name_selected(capsys) -> None:
    assert main(["predict", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-7b" in out and "int4 weights" in out
    assert main(["predict", "--model", "qwen2.5-7b", "--gpu", "h100"]) == 0
    assert "weights" not in capsys.readouterr().out.splitlines()[0]


def test_get_model_is_cached() -> None:
    assert get_model("llama-3.1-70b") is get_model("llama-3.1-70b")


def test_unknown_model_suggests_three_close_names(capsys) -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model("acme/Frobnicator-13B-Instruct")
    message = str(info.value)
    assert "Frobnicator-13B-Instruct" in message
    assert "\n" not in message
    assert len(info.value.suggestions) == 3
    with pytest.raises(UnknownModelError) as info:
        get_model("llama-3.1-7b")
    assert "llama-3.1-8b" in info.value.suggestions
    assert isinstance(info.value, ValueError)
    assert main(["predict", "--model", "llama-3.1-7b", "--gpu", "h100"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "llama-3.1-8b" in err[0]


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
    "max_position_embeddings": 131072,
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
    "max_position_embeddings": 40960,
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
    """The fields a config.json gives (not what a checkpoint's exclude list keeps 16-bit:
    ``held_16bit`` is read from the zoo only, docs/models.md)."""
    skip = {"name", "hf_id", "notes", "params_total_published", "params_active_published",
            "held_16bit"}
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
    with pytest.raises(ModelConfigError, match="intermediate_size") as info:
        load_hf_config(path)
    assert str(path) in str(info.value)


def test_load_config_unsupported_type_without_standard_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, "acme", {"model_type": "acme_lm", "vocab_size": 1000})
    with pytest.raises(ModelConfigError, match="acme_lm") as info:
        load_hf_config(path)
    assert ", ".join(supported_model_types()) in str(info.value)
    assert "lacks the standard decoder fields ['hidden_size'" in str(info.value)


def test_load_deepseek_llama4_gpt_oss_bloom(tmp_path: Path) -> None:
    deepseek = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "tie_word_embeddings": False, "max_position_embeddings": 163840,
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
        "no_rope_layers": [], "vocab_size": 202048, "max_position_embeddings": 1048576,
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
        "tie_word_embeddings": False, "max_position_embeddings": 131072,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "quantization_config": {"quant_method": "mxfp4"},  # as the released checkpoint's
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
    with pytest.raises(ModelConfigError, match=r"text_config\.num_local_experts"):
        load_hf_config(_write(tmp_path, "mav2", llama4_missing))


def test_mla_without_a_query_latent_predicts(tmp_path: Path) -> None:
    """DeepSeek-V2-Lite style (q_lora_rank null): queries projected straight from the hidden
    state, not through a zero-width latent (which used to give NaN)."""
    from energylens.model import build_graph, parameter_count
    from energylens.predict import predict

    lite = {
        "model_type": "deepseek_v3", "hidden_size": 2048, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_hidden_layers": 27,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
    }  # fmt: skip
    model = load_hf_config(_write(tmp_path, "DeepSeek-V2-Lite", lite))
    assert model.mla is not None and model.mla.q_lora_rank == 0
    assert "q" in {op.name for op in build_graph(model).groups[0].layer.ops}
    assert parameter_count(model)[0] == pytest.approx(15.7e9, rel=0.03)  # model card: 15.7B
    result = predict(model=model, gpu="h100")
    assert result.prefill.energy_j > 0 and result.decode.latency_s > 0


# ---------------------------------------------------------------- the HF builder registry


def test_registry_knows_the_builder_modules() -> None:
    builders = registered_builders()
    assert set(supported_model_types()) == set(builders)
    assert {"llama", "qwen3_moe", "deepseek_v3", "llama4", "bloom"} <= set(builders)
    for builder in builders.values():
        assert builder.__module__.startswith("energylens.model.hf.builders.")


def test_a_model_type_cannot_have_two_builders() -> None:
    with pytest.raises(RuntimeError, match="'llama' has two builders"):
        hf_builder("llama")(lambda cfg, *, name, model_type: get_model("llama-3.1-8b"))
    assert registered_builders()["llama"].__module__.endswith(".llama")


# ---------------------------------------------------------------- malformed config.json

_MALFORMED: list[tuple[str, object, str]] = [
    # (case id, file content: bytes, "<dir>", "<missing>" or a JSON value, message fragment)
    ("not-json", b"{not json", "not valid JSON"),
    ("empty-file", b"", "not valid JSON"),
    ("not-utf8", b'{"model_type": "llama\xff\xfe"}', "not UTF-8"),
    ("directory", "<dir>", "cannot read"),
    ("missing-file", "<missing>", "cannot read"),
    ("deeply-nested", b"[" * 100_000, "not valid JSON"),
    ("top-level-list", [_LLAMA], "expected a JSON object"),
    ("top-level-string", "llama", "expected a JSON object"),
    ("no-model-type", {k: v for k, v in _LLAMA.items() if k != "model_type"}, "no model_type"),
    ("unsupported-type-without-fields", {"model_type": "acme_lm", "hidden_size": 64},
     "lacks the standard decoder fields"),
    ("model-type-list", {**_LLAMA, "model_type": ["llama"]}, "is not a string"),
    ("hidden-string", {**_LLAMA, "hidden_size": "abc"}, "'hidden_size' must be an integer"),
    ("hidden-zero", {**_LLAMA, "hidden_size": 0}, "'hidden_size' must be an integer >= 1"),
    ("hidden-negative", {**_LLAMA, "hidden_size": -4096}, "'hidden_size' must be an integer"),
    ("hidden-float", {**_LLAMA, "hidden_size": 4096.5}, "'hidden_size' must be an integer"),
    ("layers-bool", {**_LLAMA, "num_hidden_layers": True}, "'num_hidden_layers' must be"),
    ("layers-absurd", {**_LLAMA, "num_hidden_layers": 10**12}, "larger than any model"),
    ("vocab-overflows-a-float", {**_LLAMA, "vocab_size": 10**400}, "larger than any model"),
    ("heads-nan", {**_LLAMA, "num_attention_heads": float("nan")}, "'num_attention_heads'"),
    ("heads-do-not-divide-hidden", {**_LLAMA, "num_attention_heads": 3, "num_key_value_heads": 1},
     "not divisible"),
    ("kv-heads-do-not-divide", {**_LLAMA, "num_key_value_heads": 5}, "not a multiple"),
    ("missing-field", {k: v for k, v in _LLAMA.items() if k != "vocab_size"}, "'vocab_size'"),
    ("flag-string", {**_LLAMA, "tie_word_embeddings": "yes"}, "must be true or false"),
    ("name-not-string", {**_LLAMA, "_name_or_path": 7}, "'_name_or_path' must be a string"),
    ("window-zero", {**_LLAMA, "model_type": "mistral", "sliding_window": 0}, "sliding_window"),
    ("top-k-above-experts", {**_QWEN3_MOE, "num_experts_per_tok": 129}, "top_k"),
    ("sparse-step-zero", {**_QWEN3_MOE, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    ("dense-layers-not-a-list", {**_QWEN3_MOE, "mlp_only_layers": "all"}, "mlp_only_layers"),
    ("every-layer-dense", {**_QWEN3_MOE, "mlp_only_layers": list(range(48))}, "num_moe_layers"),
    ("text-config-list", {**_LLAMA, "model_type": "llama4", "text_config": [1]},
     "'text_config' must be an object"),
    ("text-config-field", {"model_type": "llama4", "text_config": {**_LLAMA, "vocab_size": "x"}},
     "'text_config.vocab_size'"),
    ("layer-types-too-long", {**_LLAMA, "model_type": "gpt_oss", "num_local_experts": 8,
                              "num_experts_per_tok": 2,
                              "layer_types": ["sliding_attention"] * 40}, "num_sliding_layers"),
    ("quantization-not-object", {**_LLAMA, "model_type": "deepseek_v3",
                                 "quantization_config": "fp8"}, "qk_nope_head_dim"),
]  # fmt: skip


def _malformed_path(tmp_path: Path, content: object) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir()
    path = folder / "config.json"
    if content == "<dir>":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content != "<missing>":
        path.write_text(json.dumps(content))
    return path


@pytest.mark.parametrize(("content", "fragment"), [c[1:] for c in _MALFORMED],
                         ids=[c[0] for c in _MALFORMED])
def test_malformed_config_json_is_one_line_and_exit_2(tmp_path: Path, capsys, content,
                                                      fragment) -> None:
    path = _malformed_path(tmp_path, content)
    assert main(["predict", "--model", str(path), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("energylens: error: ")
    assert str(path) in lines[0] and fragment in lines[0], lines[0]
    with pytest.raises(ModelConfigError):
        load_hf_config(path)


# ---------------------------------------------------------------- malformed models.yaml

_ENTRY = """
tiny:
  hf_id: org/Tiny
  family: dense
  num_layers: 2
  hidden_size: 64
  num_heads: 4
  num_kv_heads: 2
  head_dim: 16
  ffn_size: 128
  gated_mlp: true
  vocab_size: 100
  tie_word_embeddings: false
  qkv_bias: false
  norm_type: rmsnorm
  attention: GQA
  sliding_window: null
  num_sliding_layers: 0
  moe: null
  mla: null
  params_total_published: null
  params_active_published: null
  model_type: llama
  verification: secondary (a test)
  source: ["tests/test_zoo.py"]
  notes: "test entry"
"""


def test_a_well_formed_entry_parses() -> None:
    zoo = parse_models_yaml(_ENTRY)
    assert zoo.models["tiny"].num_heads == 4
    assert zoo.index["org/tiny"] == "tiny"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tiny: [", "not valid YAML"),
        ("- tiny", "expected a mapping of zoo names"),
        ("tiny: 3", "expected a mapping of fields"),
        (_ENTRY.replace("  notes:", "  nootes:"), "unknown keys ['nootes']"),
        (_ENTRY.replace("  vocab_size: 100\n", ""), "missing keys ['vocab_size']"),
        (_ENTRY.replace("hidden_size: 64", "hidden_size: abc"), "hidden_size must be an integer"),
        (_ENTRY.replace("vocab_size: 100", "vocab_size: 1e400"), "vocab_size must be an integer"),
        (_ENTRY.replace("num_layers: 2", "num_layers: 1000000"), "more than any model"),
        (_ENTRY.replace("num_kv_heads: 2", "num_kv_heads: 3"), "not a multiple of num_kv_heads"),
        (_ENTRY.replace("gated_mlp: true", "gated_mlp: 1"), "gated_mlp must be true or false"),
        (_ENTRY.replace("family: dense", "family: moe"), "moe is missing"),
        (_ENTRY.replace("moe: null", "moe: {num_experts: 4}"), "moe.top_k"),
        (_ENTRY.replace("norm_type: rmsnorm", "norm_type: batchnorm"), "norm_type must be one of"),
        (_ENTRY.replace("params_total_published: null", "params_total_published: many"),
         "params_total_published must be a number"),
        (_ENTRY.replace("hf_id: org/Tiny", "hf_id: org/Tiny\n  aliases: tiny2"),
         "aliases must be a list"),
        (_ENTRY + _ENTRY.replace("tiny:", "small:"), "'org/Tiny' names both tiny and small"),
        (_ENTRY.replace("secondary (a test)", "looked at it"),
         "verification must start with one of real_config, real_config_variant, secondary"),
        (_ENTRY.replace("  model_type: llama\n", ""), "model_type must name"),
        (_ENTRY.replace("  source: [\"tests/test_zoo.py\"]\n", ""), "source must be a list"),
        (_ENTRY.replace("hf_id: org/Tiny", "hf_id: org/Tiny\n  aliases: [{name: tiny2}]"),
         "needs a name and a note"),
        (_ENTRY.replace("hf_id: org/Tiny", "hf_id: org/Tiny\n  aliases: [{name: t, hf: x}]"),
         "aliases must be a list of names or {name, hf_id, note} mappings"),
        (_ENTRY.replace("hf_id: org/Tiny", "hf_id: org/Tiny\n  params_active_excludes: [lm]"),
         "params_active_excludes may name input_embedding, output_embedding"),
        (_ENTRY.replace("hf_id: org/Tiny", "hf_id: org/Tiny\n  params_text_published: -1"),
         "params_text_published must be a positive number"),
    ],
)
def test_malformed_models_yaml_raises_model_config_error(text: str, fragment: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_models_yaml(text, source="models.yaml")
    message = str(info.value)
    assert message.startswith("models.yaml") and fragment in message, message
    assert "\n" not in message


def test_an_alias_names_its_own_checkpoint() -> None:
    """DeepSeek-R1 is priced as the DeepSeek-V3 entry (same architecture) but serves its own
    weights: a launch command must name deepseek-ai/DeepSeek-R1."""
    r1, v3 = get_model("deepseek-r1"), get_model("deepseek-v3")
    assert r1.hf_id == "deepseek-ai/DeepSeek-R1" and v3.hf_id == "deepseek-ai/DeepSeek-V3"
    assert dataclasses.replace(r1, hf_id=v3.hf_id) == v3
