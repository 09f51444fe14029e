"""Runtime profiles beyond the conformance suite: what each engine refuses (and why), its
kernel-efficiency scales, and its launch command checked against the flags its facts file
documents (no engine installed)."""

from __future__ import annotations

import ast
import dataclasses
import shlex
from pathlib import Path

import pandas as pd
import pytest
import yaml

from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.cost.constants import runtime_key
from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.params import parameter_count
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime, runtime_names
from energylens.runtime.launch import PORT, launch_command
from energylens.study.objective import DeploymentProblem

DENSE, MOE, GPU = "llama-3.1-8b", "qwen3-30b-a3b", "H100"


@pytest.mark.parametrize(("runtime", "deployment", "reason"), [
    ("llama.cpp", Deployment(weight_dtype="fp8"), "cannot run fp8 weights"),
    ("deepspeed-mii", Deployment(weight_dtype="int4"), "cannot run int4 weights"),
    ("lmdeploy", Deployment(kv_dtype="fp8"), "no fp8 KV cache"),
    ("llama.cpp", Deployment(kv_dtype="fp8"), "no fp8 KV cache"),
    ("deepspeed-mii", Deployment(pp=2), "no pipeline parallelism"),
    ("lmdeploy", Deployment(pp=2), "no pipeline parallelism"),
    ("llama.cpp", Deployment(tp=2, pp=2), r"by layer \(pp\) or by row \(tp\), not both"),
])
def test_a_configuration_the_engine_lacks_is_refused_with_the_reason(
        runtime: str, deployment: Deployment, reason: str) -> None:
    deployment = dataclasses.replace(deployment, runtime=runtime)
    with pytest.raises(ConfigError, match=reason):
        predict(model=DENSE, gpu=GPU, deployment=deployment)
    assert predict(model=DENSE, gpu=GPU, deployment=Deployment(runtime="vllm", **{
        k: getattr(deployment, k) for k in ("tp", "pp", "weight_dtype", "kv_dtype")})).feasible


def test_an_engine_is_refused_on_a_gpu_vendor_it_does_not_run_on() -> None:
    for runtime in ("trtllm", "lmdeploy", "deepspeed-mii"):
        with pytest.raises(ConfigError, match="does not run on amd GPUs"):
            predict(model=DENSE, gpu="MI300X", deployment=Deployment(runtime=runtime))
    for runtime in ("vllm", "sglang", "llama.cpp"):
        assert predict(model=DENSE, gpu="MI300X", deployment=Deployment(runtime=runtime)).feasible


