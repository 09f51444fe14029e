"""``energylens models`` / ``models show`` / ``gpus show`` / ``runtimes``: what they list
matches the registries, filters keep only what they say, and the sizes are the hand-
computed ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from energylens.cli.catalog import footprint
from energylens.cli.main import main
from energylens.cost.work import DTYPE_BYTES
from energylens.hardware import list_gpus, load_gpu
from energylens.model import get_model, list_models, parameter_count
from energylens.model.hf import write_hf_config
from energylens.model.zoo import model_info


def _json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_models_lists_every_entry_and_alias(capsys) -> None:
    listed = _json(capsys, "models", "--json")
    assert [m["name"] for m in listed["models"]] == [m.name for m in list_models()]
    aliases = {a["name"] for a in listed["aliases"]}
    assert aliases == {a.name for m in list_models() for a in model_info(m.name).aliases}
    assert len(listed["models"]) >= 53
    for row in listed["models"]:
        total, active = parameter_count(get_model(row["name"]))
        assert (row["total_params"], row["active_params"]) == (total, active)


def test_models_text_says_which_entries_are_secondary(capsys) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    secondary = [m.name for m in list_models() if model_info(m.name).level == "secondary"]
    assert secondary and "secondary" in out
    assert all(name in out for name in secondary)


@pytest.mark.parametrize(("args", "keep"), [
    (["--family", "moe"], lambda m: m.family == "moe" and m.hybrid is None),
    (["--family", "dense"], lambda m: m.family == "dense" and m.hybrid is None),
    (["--family", "hybrid"], lambda m: m.hybrid is not None),
    (["--search", "QWEN2.5"], lambda m: "qwen2.5" in m.name),
    (["--search", "distill"], lambda m: m.name in {"llama-3.1-70b", "llama-3.1-8b",
                                                   "qwen2.5-32b", "qwen2.5-14b", "qwen2.5-7b"}),
    (["--family", "moe", "--search", "qwen3"], lambda m: m.family == "moe"
     and m.hybrid is None and m.name.startswith("qwen3")),  # not the hybrid Qwen3.5
])
def test_filters_keep_exactly_the_matching_models(capsys, args, keep) -> None:
    listed = _json(capsys, "models", "--json", *args)
    assert [m["name"] for m in listed["models"]] == [m.name for m in list_models() if keep(m)]


def test_models_show_sizes_by_hand(capsys) -> None:
    shown = _json(capsys, "models", "show", "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert shown["name"] == "llama-3.1-8b" and shown["verification"] == "real_config"
    assert shown["total_params"] == pytest.approx(8.03e9, rel=0.001)
    assert shown["active_params"] == shown["total_params"]
    # K and V of 8 heads of 128, 32 layers, 2 bytes
    assert shown["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    assert shown["state_bytes_per_sequence"] == 0
    bf16 = shown["weight_bytes"]["bf16"]
    assert bf16 == pytest.approx(2 * shown["total_params"], rel=0.001)  # norms are the rest
    head = 2 * 128256 * 4096  # untied embedding and LM head stay bf16 in every format
    for dtype, nbytes in shown["weight_bytes"].items():
        assert nbytes == pytest.approx((bf16 / 2 - head) * DTYPE_BYTES[dtype] + 2 * head)
    assert shown["sources"] and shown["aliases"]


def test_models_show_moe_active_and_mla_kv(capsys) -> None:
    shown = _json(capsys, "models", "show", "deepseek-ai/DeepSeek-R1", "--json")
    assert shown["name"] == "deepseek-v3" and shown["weight_dtype"] == "fp8"
    assert shown["active_params"] < shown["total_params"] / 10
    assert shown["kv_bytes_per_token"] == 61 * (512 + 64) * 2  # one latent per layer


def test_models_show_names_the_weights_a_checkpoint_keeps_16_bit(capsys) -> None:
    """DeepSeek-V3's NVFP4 release keeps MLA's q_a, q_b, kv_a and kv_b (o_proj is NVFP4);
    its NVFP4 weight bytes count them at 2 bytes: 61 layers of q_a 7168 x 1536, q_b 1536 x
    128 x 192, kv_a 7168 x 576, and kv_b as the absorbed form holds it, 128 heads of
    192 x 576 (keys) and 576 x 128 (values; rope dims included, docs/models.md), each
    (2 - 0.5625) bytes more."""
    shown = _json(capsys, "models", "show", "deepseek-v3", "--json")
    assert shown["held_16bit"] == {"nvfp4": ["WQA", "WQB", "WKVA", "WUK", "WUV"]}
    held = 61 * (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 128 * (192 * 576 + 576 * 128))
    plain = dataclasses.replace(get_model("deepseek-v3"), held_16bit=())
    assert shown["weight_bytes"]["nvfp4"] - footprint(plain)["weight_bytes"]["nvfp4"] == \
        pytest.approx(held * (DTYPE_BYTES["bf16"] - DTYPE_BYTES["nvfp4"]), rel=1e-9)
    assert main(["models", "show", "deepseek-v3"]) == 0
    assert "kept 16-bit in nvfp4" in capsys.readouterr().out


def test_models_show_a_config_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "Mixtral" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(write_hf_config(get_model("mixtral-8x7b"), model_type="mixtral")))
    shown = _json(capsys, "models", "show", str(path), "--json")
    assert shown["name"] == "Mixtral" and shown["verification"] == "local config.json"
    assert shown["model_type"] == "mixtral"  # was null: the file's type, as for zoo entries
    assert _json(capsys, "models", "show", str(path.parent), "--json")["model_type"] == "mixtral"
    zoo = _json(capsys, "models", "show", "mixtral-8x7b", "--json")
    for key in ("total_params", "active_params", "weight_bytes", "kv_bytes_per_token"):
        assert shown[key] == zoo[key]
    assert main(["models", "show", str(path)]) == 0
    assert "Mixtral" in capsys.readouterr().out


def test_models_show_text_names_the_precision_and_the_disagreements(capsys) -> None:
    assert main(["models", "show", "Qwen/Qwen2.5-7B-Instruct-AWQ"]) == 0
    out = capsys.readouterr().out
    assert "int4 weights" in out and "qwen2.5-7b" in out
    assert main(["models", "show", "glm-4.5-air"]) == 0
    assert "disagreement" in capsys.readouterr().out


def test_an_unknown_model_is_one_line_with_three_names(capsys) -> None:
    assert main(["models", "show", "llama-3.1-7b"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].count(",") >= 2 and "llama-3.1-8b" in err[0]


def test_the_gpu_list_says_whose_data_each_gpus_constants_come_from(capsys) -> None:
    """A GPU that borrows from a relative but has measurements of its own (B200: serving
    rows, kernel tables) has constants of its own; one without any data (B300) has none,
    only borrowed ones; the reference GPU (H100 SXM) has more of its own than it borrows."""
    listed = {g["name"]: g["constants"] for g in _json(capsys, "gpus", "--json")["gpus"]}
    assert listed["B200"]["own"] > 0 and listed["B200"]["borrowed"] > 0
    assert listed["B300"]["own"] == 0 and listed["B300"]["borrowed"] > 0
    assert listed["H100-SXM"]["own"] > listed["H100-SXM"]["borrowed"]
    assert main(["gpus"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "B300" in line)
    assert "0 own" in row and "borrowed (B200)" in row


def test_gpus_list_and_show_every_number_with_its_source(capsys) -> None:
    listed = _json(capsys, "gpus", "--json")
    assert [g["name"] for g in listed["gpus"]] == [g.name for g in list_gpus()]
    shown = _json(capsys, "gpus", "show", "h100", "--json")
    gpu = load_gpu("h100")
    assert set(shown["fields"]) == set(gpu.provenance)
    assert shown["fields"]["dense_flops_per_s.bf16"]["value"] == gpu.dense_flops_per_s["bf16"]
    assert shown["fields"]["intra_node.bandwidth_bytes_per_s"]["value"] == 450e9
    for field in shown["fields"].values():
        assert field["kind"] in {"datasheet", "measured", "assumed", "derived"} and field["source"]
    assert main(["gpus", "show", "B200"]) == 0
    out = capsys.readouterr().out
    assert "2,250 TFLOP/s" in out and "borrowed from H100-SXM" in out
    assert main(["gpus", "show", "X9000"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1



def test_runtimes_json_lists_every_profile_with_its_release(capsys) -> None:  # type: ignore[no-untyped-def]
    from energylens.runtime import get_runtime, runtime_names

    assert main(["runtimes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runtimes"]
    assert [r["name"] for r in rows] == list(runtime_names())
    trtllm = next(r for r in rows if r["name"] == "trtllm")
    assert trtllm["version"] == get_runtime("trtllm").version
    assert trtllm["prefill_scheduling"] == "mixed-whole"
    # when attention-DP ranks prefill: said only of engines that run attention DP
    by_name = {r["name"]: r["attention_dp_prompts"] for r in rows}
    assert (by_name["trtllm"], by_name["sglang"], by_name["llama.cpp"]) == (
        "balanced", "independent", None)


def test_an_engine_spelled_as_its_project_spells_it_is_accepted(capsys) -> None:  # type: ignore[no-untyped-def]
    """``--runtime tensorrt-llm`` is TensorRT-LLM, as the measurement CSV reads it."""
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime",
                 "TensorRT-LLM", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["configuration"]["runtime"] == "trtllm"


def test_deepspeed_fastgen_is_the_mii_profile(capsys) -> None:  # type: ignore[no-untyped-def]
    """FastGen is the engine DeepSpeed-MII serves with: a file naming it reads as MII."""
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime",
                 "DeepSpeed-FastGen", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["configuration"]["runtime"] == "deepspeed-mii"


@pytest.mark.parametrize(("spelling", "name"), [("TensorRT-LLM", "trtllm"), ("turbomind", "lmdeploy"),
                                                ("llama-server", "llama.cpp"), ("SGLang", "sglang"),
                                                ("TensorRT LLM", "trtllm"), ("vllm_v1", "vllm"),
                                                ("HF TGI", "tgi"), ("deepspeed habana",
                                                                    "deepspeed-habana"),
                                                ("vllm-openai", "vllm")])
def test_a_deployment_and_a_space_take_an_engine_by_its_other_spellings(spelling: str,
                                                                        name: str) -> None:
    """The Python API and a space's ``runtime`` knob read the spellings the CLI reads; the
    deployment keeps the registry name (what reports and the memo compare)."""
    from energylens.deployment import Deployment
    from energylens.study.objective import PARAMS

    assert Deployment(runtime=spelling).runtime == name
    assert PARAMS["runtime"](spelling) is None
    assert "a serving runtime" in (PARAMS["runtime"]("tensorrt") or "")


@pytest.mark.parametrize(("front_end", "said"), [("NIM", "TensorRT-LLM, vLLM or SGLang"),
                                                 ("dynamo", "workers' engine"),
                                                 ("Ollama", "--runtime llama.cpp")])
def test_a_server_that_runs_another_engine_says_which_to_give(front_end: str, said: str,
                                                              capsys) -> None:  # type: ignore[no-untyped-def]
    """NIM, Dynamo, Triton and Ollama serve through an engine the registry has: the CLI, the
    Python API and a space refuse them in one line naming what to give instead."""
    from energylens.deployment import Deployment
    from energylens.errors import UnknownRuntimeError
    from energylens.study.objective import PARAMS

    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--runtime", front_end])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "is not an engine of its own" in err and said in err and len(err.splitlines()) == 1
    with pytest.raises(UnknownRuntimeError, match=said):
        Deployment(runtime=front_end)
    assert said in (PARAMS["runtime"](front_end) or "")
