"""NVIDIA's -FP4 releases and GPTQ-Int8 ones resolve with their precision (a review)."""

from __future__ import annotations

import pytest

from energylens.errors import UnknownModelError
from energylens.model.zoo import get_model, resolve


@pytest.mark.parametrize(("name", "zoo"), [
    ("nvidia/DeepSeek-R1-FP4", "deepseek-v3"),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama-3.1-70b"),
    ("nvidia/Qwen3-235B-A22B-FP4", "qwen3-235b-a22b"),
])
def test_nvidia_fp4_releases_are_nvfp4_model_optimizer_checkpoints(name: str, zoo: str) -> None:
    found = resolve(name)
    assert (found.name, found.weight_dtype, found.kv_dtype) == (zoo, "nvfp4", "fp8")
    assert get_model(name).weight_dtype == "nvfp4"


def test_another_org_s_fp4_is_not_read_as_nvfp4() -> None:
    with pytest.raises(UnknownModelError):
        resolve("someorg/DeepSeek-R1-FP4")


def test_gptq_int8_selects_int8_weights_and_gptq_alone_int4() -> None:
    assert resolve("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8").weight_dtype == "int8"
    assert resolve("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4").weight_dtype == "int4"
    assert resolve("TheBloke/Llama-2-7B-GPTQ").weight_dtype == "int4"