def test_autotp_splits_heads_that_tp_does_not_divide_in_whole_kv_groups() -> None:
    """Qwen2.5-7B (28 query heads in 4 KV groups of 7) on 8 Gaudi2 cards: DeepSpeed AutoTP
    gives ranks 0-3 one group each, so the slowest rank holds 7 query heads and 1 KV head,
    priced as the model padded to 8 groups (56 heads); engines that split heads evenly
    refuse the layout."""
    qwen = get_model("qwen2.5-7b")
    assert (qwen.num_heads, qwen.num_kv_heads) == (28, 4)
    padded = get_runtime("deepspeed-habana").sharded_model(model=qwen, attention_tp=8, ep=1)
    assert (padded.num_heads // 8, padded.num_kv_heads // 8) == (7, 1)
    assert padded.head_dim == qwen.head_dim and padded.hidden_size == qwen.hidden_size
    # tp 4 divides the groups: nothing to pad, and vLLM never pads
    assert get_runtime("deepspeed-habana").sharded_model(model=qwen, attention_tp=4, ep=1) is qwen
    assert get_runtime("vllm").sharded_model(model=qwen, attention_tp=8, ep=1) is qwen
    with pytest.raises(ConfigError, match="does not divide the 28 attention heads"):
        predict(model=qwen, gpu="H100", deployment=Deployment(tp=8))
    workload = Workload(kind="batch", batch=16, input_tokens=512, output_tokens=512)
    tp4, tp8 = (predict(model=qwen, gpu="Gaudi2", workload=workload,
                        deployment=Deployment(tp=tp, runtime="deepspeed-habana"))
                for tp in (4, 8))
    assert tp8.feasible
    # the slowest rank at tp 8 holds tp 4's attention and half its MLP and vocabulary
    mlp = qwen.num_layers * 3 * qwen.hidden_size * qwen.ffn_size * 2
    vocab = 2 * qwen.vocab_size * qwen.hidden_size * 2
    halved_gb = (mlp + vocab) / 8 / 1e9
    assert tp4.memory_per_gpu_gb - tp8.memory_per_gpu_gb == pytest.approx(halved_gb, rel=0.05)


def test_redundant_expert_slots_run_an_ep_degree_that_does_not_divide_the_experts() -> None:
    """DeepSeek-V3's 256 experts over 36 GPUs (GB200 wide EP): TensorRT-LLM's load balancer
    runs ceil(256 / 36) = 8 slots per rank (288 in all), the routed tokens spread over
    them; an engine without redundant slots refuses the layout."""
    model = get_model("deepseek-v3")
    assert model.moe is not None and model.moe.num_experts == 256
    trtllm = get_runtime("trtllm")
    slots = trtllm.sharded_model(model=model, attention_tp=1, ep=36)
    assert slots.moe is not None and slots.moe.num_experts == 288
    assert trtllm.sharded_model(model=model, attention_tp=1, ep=32) is model  # 8 per rank
    without = dataclasses.replace(trtllm, redundant_expert_slots=False)
    assert without.sharded_model(model=model, attention_tp=1, ep=36) is model
    wide = Deployment(attention_dp=36, ep=36, num_gpus=36, runtime="trtllm",
                      weight_dtype="nvfp4")
    work = Workload(kind="serving", batch=144, input_tokens=1024, output_tokens=1024)
    p36 = predict(model=model, gpu="GB200", deployment=wide, workload=work)
    p32 = predict(model=model, gpu="GB200", deployment=dataclasses.replace(
        wide, attention_dp=32, ep=32, num_gpus=32), workload=work)
    assert p36.feasible and p32.feasible
    # 8 experts per rank either way: the same expert weights on each GPU, attention alike
    assert p36.memory_per_gpu_gb == pytest.approx(p32.memory_per_gpu_gb, rel=0.02)
    notes = launch_command(model=model, deployment=wide, workload=work).notes
    assert any("288 expert slots (8 per rank)" in n for n in notes)
    assert not any("expert slots" in n for n in launch_command(
        model=model, deployment=dataclasses.replace(wide, attention_dp=32, ep=32, num_gpus=32),
        workload=work).notes)


def test_a_sambaflow_decode_step_is_its_weight_stream_with_no_kernel_or_collective_floor() -> None:
    """A dataflow pipeline launches no kernel and calls no collective: with its engine
    overheads at zero, Llama-3.1-8B's batch-1 decode step over 8 SN40L sockets is the time to
    stream each socket's share of the weights from HBM (2.0 TB/s at the borrowed H100
    efficiency), plus a little KV; on 8 H100s the per-kernel and all-reduce floors make the
    same step slower though H100's HBM is faster."""
    cal = default_calibration().with_runtime(
        runtime="sambaflow", gpu="SN40L", step_overhead_s=0.0, per_sequence_overhead_s=0.0,
        memory_efficiency_scale=1.0, kv_bandwidth_scale=1.0)
    work = Workload(kind="batch", batch=1, input_tokens=128, output_tokens=128)
    step_s = predict(model=DENSE, gpu="SN40L", workload=work, calibration=cal,
                     deployment=Deployment(tp=8, runtime="sambaflow")).tpot_s
    efficiency = cal.kernel("H100-SXM").memory_efficiency_max
    stream_s = parameter_count(get_model(DENSE))[0] * 2 / 8 / (2.0e12 * efficiency)
    assert stream_s < step_s < 1.08 * stream_s
    h100_s = predict(model=DENSE, gpu="H100", workload=work, calibration=cal,
                     deployment=Deployment(tp=8)).tpot_s
    assert h100_s > 2 * step_s * 2.0e12 / 3.35e12


@pytest.mark.parametrize("runtime", ["deepspeed-mii", "lmdeploy", "llama.cpp"])
def test_expert_parallelism_is_refused_by_engines_without_it(runtime: str) -> None:
    with pytest.raises(ConfigError, match="no expert parallelism"):
        predict(model=MOE, gpu=GPU, deployment=Deployment(runtime=runtime, ep=2, num_gpus=2))


def test_an_fp8_checkpoint_is_refused_by_engines_without_fp8() -> None:
    model = dataclasses.replace(get_model(DENSE), weight_dtype="fp8")
    for runtime in ("llama.cpp", "deepspeed-mii"):
        with pytest.raises(ConfigError, match="fp8 weights"):
            predict(model=model, gpu=GPU, deployment=Deployment(runtime=runtime))


def test_the_study_knob_makes_the_trial_infeasible_with_the_reason() -> None:
    problem = DeploymentProblem(model=get_model(DENSE), workload=Workload(batch=8))
    bad = problem.evaluate({"gpu": GPU, "runtime": "llama.cpp", "dtype": "fp8"})
    assert not bad.metrics and "llama.cpp" in (bad.infeasible_reason or "")
    assert "fp8" in (bad.infeasible_reason or "")
    good = problem.evaluate({"gpu": GPU, "runtime": "trtllm", "dtype": "fp8"})
    assert good.infeasible_reason is None and good.metrics["tpot_s"] > 0


# --- kernel-efficiency scales ------------------------------------------------------------

def test_unit_scales_leave_the_calibration_itself() -> None:
    """vLLM's predictions do not move: no scales, the very same calibration object."""
    cal = default_calibration()
    for name in runtime_names():
        if "nvidia" not in get_runtime(name).gpu_vendors:
            continue
        c = cal.runtime(runtime=name, gpu="H100-SXM")
        unit = (c.gemm_efficiency_scale, c.attention_efficiency_scale,
                c.memory_efficiency_scale, c.kv_bandwidth_scale,
                c.expert_bandwidth_scale or c.memory_efficiency_scale) == (1.0,) * 5
        if unit and runtime_key(runtime=name, gpu="H100-SXM") in cal.runtimes:
            assert get_runtime(name).calibration_for(calibration=cal, gpu="H100-SXM") is cal


def test_scales_multiply_the_efficiencies_and_move_the_phase_they_bound() -> None:
    cal = default_calibration().with_runtime(runtime="sglang", gpu="H100-SXM",
                                             gemm_efficiency_scale=0.5, memory_efficiency_scale=0.5)
    base = cal.kernel("H100-SXM")
    scaled = get_runtime("sglang").calibration_for(calibration=cal, gpu="H100-SXM")
    k = scaled.kernel("H100-SXM")
    assert k.gemm_efficiency_max == pytest.approx(base.gemm_efficiency_max * 0.5)
    assert k.memory_efficiency_max == pytest.approx(base.memory_efficiency_max * 0.5)
    assert k.attention_efficiency_max == base.attention_efficiency_max
    assert k.kv_bandwidth_efficiency == base.kv_bandwidth_efficiency
    work = Workload(batch=16, input_tokens=2048, output_tokens=64)
    slow = predict(model=DENSE, gpu=GPU, deployment=Deployment(runtime="sglang"), workload=work,
                   calibration=cal)
    ref = predict(model=DENSE, gpu=GPU, deployment=Deployment(runtime="sglang"), workload=work,
                  calibration=default_calibration())
    # compute-bound prefill and memory-bound decode both slow down, by at most 2x
    assert ref.prefill.latency_s < slow.prefill.latency_s <= 2.0 * ref.prefill.latency_s * 1.001
    assert ref.tpot_s < slow.tpot_s <= 2.0 * ref.tpot_s * 1.001


# --- launch commands ---------------------------------------------------------------------

DEPLOYMENTS = [Deployment(), Deployment(tp=4, num_gpus=4), Deployment(tp=2, num_gpus=8),
               Deployment(pp=2, num_gpus=2), Deployment(kv_dtype="fp8"),
               Deployment(weight_dtype="fp8", kv_dtype="bf16"), Deployment(weight_dtype="int4"),
               Deployment(weight_dtype="fp16")]
MOE_DEPLOYMENTS = [Deployment(tp=2, ep=2, num_gpus=4), Deployment(ep=4, num_gpus=8),
                   Deployment(attention_dp=4, ep=4, num_gpus=8),  # data-parallel attention
                   Deployment(tp=2, attention_dp=2, ep=2, num_gpus=4)]  # moe_tp = 2


LAUNCHED_WORK = Workload(batch=64, input_tokens=1000, output_tokens=200)
#: Runtimes that document a launch program (the others refuse every launch, with why).
LAUNCHED = tuple(r for r in runtime_names() if get_runtime(r).launch_program)


def _cases() -> list[tuple[str, str, Deployment]]:
    out = []
    for runtime in LAUNCHED:
        profile = get_runtime(runtime)
        for model, deployments in ((DENSE, DEPLOYMENTS), (MOE, MOE_DEPLOYMENTS)):
            for d in deployments:
                d = dataclasses.replace(d, runtime=runtime)
                try:  # a layout or precision the runtime, or its launcher, refuses
                    profile.check(deployment=d, model=get_model(model))
                    launch_command(model=get_model(model), deployment=d, workload=LAUNCHED_WORK)
                except ConfigError:
                    continue
                out.append((runtime, model, d))
    return out


CASES = _cases()


def _flags(argv: list[str], program: list[str]) -> tuple[list[str], list[str]]:
    """(flags, positionals) of a command line after its program words (``--flag value``
    pairs: a word after a flag is its value unless it is a flag itself)."""
    assert argv[:len(program)] == program
    flags, positionals, after_flag = [], [], False
    for word in argv[len(program):]:
        if word.startswith("-"):
            flags.append(word.split("=", 1)[0])
            after_flag = True
        elif after_flag:
            after_flag = False
        else:
            positionals.append(word)
    return flags, positionals


def test_every_runtime_has_launch_cases_or_refuses_every_launch_with_why() -> None:
    assert {runtime for runtime, _, _ in CASES} == set(LAUNCHED)
    assert set(runtime_names()) - set(LAUNCHED) == {"sambaflow"}
    deployment = Deployment(tp=8, runtime="sambaflow")
    with pytest.raises(ConfigError, match="SambaStudio endpoints") as refused:
        launch_command(model=get_model(DENSE), deployment=deployment,
                       workload=Workload(batch=8))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("runtime", "model", "deployment"), CASES,
                         ids=[f"{r}-{m}-{i}" for i, (r, m, _) in enumerate(CASES)])
