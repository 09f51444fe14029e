"""config.json files of models outside the zoo, read by the generic decoder or a small
builder: parameter counts and KV bytes per token summed by hand against the published
totals, and one-line refusals of what is not modelled."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from energylens.cli.catalog import footprint
from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.errors import ModelConfigError
from energylens.model import ModelConfig, get_model, parameter_count
from energylens.model.config import check_model_config
from energylens.model.hf import ModelApproximationWarning, load_hf_config, write_hf_config
from energylens.predict import predict


def _load(tmp_path: Path, config: dict[str, Any]) -> tuple[ModelConfig, str]:
    """The model read from ``config`` and its approximation warning ('' when none)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_hf_config(path)
    notes = [str(w.message) for w in caught if w.category is ModelApproximationWarning]
    assert len(notes) <= 1
    return model, notes[0] if notes else ""


def _kv_bytes(model: ModelConfig) -> float:
    """KV-cache bytes one token adds (16-bit cache, all layers)."""
    return float(footprint(model)["kv_bytes_per_token"])


#: Jamba-v0.1 (ai21labs/Jamba-v0.1 config.json): Mamba-1 mixers in 28 of 32 layers (read by
#: the jamba builder: tests/test_jamba.py).
JAMBA = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "vocab_size": 65536, "num_experts": 16, "num_experts_per_tok": 2,
         "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2,
         "expert_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
         "mamba_dt_rank": 256, "hidden_act": "silu", "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False}
