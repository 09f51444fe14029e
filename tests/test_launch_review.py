"""Launch commands as a review found them wrong: each test names the flags (or the script's
behaviour) a deployment's command must carry, not a whole string."""

from __future__ import annotations

import math
import os
import stat
import subprocess
from pathlib import Path

import pytest

from energylens.cost.memory import engine_share
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime
from energylens.runtime.launch import (
    LaunchCommand,
    launch_command,
    launch_spec,
    mtp_family,
    start_up_memory,
)
from energylens.workloads import Workload

WORK = Workload(kind="batch", batch=8, input_tokens=512, output_tokens=128)


def _value(argv: tuple[str, ...], flag: str) -> str:
    assert flag in argv, (flag, argv)
    return argv[argv.index(flag) + 1]


def _command(model: str, deployment: Deployment, workload: Workload = WORK,
             gpu: str | None = "H100") -> LaunchCommand:
    return launch_command(model=get_model(model), deployment=deployment, workload=workload,
                          gpu=None if gpu is None else load_gpu(gpu))


# --- 1. vLLM: replicas of an MoE model are servers, not data-parallel ranks ------------------

@pytest.mark.parametrize(("deployment", "tp", "ep"), [
    (Deployment(tp=2, num_gpus=4), "2", False),
    (Deployment(ep=8, num_gpus=16), "8", True)])
def test_moe_replicas_are_one_vllm_server_each(deployment: Deployment, tp: str,
                                               ep: bool) -> None:
    """vLLM runs an MoE model's DP ranks in lockstep with experts over DP x TP: two
    independent replicas are two servers of a replica's GPUs each."""
    command = _command("mixtral-8x7b", deployment)
    assert "--data-parallel-size" not in command.argv
    assert _value(command.argv, "--tensor-parallel-size") == tp
    assert ("--enable-expert-parallel" in command.argv) == ep
    assert (command.replicas, command.gpus_per_server) == (2, deployment.gpus_per_replica)


def test_dense_replicas_on_one_host_stay_one_data_parallel_server() -> None:
    command = _command("llama-3.1-8b", Deployment(tp=2, num_gpus=8))
    assert _value(command.argv, "--data-parallel-size") == "4"
    assert (command.replicas, command.gpus_per_server) == (1, 8)
    # over two hosts: one server per replica, placed per host
    wide = _command("llama-3.1-8b", Deployment(tp=4, num_gpus=16))
    assert "--data-parallel-size" not in wide.argv and wide.replicas == 4


# --- 2. vLLM: a raised memory share is one the engine starts with ----------------------------

def test_a_raised_vllm_share_is_the_most_that_starts() -> None:
    """Qwen2.5-72B over 2 H100: the default 0.9 cannot hold the weights; 1 never starts
    (vLLM needs share x total free at start-up), so the board less 1.5 GiB held by the
    CUDA context, the driver and NCCL, rounded down to a thousandth."""
    gpu = load_gpu("H100")
    command = _command("qwen2.5-72b", Deployment(tp=2))
    share = float(_value(command.argv, "--gpu-memory-utilization"))
    assert share == math.floor((1 - 1.5 * 2**30 / gpu.hbm_capacity_bytes) * 1000) / 1000
    assert 0.9 < share < 1.0 and share == 0.981
    assert any("the most it starts with" in note for note in command.notes)
    use = start_up_memory(model=get_model("qwen2.5-72b"), deployment=Deployment(tp=2), gpu=gpu)
    # priced as the share the command writes, not the whole board (~1.5 GiB less)
    assert float(use.usable_bytes) == pytest.approx(share * use.capacity_bytes, rel=1e-12)
    assert engine_share(runtime=get_runtime("vllm"), use=use) == share
    roomy = _command("llama-3.1-8b", Deployment())
    assert _value(roomy.argv, "--gpu-memory-utilization") == "0.9"
    too_big = _command("llama-3.1-70b", Deployment()).notes  # 141 GB of weights on 80 GB
    assert any(note.endswith("the engine will not start") for note in too_big)
    assert not any("will not start" in note for note in command.notes)


# --- 3. the start-up memory builds the model as the prediction shards it ---------------------

@pytest.mark.parametrize(("model", "gpu", "deployment"), [
    ("qwen2.5-7b", "gaudi2", Deployment(tp=8, runtime="deepspeed-habana")),  # 7 groups / 8
    ("qwen3-235b-a22b", "H100", Deployment(attention_dp=6, ep=6, runtime="trtllm")),
    ("deepseek-v3", "H200", Deployment(attention_dp=12, ep=12, runtime="sglang"))])
def test_every_layout_predict_accepts_has_a_command(model: str, gpu: str,
                                                    deployment: Deployment) -> None:
    """Padded KV groups (DeepSpeed AutoTP) and redundant expert slots: built sharded."""
    command = _command(model, deployment, gpu=gpu)
    assert command.argv[:len(get_runtime(deployment.runtime).launch_program.split())]