def test_launch_command_uses_only_the_documented_flags(runtime: str, model: str,
                                                       deployment: Deployment) -> None:
    profile = get_runtime(runtime)
    command = launch_command(model=get_model(model), deployment=deployment,
                             workload=LAUNCHED_WORK)
    argv = shlex.split(command.line())
    assert list(command.argv) == argv  # the line quotes what it must
    if runtime == "deepspeed-mii":  # started from Python: keyword arguments of mii.serve
        assert argv[:2] == ["python", "-c"]
        calls = [n for n in ast.walk(ast.parse(argv[2])) if isinstance(n, ast.Call)]
        serve = next(c for c in calls if getattr(c.func, "attr", "") == "serve")
        used = [k.arg for k in serve.keywords]
        assert len(serve.args) == 1 and "tensor_parallel" in used
    else:
        used, positionals = _flags(argv, profile.launch_program.split())
        assert len(positionals) <= 1, positionals  # the model, where it is positional
    assert used and set(used) <= set(profile.launch_flags), set(used) - set(profile.launch_flags)
    assert len(used) == len(set(used))
    # the deployment reaches the command: every GPU is used, the batch is the seqs limit
    assert command.replicas * command.gpus_per_server == deployment.total_gpus
    seqs = -(-64 // deployment.replicas)
    if runtime in ("vllm", "trtllm"):  # their limit is per data-parallel attention rank
        seqs = -(-64 // (deployment.replicas * deployment.attention_dp))
    if runtime == "deepspeed-mii":
        assert "max_length=1200" in argv[2]
    else:  # the running-sequence limit is the batch each replica runs
        assert str(seqs) in argv
    script = command.script()
    assert script.startswith("#!/usr/bin/env bash")
    if runtime != "deepspeed-habana":  # a static-batch benchmark script, not a server
        assert str(PORT) in script


def test_launch_command_carries_the_parallel_layout() -> None:
    model = get_model(DENSE)
    argv = launch_command(model=model, deployment=Deployment(tp=4, pp=2, num_gpus=16),
                          workload=Workload(batch=64)).argv
    assert argv[:3] == ("vllm", "serve", model.hf_id)
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--tensor-parallel-size"] == "4" and pairs["--pipeline-parallel-size"] == "2"
    assert pairs["--data-parallel-size"] == "2" and pairs["--max-num-seqs"] == "32"
    trt = launch_command(model=model, deployment=Deployment(runtime="trtllm", kv_dtype="fp8"),
                         workload=Workload(batch=8))
    assert "--extra_llm_api_options" in trt.argv
    assert any("dtype: fp8" in text for _, text in trt.files)



def test_launch_command_raises_the_memory_share_the_prediction_raised() -> None:
    """On a GPU, a deployment whose weights the engine's default share cannot hold starts
    with the share raised to what the prediction priced (SGLang, DeepSeek-R1 FP8 over 4
    B200: the board less activations and reserve, 0.985), and says so; one that fits keeps
    the default (and without a GPU the command cannot know: the default)."""
    from energylens.hardware import load_gpu

    work = Workload(batch=1, input_tokens=512, output_tokens=128)
    tight = Deployment(tp=4, runtime="sglang")
    model = get_model("deepseek-r1")
    command = launch_command(model=model, deployment=tight, workload=work, gpu=load_gpu("B200"))
    share = float(command.argv[command.argv.index("--mem-fraction-static") + 1])
    assert get_runtime("sglang").memory_utilization < share < 1.0
    assert any("memory share" in note for note in command.notes)
    plain = launch_command(model=model, deployment=tight, workload=work)
    assert plain.argv[plain.argv.index("--mem-fraction-static") + 1] == "0.88"
    roomy = launch_command(model=get_model(DENSE), deployment=Deployment(), workload=work,
                           gpu=load_gpu("H100"))
    assert roomy.argv[roomy.argv.index("--gpu-memory-utilization") + 1] == "0.9"
    assert not any("memory share" in note for note in roomy.notes)

def test_launch_command_refuses_what_the_engine_cannot_run() -> None:
    with pytest.raises(ConfigError, match="fp8"):
        launch_command(model=get_model(DENSE), deployment=Deployment(runtime="llama.cpp",
                       weight_dtype="fp8"), workload=Workload())


# --- command line --------------------------------------------------------------------------

def test_predict_prints_the_launch_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", DENSE, "--gpu", GPU, "--tp", "2", "--num-gpus", "4",
                 "--batch", "16", "--runtime", "sglang", "--launch-command"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/usr/bin/env bash")
    line = next(x for x in out.splitlines() if x.startswith("python -m sglang.launch_server"))
    words = shlex.split(line)
    assert words[words.index("--tp-size") + 1] == "2" and words[words.index("--dp-size") + 1] == "2"
    assert words[words.index("--max-running-requests") + 1] == "8"
    assert main(["predict", "--model", DENSE, "--gpu", GPU, "--runtime", "llama.cpp",
                 "--dtype", "fp8", "--launch-command"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fp8" in err[0]


def test_study_report_writes_each_pareto_points_launch_command(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "knobs": {"runtime": {"type": "categorical", "values": ["vllm", "trtllm", "llama.cpp"],
                              "baseline": "vllm"},
                  "dtype": {"type": "categorical", "values": ["bf16", "fp8"], "baseline": "bf16"},
                  "batch": {"type": "ordinal", "values": [1, 16], "baseline": 1}},
        "fixed": {"gpu": GPU, "num_gpus": 1}}))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "runtime-test", "space": "space.yaml", "model": DENSE,
        "workload": {"kind": "batch", "input_tokens": 256, "output_tokens": 64},
        "objectives": ["minimize energy_per_output_token_j", "minimize tpot_s"],
        "engine": "grid", "results": "out"}))
    assert main(["study", "run", str(study)]) == 0
    out = tmp_path / "out"
    trials = pd.read_csv(out / "trials.csv")
    refused = trials[(trials.runtime == "llama.cpp") & (trials.dtype == "fp8")]
    assert len(refused) and refused.infeasible_reason.str.contains("cannot run fp8").all()
    front = pd.read_csv(out / "pareto.csv")
    assert "launch_command" in front.columns and len(front)
    scripts = sorted((out / "launch").glob("*.sh"))
    assert len(scripts) == len(front)
    for row in front.itertuples():
        program = get_runtime(str(row.runtime)).launch_program.split()
        assert shlex.split(str(row.launch_command))[:len(program)] == program
        script = (out / "launch" / f"trial-{row.number}.sh").read_text()
        assert str(row.launch_command) in script
    assert main(["study", "report", str(study)]) == 0  # rewriting keeps one script per point
    assert len(list((out / "launch").glob("*.sh"))) == len(pd.read_csv(out / "pareto.csv"))


