"""Any real ``config.json``: the family builders, the generic decoder for model types
without one, nested ``text_config``, quantization configs, and the round trip
zoo entry -> written config.json -> ``--model path``."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path

import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.errors import ModelConfigError, UnknownModelError
from energylens.model import ModelConfig, build_graph, get_model, list_models, parameter_count
from energylens.model.hf import (
    ModelApproximationWarning,
    load_hf_config,
    registered_builders,
    registered_writers,
    write_hf_config,
)
from energylens.model.zoo import model_info, resolve
from energylens.predict import predict

REAL = Path(__file__).parent / "data" / "hf_configs"
REAL_CONFIGS = sorted(p for p in REAL.glob("*_config.json")
                      if not p.name.endswith("_hf_quant_config.json"))

#: Weight format each real checkpoint declares, read by hand from its quantization_config
#: (or the hf_quant_config.json beside it).
DECLARED_DTYPE = {
    "MiniMaxAI--MiniMax-M2.5": "fp8", "Qwen--Qwen3-235B-A22B-FP8": "fp8",
    "Qwen--Qwen3-30B-A3B-FP8": "fp8", "Qwen--Qwen3-32B-FP8-Static-PerTensor": "fp8",
    "Qwen--Qwen3-32B-FP8": "fp8", "deepseek-ai--DeepSeek-R1": "fp8",
    "deepseek-ai--DeepSeek-V3": "fp8", "moonshotai--Kimi-K2-Instruct": "fp8",
    "moonshotai--Kimi-K2.5": "int4",  # compressed-tensors, 4-bit int weights
    "nvidia--DeepSeek-V3.1-NVFP4": "nvfp4", "nvidia--GLM-5-NVFP4": "nvfp4",
    "nvidia--Kimi-K2.5-NVFP4": "nvfp4", "nvidia--MiniMax-M2.5-NVFP4": "nvfp4",
    "nvidia--Qwen3-235B-A22B-NVFP4": "nvfp4", "nvidia--Qwen3.5-397B-A17B-NVFP4": "nvfp4",
    "nvidia--Llama-3.1-70B-Instruct-FP8": "fp8",  # only in its hf_quant_config.json
    "openai--gpt-oss-120b": "mxfp4", "openai--gpt-oss-20b": "mxfp4", "zai-org--GLM-5-FP8": "fp8",
}  # fmt: skip

#: Published total parameters of the real checkpoints the zoo has no entry for (model
#: cards: MiniMax-M2.5 229B, GLM-5 744B, Qwen3.5-397B-A17B 397B).
PUBLISHED_TOTAL = {"MiniMax-M2.5": 229e9, "GLM-5": 744e9, "Qwen3.5-397B-A17B": 397e9}

_SKIP = {"name", "hf_id", "notes", "params_total_published", "params_active_published"}


def _shapes(model: ModelConfig, *, dtype: bool = True) -> dict:
    skip = _SKIP if dtype else _SKIP | {"weight_dtype", "kv_dtype", "held_16bit"}
    return {k: v for k, v in dataclasses.asdict(model).items() if k not in skip}


def _load(path: Path) -> tuple[ModelConfig, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_hf_config(path)
    return model, [str(w.message) for w in caught if w.category is ModelApproximationWarning]


@pytest.mark.parametrize("path", REAL_CONFIGS, ids=lambda p: p.name.removesuffix("_config.json"))
def test_every_real_config_reads(path: Path) -> None:
    model, notes = _load(path)
    stem = path.name.removesuffix("_config.json")
    assert model.name == stem
    assert model.weight_dtype == DECLARED_DTYPE.get(stem, "bf16")
    graph = build_graph(model)
    assert sum(g.count for g in graph.groups) == pytest.approx(model.num_layers)
    raw = json.loads(path.read_text())
    model_type = (raw.get("text_config") or {}).get("model_type") or raw["model_type"]
    if model_type in registered_builders():
        assert not notes, notes
    else:  # generic decoder: one warning naming the type and what was approximated
        assert len(notes) == 1 and f"model_type {model_type!r} has no builder" in notes[0]
    org_repo = stem.replace("--", "/", 1)
    repo = org_repo.split("/", 1)[1]
    for name, published in PUBLISHED_TOTAL.items():
        if repo.startswith(name):
            assert parameter_count(model)[0] == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("path", REAL_CONFIGS, ids=lambda p: p.name.removesuffix("_config.json"))
def test_real_configs_of_zoo_checkpoints_match_the_zoo(path: Path) -> None:
    """Where the checkpoint resolves to a zoo entry, the file gives the entry's shapes
    (the base Mixtral-8x22B has the older vocabulary, as the entry's disagreements
    record)."""
    stem = path.name.removesuffix("_config.json")
    try:
        entry = get_model(resolve(stem.replace("--", "/", 1)).name)
    except UnknownModelError:
        pytest.skip("not a zoo checkpoint")
    model, _ = _load(path)
    loaded, zoo = _shapes(model, dtype=False), _shapes(entry, dtype=False)
    if stem == "mistralai--Mixtral-8x22B-v0.1":
        assert (loaded["vocab_size"], zoo["vocab_size"]) == (32000, 32768)
        assert "32000" in " ".join(model_info(entry.name).disagreements)
        loaded["vocab_size"] = zoo["vocab_size"]
    # the context is the checkpoint's (an Instruct release may differ from the entry's base
    # checkpoint): tests/test_context_length.py compares it per checkpoint
    del loaded["max_context_tokens"], zoo["max_context_tokens"]
    assert loaded == zoo


def test_the_generic_decoder_reads_what_the_llama_builder_reads(tmp_path: Path) -> None:
    llama = write_hf_config(get_model("llama-3.1-8b"), model_type="llama")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama, "model_type": "acme_lm"}))
    model, notes = _load(path)
    assert _shapes(model) == _shapes(get_model("llama-3.1-8b"))
    assert notes and "'acme_lm' has no builder" in notes[0]


def _generic(tmp_path: Path, **fields: object) -> tuple[ModelConfig, list[str]]:
    base = {"model_type": "acme_lm", "hidden_size": 1024, "num_hidden_layers": 8,
            "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 4096,
            "vocab_size": 32000, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
            "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **fields}))
    return _load(path)


def test_generic_moe_with_shared_experts_and_dense_layers(tmp_path: Path) -> None:
    model, _ = _generic(tmp_path, num_experts=64, num_experts_per_tok=6,
                        moe_intermediate_size=512, shared_expert_intermediate_size=2048,
                        mlp_only_layers=[0, 1])
    moe = model.moe
    assert model.family == "moe" and moe is not None
    assert (moe.num_experts, moe.top_k, moe.expert_ffn) == (64, 6, 512)
    assert (moe.num_shared_experts, moe.shared_expert_ffn) == (1, 2048)  # one shared of 2048
    assert (moe.num_moe_layers, moe.dense_layer_ffn, model.ffn_size) == (6, 4096, 4096)
    model, _ = _generic(tmp_path, n_routed_experts=32, n_shared_experts=2, num_experts_per_tok=4,
                        moe_intermediate_size=256, first_k_dense_replace=3)
    assert model.moe is not None and (model.moe.num_shared_experts,
                                      model.moe.shared_expert_ffn) == (2, 256)
    assert model.moe.num_moe_layers == 5
    model, _ = _generic(tmp_path, num_local_experts=8, num_experts_per_tok=2)  # Mixtral-like
    assert model.moe is not None and model.moe.expert_ffn == 4096 and model.ffn_size == 4096
    model, _ = _generic(tmp_path, num_experts=16, num_experts_per_tok=2,
                        moe_intermediate_size=512, moe_layer_freq=[0, 1] * 4)
    assert model.moe is not None and model.moe.num_moe_layers == 4


def test_generic_per_layer_lists_and_layer_types(tmp_path: Path) -> None:
    model, notes = _generic(tmp_path, intermediate_size=[4096, 2048] * 4,
                            num_key_value_heads=[4, 4, 2, 2, 8, 8, 4, 4])
    assert model.ffn_size == 3072 and model.num_kv_heads == 4
    assert "per-layer intermediate_size averaged to 3072" in notes[0]
    model, notes = _generic(tmp_path, sliding_window=512,
                            layer_types=["sliding_attention"] * 6 + ["full_attention"] * 2)
    assert (model.sliding_window, model.num_sliding_layers) == (512, 6)
    model, notes = _generic(tmp_path, layer_types=["linear_attention"] * 6 + ["full_attention"] * 2)
    assert "6 linear-attention (recurrent) layers of 8" in notes[0]
    model, _ = _generic(tmp_path, sliding_window=4096, sliding_window_pattern=4)
    assert model.num_sliding_layers == 6
    model, notes = _generic(tmp_path, kv_lora_rank=256, q_lora_rank=None, qk_nope_head_dim=64,
                            qk_rope_head_dim=32, v_head_dim=64, num_nextn_predict_layers=1)
    assert model.attention == "MLA" and model.mla is not None and model.head_dim == 96
    assert "1 multi-token-prediction layers left out" in notes[0]


def test_generic_guesses_are_named(tmp_path: Path) -> None:
    base = {"model_type": "acme_lm", "hidden_size": 512, "num_hidden_layers": 4,
            "num_attention_heads": 8, "intermediate_size": 2048, "vocab_size": 1000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base))
    model, notes = _load(path)
    for guess in ("untied assumed", "RMSNorm assumed", "a gated MLP assumed"):
        assert guess in notes[0]
    assert guess in model.notes
    model, notes = _generic(tmp_path, hidden_act="relu2", layer_norm_eps=1e-5,
                            rms_norm_eps=None)
    assert (model.gated_mlp, model.norm_type) == (False, "layernorm")


def test_a_vision_language_checkpoint_reads_its_text_model(tmp_path: Path) -> None:
    text = write_hf_config(get_model("qwen3-8b"), model_type="qwen3")
    del text["tie_word_embeddings"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "acme_vl", "tie_word_embeddings": False,
                                "text_config": text, "vision_config": {"hidden_size": 1152},
                                "quantization_config": {"quant_method": "fp8"}}))
    model, notes = _load(path)
    assert not notes  # the text model's type has a builder
    assert _shapes(model, dtype=False) == _shapes(get_model("qwen3-8b"), dtype=False)
    assert model.weight_dtype == "fp8"


@pytest.mark.parametrize(
    ("quantization", "dtype"),
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
        ({"quant_method": "gptq", "bits": 4}, "int4"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
        ({"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float"}}}}, "nvfp4"),
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bf16"),
        ({"quant_method": "gptq", "bits": 8}, "bf16"),
    ],
)
def test_quantization_config_sets_the_weight_dtype(tmp_path: Path, quantization: dict,
                                                   dtype: str) -> None:
    llama = write_hf_config(get_model("llama-3.1-8b"), model_type="llama")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama, "quantization_config": quantization}))
    model, notes = _load(path)
    assert model.weight_dtype == dtype
    assert bool(notes) == (dtype == "bf16")  # a format that is not modelled says so


def test_hf_quant_config_beside_the_file(tmp_path: Path) -> None:
    llama = write_hf_config(get_model("llama-3.1-8b"), model_type="llama")
    (tmp_path / "config.json").write_text(json.dumps(llama))
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}))
    assert _load(tmp_path / "config.json")[0].weight_dtype == "fp8"


# ---------------------------------------------------------------- round trip

ZOO = list_models()


@pytest.mark.parametrize("model", ZOO, ids=lambda m: m.name)
def test_every_zoo_entry_has_a_builder_and_a_writer(model: ModelConfig) -> None:
    model_type = model_info(model.name).model_type
    assert model_type in registered_builders()
    assert model_type in registered_writers()


@pytest.mark.parametrize("model", ZOO, ids=lambda m: m.name)
def test_round_trip_through_config_json_predicts_the_same(tmp_path: Path,
                                                          model: ModelConfig) -> None:
    """zoo entry -> written config.json -> --model path: the same shapes and predictions.
    A config.json is one checkpoint: its exclude list carries the weights held in 16 bits
    at its own weight dtype only, so the round trip is of the entry with those alone."""
    model = dataclasses.replace(model, held_16bit=tuple(
        (dtype, tuple(sorted(weights))) for dtype, weights in model.held_16bit
        if dtype == model.weight_dtype))
    path = tmp_path / model.name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(write_hf_config(model, model_type=model_info(model.name).model_type)))
    loaded, notes = _load(path)
    assert not notes
    assert _shapes(loaded) == _shapes(model)
    ours, theirs = (predict(model=m, gpu="h100").as_dict() for m in (model, loaded))
    theirs["model"] = ours["model"]
    assert theirs == ours
    assert all(math.isfinite(v) for v in ours.values() if isinstance(v, float))


def test_round_trip_on_the_command_line(tmp_path: Path, capsys) -> None:
    model = get_model("deepseek-ai/DeepSeek-V2-Lite")
    path = tmp_path / "DeepSeek-V2-Lite" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(write_hf_config(model, model_type="deepseek_v2")))
    args = ["predict", "--gpu", "h100", "--tp", "2", "--batch", "8", "--json"]
    assert main([*args, "--model", "deepseek-v2-lite"]) == 0
    zoo = json.loads(capsys.readouterr().out)
    assert main([*args, "--model", str(path)]) == 0
    local = json.loads(capsys.readouterr().out)
    assert local.pop("model") == "DeepSeek-V2-Lite" and zoo.pop("model") == "deepseek-v2-lite"
    # the configuration echoes each request as given; what was predicted is the same
    assert local["configuration"].pop("model_requested") == str(path)
    assert zoo["configuration"].pop("model_requested") == "deepseek-v2-lite"
    assert local == zoo


def test_a_generic_import_warns_in_one_line_and_predicts(tmp_path: Path, capsys) -> None:
    """A real MoE config under a model_type no builder knows."""
    raw = json.loads((REAL / "MiniMaxAI--MiniMax-M2.5_config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, "model_type": "acme_moe"}))
    assert main(["predict", "--model", str(path), "--gpu", "h100", "--tp", "8"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("energylens: warning: ")
    assert "acme_moe" in err[0]


def test_no_writer_is_one_line(capsys) -> None:
    with pytest.raises(ModelConfigError, match="no config.json writer for model_type 'acme'"):
        write_hf_config(get_model("llama-3.1-8b"), model_type="acme")


def test_linear_attention_layers_become_gated_deltanet_mixers() -> None:
    """Qwen3.5-397B-A17B (a real config): 45 Gated DeltaNet layers of 64 value heads x 128,
    keys 16 x 128, each a mixer block and an MoE block; 15 attention layers. Its published
    397B total within 2 %; its active count as summed by hand from the config (the name's
    17B is rounded): 60 MoE blocks of 10 routed + 1 shared experts (3 x 4096 x 1024 each)
    and a 512-way router, 8.431B; 45 mixers (q/k/v 4096 x 12288, z 4096 x 8192, b and a
    4096 x 64 each, out 8192 x 4096, the convolution's 4 x 12288 taps, A, dt bias, the
    norm), 5.311B; 15 attention layers (q with its gate 4096 x 16384, k/v 4096 x 1024,
    o 8192 x 4096), 1.573B; embedding and LM head 2 x 248320 x 4096, 2.034B; 121 norms:
    17.349B. The full-attention approximation missed the active count by 13 %."""
    model, notes = _load(REAL / "Qwen--Qwen3.5-397B-A17B_config.json")
    hybrid = model.hybrid
    assert hybrid is not None and model.num_layers == 120
    assert (hybrid.count("M"), hybrid.count("*"), hybrid.count("E")) == (45, 15, 60)
    assert hybrid.layer_pattern.startswith("MEMEME*E")
    assert (hybrid.ssm_heads, hybrid.ssm_head_dim, hybrid.ssm_state_size,
            hybrid.ssm_groups) == (64, 128, 128, 16)
    total, active = parameter_count(model)
    assert total == pytest.approx(397e9, rel=0.02)
    assert active == pytest.approx(17.3488e9, rel=1e-4)
    assert hybrid.mixer == "gated_deltanet"
    assert not notes  # its family has a builder: the approximations are in the notes
    assert "45 linear-attention (Gated DeltaNet) layers of 60" in model.notes
    assert hybrid.ssm_state_dtype == "fp32"  # mamba_ssm_dtype float32
    path = REAL / "Qwen--Qwen3.5-397B-A17B_config.json"
    result = predict(model=str(path), gpu="h100", deployment=Deployment(tp=8, pp=2))
    assert result.feasible and result.tpot_s > 0


def test_a_checkpoint_folder_reads_its_config_json(tmp_path: Path) -> None:
    """A local checkpoint folder stands for the config.json in it (named after the folder);
    a folder without one is a one-line error, not an unknown zoo name."""
    folder = tmp_path / "My-Llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        write_hf_config(get_model("llama-3.1-8b"), model_type="llama")))
    model = get_model(str(folder))
    assert model.name == "My-Llama"
    assert _shapes(model) == _shapes(get_model("llama-3.1-8b"))
    with pytest.raises(ModelConfigError, match="a folder without a config.json"):
        get_model(str(tmp_path))
