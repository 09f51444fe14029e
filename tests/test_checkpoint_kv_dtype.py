"""``--kv-dtype auto``: the checkpoint's declared KV precision where the engine follows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.hf import load_hf_config
from energylens.model.hf.write import write_hf_config
from energylens.model.zoo import get_model
from energylens.predict import calibration_for_gpu, step_context
from energylens.workloads.load.kind import kv_bytes_per_token

#: Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x (K and V).
KV_ELEMENTS_PER_TOKEN = 32 * 8 * 128 * 2


def _checkpoint(folder: Path, *, kv_algo: str | None) -> Path:
    """A ModelOpt FP8 release of Llama-3.1-8B: config.json and hf_quant_config.json."""
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps(write_hf_config(get_model("llama-3.1-8b"), model_type="llama")))
    quant: dict[str, object] = {"quant_algo": "FP8"}
    if kv_algo is not None:
        quant["kv_cache_quant_algo"] = kv_algo
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": quant}))
    return config


def test_the_declared_kv_precision_is_read(tmp_path: Path) -> None:
    fp8_kv = load_hf_config(_checkpoint(tmp_path / "a", kv_algo="FP8"))
    assert (fp8_kv.weight_dtype, fp8_kv.kv_dtype) == ("fp8", "fp8")
    plain = load_hf_config(_checkpoint(tmp_path / "b", kv_algo=None))
    assert (plain.weight_dtype, plain.kv_dtype) == ("fp8", None)


def _kv_bytes(model_path: Path, *, runtime: str, kv_dtype: str | None = None,
              version: str | None = None) -> float:
    model = load_hf_config(model_path)
    gpu = load_gpu("H100")
    ctx = step_context(model=model, gpu=gpu,
                       deployment=Deployment(runtime=runtime, kv_dtype=kv_dtype,
                                             runtime_version=version),
                       calibration=calibration_for_gpu(default_calibration(), gpu))
    return kv_bytes_per_token(ctx)


@pytest.mark.parametrize(("runtime", "element_bytes"),
                         [("trtllm", 1), ("vllm", 2), ("sglang", 2), ("lmdeploy", 2)])
def test_auto_follows_the_checkpoint_only_where_the_engine_does(
        tmp_path: Path, runtime: str, element_bytes: int) -> None:
    """TensorRT-LLM's auto takes the checkpoint's FP8 KV cache (half the bytes per token,
    twice the tokens in the same pool); vLLM's and SGLang's auto is the model's 16 bits;
    LMDeploy stores no FP8 cache at all."""
    path = _checkpoint(tmp_path / "ckpt", kv_algo="FP8")
    assert _kv_bytes(path, runtime=runtime) == pytest.approx(
        KV_ELEMENTS_PER_TOKEN * element_bytes)


@pytest.mark.parametrize(("version", "element_bytes"),
                         [("0.11.1", 2), ("0.12.0", 1), ("0.19.0", 1), ("1.0.0rc1", 1)])
def test_vllm_follows_the_checkpoint_from_the_release_its_profile_names(
        tmp_path: Path, version: str, element_bytes: int) -> None:
    """vLLM's auto resolves a Model Optimizer checkpoint's FP8 KV from
    ``checkpoint_kv_since`` (0.12) on; the profile's own release (0.11) does not."""
    from energylens.runtime import get_runtime

    assert get_runtime("vllm").checkpoint_kv_since == "0.12.0"
    path = _checkpoint(tmp_path / "ckpt", kv_algo="FP8")
    assert _kv_bytes(path, runtime="vllm", version=version) == pytest.approx(
        KV_ELEMENTS_PER_TOKEN * element_bytes)


def test_an_explicit_kv_dtype_wins_over_the_checkpoint(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "ckpt", kv_algo="FP8")
    assert _kv_bytes(path, runtime="trtllm", kv_dtype="bf16") == pytest.approx(
        KV_ELEMENTS_PER_TOKEN * 2)
    assert _kv_bytes(path, runtime="vllm", kv_dtype="fp8") == pytest.approx(
        KV_ELEMENTS_PER_TOKEN * 1)


