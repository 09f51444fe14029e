"""A model's context length (``ModelConfig.max_context_tokens``, the checkpoint's
``max_position_embeddings``): the zoo's values, the config.json reader and writer, and a
request longer than it coming back infeasible in ``predict`` and ``predict_many`` alike."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from energylens.deployment import Deployment
from energylens.errors import ModelConfigError, UnknownModelError
from energylens.model.config import ModelConfig
from energylens.model.context import context_shortfall
from energylens.model.hf import load_hf_config, write_hf_config
from energylens.model.zoo import get_model, list_models, model_info, parse_models_yaml
from energylens.predict import predict, predict_many
from energylens.workloads import Prediction, Workload

REAL = Path(__file__).parent / "data" / "hf_configs"
PACKAGED = Path(__file__).parent.parent / "energylens" / "data" / "models.yaml"

#: Llama-3.1-8B's config.json says max_position_embeddings 131072 (read by hand in
#: tests/data/hf_configs/meta-llama--Meta-Llama-3.1-8B_config.json, a verbatim copy).
LLAMA_CONTEXT = 131_072
TOO_LONG = "prompt + output 200,128 tokens exceed llama-3.1-8b's context of 131,072 " \
           "(max_position_embeddings)"


def _predict(model: str | ModelConfig = "llama-3.1-8b", **workload: Any) -> Prediction:
    return predict(model=model, gpu="h100", workload=Workload(**workload))


def test_llama_3_1_8b_has_its_config_context() -> None:
    model = get_model("llama-3.1-8b")
    assert model.max_context_tokens == LLAMA_CONTEXT
    raw = json.loads((REAL / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    assert raw["max_position_embeddings"] == LLAMA_CONTEXT
    # the value says where it was read
    assert any(s.startswith("max_context_tokens:") and "131072" in s
               for s in model_info("llama-3.1-8b").sources)


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_a_request_longer_than_the_context_is_infeasible(kind: str) -> None:
    result = _predict(kind=kind, batch=1, input_tokens=200_000, output_tokens=128)
    assert not result.feasible
    assert result.infeasible_reason == TOO_LONG


def test_a_load_of_too_long_requests_is_infeasible_colocated_or_disaggregated() -> None:
    from energylens.workloads.load.disagg import Pool, predict_disaggregated

    load = Workload(kind="load", request_rate=1.0, num_requests=20, input_tokens=200_000,
                    output_tokens=128)
    colocated = predict(model="llama-3.1-8b", gpu="h100", workload=load)
    assert not colocated.feasible and colocated.infeasible_reason == TOO_LONG
    pools = {p: Pool(gpu="H100", deployment=Deployment()) for p in ("prefill", "decode")}
    split = predict_disaggregated(model="llama-3.1-8b", workload=load, **pools)
    assert not split.feasible and split.infeasible_reason == TOO_LONG
    fits = predict(model="llama-3.1-8b", gpu="h100",
                   workload=dataclasses.replace(load, input_tokens=2_000))
    assert fits.feasible


def test_a_request_exactly_at_the_context_runs() -> None:
    at_limit = _predict(input_tokens=LLAMA_CONTEXT - 128, output_tokens=128)
    assert at_limit.feasible and at_limit.infeasible_reason is None
    over = _predict(input_tokens=LLAMA_CONTEXT - 127, output_tokens=128)
    assert not over.feasible
    assert over.infeasible_reason == ("prompt + output 131,073 tokens exceed llama-3.1-8b's "
                                      "context of 131,072 (max_position_embeddings)")


def test_the_context_reason_comes_before_a_memory_shortfall() -> None:
    """Llama-3.1-70B on one H100 does not fit at all; a too-long request says so first."""
    short = predict(model="llama-3.1-70b", gpu="h100", workload=Workload(input_tokens=512))
    assert not short.feasible and "context" not in str(short.infeasible_reason)
    long = predict(model="llama-3.1-70b", gpu="h100", workload=Workload(input_tokens=200_000))
    assert long.infeasible_reason is not None
    assert long.infeasible_reason.startswith("prompt + output 200,128 tokens exceed llama-3.1-70b")


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_predict_many_gives_the_same_feasibility_per_row(kind: str) -> None:
    table = pd.DataFrame({"gpu": ["h100", "h100", "a100", "h200", "h100"],
                          "tp": [1, 2, 1, 4, 3], "batch": [1.0, 8.0, 4.0, 16.0, 1.0]})
    for input_tokens, infeasible in ((200_000, True), (LLAMA_CONTEXT - 128, False)):
        workload = Workload(kind=kind, input_tokens=input_tokens, output_tokens=128)
        many = predict_many(model="llama-3.1-8b", workload=workload, table=table)
        for (_, row), (_, got) in zip(table.iterrows(), many.iterrows(), strict=True):
            if row["tp"] == 3:  # 32 heads do not split 3 ways: refused before any pricing
                assert not got["feasible"] and "context" not in got["infeasible_reason"]
                continue
            one = predict(model="llama-3.1-8b", gpu=row["gpu"], deployment=Deployment(
                tp=int(row["tp"])), workload=dataclasses.replace(workload, batch=float(row["batch"])))
            assert bool(got["feasible"]) == one.feasible
            assert got["infeasible_reason"] == one.infeasible_reason
            if infeasible:
                assert got["infeasible_reason"] == TOO_LONG
            else:
                assert got["infeasible_reason"] is None or "context" not in got["infeasible_reason"]


def test_a_model_of_unknown_context_is_not_checked() -> None:
    unknown = dataclasses.replace(get_model("llama-3.1-8b"), max_context_tokens=None)
    result = _predict(model=unknown, input_tokens=200_000, output_tokens=128)
    assert result.feasible and result.infeasible_reason is None
    phi2 = get_model("phi-2")  # no file recording its max_position_embeddings was read
    assert phi2.max_context_tokens is None
    assert context_shortfall(model=phi2, input_tokens=10**9, output_tokens=1) is None


def test_a_checkpoint_has_its_own_context() -> None:
    """The base Scout's config says 262144, the Instruct release's 10485760; a re-release
    that only resolves to an entry (Qwen3-4B-Instruct-2507: 262144 in its config, the entry's
    Qwen3-4B: 40960) has an unknown context rather than the entry's; Meta's old repo name
    is the same repository."""
    assert get_model("llama-4-scout-17b-16e").max_context_tokens == 262_144
    assert get_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").max_context_tokens == 10_485_760
    assert get_model("llama-4-scout-17b-16e-instruct").max_context_tokens == 10_485_760
    assert get_model("qwen3-4b").max_context_tokens == 40_960
    assert get_model("Qwen/Qwen3-4B-Instruct-2507").max_context_tokens is None
    assert get_model("meta-llama/Meta-Llama-3.1-8B-Instruct").max_context_tokens == LLAMA_CONTEXT
    assert get_model("deepseek-ai/DeepSeek-R1-Distill-Llama-8B").max_context_tokens is None


def _real_configs() -> list[Path]:
    return sorted(p for p in REAL.glob("*_config.json")
                  if not p.name.endswith("_hf_quant_config.json"))


def test_real_configs_agree_with_the_zoo_where_it_knows_the_checkpoint() -> None:
    checked = set()
    for path in _real_configs():
        stem = path.name.removesuffix("_config.json")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load_hf_config(path)
        try:
            zoo = get_model(stem.replace("--", "/", 1)).max_context_tokens
        except UnknownModelError:
            continue
        if zoo is not None:
            assert loaded.max_context_tokens == zoo, stem
            checked.add(stem)
    assert {"meta-llama--Meta-Llama-3.1-8B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
            "Qwen--Qwen3-235B-A22B-FP8", "zai-org--GLM-5-FP8", "deepseek-ai--DeepSeek-R1",
            "moonshotai--Kimi-K2.5", "Qwen--Qwen3.5-397B-A17B"} <= checked
    assert len(checked) >= 20


def test_config_json_round_trip(tmp_path: Path) -> None:
    fields = write_hf_config(get_model("llama-3.1-8b"), model_type="llama")
    assert fields["max_position_embeddings"] == LLAMA_CONTEXT
    path = tmp_path / "Llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(fields))
    assert load_hf_config(path).max_context_tokens == LLAMA_CONTEXT
    # a vision-language checkpoint keeps it in text_config
    maverick = get_model("llama-4-maverick-17b-128e")
    written = write_hf_config(maverick, model_type="llama4")
    assert written["text_config"]["max_position_embeddings"] == 1_048_576
    assert "max_position_embeddings" not in written
    path.write_text(json.dumps(written))
    assert load_hf_config(path).max_context_tokens == 1_048_576
    # unknown stays unknown: nothing written, nothing read
    unknown = write_hf_config(dataclasses.replace(get_model("llama-3.1-8b"),
                                                  max_context_tokens=None), model_type="llama")
    assert "max_position_embeddings" not in unknown
    path.write_text(json.dumps(unknown))
    assert load_hf_config(path).max_context_tokens is None


def test_a_malformed_context_in_a_config_is_one_line(tmp_path: Path) -> None:
    fields = write_hf_config(get_model("llama-3.1-8b"), model_type="llama")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**fields, "max_position_embeddings": "long"}))
    with pytest.raises(ModelConfigError, match="max_position_embeddings"):
        load_hf_config(path)


def _entry_yaml(**changes: object) -> str:
    entry = yaml.safe_load(PACKAGED.read_text())["llama-3.1-8b"]
    entry.update(changes)
    return yaml.safe_dump({"llama-3.1-8b": entry})


def test_models_yaml_needs_a_source_for_a_context() -> None:
    assert parse_models_yaml(_entry_yaml()).models["llama-3.1-8b"].max_context_tokens \
        == LLAMA_CONTEXT
    entry = yaml.safe_load(PACKAGED.read_text())["llama-3.1-8b"]
    sources = [s for s in entry["source"] if not s.startswith("max_context_tokens:")]
    with pytest.raises(ModelConfigError, match="max_context_tokens needs a source line"):
        parse_models_yaml(_entry_yaml(source=sources))
    for bad in (0, "131072", True, 1.5):
        with pytest.raises(ModelConfigError, match="max_context_tokens"):
            parse_models_yaml(_entry_yaml(max_context_tokens=bad))


def test_every_zoo_context_has_a_source_and_a_plausible_size() -> None:
    known = [m for m in list_models() if m.max_context_tokens is not None]
    assert len(known) == 56
    for model in known:
        assert 2048 <= model.max_context_tokens <= 10_485_760, model.name
        lines = [s for s in model_info(model.name).sources if s.startswith("max_context_tokens:")]
        assert len(lines) == 1 and f"{model.max_context_tokens}" in lines[0], model.name
