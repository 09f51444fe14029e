"""A GGUF file as the model: its header read as the config of its family, its file type
as the weight dtype (files written here with the metadata llama.cpp's converter writes)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

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


def write_gguf(path: Path, *, metadata: dict[str, tuple[int, Any]], tensors: list[str],
               tokens: int) -> Path:
    """A GGUF v3 header (no tensor data): ``metadata`` key -> (type, value), a vocabulary of
    ``tokens`` strings, and the named tensors (shapes and types do not matter here)."""
    items = [_string(k) + struct.pack("<I", kind) + _value(kind, v)
             for k, (kind, v) in metadata.items()]
    items.append(_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, tokens)
                 + b"".join(_string(f"t{i}") for i in range(tokens)))
    infos = [_string(name) + struct.pack("<I", 2) + struct.pack("<QQ", 4096, 4096)
             + struct.pack("<IQ", 12, 0) for name in tensors]
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
