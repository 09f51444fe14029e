"""The builders of GPT-NeoX, StarCoder2, StableLM, OLMo 2 / OLMoE, Phi-3.5-MoE, the
Llama-layout types (InternLM2, Granite, Seed-OSS), Qwen3-Next, DeepSeek-V3.2, ChatGLM,
Baichuan, Arctic, ERNIE 4.5, Falcon's first architecture (Falcon-7B), Qwen2-MoE and
DeepSeekMoE: what each family's code fixes beyond the round trip of its zoo entry
(tests/test_hf_import.py), checked on config.json fields as the checkpoints write them
(recalled) against counts summed by hand."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from energylens.errors import ModelConfigError
from energylens.model import ModelConfig, get_model, parameter_count
from energylens.model.hf import ModelApproximationWarning, load_hf_config, write_hf_config


def _load(tmp_path: Path, config: dict[str, Any]) -> ModelConfig:
    """The model read from ``config``; a builder reads it without approximation warnings."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelApproximationWarning)
        return load_hf_config(path)


#: EleutherAI/gpt-neox-20b config.json (recalled): no KV-head field, no attention_bias.
GPT_NEOX_20B = {"model_type": "gpt_neox", "hidden_size": 6144, "intermediate_size": 24576,
                "num_attention_heads": 64, "num_hidden_layers": 44, "rotary_pct": 0.25,
                "use_parallel_residual": True, "hidden_act": "gelu_fast",
                "layer_norm_eps": 1e-5, "vocab_size": 50432, "tie_word_embeddings": False}


def test_gpt_neox_parallel_residual_keeps_two_layernorms(tmp_path: Path) -> None:
    """GPTNeoXLayer's parallel residual reads two LayerNorms of the same input, so it is
    priced as a sequential block (two norms), not as GPT-J's one-norm parallel block.
    The model card's 20,554,567,680 summed by hand: per layer a fused q/k/v of
    6144 x 3 x 6144 with its bias, dense 6144 x 6144 with its bias, the MLP
    2 x 6144 x 24576 with its biases, two LayerNorms (weight and bias); the untied
    50432 x 6144 embedding and output and the final LayerNorm."""
    model = _load(tmp_path, GPT_NEOX_20B)
    assert (model.num_kv_heads, model.attention, model.qkv_bias) == (64, "MHA", True)
    assert (model.gated_mlp, model.norm_type, model.parallel_block) == (False, "layernorm", False)
    h, f = 6144, 24576
    layer = 4 * h * h + 3 * h + h + 2 * h * f + f + h + 2 * 2 * h
    hand = 44 * layer + 2 * 50432 * h + 2 * h
    assert hand == 20_554_567_680
    assert parameter_count(model)[0] == hand - 44 * (h + f + h)  # dense and MLP biases
    assert _load(tmp_path, {**GPT_NEOX_20B, "attention_bias": False}).qkv_bias is False


def test_starcoder2_windows_every_layer_and_biases_by_default(tmp_path: Path) -> None:
    model = _load(tmp_path, {"model_type": "starcoder2", "hidden_size": 6144,
                             "num_hidden_layers": 40, "num_attention_heads": 48,
                             "num_key_value_heads": 4, "intermediate_size": 24576,
                             "vocab_size": 49152, "sliding_window": 4096,
                             "norm_epsilon": 1e-5})
    assert (model.sliding_window, model.num_sliding_layers) == (4096, 40)
    assert model.qkv_bias and model.tie_word_embeddings  # Starcoder2Config's defaults
    assert (model.gated_mlp, model.norm_type) == (False, "layernorm")


