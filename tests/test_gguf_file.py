"""A GGUF file as the model: its header read as the config of its family, its weights
priced as its tensors' types store them, or by its file type where it lists no layers'
tensors (files written here with the metadata and tensors llama.cpp's converter writes)."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from energylens.cli.catalog import footprint
from energylens.cli.main import main
from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError, ModelConfigError
from energylens.model import get_model, parameter_count
from energylens.predict import predict

U32, I32, F32, STRING, ARRAY, U64 = 4, 5, 6, 8, 9, 10


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value: Any) -> bytes:
    if kind == STRING:
        return _string(value)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", U64: "<Q"}[kind], value)


Tensor = tuple[str, tuple[int, ...], int]  # name, dimensions, ggml type


def write_gguf(path: Path, *, metadata: dict[str, tuple[int, Any]],
               tensors: list[str] | list[Tensor], tokens: int) -> Path:
    """A GGUF v3 header (no tensor data): ``metadata`` key -> (type, value), a vocabulary of
    ``tokens`` strings, and the tensors: names (4096 x 4096 Q4_K each) or (name,
    dimensions, ggml type)."""
    items = [_string(k) + struct.pack("<I", kind) + _value(kind, v)
             for k, (kind, v) in metadata.items()]
    items.append(_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, tokens)
                 + b"".join(_string(f"t{i}") for i in range(tokens)))
    listed = [t if isinstance(t, tuple) else (t, (4096, 4096), 12) for t in tensors]
    infos = [_string(name) + struct.pack("<I", len(dims))
             + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", kind, 0)
             for name, dims, kind in listed]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(items))
                     + b"".join(items) + b"".join(infos))
    return path


def _llama(arch: str = "llama", **extra: tuple[int, Any]) -> dict[str, tuple[int, Any]]:
    """Llama-3.1-8B as convert_hf_to_gguf.py writes it, quantised to Q4_K_M (15)."""
    return {"general.architecture": (STRING, arch), "general.name": (STRING, "Llama 3.1 8B"),
            "general.file_type": (U32, 15), f"{arch}.block_count": (U32, 32),
            f"{arch}.context_length": (U32, 131072), f"{arch}.embedding_length": (U32, 4096),
            f"{arch}.feed_forward_length": (U32, 14336),
            f"{arch}.attention.head_count": (U32, 32),
            f"{arch}.attention.head_count_kv": (U32, 8),
            f"{arch}.rope.freq_base": (F32, 500000.0),
            f"{arch}.attention.layer_norm_rms_epsilon": (F32, 1e-5), **extra}


SHAPES = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size",
          "vocab_size", "tie_word_embeddings", "qkv_bias", "norm_type", "moe")


def _same_shapes(model: Any, zoo_name: str) -> None:
    zoo = get_model(zoo_name)
    assert {k: getattr(model, k) for k in SHAPES} == {k: getattr(zoo, k) for k in SHAPES}
    assert parameter_count(model) == parameter_count(zoo)


def test_a_llama_file_is_the_zoo_model_in_its_file_type(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", metadata=_llama(),
                      tensors=["token_embd.weight", "output.weight", "blk.0.attn_q.weight"],
                      tokens=128256)
    model = get_model(str(path))
    _same_shapes(model, "llama-3.1-8b")
    assert model.weight_dtype == "q4_k_m" and model.max_context_tokens == 131072
    work = Workload(batch=1, input_tokens=256, output_tokens=32)
    from_file = predict(model=model, gpu="rtx-4090", workload=work,
                        deployment=Deployment(runtime="llama.cpp"))
    from_zoo = predict(model="llama-3.1-8b", gpu="rtx-4090", workload=work,
                       deployment=Deployment(runtime="llama.cpp", weight_dtype="q4_k_m"))
    assert from_file.tpot_s == pytest.approx(from_zoo.tpot_s, rel=1e-12)
    with pytest.raises(ConfigError, match="cannot run q4_k_m weights"):
        predict(model=model, gpu="h100", workload=work, deployment=Deployment())


def test_no_output_tensor_ties_the_embedding(tmp_path: Path) -> None:
    """Llama-3.2-1B: 16 layers of 2048, 32/8 heads of 64, 8192 FFN, tied."""
    meta = _llama(**{"llama.block_count": (U32, 16), "llama.embedding_length": (U32, 2048),
                     "llama.feed_forward_length": (U32, 8192),
                     "llama.attention.key_length": (U32, 64),
                     "llama.attention.value_length": (U32, 64), "general.file_type": (U32, 32)})
    path = write_gguf(tmp_path / "1b.gguf", metadata=meta, tensors=["token_embd.weight"],
                      tokens=128256)
    model = get_model(str(path))
    _same_shapes(model, "llama-3.2-1b")
    assert model.weight_dtype == "bf16"


def test_experts_make_a_mixtral_or_a_qwen3_moe(tmp_path: Path) -> None:
    mixtral = _llama(**{"llama.expert_count": (U32, 8), "llama.expert_used_count": (U32, 2),
                        "llama.context_length": (U32, 32768), "llama.vocab_size": (U32, 32000),
                        "general.file_type": (U32, 7)})
    model = get_model(str(write_gguf(tmp_path / "mixtral.gguf", metadata=mixtral,
                                     tensors=["output.weight"], tokens=32000)))
    _same_shapes(model, "mixtral-8x7b")
    qwen = _llama("qwen3moe", **{
        "qwen3moe.block_count": (U32, 48), "qwen3moe.embedding_length": (U32, 2048),
        "qwen3moe.feed_forward_length": (U32, 6144), "qwen3moe.attention.head_count_kv": (U32, 4),
        "qwen3moe.attention.key_length": (U32, 128), "qwen3moe.expert_count": (U32, 128),
        "qwen3moe.expert_used_count": (U32, 8),
        "qwen3moe.expert_feed_forward_length": (U32, 768), "general.file_type": (U32, 18)})
    model = get_model(str(write_gguf(tmp_path / "qwen.gguf", metadata=qwen,
                                     tensors=["output.weight"], tokens=151936)))
    _same_shapes(model, "qwen3-30b-a3b")
    assert model.weight_dtype == "q6_k" and model.qk_norm == "head"


@pytest.mark.parametrize(("content", "message"), [
    (b"GGML" + bytes(20), "not a GGUF file"),
    (b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0), "ends inside its GGUF header"),
])
def test_a_file_that_is_not_gguf_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelConfigError, match=message):
        get_model(str(path))


def test_an_architecture_or_file_type_not_read_is_named(tmp_path: Path) -> None:
    rwkv = write_gguf(tmp_path / "rwkv.gguf", metadata={"general.architecture": (STRING, "rwkv6"),
                                                        "general.file_type": (U32, 15)},
                      tensors=[], tokens=10)
    with pytest.raises(ModelConfigError, match="architecture 'rwkv6' is not read"):
        get_model(str(rwkv))
    q3 = write_gguf(tmp_path / "q3.gguf", metadata=_llama(**{"general.file_type": (U32, 12)}),
                    tensors=[], tokens=128256)
    with pytest.raises(ModelConfigError, match="file type Q3_K_M is not priced"):
        get_model(str(q3))


def test_the_command_line_predicts_and_launches_the_file_itself(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = write_gguf(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", metadata=_llama(),
                      tensors=["output.weight"], tokens=128256)
    assert main(["predict", "--model", str(path), "--gpu", "rtx-4090", "--runtime", "llama.cpp",
                 "--launch-command"]) == 0
    out = capsys.readouterr().out
    assert f"--model {path} " in out and "convert" not in out
    assert main(["predict", "--model", str(path), "--gpu", "h100", "--json"]) == 2
    assert "cannot run q4_k_m weights" in (err := capsys.readouterr().err)
    assert "q4_k_m weights: --runtime llama.cpp" in err  # who does run them
    assert main(["models", "show", str(path), "--json"]) == 0
    assert '"model_type": "llama"' in capsys.readouterr().out


#: ggml tensor types (``enum ggml_type``).
Q3_K, Q4_K, Q5_K, Q6_K, GGML_F32 = 11, 12, 13, 14, 0
#: llama-quantize's more-bits layers as cost/gguf.py prices a Q4_K_M file: half of them.
MORE_BITS_LAYERS = frozenset(range(0, 32, 2))


def _llama_tensors(*, base: int, more: int, v: int, out: int, embd: int,
                   more_layers: frozenset[int] = MORE_BITS_LAYERS) -> list[Tensor]:
    """Llama-3.1-8B's weight tensors (ggml dimensions: input width first), ``base`` type
    but ``attn_v`` and ``ffn_down`` in ``more`` on ``more_layers`` (``v``: attn_v's base)."""
    d, kv, ff, vocab = 4096, 1024, 14336, 128256
    tensors: list[Tensor] = [("token_embd.weight", (d, vocab), embd),
                             ("output.weight", (d, vocab), out), ("output_norm.weight", (d,), GGML_F32)]
    for i in range(32):
        up = more if i in more_layers else base
        tensors += [(f"blk.{i}.attn_q.weight", (d, d), base), (f"blk.{i}.attn_k.weight", (d, kv), base),
                    (f"blk.{i}.attn_v.weight", (d, kv), more if i in more_layers else v),
                    (f"blk.{i}.attn_output.weight", (d, d), base),
                    (f"blk.{i}.ffn_gate.weight", (d, ff), base), (f"blk.{i}.ffn_up.weight", (d, ff), base),
                    (f"blk.{i}.ffn_down.weight", (ff, d), up), (f"blk.{i}.attn_norm.weight", (d,), GGML_F32)]
    return tensors


def test_tensors_priced_as_stored_agree_with_the_file_types_rule(tmp_path: Path) -> None:
    """A Q4_K_M file whose tensors are what cost/gguf.py's rule says (attn_v and ffn_down
    in Q6_K on half the layers, the output in Q6_K) costs the same read either way: two
    separate paths, one from the header and one from the rule."""
    tensors = _llama_tensors(base=Q4_K, more=Q6_K, v=Q4_K, out=Q6_K, embd=Q4_K)
    path = write_gguf(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", metadata=_llama(),
                      tensors=tensors, tokens=128256)
    model = get_model(str(path))
    assert model.weight_dtype == "gguf"
    stored = dict(model.gguf_storage)
    assert stored["WQ"] == 144 / 256 and stored["WLM"] == 210 / 256
    assert stored["WD"] == pytest.approx((144 + 210) / 2 / 256, rel=1e-15)
    by_rule = footprint(replace(model, weight_dtype="q4_k_m"))["weight_bytes"]["q4_k_m"]
    assert footprint(model)["weight_bytes"]["gguf"] == pytest.approx(by_rule, rel=1e-9)
    work = Workload(batch=4, input_tokens=512, output_tokens=64)
    as_stored = predict(model=model, gpu="rtx-4090", workload=work,
                        deployment=Deployment(runtime="llama.cpp"))
    rule = predict(model=model, gpu="rtx-4090", workload=work,
                   deployment=Deployment(runtime="llama.cpp", weight_dtype="q4_k_m"))
    assert as_stored.tpot_s == pytest.approx(rule.tpot_s, rel=1e-9)
    assert as_stored.ttft_s == pytest.approx(rule.ttft_s, rel=1e-9)


def test_a_type_no_rule_prices_is_priced_from_its_tensors(tmp_path: Path) -> None:
    """A Q3_K_M file (type 12, which no rule here prices; a layout of its kind, not
    llama-quantize's exact one): Q3_K mostly, attn_v and ffn_down in Q5_K on 16 layers and
    Q4_K on the rest, attn_output Q4_K, the output Q6_K; the weights' bytes summed by hand
    from the block sizes (Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210 bytes per 256 weights)."""
    more = frozenset({0, 1, 2, 3, 28, 29, 30, 31, *range(6, 28, 3)})  # 8 + 8 = 16 layers
    tensors = _llama_tensors(base=Q3_K, more=Q5_K, v=Q4_K, out=Q6_K, embd=Q3_K,
                             more_layers=more)
    tensors = [(n, dims, Q4_K if ".attn_output." in n or (".ffn_down." in n and kind == Q3_K)
                else kind) for n, dims, kind in tensors]
    path = write_gguf(tmp_path / "Llama-3.1-8B-Q3_K_M.gguf",
                      metadata=_llama(**{"general.file_type": (U32, 12)}),
                      tensors=tensors, tokens=128256)
    model = get_model(str(path))
    d, kv, ff, vocab = 4096, 1024, 14336, 128256
    q3, q4, q5, q6 = (b / 256 for b in (110, 144, 176, 210))
    by_hand = (32 * (d * d * q3 + d * kv * q3 + 2 * d * ff * q3 + d * d * q4)
               + 16 * (d * kv * q5 + ff * d * q5) + 16 * (d * kv * q4 + ff * d * q4)
               + d * vocab * (q3 + q6))
    assert footprint(model)["weight_bytes"]["gguf"] == pytest.approx(by_hand, rel=1e-9)
    assert "file type Q3_K_M" in model.notes


def test_a_phi3_fused_tensor_prices_each_projection_it_holds(tmp_path: Path) -> None:
    """Phi-3 stores q, k, v as one attn_qkv and gate, up as one ffn_up: each projection is
    priced at its fused tensor's type."""
    d, ff = 3072, 8192
    tensors: list[Tensor] = [("token_embd.weight", (d, 32064), Q4_K)]
    for i in range(32):
        tensors += [(f"blk.{i}.attn_qkv.weight", (d, 3 * d), Q5_K),
                    (f"blk.{i}.attn_output.weight", (d, d), Q4_K),
                    (f"blk.{i}.ffn_up.weight", (d, 2 * ff), Q6_K),
                    (f"blk.{i}.ffn_down.weight", (ff, d), Q4_K)]
    meta = {"general.architecture": (STRING, "phi3"), "general.file_type": (U32, 17),
            "phi3.block_count": (U32, 32), "phi3.embedding_length": (U32, d),
            "phi3.feed_forward_length": (U32, ff), "phi3.attention.head_count": (U32, 32),
            "phi3.attention.head_count_kv": (U32, 32), "phi3.context_length": (U32, 4096)}
    stored = dict(get_model(str(write_gguf(tmp_path / "phi3.gguf", metadata=meta,
                                           tensors=tensors, tokens=32064))).gguf_storage)
    assert stored["WQ"] == stored["WK"] == stored["WV"] == 176 / 256
    assert stored["WG"] == stored["WU"] == 210 / 256 and stored["WLM"] == 144 / 256  # tied


def test_a_tensor_type_not_known_and_gguf_without_a_file_are_one_line(tmp_path: Path) -> None:
    tensors = [*_llama_tensors(base=Q4_K, more=Q6_K, v=Q4_K, out=Q6_K, embd=Q4_K)]
    tensors[5] = (tensors[5][0], tensors[5][1], 99)
    path = write_gguf(tmp_path / "odd.gguf", metadata=_llama(), tensors=tensors, tokens=128256)
    with pytest.raises(ModelConfigError, match=f"tensor {tensors[5][0]} is of ggml type 99"):
        get_model(str(path))
    with pytest.raises(ConfigError, match="was not read from one"):
        predict(model="llama-3.1-8b", gpu="rtx-4090", workload=Workload(batch=1),
                deployment=Deployment(runtime="llama.cpp", weight_dtype="gguf"))


def test_a_gpt_oss_file_is_the_zoo_model_with_its_mxfp4_experts(tmp_path: Path) -> None:
    """gpt-oss-20b as llama.cpp's converter writes it (architecture ``gpt-oss``; experts in
    MXFP4, 17 bytes per 32 weights; attention and router in BF16 / F32): the zoo's shapes,
    every other layer sliding, and the experts' bytes as the zoo's MXFP4 checkpoint prices
    them (the rule's path: experts MXFP4, the rest 16-bit)."""
    d, heads, kv, ff, experts, vocab = 2880, 64, 8, 2880, 32, 201088
    meta = {"general.architecture": (STRING, "gpt-oss"), "general.file_type": (U32, 38),
            "gpt-oss.block_count": (U32, 24), "gpt-oss.context_length": (U32, 131072),
            "gpt-oss.embedding_length": (U32, d), "gpt-oss.feed_forward_length": (U32, ff),
            "gpt-oss.attention.head_count": (U32, heads),
            "gpt-oss.attention.head_count_kv": (U32, kv),
            "gpt-oss.attention.key_length": (U32, 64), "gpt-oss.attention.value_length": (U32, 64),
            "gpt-oss.attention.sliding_window": (U32, 128), "gpt-oss.expert_count": (U32, experts),
            "gpt-oss.expert_used_count": (U32, 4), "gpt-oss.expert_feed_forward_length": (U32, ff)}
    bf16, mxfp4 = 30, 39
    tensors: list[Tensor] = [("token_embd.weight", (d, vocab), bf16),
                             ("output.weight", (d, vocab), bf16)]
    for i in range(24):
        tensors += [(f"blk.{i}.attn_q.weight", (d, heads * 64), bf16),
                    (f"blk.{i}.attn_k.weight", (d, kv * 64), bf16),
                    (f"blk.{i}.attn_v.weight", (d, kv * 64), bf16),
                    (f"blk.{i}.attn_output.weight", (heads * 64, d), bf16),
                    (f"blk.{i}.attn_sinks.weight", (heads,), GGML_F32),
                    (f"blk.{i}.ffn_gate_inp.weight", (d, experts), bf16),
                    (f"blk.{i}.ffn_gate_exps.weight", (d, ff, experts), mxfp4),
                    (f"blk.{i}.ffn_up_exps.weight", (d, ff, experts), mxfp4),
                    (f"blk.{i}.ffn_down_exps.weight", (ff, d, experts), mxfp4)]
    model = get_model(str(write_gguf(tmp_path / "gpt-oss-20b-mxfp4.gguf", metadata=meta,
                                     tensors=tensors, tokens=vocab)))
    _same_shapes(model, "gpt-oss-20b")
    zoo = get_model("gpt-oss-20b")
    assert (model.sliding_window, model.num_sliding_layers) == (zoo.sliding_window,
                                                              zoo.num_sliding_layers)
    assert dict(model.gguf_storage)["WEG"] == 17 / 32
    stored = footprint(model)["weight_bytes"]["gguf"]
    assert stored == pytest.approx(footprint(zoo)["weight_bytes"]["mxfp4"], rel=1e-9)


def test_a_deepseek_r1_file_reads_mla_in_either_layout_and_prices_a_dynamic_quant(
        tmp_path: Path) -> None:
    """DeepSeek-R1 as llama.cpp's converter writes it (architecture ``deepseek2``), in the
    layout before llama.cpp stored MLA absorbed (``key_length`` 192, one ``attn_kv_b``) and
    after (``key_length`` 576 = latent + rotary, ``key_length_mla`` 192, ``attn_k_b`` and
    ``attn_v_b``): both are the zoo's DeepSeek-V3 shapes, and a dynamic quant that keeps
    attention and the shared experts in more bits than the routed ones (IQ1_S, 50 bytes per
    256 weights) costs the bytes summed by hand."""
    d, heads, q_lat, kv_lat, nope, rope, v_head = 7168, 128, 1536, 512, 128, 64, 128
    dense_ff, expert_ff, experts, vocab, layers, dense = 18432, 2048, 256, 129280, 61, 3
    iq1_s = 19
    sizes = {Q4_K: 144 / 256, Q6_K: 210 / 256, iq1_s: 50 / 256, GGML_F32: 4.0}

    def header(absorbed: bool) -> tuple[dict[str, tuple[int, Any]], list[Tensor]]:
        meta: dict[str, tuple[int, Any]] = {
            "general.architecture": (STRING, "deepseek2"), "general.file_type": (U32, 24),
            "deepseek2.block_count": (U32, layers), "deepseek2.context_length": (U32, 163840),
            "deepseek2.embedding_length": (U32, d), "deepseek2.feed_forward_length": (U32, dense_ff),
            "deepseek2.attention.head_count": (U32, heads),
            "deepseek2.attention.head_count_kv": (U32, 1 if absorbed else heads),
            "deepseek2.attention.q_lora_rank": (U32, q_lat),
            "deepseek2.attention.kv_lora_rank": (U32, kv_lat),
            "deepseek2.attention.key_length": (U32, kv_lat + rope if absorbed else nope + rope),
            "deepseek2.attention.value_length": (U32, kv_lat if absorbed else v_head),
            "deepseek2.rope.dimension_count": (U32, rope),
            "deepseek2.leading_dense_block_count": (U32, dense),
            "deepseek2.expert_count": (U32, experts), "deepseek2.expert_used_count": (U32, 8),
            "deepseek2.expert_shared_count": (U32, 1),
            "deepseek2.expert_feed_forward_length": (U32, expert_ff)}
        if absorbed:
            meta["deepseek2.attention.key_length_mla"] = (U32, nope + rope)
            meta["deepseek2.attention.value_length_mla"] = (U32, v_head)
        tensors: list[Tensor] = [("token_embd.weight", (d, vocab), Q4_K),
                                 ("output.weight", (d, vocab), Q6_K)]
        for i in range(layers):
            b = f"blk.{i}."
            tensors += [(b + "attn_q_a.weight", (d, q_lat), Q4_K),
                        (b + "attn_q_b.weight", (q_lat, heads * (nope + rope)), Q4_K),
                        (b + "attn_kv_a_mqa.weight", (d, kv_lat + rope), Q6_K),
                        (b + "attn_output.weight", (heads * v_head, d), Q4_K)]
            tensors += ([(b + "attn_k_b.weight", (nope, kv_lat, heads), Q4_K),
                         (b + "attn_v_b.weight", (kv_lat, v_head, heads), Q4_K)] if absorbed
                        else [(b + "attn_kv_b.weight", (kv_lat, heads * (nope + v_head)), Q4_K)])
            if i < dense:
                tensors += [(b + f"ffn_{n}.weight", (d, dense_ff), Q4_K) for n in ("gate", "up")]
                tensors += [(b + "ffn_down.weight", (dense_ff, d), Q6_K)]
                continue
            tensors += [(b + "ffn_gate_inp.weight", (d, experts), GGML_F32),
                        (b + "ffn_gate_exps.weight", (d, expert_ff, experts), iq1_s),
                        (b + "ffn_up_exps.weight", (d, expert_ff, experts), iq1_s),
                        (b + "ffn_down_exps.weight", (expert_ff, d, experts), iq1_s),
                        (b + "ffn_gate_shexp.weight", (d, expert_ff), Q4_K),
                        (b + "ffn_up_shexp.weight", (d, expert_ff), Q4_K),
                        (b + "ffn_down_shexp.weight", (expert_ff, d), Q6_K)]
        return meta, tensors

    zoo = get_model("deepseek-v3")
    # the family sizes MLA's up-projections over the whole latent row (the rotary part
    # priced as value dims too: families/attention_mla.yaml): WUK h x 192 x 576 and WUV
    # h x 576 x 128 where the checkpoint's are h x 128 x 512 and h x 512 x 128, both Q4_K
    family_extra = layers * heads * ((nope + rope) * (kv_lat + rope) - nope * kv_lat
                                     + (kv_lat + rope) * v_head - kv_lat * v_head) * sizes[Q4_K]
    costs = []
    for absorbed in (False, True):
        meta, tensors = header(absorbed)
        model = get_model(str(write_gguf(tmp_path / f"R1-{absorbed}.gguf", metadata=meta,
                                         tensors=tensors, tokens=vocab)))
        _same_shapes(model, "deepseek-v3")
        assert model.mla == zoo.mla and model.weight_dtype == "gguf"
        by_hand = 0.0
        for _, dims, kind in tensors:
            elements = 1
            for dim in dims:
                elements *= dim
            by_hand += elements * sizes[kind]
        costs.append(footprint(model)["weight_bytes"]["gguf"])
        assert costs[-1] == pytest.approx(by_hand + family_extra, rel=1e-9)
    assert costs[0] == pytest.approx(costs[1], rel=1e-12)
    assert 130e9 < costs[0] < 200e9  # routed experts at 1.56 bits: most of the 671B weights


def test_a_glm_4_5_air_file_leaves_out_its_mtp_block(tmp_path: Path) -> None:
    """GLM-4.5-Air as llama.cpp's converter writes it (``glm4moe``): 46 decoder blocks and
    its multi-token-prediction layer as a 47th (``nextn_predict_layers`` 1), biases on the
    q/k/v projections: the zoo's 46 layers, the first dense, and its qkv bias."""
    meta = {"general.architecture": (STRING, "glm4moe"), "general.file_type": (U32, 15),
            "glm4moe.block_count": (U32, 47), "glm4moe.nextn_predict_layers": (U32, 1),
            "glm4moe.context_length": (U32, 131072), "glm4moe.embedding_length": (U32, 4096),
            "glm4moe.feed_forward_length": (U32, 10944), "glm4moe.attention.head_count": (U32, 96),
            "glm4moe.attention.head_count_kv": (U32, 8), "glm4moe.attention.key_length": (U32, 128),
            "glm4moe.rope.dimension_count": (U32, 64), "glm4moe.expert_count": (U32, 128),
            "glm4moe.expert_used_count": (U32, 8), "glm4moe.expert_shared_count": (U32, 1),
            "glm4moe.expert_feed_forward_length": (U32, 1408),
            "glm4moe.leading_dense_block_count": (U32, 1)}
    tensors = ["output.weight", "blk.0.attn_q.weight", "blk.0.attn_q.bias", "blk.0.attn_output.weight"]
    model = get_model(str(write_gguf(tmp_path / "GLM-4.5-Air-Q4_K_M.gguf", metadata=meta,
                                     tensors=tensors, tokens=151552)))
    _same_shapes(model, "glm-4.5-air")
    assert model.qk_norm == get_model("glm-4.5-air").qk_norm is None