#: RecurrentGemma-2b (google/recurrentgemma-2b config.json): RG-LRU blocks, 2 of each 3.
RECURRENT_GEMMA = {"model_type": "recurrent_gemma", "hidden_size": 2560, "num_hidden_layers": 26,
                   "num_attention_heads": 10, "num_key_value_heads": 1, "head_dim": 256,
                   "intermediate_size": 15360, "vocab_size": 256000, "lru_width": 2560,
                   "block_types": ["recurrent", "recurrent", "attention"],
                   "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6}
#: state-spaces/mamba-2.8b-hf config.json: Mamba-1 only.
MAMBA = {"model_type": "mamba", "hidden_size": 2560, "num_hidden_layers": 64,
         "intermediate_size": 5120, "vocab_size": 50280, "state_size": 16,
         "time_step_rank": 160, "conv_kernel": 4, "layer_norm_epsilon": 1e-5}


@pytest.mark.parametrize(("config", "fields"), [
    ({**JAMBA, "model_type": "acme_jamba"}, "attn_layer_period, mamba_d_state, mamba_d_conv, ..."),
    (RECURRENT_GEMMA, "lru_width, block_types"),
    (MAMBA, "time_step_rank"),
], ids=["jamba_fields_without_its_builder", "recurrent_gemma", "mamba"])
def test_recurrent_layers_not_modelled_are_refused(tmp_path: Path, config: dict[str, Any],
                                                   fields: str) -> None:
    """RecurrentGemma's RG-LRU blocks and Jamba's Mamba-1 mixers were read as attention
    layers by the generic decoder (RecurrentGemma-2b 4.75B against ~2.7B; Jamba 92.1B and
    131,072 KV bytes per token against ~51.6B and 16,384, before the ``jamba`` builder:
    tests/test_jamba.py): refused in one line naming the fields, as are Mamba's, and
    Jamba's under a model_type without that builder."""
    with pytest.raises(ModelConfigError, match="recurrent layers") as caught:
        _load(tmp_path, config)
    message = str(caught.value)
    assert "\n" not in message and f"({fields})" in message
    assert f"model_type {config['model_type']!r}" in message


def test_a_refused_config_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MAMBA))
    assert main(["models", "show", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recurrent layers" in err[0] and "Traceback" not in err[0]


def test_gated_deltanet_configs_with_a_state_dtype_still_read(tmp_path: Path) -> None:
    """The SSM state dtype key of a Gated DeltaNet config is no recurrent marker."""
    model, _ = _load(tmp_path, {
        "model_type": "acme_next", "hidden_size": 1024, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 2048,
        "vocab_size": 1000, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "full_attention_interval": 4, "linear_num_value_heads": 8,
        "linear_value_head_dim": 64, "linear_num_key_heads": 4, "linear_key_head_dim": 64,
        "mamba_ssm_dtype": "float32"})
    assert model.hybrid is not None and model.hybrid.ssm_state_dtype == "fp32"


#: StarCoder (bigcode/starcoder config.json): GPT-BigCode, multi-query attention.
STARCODER = {"model_type": "gpt_bigcode", "n_embd": 6144, "n_head": 48, "n_layer": 40,
             "n_inner": 24576, "vocab_size": 49152, "n_positions": 8192, "multi_query": True,
             "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-5}


def test_multi_query_means_one_kv_head(tmp_path: Path) -> None:
    """StarCoder's ``multi_query: true`` was ignored (48 KV heads, 983,040 bytes per
    token): one KV head of 128 in 40 layers, K and V in 16 bits, is 2 x 40 x 128 x 2."""
    model, _ = _load(tmp_path, STARCODER)
    assert (model.num_kv_heads, model.head_dim) == (1, 128)
    assert _kv_bytes(model) == 2 * 40 * 1 * 128 * 2 == 20_480
    model, _ = _load(tmp_path, {**STARCODER, "multi_query": False})
    assert _kv_bytes(model) == 2 * 40 * 48 * 128 * 2


def test_kv_head_fields_are_named_as_the_config_names_them(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"n_head = 48 is not a multiple of "
                                               r"num_key_value_heads = 5$"):
        _load(tmp_path, {**STARCODER, "multi_query": False, "num_key_value_heads": 5})


def test_chatglm_without_multi_query_attention_has_a_kv_head_per_head(tmp_path: Path) -> None:
    config = {"model_type": "acme_glm", "hidden_size": 1024, "num_layers": 4,
              "num_attention_heads": 8, "multi_query_group_num": 2, "ffn_hidden_size": 2048,
              "vocab_size": 1000, "rms_norm_eps": 1e-6, "hidden_act": "silu",
              "tie_word_embeddings": False}
    assert _load(tmp_path, {**config, "multi_query_attention": True})[0].num_kv_heads == 2
    assert _load(tmp_path, {**config, "multi_query_attention": False})[0].num_kv_heads == 8


#: google/gemma-7b and gemma-2b config.json: Gemma 1 (hidden_act gelu, no
#: tie_word_embeddings field: GemmaConfig ties them by default).
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "intermediate_size": 24576, "vocab_size": 256000, "hidden_act": "gelu",
            "rms_norm_eps": 1e-6}
GEMMA_2B = {**GEMMA_7B, "hidden_size": 2048, "num_hidden_layers": 18,
            "num_attention_heads": 8, "num_key_value_heads": 1, "intermediate_size": 16384}


def test_gemma_1_is_geglu_with_tied_embeddings(tmp_path: Path) -> None:
    """Gemma 1 was read as a generic decoder with a plain GELU MLP and untied embeddings:
    7.21B for gemma-7b. GemmaMLP is GeGLU (3 x 3072 x 24576 per layer), attention
    16 heads x 256 for q, k, v and o (4 x 3072 x 4096), two RMSNorms per layer, one
    tied 256000 x 3072 embedding: 28 x 276,830,208 + 786,432,000 + 3072 = 8,537,680,896,
    the published 8.54B; gemma-2b (one KV head) 2,506,172,416."""
    model, warning = _load(tmp_path, GEMMA_7B)
    assert not warning  # the gemma builder: nothing guessed
    assert model.gated_mlp and model.tie_word_embeddings and model.sliding_window is None
    assert parameter_count(model) == (8_537_680_896, 8_537_680_896)
    assert _kv_bytes(model) == 2 * 28 * 16 * 256 * 2
    model, _ = _load(tmp_path, GEMMA_2B)
    assert parameter_count(model)[0] == 2_506_172_416
    assert _kv_bytes(model) == 2 * 18 * 1 * 256 * 2


def test_gemma_1_round_trips_through_config_json(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, GEMMA_7B)
    written = write_hf_config(model, model_type="gemma")
    again, _ = _load(tmp_path, written)
    assert again == model


def _plain_layer(*, hidden: int, kv_width: int, ffn: int) -> int:
    """One pre-LayerNorm layer with a plain MLP and biases on every linear: q/k/v and o,
    up and down, two LayerNorms (weight and bias)."""
    attention = hidden * (hidden + 2 * kv_width) + hidden + 2 * kv_width + hidden * hidden + hidden
    return attention + 2 * hidden * ffn + ffn + hidden + 2 * 2 * hidden


def test_plain_mlp_families_are_read_as_plain(tmp_path: Path) -> None:
    """gelu_pytorch_tanh was taken for a gated MLP: StarCoder2-15B 22.00B against the
    published 15.96B. Starcoder2MLP and GPTBigCodeMLP are c_fc/c_proj, under LayerNorms,
    with biases. Summed by hand with every bias (the model leaves out those of o, c_fc
    and c_proj, and GPT-BigCode's learned position table): StarCoder2-15B 15,957,889,024
    (published 15.96B), StarCoder 15,517,456,384 (published 15.5B; MQA, tied)."""
    starcoder2 = {"model_type": "starcoder2", "hidden_size": 6144, "num_hidden_layers": 40,
                  "num_attention_heads": 48, "num_key_value_heads": 4,
                  "intermediate_size": 24576, "vocab_size": 49152, "norm_epsilon": 1e-5,
                  "hidden_act": "gelu_pytorch_tanh", "use_bias": True, "sliding_window": 4096,
                  "tie_word_embeddings": False}
    model, warning = _load(tmp_path, starcoder2)
    assert (model.gated_mlp, model.norm_type, model.qkv_bias) == (False, "layernorm", True)
    assert "MLP" not in warning and "norm" not in warning
    hidden, layers = 6144, 40
    hand = layers * _plain_layer(hidden=hidden, kv_width=512, ffn=24576) \
        + 2 * 49152 * hidden + 2 * hidden
    assert hand == 15_957_889_024
    assert parameter_count(model)[0] == hand - layers * (hidden + 24576 + hidden)
    del starcoder2["tie_word_embeddings"]  # Starcoder2Config ties them by default
    assert _load(tmp_path, starcoder2)[0].tie_word_embeddings

    model, warning = _load(tmp_path, STARCODER)
    assert (model.gated_mlp, model.norm_type, model.qkv_bias) == (False, "layernorm", True)
    assert model.tie_word_embeddings and model.position_encoding == "learned"
    hand = layers * _plain_layer(hidden=hidden, kv_width=128, ffn=24576) \
        + 49152 * hidden + 8192 * hidden + 2 * hidden
    assert hand == pytest.approx(15.5e9, rel=0.005)
    assert parameter_count(model)[0] == hand - 8192 * hidden - layers * (hidden + 24576 + hidden)
    unsaid = {k: v for k, v in STARCODER.items() if k != "multi_query"}
    assert _load(tmp_path, unsaid)[0].num_kv_heads == 1  # GPTBigCodeConfig's default


def test_gpt2_without_n_inner_has_a_4x_mlp(tmp_path: Path) -> None:
    """GPT-2 (n_inner null: 4 x n_embd), summed by hand with every bias and its
    1024-position table: 124,439,808, the published 124M."""
    model, _ = _load(tmp_path, {"model_type": "gpt2", "n_embd": 768, "n_head": 12,
                                "n_layer": 12, "n_inner": None, "vocab_size": 50257,
                                "n_positions": 1024, "activation_function": "gelu_new",
                                "layer_norm_epsilon": 1e-5})
    assert (model.ffn_size, model.gated_mlp, model.tie_word_embeddings) == (3072, False, True)
    hand = 12 * _plain_layer(hidden=768, kv_width=768, ffn=3072) + 50257 * 768 \
        + 1024 * 768 + 2 * 768
    assert hand == 124_439_808
    assert parameter_count(model)[0] == hand - 1024 * 768 - 12 * (768 + 3072 + 768)


def test_qwen2_moe_has_qkv_biases_by_default(tmp_path: Path) -> None:
    """Qwen2MoeConfig's qkv_bias defaults to True. Qwen2-57B-A14B summed by hand: per
    layer q/k/v/o 3584 x (3584 + 2 x 512) + 3584 x 3584 with 4608 biases, 64 experts of
    3 x 3584 x 2560, one shared expert of 3 x 3584 x 20480, a 64-way router, two norms;
    untied 151936 x 3584 embeddings: 57.41B total, 14.24B active (published 57B, A14B)."""
    model, warning = _load(tmp_path, {
        "model_type": "qwen2_moe", "hidden_size": 3584, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
        "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
        "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 151936,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "decoder_sparse_step": 1, "use_sliding_window": False, "sliding_window": 65536})
    assert model.qkv_bias and "MLP" not in warning
    h = 3584
    common = h * (h + 1024) + h + 1024 + h * h + 3 * h * 20480 + h * 64 + 2 * h
    expert = 3 * h * 2560
    head = 2 * 151936 * h + h
    total, active = parameter_count(model)
    assert total == 28 * (common + 64 * expert) + head == pytest.approx(57.41e9, rel=1e-3)
    assert active == 28 * (common + 8 * expert) + head == pytest.approx(14.24e9, rel=1e-3)


def test_the_mlp_form_of_an_unknown_type_is_a_named_guess(tmp_path: Path) -> None:
    base = {"model_type": "acme_lm", "hidden_size": 512, "num_hidden_layers": 4,
            "num_attention_heads": 8, "intermediate_size": 2048, "vocab_size": 1000,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    model, warning = _load(tmp_path, {**base, "hidden_act": "silu"})
    assert model.gated_mlp and "hidden_act silu: a gated MLP guessed" in warning
    model, warning = _load(tmp_path, {**base, "hidden_act": "gelu_pytorch_tanh"})
    assert not model.gated_mlp
    assert "hidden_act gelu_pytorch_tanh: a plain (non-gated) MLP guessed" in warning


#: THUDM/glm-4-9b-chat config.json (model_type chatglm, remote code).
GLM_4_9B = {"model_type": "chatglm", "hidden_size": 4096, "num_layers": 40,
            "num_attention_heads": 32, "multi_query_attention": True,
            "multi_query_group_num": 2, "kv_channels": 128, "ffn_hidden_size": 13696,
            "padded_vocab_size": 151552, "add_qkv_bias": True, "add_bias_linear": False,
            "rmsnorm": True, "layernorm_epsilon": 1.5625e-07, "tie_word_embeddings": False,
            "seq_length": 131072}


def test_chatglm_reads_padded_vocab_size_and_its_rmsnorm_flag(tmp_path: Path) -> None:
    """GLM-4-9B was refused for want of vocab_size (it has padded_vocab_size, which the
    reader then reads), and its rmsnorm: true would have been read as LayerNorm from its
    layernorm_epsilon. Summed by hand: per layer q/k/v 4096 x (4096 + 2 x 256) with 4608
    biases, o 4096 x 4096, a SwiGLU of 3 x 4096 x 13696, two RMSNorms; untied 151552 x
    4096 embedding and output layer, a final norm: 9,399,951,360 (published 9.40B).
    KV: 2 groups of 128 in 40 layers, 2 x 40 x 2 x 128 x 2 bytes."""
    model, warning = _load(tmp_path, GLM_4_9B)
    assert (model.norm_type, model.gated_mlp, model.qkv_bias) == ("rmsnorm", True, True)
    assert "MLP" not in warning and "norm" not in warning
    h = 4096
    layer = h * (h + 2 * 256) + 4608 + h * h + 3 * h * 13696 + 2 * h
    hand = 40 * layer + 2 * 151552 * h + h
    assert parameter_count(model)[0] == hand == pytest.approx(9.40e9, rel=1e-3)
    assert _kv_bytes(model) == 2 * 40 * 2 * 128 * 2 == 40_960
    model, _ = _load(tmp_path, {**GLM_4_9B, "rmsnorm": False})
    assert model.norm_type == "layernorm"


#: Snowflake/snowflake-arctic-instruct config.json (remote code): 128 experts in every
#: layer and the residual dense MLP (use_residual) beside them.
ARCTIC = {"model_type": "arctic", "hidden_size": 7168, "num_hidden_layers": 35,
          "num_attention_heads": 56, "num_key_value_heads": 8, "intermediate_size": 4864,
          "num_local_experts": 128, "num_experts_per_tok": 2, "moe_layer_frequency": 1,
          "use_residual": True, "parallel_attn_mlp_res": True, "vocab_size": 32000,
          "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def test_arctic_keeps_its_residual_dense_mlp(tmp_path: Path) -> None:
    """Arctic's residual MLP was dropped silently: 473.2B total, 11.92B active. Its card:
    a 10B dense transformer with a residual 128 x 3.66B MoE MLP, 480B total and 17B
    active with top-2. Summed by hand: per layer attention 2 x 7168 x 7168 +
    2 x 7168 x 1024, experts of 3 x 7168 x 4864 (35 of them 3.66B), the residual SwiGLU
    of hidden width 3 x 7168 x 7168, a 128-way router, two norms; untied 32000 x 7168
    embeddings: 478.58B total, 17.32B active (the dense part 9.97B)."""
    model, warning = _load(tmp_path, ARCTIC)
    assert model.moe is not None
    assert (model.moe.num_shared_experts, model.moe.shared_expert_ffn) == (1, 7168)
    # read by its builder (builders/arctic.py): no approximation warning, the note kept
    assert not warning and "residual MLP (use_residual) of width 7168" in model.notes
    h = 7168
    dense = 2 * h * h + 2 * h * 1024 + 3 * h * h + h * 128 + 2 * h
    expert = 3 * h * 4864
    head = 2 * 32000 * h + h
    assert 35 * expert == pytest.approx(3.66e9, rel=1e-3)
    assert 35 * dense + head == pytest.approx(10e9, rel=0.01)
    total, active = parameter_count(model)
    assert total == 35 * (dense + 128 * expert) + head == pytest.approx(480e9, rel=0.01)
    assert active == 35 * (dense + 2 * expert) + head == pytest.approx(17e9, rel=0.02)
    assert _kv_bytes(model) == 2 * 35 * 8 * 128 * 2
    model, _ = _load(tmp_path, {**ARCTIC, "moe_layer_frequency": 2})
    assert model.moe is not None and model.moe.num_moe_layers == 17  # layers 2, 4, ..., 34


#: meta-llama/Llama-3.2-11B-Vision config.json, its text_config: 40 layers of which 8
#: cross-attend to the image.
MLLAMA = {"model_type": "mllama", "text_config": {
    "model_type": "mllama_text_model", "hidden_size": 4096, "num_hidden_layers": 40,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
    "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "max_position_embeddings": 131072}, "vision_config": {"hidden_size": 1280}}


def test_cross_attention_layers_hold_no_kv_per_token(tmp_path: Path) -> None:
    """Llama-3.2-11B-Vision's 8 cross-attention layers were priced as self-attention:
    163,840 KV bytes per token. Their keys and values are the image's, computed once per
    request: 32 self-attention layers of 8 KV heads x 128 cache 2 x 32 x 8 x 128 x 2 =
    131,072 bytes. Their weights stay: Llama-3.1-8B's published 8,030,261,248 (32 layers)
    and 8 more layers of 218,112,000 (q/k/v/o 4096 x 6144 + 4096 x 4096, a SwiGLU of
    3 x 4096 x 14336, two norms). Read by the ``mllama`` builder since the zoo gained
    llama-3.2-11b-vision: what it approximates is in the notes, not a warning."""
    model, warning = _load(tmp_path, MLLAMA)
    assert model.cross_attention_layers == 8 and model.num_layers == 40
    assert warning == ""
    assert "8 cross-attention layers hold no KV cache per token" in model.notes
    assert _kv_bytes(model) == 2 * 32 * 8 * 128 * 2 == 131_072
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    assert parameter_count(model)[0] == 8_030_261_248 + 8 * layer
    path = tmp_path / "config.json"
    result = predict(model=str(path), gpu="h100", deployment=Deployment(tp=1))
    assert result.feasible and result.tpot_s > 0


def test_cross_attention_layers_must_lie_within_the_model(tmp_path: Path) -> None:
    text = {**MLLAMA["text_config"], "cross_attention_layers": [3, 40]}
    with pytest.raises(ModelConfigError, match="cross_attention_layers' names layers outside"):
        _load(tmp_path, {**MLLAMA, "text_config": text})


def test_cross_attention_layers_are_modelled_in_dense_gqa_models_only() -> None:
    moe = dataclasses.replace(get_model("mixtral-8x7b"), cross_attention_layers=1)
    with pytest.raises(ModelConfigError, match="cross_attention_layers are modelled for dense"):
        check_model_config(moe, where="test")


def test_models_show_names_a_local_configs_model_type(tmp_path: Path, capsys) -> None:
    """Was null for every local config.json; a nested text model's type is the decoder's."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MLLAMA))
    assert main(["models", "show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_type"] == "mllama_text_model"


#: Qwen/Qwen3-Next-80B-A3B-Instruct config.json: no attn_output_gate field.
QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "intermediate_size": 5120, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512, "num_experts": 512,
              "num_experts_per_tok": 10, "decoder_sparse_step": 1, "mlp_only_layers": [],
              "full_attention_interval": 4, "linear_num_value_heads": 32,
              "linear_value_head_dim": 128, "linear_num_key_heads": 16,
              "linear_key_head_dim": 128, "linear_conv_kernel_dim": 4, "vocab_size": 151936,
              "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "attention_bias": False, "use_sliding_window": False}


def test_qwen3_next_attention_is_gated_and_qk_normed(tmp_path: Path) -> None:
    """Qwen3NextAttention's q_proj always has twice the query width (the second half a
    sigmoid gate on the output) and an RMSNorm on each head's query and key; neither was
    read from a config without attn_output_gate. Summed by hand: 12 attention layers of
    q with its gate 2048 x 8192, k/v 2 x 2048 x 512, o 4096 x 2048; 36 Gated DeltaNet
    mixers of 33,718,464; 48 MoE blocks of 512 experts (10 routed) and one shared
    expert of 3 x 2048 x 512 and a router; untied 151936 x 2048 embeddings; 97 norms:
    79.67B total (published 80B), 3.87B active (3B without the embeddings' 0.62B)."""
    model, _ = _load(tmp_path, QWEN3_NEXT)
    assert model.attention_output_gate and model.qk_norm == "head"
    h = 2048
    attention = h * 16 * 256 * 2 + 2 * h * 512 + 16 * 256 * h
    mixer = h * (4096 + 8192 + 64) + 4 * 8192 + 64 + 128 + 4096 * h
    expert, common = 3 * h * 512, 3 * h * 512 + h * 512
    rest = 2 * 151936 * h + h + 12 * attention + 36 * mixer + 96 * h
    total, active = parameter_count(model)
    assert total == rest + 48 * (512 * expert + common) == pytest.approx(80e9, rel=0.01)
    assert active == rest + 48 * (10 * expert + common) == pytest.approx(3.87e9, rel=2e-3)
    gateless, _ = _load(tmp_path, {**QWEN3_NEXT, "attn_output_gate": False})
    assert total - parameter_count(gateless)[0] == 12 * h * 16 * 256


def test_olmoe_normalises_queries_and_keys_over_all_heads(tmp_path: Path) -> None:
    """OlmoeAttention's q_norm and k_norm span the whole projection (hidden_size), not a
    head: under tensor parallelism the ranks all-reduce their statistics."""
    model, _ = _load(tmp_path, {
        "model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 1024,
        "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False})
    assert model.qk_norm == "all_heads"


#: databricks/dbrx-base config.json: attention and experts nested in their own sections.
DBRX = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40,
        "max_seq_len": 32768, "vocab_size": 100352, "tie_word_embeddings": False,
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}


def test_dbrx_reads_its_nested_sections(tmp_path: Path) -> None:
    """DBRX was refused (no hidden_size at the top level). Summed by hand: 40 layers of a
    fused Wqkv 6144 x (6144 + 2 x 8 x 128) and an output 6144 x 6144, 16 gated experts of 3
    x 6144 x 10752 (4 per token) and a 16-way router; untied 100352 x 6144 embeddings:
    131.6B total (published 132B), 36.5B active (36B); 8 KV heads of 128 in 40 layers;
    its context is max_seq_len."""
    model, notes = _load(tmp_path, DBRX)
    assert not notes and model.moe is not None and model.norm_type == "layernorm"
    h = 6144
    attention, expert = h * (h + 2 * 8 * 128) + h * h, 3 * h * 10752
    # 81 LayerNorms counted with a bias (DBRX's have none: 0.5M of 131.6B)
    rest = 2 * 100352 * h + 40 * (attention + h * 16) + 81 * 2 * h
    total, active = parameter_count(model)
    assert total == rest + 40 * 16 * expert
    assert active == rest + 40 * 4 * expert
    assert total == pytest.approx(132e9, rel=0.01) and active == pytest.approx(36e9, rel=0.02)
    assert _kv_bytes(model) == 40 * 2 * 8 * 128 * 2
    assert model.max_context_tokens == 32768
    again, _ = _load(tmp_path, write_hf_config(model, model_type="dbrx"))
    assert dataclasses.replace(again, notes="") == dataclasses.replace(model, notes="")


def test_a_dbrx_config_without_its_sections_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="ffn_config is missing") as caught:
        _load(tmp_path, {k: v for k, v in DBRX.items() if k != "ffn_config"})
    assert "\n" not in str(caught.value)