@pytest.mark.parametrize(("version", "charged"), [
    (None, True), ("0.11.1", True), ("0.16.9", True), ("0.17.0", False), ("0.19.0", False)])
def test_the_ep_layer_overhead_follows_the_release(version: str | None, charged: bool) -> None:
    """vLLM's fitted fixed time per expert-parallel MoE layer holds up to the profile's
    ``ep_layer_overhead_until`` and is gone from it on: the gap between the decode steps of
    an EP and a TP-only deployment of the same release shrinks by exactly that time x the
    MoE layers (every other release fact, such as async scheduling from 0.14, moves both)."""
    runtime = get_runtime("vllm")
    assert runtime.ep_layer_overhead_until == "0.17.0"
    cal = default_calibration()
    gpu = "H100-SXM"
    per_layer = cal.runtime(runtime="vllm", gpu=gpu).ep_moe_layer_overhead_s
    assert per_layer > 0
    layers = get_model(MOE).moe.num_moe_layers
    work = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=128)

    def tpot(ep: int, release: str | None) -> float:
        d = Deployment(num_gpus=2, tp=2 // ep, ep=ep, runtime="vllm", runtime_version=release)
        out = predict(model=MOE, gpu=gpu, deployment=d, workload=work)
        assert out.tpot_s is not None
        return out.tpot_s

    def ep_gap(release: str | None) -> float:
        return tpot(2, release) - tpot(1, release)

    assert ep_gap(None) - ep_gap(version) == pytest.approx(
        0.0 if charged else per_layer * layers, rel=1e-6, abs=1e-12)


#: (runtime, overlap_scheduler_since, the profile's release, a release before both)
_OVERLAP = {"trtllm": ("1.0.0", "1.0.0", "0.9.0"), "vllm": ("0.14.0", "0.11.0", "0.10.0")}


@pytest.mark.parametrize(("name", "version", "hidden"), [
    ("trtllm", "0", False), ("trtllm", "0.21.0", False), ("trtllm", "1.0.0", True),
    ("trtllm", "1.3.0rc5", True), ("trtllm", None, True),
    ("vllm", None, False), ("vllm", "0.11.1", False), ("vllm", "0.13.0", False),
    ("vllm", "0.14.0", True), ("vllm", "0.19.0", True)])
def test_the_step_overhead_hides_behind_the_overlap_scheduler(
        name: str, version: str | None, hidden: bool) -> None:
    """A runtime's step and per-sequence overheads (fitted on an earlier release:
    TensorRT-LLM's on the bench's pre-1.0 engines, vLLM's on ML.ENERGY's 0.11) are charged
    after the GPUs' step before its ``overlap_scheduler_since`` (TensorRT-LLM 1.0's overlap
    scheduler, vLLM 0.14's default async scheduling) and run beside it from then on, also
    for the release the profile describes (None): a batch-16 decode step, longer than the
    CPU's work, differs by exactly step + 16 x per-sequence overhead between a release
    before and the one asked."""
    since, profile, before = _OVERLAP[name]
    runtime = get_runtime(name)
    assert runtime.overlap_scheduler_since == since and runtime.version == profile
    cal = default_calibration()
    gpu = "H100-SXM"
    c = cal.runtime(runtime=name, gpu=gpu)
    assert c.step_overhead_s > 0 and c.per_sequence_overhead_s > 0
    work = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=128)

    def tpot(release: str | None) -> float:
        d = Deployment(num_gpus=1, runtime=name, runtime_version=release)
        out = predict(model="llama-3.1-8b", gpu=gpu, deployment=d, workload=work)
        assert out.tpot_s is not None
        return out.tpot_s

    charged = c.step_overhead_s + 16 * c.per_sequence_overhead_s
    assert tpot(before) - tpot(version) == pytest.approx(
        charged if hidden else 0.0, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("batch", [1, 64, 512])
def test_an_overlapped_step_lasts_the_longer_of_the_gpus_and_the_cpus_work(batch: int) -> None:
    """Under vLLM 0.19's async scheduling the CPU prepares step n + 1 while the GPUs run
    step n: a decode step lasts max(GPU step, CPU work), where vLLM 0.13 (no overlap, the
    same kernels) takes their sum. At 512 sequences of 128 + 1,024 tokens the CPU's work
    (0.67 ms + 512 x 39 us on H100) outlasts Llama-3.2-1B's step, so it sets the TPOT
    there: an overlapped engine is never charged less than its host's time."""
    c = default_calibration().runtime(runtime="vllm", gpu="H100-SXM")
    cpu = c.step_overhead_s + batch * c.per_sequence_overhead_s
    work = Workload(kind="serving", batch=batch, input_tokens=128, output_tokens=1024)

    def tpot(release: str) -> float:
        d = Deployment(num_gpus=1, runtime="vllm", runtime_version=release)
        out = predict(model="llama-3.2-1b", gpu="H100-SXM", deployment=d, workload=work)
        assert out.tpot_s is not None
        return out.tpot_s

    gpu = tpot("0.13.0") - cpu
    assert tpot("0.19.0") == pytest.approx(max(gpu, cpu), rel=1e-6)
    if batch == 512:
        assert cpu > gpu  # the host sets the step: the case the overlap must not hide


@pytest.mark.parametrize("pp", [1, 2])
def test_vllm_keeps_its_overheads_under_pipeline_parallelism(pp: int) -> None:
    """vLLM turns async scheduling off when pipeline_parallel_size > 1 (0.14-0.19 source):
    a two-stage deployment of 0.19 is charged the overheads as 0.13 is, a one-stage one is
    not (a dense BF16 model: no other fact differs between the two releases)."""
    assert get_runtime("vllm").overlap_scheduler_with_pp is False
    work = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=128)

    def tpot(release: str) -> float:
        d = Deployment(num_gpus=pp, pp=pp, runtime="vllm", runtime_version=release)
        out = predict(model="llama-3.1-8b", gpu="H100-SXM", deployment=d, workload=work)
        assert out.tpot_s is not None
        return out.tpot_s

    c = default_calibration().runtime(runtime="vllm", gpu="H100-SXM")
    hidden = 0.0 if pp > 1 else c.step_overhead_s + 16 * c.per_sequence_overhead_s
    assert tpot("0.13.0") - tpot("0.19.0") == pytest.approx(hidden, rel=1e-6, abs=1e-12)