def test_zoo_models_declare_no_kv_precision() -> None:
    assert get_model("llama-3.1-8b").kv_dtype is None
    # a publisher's own FP8 release quantises the weights only (Qwen's: block-scaled)
    assert get_model("Qwen/Qwen3-32B-FP8").kv_dtype is None


@pytest.mark.parametrize("name", ["nvidia/Llama-3.1-8B-Instruct-FP8", "nvidia/Qwen3-32B-NVFP4"])
def test_nvidia_model_optimizer_releases_declare_an_fp8_kv_cache(name: str) -> None:
    """Named by their Hugging Face id, NVIDIA's quantised releases carry what their
    hf_quant_config.json says (kv_cache_quant_algo FP8), so TensorRT-LLM's auto stores one
    byte per element where vLLM's stays at two."""
    model = get_model(name)
    assert model.kv_dtype == "fp8"
    gpu = load_gpu("H100")
    per_token = {}
    for runtime in ("trtllm", "vllm"):
        ctx = step_context(model=model, gpu=gpu, deployment=Deployment(runtime=runtime),
                           calibration=calibration_for_gpu(default_calibration(), gpu))
        per_token[runtime] = kv_bytes_per_token(ctx)
    assert per_token["vllm"] == pytest.approx(2 * per_token["trtllm"])


@pytest.mark.parametrize(("runtime", "gpu", "expected"), [
    ("sglang", "B200", "fp8"), ("sglang", "B300", "fp8"),
    ("sglang", "H200", "bf16"), ("sglang", "MI300X", "bf16"), ("vllm", "B200", "bf16")])
def test_sglang_stores_fp8_for_sparse_attention_models_on_blackwell(
        runtime: str, gpu: str, expected: str) -> None:
    """SGLang (0.5.3 / 0.5.9 server_args.py) turns kv_cache_dtype auto into FP8 for a
    DeepSeek Sparse Attention model (GLM-5: an indexer) on compute capability >= 10 and
    keeps bf16 below (and on GPUs with no CUDA compute capability); vLLM stores the
    model's dtype. A dense model keeps bf16 under SGLang on Blackwell too; and a step
    context of GLM-5 on B200 holds its 576-wide latent in half the bytes of one on H200
    (the FP8 index keys, 132 B, alike on both: 708 against 1,284 B a token and layer)."""
    from energylens.runtime import get_runtime

    glm5 = get_model("zai-org/GLM-5-FP8")
    assert glm5.mla is not None and glm5.mla.index_heads > 0
    profile = get_runtime(runtime)
    assert profile.auto_kv(model=glm5, gpu=load_gpu(gpu)) == expected
    assert get_runtime("sglang").auto_kv(model=get_model("llama-3.1-8b"),
                                         gpu=load_gpu("B200")) == "bf16"
    if (runtime, gpu) == ("sglang", "B200"):
        cal = default_calibration()

        def per_token(name: str) -> float:
            spec = load_gpu(name)
            ctx = step_context(model=glm5, gpu=spec, deployment=Deployment(tp=8, runtime="sglang"),
                               calibration=calibration_for_gpu(cal, spec))
            assert ctx.kv_dtype == ("fp8" if name == "B200" else "bf16")
            return kv_bytes_per_token(ctx)

        assert per_token("B200") == pytest.approx(per_token("H200") * 708 / 1284, rel=1e-9)


def test_compute_capability_is_an_nvidia_gpus_spec() -> None:
    assert load_gpu("H100").compute_capability == 9.0
    assert load_gpu("B200").compute_capability == 10.0
    assert load_gpu("A100-80GB-SXM").compute_capability == 8.0
    assert load_gpu("MI300X").compute_capability is None
