"""A checkpoint's quantisation exclude list read into ``held_16bit``
(``energylens.model.hf.exclusions``): checked against the zoo's lists, written by hand from
the same files, and against small lists whose answer is known."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from energylens.model.hf.load import ModelApproximationWarning, load_hf_config
from energylens.model.zoo import get_model

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


@pytest.mark.parametrize(("config", "zoo", "dtype"), [
    ("nvidia--DeepSeek-V3.1-NVFP4_config.json", "deepseek-v3", "nvfp4"),
    ("nvidia--GLM-5-NVFP4_config.json", "glm-5", "nvfp4"),
    ("nvidia--MiniMax-M2.5-NVFP4_config.json", "minimax-m2.5", "nvfp4"),
    ("nvidia--Kimi-K2.5-NVFP4_config.json", "kimi-k2.5", "nvfp4"),
    ("moonshotai--Kimi-K2.5_config.json", "kimi-k2.5", "int4"),
    ("nvidia--Qwen3.5-397B-A17B-NVFP4_config.json", "qwen3.5-397b-a17b", "nvfp4"),
])
def test_read_lists_equal_the_zoos_hand_written_ones(config: str, zoo: str, dtype: str) -> None:
    """ModelOpt globs (DeepSeek, GLM-5 with its indexer, Qwen3.5's linear attention and
    shared experts under ``model.language_model.``), compressed-tensors names under
    ``language_model.`` (Kimi NVFP4) and ``re:`` patterns (Kimi INT4: attention, shared
    experts and the one dense MLP)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelApproximationWarning)
        model = load_hf_config(CONFIGS / config)
    assert model.weight_dtype == dtype
    (read_dtype, read), = model.held_16bit
    by_hand = dict(get_model(zoo).held_16bit)[dtype]
    assert read_dtype == dtype and sorted(read) == sorted(by_hand)


def test_lists_that_name_only_16_bit_modules_hold_nothing() -> None:
    """Routers, norms and the output head (Qwen3-235B's FP8 and NVFP4 releases, MiniMax's
    FP8): 16-bit in every checkpoint already."""
    for config in ("Qwen--Qwen3-235B-A22B-FP8_config.json",
                   "nvidia--Qwen3-235B-A22B-NVFP4_config.json",
                   "MiniMaxAI--MiniMax-M2.5_config.json"):
        assert load_hf_config(CONFIGS / config).held_16bit == ()


def _llama(tmp_path: Path, quantization: dict[str, object]) -> Path:
    data = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "quantization_config": quantization}))
    return path


def _fp8(**lists: object) -> dict[str, object]:
    return {"quant_method": "fp8", "weight_block_size": [128, 128], **lists}


def test_a_weight_named_in_half_the_layers_or_more_is_held_and_the_split_is_noted(
        tmp_path: Path) -> None:
    """Llama-3.1-8B has 32 layers: q_proj named in 16 of them is held, k_proj in 15 is not,
    and the note names both counts."""
    ignore = [f"model.layers.{i}.self_attn.q_proj" for i in range(16)] + \
             [f"model.layers.{i}.self_attn.k_proj" for i in range(15)]
    with pytest.warns(ModelApproximationWarning, match="WK in 15 of 32 layers, WQ in 16 of 32"):
        model = load_hf_config(_llama(tmp_path, _fp8(ignore=ignore)))
    assert model.held_16bit == (("fp8", ("WQ",)),)


def test_each_spelling_of_an_entry(tmp_path: Path) -> None:
    """A dotted part of the name (Hugging Face ``modules_to_not_convert``), a glob that names
    a module's children (gpt-oss's ``model.layers.*.self_attn``), a ``re:`` pattern, and
    entries of modules the model does not price (multi-token prediction, vision)."""
    cases = [
        (_fp8(modules_to_not_convert=["mlp.down_proj"]), ("WD",)),
        (_fp8(modules_to_not_convert=["down_proj.weight"]), ("WD",)),
        (_fp8(modules_to_not_convert=["proj"]), ()),  # not a whole dotted part
        (_fp8(ignore=["model.layers.*.self_attn"]), ("WK", "WO", "WQ", "WV")),
        (_fp8(ignore=["re:.*mlp\\.(gate|up)_proj$"]), ("WG", "WU")),
        (_fp8(ignore=["re:^language_model\\.model\\.layers\\.\\d+\\.self_attn\\.o_proj$"]),
         ("WO",)),  # anchored to a vision-language checkpoint's prefix
        (_fp8(ignore=["re:("]), ()),  # does not compile: names nothing
        (_fp8(ignore=["mtp.layers.0*", "model.visual*", "lm_head"]), ()),
    ]
    for quantization, held in cases:
        model = load_hf_config(_llama(tmp_path, quantization))
        assert model.held_16bit == ((("fp8", held),) if held else ()), quantization


def test_a_16_bit_checkpoint_holds_nothing(tmp_path: Path) -> None:
    """A list beside weights that are not quantised (an unknown method: read as 16-bit)."""
    with pytest.warns(ModelApproximationWarning):
        model = load_hf_config(_llama(tmp_path, {"quant_method": "hqq",
                                                 "ignore": ["model.layers.*.self_attn"]}))
    assert model.weight_dtype == "bf16" and model.held_16bit == ()