def test_a_runtime_version_that_is_no_release_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a release number"):
        Deployment(runtime="vllm", runtime_version="latest")


@pytest.mark.parametrize(("model", "mha"), [
    ("llama-2-7b", True), ("llama-3.1-8b", False), ("deepseek-ai/DeepSeek-V3", False)])
def test_an_mha_models_kv_reads_take_the_engines_mha_scale(model: str, mha: bool) -> None:
    """A runtime whose decode kernel for one query head per KV head differs (TensorRT-LLM's
    masked MHA beside XQA) scales an MHA model's KV reads by ``mha_kv_bandwidth_scale``, a
    grouped-query or MLA model's (whose decode reads the latent) by ``kv_bandwidth_scale``;
    0 falls back to the latter."""
    from energylens.predict import calibration_for_gpu, step_context

    gpu = load_gpu("H100")
    base = calibration_for_gpu(default_calibration(), gpu)
    cal = base.with_runtime(runtime="trtllm", gpu=gpu.name, kv_bandwidth_scale=0.5,
                            mha_kv_bandwidth_scale=0.9)
    spec = get_model(model)
    ctx = step_context(model=spec, gpu=gpu, deployment=Deployment(tp=8, runtime="trtllm"),
                       calibration=cal)
    shipped = base.kernel(gpu.name).kv_bandwidth_efficiency
    assert ctx.constants.kv_bandwidth_efficiency == pytest.approx(shipped * (0.9 if mha else 0.5))
    unset = base.with_runtime(runtime="trtllm", gpu=gpu.name, kv_bandwidth_scale=0.5,
                              mha_kv_bandwidth_scale=0.0)
    fallback = step_context(model=spec, gpu=gpu, deployment=Deployment(tp=8, runtime="trtllm"),
                            calibration=unset)
    assert fallback.constants.kv_bandwidth_efficiency == pytest.approx(shipped * 0.5)


