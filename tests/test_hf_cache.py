"""A repo id the zoo does not know is read from the local Hugging Face hub cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from energylens.cli import main
from energylens.errors import UnknownModelError
from energylens.model.hf.cache import cached_config, hub_cache_dir
from energylens.model.zoo import get_model

REPO = "example-org/Tiny-Llama-Test"


def _config(layers: int) -> dict[str, object]:
    """A small llama config.json (the shapes are the test's own, not a release's)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
            "intermediate_size": 4096, "num_hidden_layers": layers,
            "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
            "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False}


def _snapshot(cache: Path, revision: str, layers: int) -> Path:
    folder = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / revision
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_config(layers)), encoding="utf-8")
    return folder / "config.json"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def test_the_revision_refs_main_names_wins_over_a_newer_snapshot(cache: Path) -> None:
    pinned = _snapshot(cache, "aaa111", layers=4)
    newer = _snapshot(cache, "bbb222", layers=6)
    os.utime(newer, (time.time() + 60, time.time() + 60))
    assert cached_config(REPO) == newer  # no ref: the snapshot written last
    (cache / f"models--{REPO.replace('/', '--')}" / "refs").mkdir()
    (cache / f"models--{REPO.replace('/', '--')}" / "refs" / "main").write_text("aaa111\n")
    assert cached_config(REPO) == pinned


def test_an_unknown_repo_id_in_the_cache_is_read_as_its_config(cache: Path) -> None:
    _snapshot(cache, "aaa111", layers=4)
    model = get_model(REPO)
    assert (model.name, model.hf_id, model.num_layers) == ("tiny-llama-test", REPO, 4)
    assert (model.hidden_size, model.num_kv_heads, model.ffn_size) == (1024, 4, 4096)


def test_a_zoo_name_is_never_shadowed_and_an_absent_repo_stays_unknown(cache: Path) -> None:
    folder = cache / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "x"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_config(2)), encoding="utf-8")
    assert get_model("meta-llama/Llama-3.1-8B").num_layers == 32  # the zoo's entry
    with pytest.raises(UnknownModelError, match="Hugging Face cache"):
        get_model("example-org/Not-Downloaded")


def test_hf_home_and_xdg_name_the_cache_in_huggingface_hub_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.delenv("HF_HOME")
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_predict_runs_on_a_cached_repo(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _snapshot(cache, "aaa111", layers=4)
    assert main(["predict", "--model", REPO, "--gpu", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "tiny-llama-test" and out["tpot_s"] > 0


def test_predict_prints_its_table_for_a_cached_repo(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table path names the model the zoo selected where a name selects a zoo entry; a
    cached repo selects none and is still predicted (it was refused as an unknown model)."""
    _snapshot(cache, "aaa111", layers=4)
    assert main(["predict", "--model", REPO, "--gpu", "h100"]) == 0
    captured = capsys.readouterr()
    assert "tiny-llama-test on 1 x H100-SXM" in captured.out and "error" not in captured.err


def test_models_show_reads_a_cached_repo(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _snapshot(cache, "aaa111", layers=4)
    assert main(["models", "show", REPO, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["model_type"], shown["layers"], shown["sources"]) == ("llama", 4, [str(config)])
    assert main(["models", "show", REPO]) == 0
    assert "local Hugging Face cache" in capsys.readouterr().out
