"""llama.cpp's GGUF file types as weight dtypes: their block formats' bytes, the tensors a
K-quant mix keeps in more bits, and who may run them."""

from __future__ import annotations

import pytest

from energylens.cost.gguf import BLOCK_BYTES
from energylens.cost.memory import memory_use
from energylens.cost.work import weight_dtype_of
from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.measurements.user_csv import _dtype
from energylens.model import build_graph
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime
from energylens.runtime.launch import launch_command

LLAMA = "llama-3.1-8b"


def _weights(dtype: str) -> float:
    return memory_use(graph=build_graph(get_model(LLAMA)), gpu=load_gpu("rtx-4090"),
                      runtime=get_runtime("llama.cpp"), degrees={"tp": 1}, pp=1,
                      weight_dtype=dtype, kv_dtype="bf16", sequences=1,
                      context_tokens=1).weights_bytes


def test_block_formats_by_hand() -> None:
    """ggml's blocks: Q8_0 34 bytes per 32 weights, Q4_0 18 per 32, Q4_K 144 per 256,
    Q5_K 176 per 256, Q6_K 210 per 256."""
    assert {k: v * 8 for k, v in BLOCK_BYTES.items()} == {
        "q8_0": 8.5, "q4_0": 4.5, "q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625}


def test_q4_k_m_weights_of_llama_3_1_8b_add_up_by_hand() -> None:
    """32 layers: q and o 4096 x 4096, k and v 4096 x 1024, gate, up and down 4096 x 14336;
    v and down at the mean of Q4_K and Q6_K (half their layers each), the rest Q4_K; the
    output table 128256 x 4096 in Q6_K and the embedding in Q4_K."""
    q4k, q6k = 144 / 256, 210 / 256
    base = 2 * 4096 * 4096 + 4096 * 1024 + 2 * 4096 * 14336
    more = 4096 * 1024 + 4096 * 14336
    vocab = 128256 * 4096
    expected = 32 * (base * q4k + more * (q4k + q6k) / 2) + vocab * (q6k + q4k)
    assert _weights("q4_k_m") == pytest.approx(expected, rel=1e-12)


def test_lighter_formats_hold_fewer_bytes_and_decode_faster() -> None:
    """bf16 > q8_0 > q6_k > q5_k_m > q4_k_m > q4_0 in bytes, and in decode time on a
    memory-bound batch of one."""
    order = ["bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0"]
    sizes = [_weights(d) for d in order]
    assert sizes == sorted(sizes, reverse=True)
    tpot = [predict(model=LLAMA, gpu="rtx-4090", deployment=Deployment(runtime="llama.cpp",
                                                                      weight_dtype=d),
                    workload=Workload(batch=1, input_tokens=256, output_tokens=64)).tpot_s
            for d in order]
    assert tpot == sorted(tpot, reverse=True)


def test_the_router_stays_unquantised_and_the_output_takes_q6_k_or_q8_0() -> None:
    moe = next(g for g in build_graph(get_model("qwen3-30b-a3b")).groups
               if any(t.name.startswith("WR") for op in g.layer.ops for t in op.inputs))
    router = next(t for op in moe.layer.ops for t in op.inputs if t.name.split("__")[0] == "WR")
    down = next(t for op in moe.layer.ops for t in op.inputs if t.name.split("__")[0] == "WED")
    assert weight_dtype_of(router, "q4_k_m") == "bf16"
    assert weight_dtype_of(down, "q4_k_m") == "q4_k|q6_k"
    assert weight_dtype_of(down, "q4_0") == "q4_0"


def test_only_llama_cpp_runs_them_and_its_launch_names_the_file_type() -> None:
    work = Workload(batch=1, input_tokens=256, output_tokens=64)
    with pytest.raises(ConfigError, match="vLLM 0.11.0 cannot run q4_k_m weights"):
        predict(model=LLAMA, gpu="h100", deployment=Deployment(weight_dtype="q4_k_m"),
                workload=work)
    with pytest.raises(ConfigError, match="cannot run int4 weights"):  # AWQ is no GGUF type
        predict(model=LLAMA, gpu="h100",
                deployment=Deployment(runtime="llama.cpp", weight_dtype="int4"), workload=work)
    command = launch_command(model=get_model(LLAMA), workload=work,
                             deployment=Deployment(runtime="llama.cpp", weight_dtype="q5_k_m"),
                             gpu=load_gpu("rtx-4090"))
    assert "Llama-3.1-8B-Q5_K_M.gguf" in " ".join(command.argv)


@pytest.mark.parametrize(("raw", "dtype"), [("Q4_K_M", "q4_k_m"), ("q8_0", "q8_0"),
                                            ("Q6_K", "q6_k")])
def test_a_measurement_row_names_them_as_llama_quantize_does(raw: str, dtype: str) -> None:
    assert _dtype(raw, ("bf16", "q8_0", "q6_k", "q4_k_m"), "dtype") == dtype


def test_a_q8_0_or_q4_0_kv_cache_holds_its_blocks_bytes_and_only_llama_cpp_stores_it() -> None:
    """Llama-3.1-8B's cache: 32 layers x 8 KV heads x 128 x (K, V) = 65,536 elements a
    token, 2 bytes each in f16, 34/32 in q8_0, 18/32 in q4_0."""
    def kv(kv_dtype: str) -> float:
        return memory_use(graph=build_graph(get_model(LLAMA)), gpu=load_gpu("rtx-4090"),
                          runtime=get_runtime("llama.cpp"), degrees={"tp": 1}, pp=1,
                          weight_dtype="q4_k_m", kv_dtype=kv_dtype, sequences=4,
                          context_tokens=1000).kv_cache_bytes
    elements = 32 * 8 * 128 * 2 * 4 * 1000
    assert kv("fp16") == pytest.approx(elements * 2.0, rel=1e-12)
    assert kv("q8_0") == pytest.approx(elements * 34 / 32, rel=1e-12)
    assert kv("q4_0") == pytest.approx(elements * 18 / 32, rel=1e-12)
    work = Workload(batch=4, input_tokens=4096, output_tokens=64)
    tpot = [predict(model=LLAMA, gpu="rtx-4090", workload=work,
                    deployment=Deployment(runtime="llama.cpp", weight_dtype="q4_k_m",
                                          kv_dtype=k)).tpot_s for k in ("fp16", "q8_0", "q4_0")]
    assert tpot == sorted(tpot, reverse=True)
    with pytest.raises(ConfigError, match="has no q8_0 KV cache"):
        predict(model=LLAMA, gpu="h100", deployment=Deployment(kv_dtype="q8_0"), workload=work)
    command = launch_command(model=get_model(LLAMA), workload=work, gpu=load_gpu("rtx-4090"),
                             deployment=Deployment(runtime="llama.cpp", weight_dtype="q4_k_m",
                                                   kv_dtype="q8_0"))
    assert "--cache-type-k q8_0 --cache-type-v q8_0" in " ".join(command.argv)
