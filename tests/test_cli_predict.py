"""The predict CLI: JSON keys, infeasible configurations, and one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from energylens.cli import main

JSON_KEYS = {"feasible", "infeasible_reason", "memory_per_gpu_gb", "ttft_s", "tpot_s",
             "energy_per_output_token_j", "energy_per_request_j", "avg_power_w",
             "output_tokens_per_s", "prefill", "decode"}


def test_json_has_the_documented_keys_in_si_units(capsys):
    assert main(["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--batch", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out.keys() >= JSON_KEYS
    for phase in ("prefill", "decode"):
        assert set(out[phase]) >= {"latency_s", "energy_j", "breakdown_j"}
        assert set(out[phase]["breakdown_j"]) == {"compute", "memory", "communication", "static"}
        assert sum(out[phase]["breakdown_j"].values()) == pytest.approx(out[phase]["energy_j"])
    assert out["feasible"] is True and out["infeasible_reason"] is None
    # energy per output token ties to the two phases
    total = out["prefill"]["energy_j"] + out["decode"]["energy_j"]
    assert out["energy_per_output_token_j"] == pytest.approx(total / (8 * 128))


def test_infeasible_but_valid_config_reports_reason_and_exits_zero(capsys):
    assert main(["predict", "--model", "llama-3.1-405b", "--gpu", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] is False
    assert "GB" in out["infeasible_reason"]
    assert main(["predict", "--model", "llama-3.1-405b", "--gpu", "h100"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # rich wraps the line
    assert "feasible: false" in text
    # the figures are the whole batch's, the memory the least it needs
    assert "as if it fit" in text and "the least it needs, one sequence" in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "llama-3.1-7b", "--gpu", "h100"], "llama-3.1-8b"),  # closest name suggested
        (["--model", "llama-3.1-8b", "--gpu", "h1000"], "H100"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "0"], "positive"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--input-tokens", "-5"], "positive"),
        (["--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "3"],
         "does not divide the 64 attention heads"),
        (["--model", "qwen3-30b-a3b", "--gpu", "h100", "--ep", "2", "--runtime", "lmdeploy"],
         "no expert parallelism"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--ep", "2"], "dense model"),
        (["--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "8", "--num-gpus", "4"], "exceed num_gpus"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--freq-mhz", "5000"], "outside"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--fusion", "magic"], "unknown fusion"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment, capsys):
    code = main(["predict", *args]) if "--batch" not in args and "--input-tokens" not in args \
        and "--fusion" not in args else _argparse_exit(args)
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert fragment in lines[0]
    assert "Traceback" not in err


def _argparse_exit(args):
    with pytest.raises(SystemExit) as info:
        main(["predict", *args])
    return info.value.code


def test_console_script_never_prints_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "energylens.cli", "predict", "--model", "nope",
                           "--gpu", "h100"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_listing_commands_read_the_registries(capsys):
    from energylens.model import supported_model_types
    from energylens.runtime import runtime_names

    assert main(["runtimes"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in runtime_names())
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(kind in out for kind in supported_model_types())


def test_kv_dtype_flag_reaches_the_memory_model(capsys):
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--json"]
    assert main(args) == 0
    auto = json.loads(capsys.readouterr().out)
    assert main([*args, "--kv-dtype", "fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8["memory_per_gpu_gb"] < auto["memory_per_gpu_gb"]


@pytest.mark.parametrize(("extra", "fragment"), [
    (["--moe-skew", "nan"], "skew"),
    (["--moe-skew", "-1"], "skew"),
    (["--overlap-sms", "132"], "132 SMs"),
])
def test_bad_knob_values_are_refused_not_ignored(capsys, extra, fragment):
    code = main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "h100", *extra])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and err.count("\n") == 1


def _llama70b_tp4(workload: str, batch: int, *extra: str) -> list[str]:
    return ["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--workload",
            workload, "--batch", str(batch), "--input-tokens", "2048", "--output-tokens", "1024",
            *extra]


def _json_and_table(capsys, args: list[str]) -> tuple[float, str]:
    """The running batch of ``args --json`` and the table ``args`` prints."""
    assert main([*args, "--json"]) == 0
    running = json.loads(capsys.readouterr().out)["running_batch"]
    assert main(args) == 0
    return running, capsys.readouterr().out


def test_a_kv_capped_running_batch_is_said_with_the_json_numbers(capsys):
    """Llama-3.1-70B BF16 on 4 H100 (TP4): ~141 GB of weights leave room for far fewer than
    1,024 sequences of 2,048 + 1,024 tokens (about 180); the table says how many run, as
    the JSON does, and what holds more. An FP8 cache holds twice the tokens and is not
    suggested again."""
    running, out = _json_and_table(capsys, _llama70b_tp4("serving", 1024))
    assert 1 <= running < 1024
    assert f"KV cache full: {running:,.0f} of the 1,024 sequences per replica" in out
    assert "--kv-dtype fp8" in out
    running_fp8, out = _json_and_table(capsys, _llama70b_tp4("serving", 1024, "--kv-dtype", "fp8"))
    assert running_fp8 == pytest.approx(2 * running, rel=0.15)  # KV bytes halve
    assert "KV cache full" in out and "--kv-dtype fp8" not in out
    _, out = _json_and_table(capsys, _llama70b_tp4("serving", 8))
    assert "KV cache full" not in out


def test_a_static_batch_larger_than_the_kv_cache_is_said_to_run_in_waves(capsys):
    cap, out = _json_and_table(capsys, _llama70b_tp4("batch", 512))
    assert 1 <= cap < 512
    waves = -(-512 // int(cap))  # ceil
    assert (f"KV cache full: the 512 sequences per replica run in {waves} waves of at most "
            f"{cap:,.0f}") in out


def test_a_load_prediction_reports_its_window_per_kind_of_step_in_seconds(capsys):
    # Under load the two phases are sums over the run's measured window (steps that carry
    # prompts, decode-only steps): their wall time is printed in seconds, never as one
    # request's latency in ms.
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--workload", "load",
            "--request-rate", "4", "--num-requests", "200", "--input-tokens", "512",
            "--output-tokens", "64"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "per kind of step" in text
    for label, phase in (("with prompts", "prefill"), ("decode only", "decode")):
        row = next(line for line in text.splitlines() if label in line)
        assert f"{out[phase]['latency_s']:,.2f} s" in row
    # the window spans many requests: far longer than one request's end-to-end latency
    assert out["prefill"]["latency_s"] + out["decode"]["latency_s"] > 10 * out["e2e_mean_s"]


def test_weights_without_tensor_cores_of_their_format_are_noted(capsys):
    """An A100 has no FP8 units and a Hopper GPU no FP4 ones: the prediction says the GEMMs
    are priced in BF16; an H100 runs FP8 natively and gets no note."""
    for gpu, dtype, shown in (("a100", "fp8", "no FP8 tensor cores"),
                              ("h100", "nvfp4", "no FP4 tensor cores"), ("h100", "fp8", None)):
        assert main(["predict", "--model", "llama-3.1-8b", "--gpu", gpu, "--dtype", dtype]) == 0
        out = capsys.readouterr().out
        assert (shown in out) if shown else ("tensor cores" not in out)


def test_json_says_what_was_predicted_with_defaults_resolved(capsys):
    """An alias keeps the name asked beside the model found; the runtime's release, the
    checkpoint's precision and the layout are the ones the prediction used."""
    assert main(["predict", "--model", "deepseek-r1", "--gpu", "h200", "--tp", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    found = out["configuration"]
    assert found["model_requested"] == "deepseek-r1" and out["model"] == "deepseek-v3"
    from energylens.runtime.registry import get_runtime

    assert found["runtime"] == "vllm" and found["runtime_version"] == get_runtime("vllm").version
    assert found["weight_dtype"] == "fp8"  # the checkpoint's own
    assert (found["tp"], found["gpus_per_replica"], found["replicas"]) == (8, 8, 1)
    assert found["workload"]["kind"] == "batch"