def test_stablelm_parallel_block_reads_one_norm_and_a_per_head_qk_norm(tmp_path: Path) -> None:
    """StableLM 2 12B: without a post_attention_layernorm its layer has one LayerNorm
    (parallel_block), and qk_layernorm a LayerNorm over each head's 160 dims (qk_norm
    head). Its count against the sequential layout: one norm (weight and bias) less a
    layer."""
    fields = {"model_type": "stablelm", "hidden_size": 5120, "num_hidden_layers": 40,
              "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 13824, "vocab_size": 100352,
              "partial_rotary_factor": 0.25, "layer_norm_eps": 1e-5,
              "use_parallel_residual": True, "qk_layernorm": True, "use_qkv_bias": False,
              "tie_word_embeddings": False}
    model = _load(tmp_path, fields)
    assert (model.parallel_block, model.qk_norm, model.head_dim) == (True, "head", 160)
    zoo = get_model("stablelm-2-12b")
    assert dataclasses.replace(model, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo
    sequential = _load(tmp_path, {**fields, "use_parallel_residual": False,
                                  "qk_layernorm": False})
    assert (sequential.parallel_block, sequential.qk_norm) == (False, None)
    assert parameter_count(sequential)[0] - parameter_count(model)[0] == 40 * 2 * 5120
    written = write_hf_config(get_model("stablelm-2-12b"), model_type="stablelm")
    assert written["qk_layernorm"] is True and "use_qk_norm" not in written


def test_olmo_families_normalise_queries_and_keys_over_all_heads(tmp_path: Path) -> None:
    """OLMo 2 and OLMoE: q_norm/k_norm over all heads, fixed by the code (no config
    field), so the written config.json has no use_qk_norm either."""
    for name, model_type in (("olmo-2-13b", "olmo2"), ("olmoe-1b-7b", "olmoe")):
        written = write_hf_config(get_model(name), model_type=model_type)
        assert "use_qk_norm" not in written and "qk_norm_type" not in written
        assert _load(tmp_path, written).qk_norm == "all_heads"


def test_olmoe_has_64_experts_top_8_in_every_layer(tmp_path: Path) -> None:
    """OLMoE-1B-7B: 64 experts of 1024, top-8, all 16 layers; summed by hand: 6.92e9
    total, 1.28e9 active (published 6.9B and 1.3B)."""
    olmoe = _load(tmp_path, {"model_type": "olmoe", "hidden_size": 2048,
                             "num_hidden_layers": 16, "num_attention_heads": 16,
                             "num_key_value_heads": 16, "intermediate_size": 1024,
                             "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304,
                             "rms_norm_eps": 1e-5, "tie_word_embeddings": False})
    assert olmoe.moe is not None and (olmoe.moe.num_experts, olmoe.moe.top_k) == (64, 8)
    h = 2048
    common = 4 * h * h + 2 * h + h * 64  # attention, two RMSNorms, router
    expert = 3 * h * 1024
    head = 2 * 50304 * h + h
    assert parameter_count(olmoe) == (16 * (common + 64 * expert) + head,
                                      16 * (common + 8 * expert) + head)
    assert parameter_count(olmoe)[1] == pytest.approx(1.3e9, rel=0.02)


def test_phimoe_has_16_experts_top_2_under_layernorms(tmp_path: Path) -> None:
    """Phi-3.5-MoE: 16 experts of 6400, top-2, LayerNorm (weight and bias) and q/k/v
    biases; summed by hand: 41.87e9 total, 6.64e9 active (published 41.9B and 6.6B)."""
    phimoe = _load(tmp_path, {"model_type": "phimoe", "hidden_size": 4096,
                              "num_hidden_layers": 32, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "intermediate_size": 6400,
                              "num_local_experts": 16, "num_experts_per_tok": 2,
                              "attention_bias": True, "lm_head_bias": True,
                              "rms_norm_eps": 1e-5, "sliding_window": 131072,
                              "vocab_size": 32064, "tie_word_embeddings": False})
    moe = phimoe.moe
    assert moe is not None and (moe.num_experts, moe.top_k, moe.expert_ffn) == (16, 2, 6400)
    assert (phimoe.norm_type, phimoe.qkv_bias) == ("layernorm", True)
    h = 4096
    common = h * (h + 2 * 1024) + h + 2 * 1024 + h * h + 2 * 2 * h + h * 16
    expert = 3 * h * 6400
    head = 2 * 32064 * h + 2 * h
    total, active = parameter_count(phimoe)
    assert (total, active) == (32 * (common + 16 * expert) + head,
                               32 * (common + 2 * expert) + head)
    assert (total, active) == (pytest.approx(41.9e9, rel=0.01), pytest.approx(6.6e9, rel=0.01))


@pytest.mark.parametrize(("model_type", "field", "default"), [
    ("internlm2", "bias", True), ("seed_oss", "attention_bias", True),
    ("granite", "attention_bias", False)])
def test_llama_layout_types_read_their_bias_field(tmp_path: Path, model_type: str, field: str,
                                                  default: bool) -> None:
    """InternLM2Config's ``bias`` and SeedOssConfig's ``attention_bias`` default true (the
    released checkpoints of InternLM2.5 say false, Seed-OSS true); Granite is Llama's."""
    base = {"model_type": model_type, "hidden_size": 1024, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 2048,
            "vocab_size": 1000, "rms_norm_eps": 1e-5}
    assert _load(tmp_path, base).qkv_bias is default
    assert _load(tmp_path, {**base, field: not default}).qkv_bias is (not default)


def test_a_vocabulary_no_tp_degree_divides_is_padded_and_heads_are_not() -> None:
    """Granite-3.3-8B's 49,159-token head over 2 ranks: 24,580 rows on the larger shard (the
    engines pad the vocabulary); attention heads that do not divide are still refused."""
    from energylens.deployment import Deployment
    from energylens.model.spec import SpecError, split_sizes
    from energylens.predict import predict

    assert split_sizes(composite="v", sizes={"v": 49159}, degree=2) == {"v": 24580}
    assert split_sizes(composite="v", sizes={"v": 128256}, degree=8) == {"v": 16032}
    with pytest.raises(SpecError, match="does not divide"):
        split_sizes(composite="g*r", sizes={"g": 8, "r": 3}, degree=16)
    one, two = (predict(model="granite-3.3-8b", gpu="h100", deployment=Deployment(tp=tp))
                for tp in (1, 2))
    assert one.feasible and two.feasible and two.tpot_s < one.tpot_s


#: Qwen/Qwen3-Next-80B-A3B-Instruct config.json (recalled): full_attention_interval, no
#: layer_types.
QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "intermediate_size": 5120, "full_attention_interval": 4,
              "linear_num_key_heads": 16, "linear_key_head_dim": 128,
              "linear_num_value_heads": 32, "linear_value_head_dim": 128,
              "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
              "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "partial_rotary_factor": 0.25,
              "rms_norm_eps": 1e-6, "vocab_size": 151936, "tie_word_embeddings": False}