def test_a_runtime_the_calibration_lacks_takes_the_overheads_calibrate_would_write() -> None:
    """A runtime added after a calibration (no section of its own) predicts with the priors
    ``energylens calibrate`` writes for it, never with no overheads: TGI, its sections taken
    out, takes vLLM's overheads on the GPU (its ``prior_overheads_from``), as the shipped
    file records for it; LMDeploy's shipped section holds exactly what the same priors give."""
    cal = default_calibration()
    vllm = cal.runtime(runtime="vllm", gpu="H100-SXM")
    older = dataclasses.replace(cal, runtimes={k: v for k, v in cal.runtimes.items()
                                               if not k.startswith("tgi/")})
    assert older.runtime(runtime="tgi", gpu="H100-SXM").step_overhead_s == 0.0  # the hole
    got = get_runtime("tgi").with_priors(calibration=older, gpu="H100-SXM")
    tgi = got.runtime(runtime="tgi", gpu="H100-SXM")
    assert vllm.step_overhead_s > 0.0
    assert (tgi.step_overhead_s, tgi.per_sequence_overhead_s) == (
        vllm.step_overhead_s, vllm.per_sequence_overhead_s)
    shipped = cal.runtime(runtime="tgi", gpu="H100-SXM")  # what calibrate wrote for it
    assert shipped.step_overhead_s == pytest.approx(tgi.step_overhead_s, rel=1e-5)
    lmdeploy = get_runtime("lmdeploy")
    assert lmdeploy.with_priors(calibration=cal, gpu="H100-SXM") is cal  # has its section
    priors = lmdeploy.prior_overheads(gpu="H100-SXM", runtimes=dict(cal.runtimes))
    shipped = cal.runtime(runtime="lmdeploy", gpu="H100-SXM")
    for name, (value, _) in priors.items():
        assert getattr(shipped, name) == pytest.approx(value, rel=1e-5), name