# --- 4. TensorRT-LLM: the token budget and chunked prefill -----------------------------------

def test_trtllm_writes_the_priced_token_budget_and_chunks_longer_prompts() -> None:
    chunked = _command("llama-3.1-8b", Deployment(runtime="trtllm", prefill_chunk_tokens=4096),
                       Workload(kind="batch", batch=1, input_tokens=16000, output_tokens=128))
    assert _value(chunked.argv, "--max_num_tokens") == "4096"
    options = dict(chunked.files)["extra_llm_api_options.yaml"]
    assert "enable_chunked_prefill: true" in options
    assert not any("not written above" in note for note in chunked.notes)
    short = _command("llama-3.1-8b", Deployment(runtime="trtllm"))
    assert _value(short.argv, "--max_num_tokens") == "8192"
    assert not any("chunked" in text for _, text in short.files)


# --- 5. llama.cpp: the slots the prediction ran, the chunk it priced -------------------------

def test_llama_cpp_slots_are_the_running_cap_the_prediction_used() -> None:
    closed = _command("llama-3.1-8b", Deployment(runtime="llama.cpp"),
                      Workload(kind="load", concurrency=64, input_tokens=512, output_tokens=128))
    assert _value(closed.argv, "--parallel") == "64"
    assert int(_value(closed.argv, "--ctx-size")) == 64 * 640
    opened = _command("llama-3.1-8b", Deployment(runtime="llama.cpp"),
                      Workload(kind="load", request_rate=4.0, input_tokens=512,
                               output_tokens=128))
    slots = int(_value(opened.argv, "--parallel"))
    spec = launch_spec(model=get_model("llama-3.1-8b"), deployment=Deployment(
        runtime="llama.cpp"), workload=Workload(kind="load", request_rate=4.0), gpu=load_gpu("H100"))
    assert spec.server_running_cap is not None and spec.kv_pool_tokens is not None
    assert slots == min(spec.server_running_cap, spec.kv_pool_tokens // 640) > 1


def test_llama_cpp_ubatch_reaches_the_priced_chunk() -> None:
    """n_ubatch = min(n_batch, n_ubatch): both at the chunk, above the 512 default too."""
    for chunk, expected in ((None, "512"), (2048, "2048")):
        argv = _command("llama-3.1-8b", Deployment(runtime="llama.cpp",
                                                   prefill_chunk_tokens=chunk)).argv
        assert _value(argv, "--ubatch-size") == _value(argv, "--batch-size") == expected


# --- 6. vLLM: the deployment's token budget ---------------------------------------------------

def test_vllm_writes_the_deployments_token_budget() -> None:
    command = _command("llama-3.1-8b", Deployment(prefill_chunk_tokens=4096))
    assert _value(command.argv, "--max-num-batched-tokens") == "4096"
    assert not any("not written above" in note for note in command.notes)
    assert "--max-num-batched-tokens" not in _command("llama-3.1-8b", Deployment()).argv
    with pytest.raises(ConfigError, match="below --max-num-seqs") as refused:
        _command("llama-3.1-8b", Deployment(prefill_chunk_tokens=16, max_num_seqs=64))
    assert "\n" not in str(refused.value)


def test_an_engine_without_the_flag_in_its_command_gets_the_note_naming_it() -> None:
    notes = _command("llama-3.1-8b", Deployment(runtime="deepspeed-habana",
                                                prefill_chunk_tokens=1024), gpu="gaudi2").notes
    assert any("1024 prompt tokens per forward pass" in note for note in notes)


# --- 7. DeepSpeed on Gaudi: FP8 refused, the priced lengths ----------------------------------

def test_deepspeed_habana_refuses_fp8_and_runs_the_priced_lengths() -> None:
    for deployment in (Deployment(runtime="deepspeed-habana", weight_dtype="fp8"),
                       Deployment(runtime="deepspeed-habana", kv_dtype="fp8")):
        with pytest.raises(ConfigError, match="QUANT_CONFIG") as refused:
            _command("llama-3.1-8b", deployment, gpu="gaudi2")
        assert "\n" not in str(refused.value)
    argv = _command("llama-3.1-8b", Deployment(runtime="deepspeed-habana"),
                    Workload(kind="batch", batch=4, input_tokens=1000, output_tokens=200),
                    gpu="gaudi2").argv
    assert (_value(argv, "--max_input_tokens"), _value(argv, "--max_new_tokens")) == (
        "1000", "200")


# --- 8. the script: devices per vendor and host, servers over hosts --------------------------

def _run_script(command: LaunchCommand, tmp_path: Path, node: int | None) -> list[str]:
    """Run ``command``'s script with its program replaced by one that prints every
    device variable and its port; the lines it printed."""
    program = command.argv[0]
    fake = tmp_path / program
    fake.write_text("#!/usr/bin/env bash\n"
                    'echo "cuda=${CUDA_VISIBLE_DEVICES:-} hip=${HIP_VISIBLE_DEVICES:-} '
                    'habana=${HABANA_VISIBLE_MODULES:-} ze=${ZE_AFFINITY_MASK:-} $*"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    if node is not None:
        env["NODE"] = str(node)
    run = subprocess.run(["bash", "-c", command.script()], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)
    return sorted(run.stdout.splitlines())


def test_sixteen_gpus_run_on_two_hosts_of_eight(tmp_path: Path) -> None:
    """4 TensorRT-LLM servers of 4 H100: two per host, devices 0-3 and 4-7 on each."""
    command = _command("llama-3.1-8b", Deployment(tp=4, num_gpus=16, runtime="trtllm"))
    script = command.script()
    assert "NODE" in script and "2 nodes" in script
    for node, ports in ((0, ("8000", "8001")), (1, ("8002", "8003"))):
        lines = _run_script(command, tmp_path, node)
        assert [line.split()[0] for line in lines] == ["cuda=0,1,2,3", "cuda=4,5,6,7"]
        assert sorted(line.split()[-1] for line in lines) == list(ports)
    with pytest.raises(subprocess.CalledProcessError):  # NODE is required
        _run_script(command, tmp_path, None)


@pytest.mark.parametrize(("gpu", "runtime", "variable"), [
    ("gaudi2", "deepspeed-habana", "habana"), ("MI300X", "vllm", "hip"),
    ("Max-1550", "vllm", "ze"), ("H100", "trtllm", "cuda")])
def test_each_vendor_restricts_devices_with_its_own_variable(tmp_path: Path, gpu: str,
                                                             runtime: str,
                                                             variable: str) -> None:
    model = "mixtral-8x7b" if runtime == "vllm" else "llama-3.1-8b"  # MoE: vLLM servers
    tp = 2 if runtime == "vllm" else 1
    command = _command(model, Deployment(tp=tp, num_gpus=2 * tp, runtime=runtime), gpu=gpu)
    lines = _run_script(command, tmp_path, None)
    assert len(lines) == 2
    for line in lines:
        values = dict(word.split("=", 1) for word in line.split()[:4])
        assert values[variable] and all(v == "" for k, v in values.items() if k != variable)


@pytest.mark.parametrize(("runtime", "model", "deployment", "words"), [
    ("vllm", "llama-3.1-70b", Deployment(tp=16), ("Ray", "ray start --head")),
    ("sglang", "llama-3.1-405b", Deployment(tp=16, runtime="sglang"),
     ("--nnodes", "--node-rank", "--dist-init-addr")),
    ("trtllm", "llama-3.1-70b", Deployment(tp=16, runtime="trtllm"), ("mpirun",))])
def test_a_server_over_several_hosts_says_what_it_needs(runtime: str, model: str,
                                                       deployment: Deployment,
                                                       words: tuple[str, ...]) -> None:
    script = _command(model, deployment).script()
    spans = [line for line in script.splitlines() if "spans 2 nodes of 8 GPUs" in line]
    assert len(spans) == 1 and all(word in spans[0] for word in words), script


def test_gb200_hosts_hold_four_gpus() -> None:
    """The NVL72 domain is 72 GPUs but a compute tray (one OS) holds 4."""
    command = _command("llama-3.1-8b", Deployment(tp=2, num_gpus=8, runtime="trtllm"),
                       gpu="GB200")
    assert command.host_gpus == 4 and "NODE=0..1" in command.script()


# --- 9. vLLM: attention DP with each expert over every rank ----------------------------------

def test_vllm_runs_attention_dp_with_experts_split_over_every_rank() -> None:
    deployment = Deployment(attention_dp=4, num_gpus=4)  # ep = 1: moe_tp 4
    command = _command("qwen3-30b-a3b", deployment)
    assert _value(command.argv, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" not in command.argv
    assert predict(model="qwen3-30b-a3b", gpu="H100", deployment=deployment,
                   workload=WORK).feasible
    with pytest.raises(ConfigError, match="moe_tp = 2"):  # 1 < ep < tp x dp: refused
        _command("qwen3-30b-a3b", Deployment(attention_dp=4, ep=2, num_gpus=4))


# --- 10. speculative decoding needs the checkpoint's MTP module ------------------------------

def test_mtp_drafting_is_written_only_for_a_checkpoint_with_the_module() -> None:
    for runtime in ("vllm", "trtllm"):
        with pytest.raises(ConfigError, match="no multi-token-prediction") as refused:
            _command("llama-3.1-8b", Deployment(runtime=runtime, speculative_tokens=2))
        assert "\n" not in str(refused.value)
    command = _command("deepseek-r1", Deployment(tp=8, speculative_tokens=2), gpu="H200")
    assert '"method": "mtp"' in _value(command.argv, "--speculative-config")
    assert mtp_family("zai-org/GLM-4.5-Air") == "glm4_moe"
    assert mtp_family("deepseek-ai/DeepSeek-R1-Distill-Llama-8B") is None