def test_qwen3_next_attends_every_fourth_layer_through_a_gated_query(tmp_path: Path) -> None:
    """full_attention_interval 4: layers 3, 7, ..., 47 attend (12), the other 36 are Gated
    DeltaNet mixers; the attention output gate and the per-head QK norm come from the
    family's code, not the config. Active per token summed by hand: a mixer's q/k/v
    2048 x (2048 + 2048 + 4096), z 2048 x 4096, b and a 2048 x 32 each, the convolution's
    4 x 8192 taps, A and the dt bias (32 each), the gated norm (128) and out 4096 x 2048:
    33,718,464; an attention layer's q with its gate 2048 x 8192, k and v 2048 x 512 each,
    o 4096 x 2048: 27,262,976; a MoE block's 10 routed and 1 shared experts of
    3 x 2048 x 512 and a 512-way router: 35,651,584; 97 norms of 2048 and the untied
    151936 x 2048 embedding and output: 3,874,824,960."""
    model = _load(tmp_path, QWEN3_NEXT)
    hybrid = model.hybrid
    assert hybrid is not None and hybrid.mixer == "gated_deltanet"
    mixers = hybrid.layer_pattern[::2]
    assert [i for i, kind in enumerate(mixers) if kind == "*"] == list(range(3, 48, 4))
    assert (model.attention_output_gate, model.qk_norm) == (True, "head")
    mixer = 2048 * (2048 + 2048 + 4096 + 4096 + 2 * 32) + 4 * 8192 + 2 * 32 + 128 + 4096 * 2048
    attention = 2048 * (2 * 4096 + 2 * 512) + 4096 * 2048
    moe = 11 * 3 * 2048 * 512 + 2048 * 512
    active = 36 * mixer + 12 * attention + 48 * moe + 97 * 2048 + 2 * 151936 * 2048
    assert (mixer, attention, moe, active) == (33_718_464, 27_262_976, 35_651_584,
                                               3_874_824_960)
    assert parameter_count(model)[1] == active
    assert parameter_count(model)[0] == pytest.approx(80e9, rel=0.02)
    zoo = get_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert dataclasses.replace(model, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               max_context_tokens=None,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo


def test_deepseek_v32_is_deepseek_v3_with_an_indexer_in_every_layer(tmp_path: Path) -> None:
    """DeepSeek-V3.2-Exp's config.json is DeepSeek-V3's (the verbatim file in
    tests/data/hf_configs/) with model_type deepseek_v32 and index_n_heads 64,
    index_head_dim 128, index_topk 2048 (recalled). The indexer adds per layer its query
    heads from the 1536-wide latent 1536 x 64 x 128, its key 7168 x 128 with a LayerNorm
    (weight and bias, 2 x 128) and its head weights 7168 x 64: 13,959,424, 851,524,864 in
    61 layers. Its cache: one 128-wide FP8 key and a 4-byte scale per 128 beside MLA's
    576-wide 16-bit latent, 61 x (2 x 576 + 128 + 4) = 78,324 bytes a token."""
    from energylens.cli.catalog import footprint

    v3 = json.loads((Path(__file__).parent / "data" / "hf_configs"
                     / "deepseek-ai--DeepSeek-V3_config.json").read_text())
    fields = {**v3, "model_type": "deepseek_v32", "architectures": ["DeepseekV32ForCausalLM"],
              "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    model, plain = _load(tmp_path, fields), _load(tmp_path, v3)
    assert model.mla is not None and (model.mla.index_heads, model.mla.index_head_dim,
                                      model.mla.index_topk) == (64, 128, 2048)
    layer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert layer == 13_959_424
    assert parameter_count(model)[0] - parameter_count(plain)[0] == 61 * layer == 851_524_864
    assert footprint(model)["kv_bytes_per_token"] == 61 * (2 * 576 + 128 + 4) == 78_324
    zoo = get_model("deepseek-ai/DeepSeek-V3.2-Exp")
    assert dataclasses.replace(model, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               max_context_tokens=None,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo


#: THUDM/chatglm3-6b config.json (recalled): ChatGLM's own names, GQA by
#: multi_query_group_num only where multi_query_attention is set.
CHATGLM3_6B = {"model_type": "chatglm", "num_layers": 28, "hidden_size": 4096,
               "num_attention_heads": 32, "kv_channels": 128, "multi_query_attention": True,
               "multi_query_group_num": 2, "ffn_hidden_size": 13696,
               "padded_vocab_size": 65024, "add_qkv_bias": True, "add_bias_linear": False,
               "rmsnorm": True, "layernorm_epsilon": 1e-5, "post_layer_norm": True,
               "seq_length": 8192, "tie_word_embeddings": False}


def test_chatglm_groups_keys_only_under_multi_query_attention(tmp_path: Path) -> None:
    """ChatGLM3-6B summed by hand: per layer a fused query_key_value 4096 x (4096 + 2 x 2 x
    128) with its 4608 biases, dense 4096 x 4096, dense_h_to_4h 4096 x 2 x 13696 and
    dense_4h_to_h 13696 x 4096, two RMSNorms: 203,960,832; 28 layers, the untied 65024 x
    4096 embedding and output_layer and the final norm: 6,243,584,000 (published 6.24B).
    Without multi_query_attention every head has its keys and values, whatever
    multi_query_group_num says; seq_length is the context; the first ChatGLM-6B's layout
    (inner_hidden_size) is refused."""
    from energylens.errors import ModelConfigError

    model = _load(tmp_path, CHATGLM3_6B)
    assert (model.num_kv_heads, model.head_dim, model.qkv_bias) == (2, 128, True)
    assert (model.gated_mlp, model.norm_type, model.max_context_tokens) == (True, "rmsnorm",
                                                                             8192)
    h = 4096
    layer = h * (h + 2 * 2 * 128) + 4608 + h * h + 3 * h * 13696 + 2 * h
    assert layer == 203_960_832
    assert parameter_count(model)[0] == 28 * layer + 2 * 65024 * h + h == 6_243_584_000
    assert _load(tmp_path, {**CHATGLM3_6B, "multi_query_attention": False}).num_kv_heads == 32
    with pytest.raises(ModelConfigError, match="first ChatGLM-6B"):
        _load(tmp_path, {"model_type": "chatglm", "num_layers": 28, "hidden_size": 4096,
                         "num_attention_heads": 32, "inner_hidden_size": 16384,
                         "vocab_size": 130528, "position_encoding_2d": True})
    written = write_hf_config(get_model("THUDM/glm-4-9b-chat"), model_type="chatglm")
    assert (written["padded_vocab_size"], written["multi_query_group_num"]) == (151552, 2)
    assert "vocab_size" not in written and "num_hidden_layers" not in written


#: baichuan-inc/Baichuan2-13B-Chat config.json (recalled): no max_position_embeddings.
BAICHUAN2_13B = {"model_type": "baichuan", "architectures": ["BaichuanForCausalLM"],
                 "hidden_size": 5120, "intermediate_size": 13696, "num_attention_heads": 40,
                 "num_hidden_layers": 40, "hidden_act": "silu", "rms_norm_eps": 1e-6,
                 "model_max_length": 4096, "vocab_size": 125696, "tie_word_embeddings": False}


def test_baichuan_positions_follow_vllms_rule(tmp_path: Path) -> None:
    """The config names no position encoding: BaichuanForCausalLM 4096 wide rotates
    (Baichuan2-7B), any other width has ALiBi (the 13B models), BaiChuanForCausalLM
    (Baichuan-7B) rotates. Baichuan2-13B summed by hand: per layer W_pack 5120 x 3 x 5120
    and o_proj 5120 x 5120 (no biases), a SwiGLU of 3 x 5120 x 13696, two RMSNorms:
    315,238,400; 40 layers, the untied 125696 x 5120 embedding and lm_head, the final
    norm: 13,896,668,160. Its context is model_max_length (it has no
    max_position_embeddings)."""
    model = _load(tmp_path, BAICHUAN2_13B)
    assert (model.position_encoding, model.attention, model.qkv_bias) == ("alibi", "MHA", False)
    assert model.max_context_tokens == 4096
    h = 5120
    layer = 4 * h * h + 3 * h * 13696 + 2 * h
    assert layer == 315_238_400
    assert parameter_count(model)[0] == 40 * layer + 2 * 125696 * h + h == 13_896_668_160
    seven = {**BAICHUAN2_13B, "hidden_size": 4096, "intermediate_size": 11008,
             "num_attention_heads": 32, "num_hidden_layers": 32}
    assert _load(tmp_path, seven).position_encoding == "rope"
    baichuan_13b_v1 = {**BAICHUAN2_13B, "vocab_size": 64000}
    assert _load(tmp_path, baichuan_13b_v1).position_encoding == "alibi"
    rotating = {**BAICHUAN2_13B, "architectures": ["BaiChuanForCausalLM"]}
    assert _load(tmp_path, rotating).position_encoding == "rope"


def test_arctic_moe_every_kth_layer_with_the_residual_mlp_only_there(tmp_path: Path) -> None:
    """Arctic's layer i is MoE where (i + 1) % moe_layer_frequency == 0; the others have a
    dense SwiGLU of intermediate_size, and only the MoE layers the residual MLP of hidden
    width (priced as a shared expert). With frequency 2 the 35 layers hold 17 MoE and 18
    dense layers; summed by hand: 35 x (attention 2 x 7168 x 7168 + 2 x 7168 x 1024 =
    117,440,512, two RMSNorms), 18 dense MLPs of 3 x 7168 x 4864 = 104,595,456, 17 x (128
    or 2 experts of that size, the residual 3 x 7168 x 7168, a 128-way router), the untied
    32000 x 7168 embeddings and the final norm: 236,688,098,304 total and 12,644,631,552
    active. The writer gives the frequency back."""
    fields = {"model_type": "arctic", "hidden_size": 7168, "num_hidden_layers": 35,
              "num_attention_heads": 56, "num_key_value_heads": 8, "intermediate_size": 4864,
              "num_local_experts": 128, "num_experts_per_tok": 2, "moe_layer_frequency": 2,
              "use_residual": True, "parallel_attn_mlp_res": True, "vocab_size": 32000,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    model = _load(tmp_path, fields)
    moe = model.moe
    assert moe is not None and (moe.num_moe_layers, moe.dense_layer_ffn) == (17, 4864)
    assert (moe.num_shared_experts, moe.shared_expert_ffn) == (1, 7168)
    h = 7168
    attention, mlp = 2 * h * h + 2 * h * 1024, 3 * h * 4864
    assert (attention, mlp) == (117_440_512, 104_595_456)
    common = 35 * (attention + 2 * h) + 18 * mlp + 2 * 32000 * h + h
    moe_layer = 3 * h * h + h * 128
    assert parameter_count(model) == (common + 17 * (128 * mlp + moe_layer),
                                      common + 17 * (2 * mlp + moe_layer)) \
        == (236_688_098_304, 12_644_631_552)
    written = write_hf_config(model, model_type="arctic")
    assert (written["moe_layer_frequency"], written["use_residual"]) == (2, True)
    assert _load(tmp_path, written).moe == moe


#: baidu/ERNIE-4.5-21B-A3B-PT config.json (recalled).
ERNIE_21B = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288,
             "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
             "use_bias": False, "moe_num_experts": 64, "moe_k": 6,
             "moe_intermediate_size": 1536, "moe_num_shared_experts": 2,
             "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
             "rms_norm_eps": 1e-5, "vocab_size": 103424, "tie_word_embeddings": True}


def test_ernie_moe_layers_from_the_start_index_with_shared_experts_fused(tmp_path: Path) -> None:
    """ERNIE 4.5: layers start..end (inclusive; -1 the last) are MoE, the ones before dense;
    the 2 shared experts are one MLP of 2 x 1536. ERNIE-4.5-21B-A3B summed by hand: 28 x
    (attention 2 x 2560 x 2560 + 2 x 2560 x 512 = 15,728,640, two RMSNorms), layer 0's
    SwiGLU 3 x 2560 x 12288, 27 x (64 or 6 experts of 3 x 2560 x 1536 = 11,796,480, the
    shared 3 x 2560 x 3072 = 23,592,960, a 64-way router), the tied 103424 x 2560
    embedding and the final norm: 21,825,436,160 total, 3,352,148,480 active."""
    model = _load(tmp_path, ERNIE_21B)
    moe = model.moe
    assert moe is not None and (moe.num_moe_layers, moe.dense_layer_ffn) == (27, 12288)
    assert (moe.num_shared_experts, moe.shared_expert_ffn) == (1, 3072)
    h = 2560
    attention, expert, shared = 2 * h * h + 2 * h * 512, 3 * h * 1536, 3 * h * 3072
    assert (attention, expert, shared) == (15_728_640, 11_796_480, 23_592_960)
    common = 28 * (attention + 2 * h) + 3 * h * 12288 + 103424 * h + h
    assert parameter_count(model) == (common + 27 * (64 * expert + shared + h * 64),
                                      common + 27 * (6 * expert + shared + h * 64)) \
        == (21_825_436_160, 3_352_148_480)
    last = _load(tmp_path, {**ERNIE_21B, "moe_layer_end_index": -1})
    assert last.moe == moe
    shorter = _load(tmp_path, {**ERNIE_21B, "moe_layer_end_index": 26}).moe
    unshared = _load(tmp_path, {**ERNIE_21B, "moe_num_shared_experts": 0}).moe
    assert shorter is not None and shorter.num_moe_layers == 26
    assert unshared is not None and unshared.num_shared_experts == 0


#: tiiuae/falcon-7b config.json (recalled): Falcon's first decoder architecture.
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
             "num_attention_heads": 71, "multi_query": True,
             "new_decoder_architecture": False, "parallel_attn": True, "bias": False,
             "alibi": False, "layer_norm_epsilon": 1e-5, "vocab_size": 65024}


def test_falcon_first_architecture_is_a_one_norm_parallel_block(tmp_path: Path) -> None:
    """Falcon-7B's attention and MLP read the one input_layernorm (parallel_attn outside
    the new decoder architecture): a parallel block, one KV head (multi_query), a 4h MLP,
    tied embeddings. Summed by hand: per layer a fused query_key_value of
    4544 x (71 + 2) x 64, dense 4544 x 4544, the MLP 2 x 4544 x 18176, one LayerNorm
    (weight and bias); the tied 65024 x 4544 embedding and the final LayerNorm: 6.92B
    against the card's nominal 7B. Falcon-40B's new architecture (two LayerNorms) stays a
    sequential block, and the zoo entry's shapes round-trip through the first
    architecture's fields."""
    model = _load(tmp_path, FALCON_7B)
    assert (model.num_kv_heads, model.head_dim, model.ffn_size) == (1, 64, 18176)
    assert (model.parallel_block, model.tie_word_embeddings, model.qkv_bias) == (True, True, False)
    h = 4544
    layer = h * 73 * 64 + h * h + 2 * h * 4 * h + 2 * h
    hand = 32 * layer + 65024 * h + 2 * h
    assert hand == 6_921_720_704
    assert parameter_count(model) == (hand, hand)
    new = _load(tmp_path, {**FALCON_7B, "new_decoder_architecture": True, "num_kv_heads": 71})
    assert new.parallel_block is False and new.num_kv_heads == 71
    sequential = _load(tmp_path, {**FALCON_7B, "parallel_attn": False})
    assert sequential.parallel_block is False
    zoo = get_model("falcon-7b")
    written = write_hf_config(zoo, model_type="falcon")
    assert (written["new_decoder_architecture"], written["multi_query"]) == (False, True)
    loaded = _load(tmp_path, written)
    assert dataclasses.replace(loaded, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo
    with pytest.raises(ModelConfigError, match="one KV head or one per head"):
        write_hf_config(dataclasses.replace(zoo, num_heads=72, num_kv_heads=8),
                        model_type="falcon")


#: Qwen/Qwen1.5-MoE-A2.7B config.json (recalled): no qkv_bias field.
QWEN1_5_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24,
               "num_attention_heads": 16, "num_key_value_heads": 16,
               "intermediate_size": 5632, "moe_intermediate_size": 1408,
               "shared_expert_intermediate_size": 5632, "num_experts": 60,
               "num_experts_per_tok": 4, "decoder_sparse_step": 1, "norm_topk_prob": False,
               "vocab_size": 151936, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
               "use_sliding_window": False, "sliding_window": 32768}


def test_qwen2_moe_has_a_shared_expert_beside_the_routed_ones(tmp_path: Path) -> None:
    """Qwen1.5-MoE-A2.7B on the Qwen builder: q/k/v biases by default (qkv_bias), every
    layer 60 routed experts of 1408 top-4 and one shared expert of 5632. Summed by hand:
    per layer q/k/v/o 4 x 2048 x 2048 with 3 x 2048 biases, the experts 3 x 2048 x 1408
    each, the shared expert 3 x 2048 x 5632, a 60-way router, two RMSNorms; the untied
    151936 x 2048 embedding and output and the final norm: 14.32B total, 2.69B active
    (published 14.3B and 2.7B). The shared expert's 1-wide sigmoid gate is not counted."""
    model = _load(tmp_path, QWEN1_5_MOE)
    moe = model.moe
    assert moe is not None and model.qkv_bias and model.ffn_size == 1408
    assert (moe.num_experts, moe.top_k, moe.expert_ffn) == (60, 4, 1408)
    assert (moe.num_shared_experts, moe.shared_expert_ffn, moe.num_moe_layers) == (1, 5632, 24)
    h = 2048
    common = 4 * h * h + 3 * h + 3 * h * 5632 + h * 60 + 2 * h
    expert = 3 * h * 1408
    head = 2 * 151936 * h + h
    total, active = parameter_count(model)
    assert total == 24 * (common + 60 * expert) + head == pytest.approx(14.32e9, rel=1e-3)
    assert active == 24 * (common + 4 * expert) + head == pytest.approx(2.69e9, rel=1e-3)
    assert _load(tmp_path, {**QWEN1_5_MOE, "qkv_bias": False}).qkv_bias is False
    zoo = get_model("Qwen/Qwen1.5-MoE-A2.7B-Chat")
    written = write_hf_config(zoo, model_type="qwen2_moe")
    assert (written["qkv_bias"], written["shared_expert_intermediate_size"]) == (True, 5632)
    loaded = _load(tmp_path, written)
    assert dataclasses.replace(loaded, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo


#: deepseek-ai/deepseek-moe-16b-base config.json (recalled; remote code).
DEEPSEEK_MOE_16B = {"model_type": "deepseek", "hidden_size": 2048, "num_hidden_layers": 28,
                    "num_attention_heads": 16, "num_key_value_heads": 16,
                    "intermediate_size": 10944, "moe_intermediate_size": 1408,
                    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                    "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "scoring_func": "softmax", "norm_topk_prob": False,
                    "vocab_size": 102400, "rms_norm_eps": 1e-6,
                    "max_position_embeddings": 4096, "tie_word_embeddings": False}


def test_deepseek_moe_is_deepseek_v2s_moe_under_plain_attention(tmp_path: Path) -> None:
    """DeepSeekMoE 16B on a builder of its own: MHA, layer 0 dense (10944), then 27 MoE
    layers of 64 routed experts top-6 and 2 shared ones, 1408 each. Summed by hand: per
    layer q/k/v/o 4 x 2048 x 2048 and two RMSNorms; the dense MLP 3 x 2048 x 10944; per
    MoE layer 66 experts of 3 x 2048 x 1408 and a 64-way router; the untied 102400 x 2048
    embedding and output and the final norm: 16.38B total, 2.83B active (the paper's 16.4B
    and 2.8B). moe_layer_freq 2 keeps every second layer after the dense one."""
    model = _load(tmp_path, DEEPSEEK_MOE_16B)
    moe = model.moe
    assert moe is not None and model.attention == "MHA" and not model.qkv_bias
    assert (moe.num_experts, moe.top_k, moe.num_shared_experts) == (64, 6, 2)
    assert (moe.expert_ffn, moe.shared_expert_ffn, moe.num_moe_layers) == (1408, 1408, 27)
    assert (moe.dense_layer_ffn, model.ffn_size) == (10944, 10944)
    h, expert = 2048, 3 * 2048 * 1408
    common = 28 * (4 * h * h + 2 * h) + 3 * h * 10944 + 2 * 102400 * h + h
    total, active = parameter_count(model)
    assert total == common + 27 * (66 * expert + 64 * h) == pytest.approx(16.38e9, rel=1e-3)
    assert active == common + 27 * (8 * expert + 64 * h) == pytest.approx(2.83e9, rel=1e-3)
    sparser = _load(tmp_path, {**DEEPSEEK_MOE_16B, "moe_layer_freq": 2})
    assert sparser.moe is not None and sparser.moe.num_moe_layers == 13  # layers 2, 4 ... 26
    zoo = get_model("deepseek-ai/deepseek-moe-16b-chat")
    loaded = _load(tmp_path, write_hf_config(zoo, model_type="deepseek"))
    assert dataclasses.replace(loaded, name=zoo.name, hf_id=zoo.hf_id, notes=zoo.notes,
                               params_total_published=zoo.params_total_published,
                               params_active_published=zoo.params_active_published) == zoo
