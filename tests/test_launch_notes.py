"""What a launch command cannot set is a comment in its script: a clock, SMs kept for
communication, fusions other than the engine's defaults (docs/runtimes.md, Launch commands)."""

from __future__ import annotations

import pytest

from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.runtime import get_runtime
from energylens.runtime.launch import launch_command
from energylens.workloads import Workload

MODEL = get_model("llama-3.1-8b")
WORKLOAD = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=64)


def _notes(deployment: Deployment, gpu: str | None = "H100") -> tuple[str, ...]:
    return launch_command(model=MODEL, deployment=deployment, workload=WORKLOAD,
                          gpu=None if gpu is None else load_gpu(gpu)).notes


def test_a_default_deployment_has_no_such_note() -> None:
    boost = load_gpu("H100").boost_clock_mhz
    for deployment in (Deployment(), Deployment(freq_mhz=boost), Deployment(
            fusion=get_runtime("vllm").fusions_at())):
        notes = _notes(deployment)
        assert not any(word in n for n in notes for word in ("nvidia-smi", "SMs", "fusions"))


@pytest.mark.parametrize("fraction", [0.5, 0.85])
def test_a_lower_clock_is_the_nvidia_smi_lock_to_run_first(fraction: float) -> None:
    gpu = load_gpu("H100")
    mhz = round(fraction * gpu.boost_clock_mhz)
    notes = _notes(Deployment(freq_mhz=fraction * gpu.boost_clock_mhz))
    assert [n for n in notes if f"sudo nvidia-smi -lgc {mhz},{mhz}" in n
            and f"{fraction:.2f} of H100-SXM" in n]
    script = launch_command(model=MODEL, deployment=Deployment(freq_mhz=mhz), workload=WORKLOAD,
                            gpu=gpu).script()
    assert f"# GPU clock {mhz} MHz" in script  # a comment: energylens never sets clocks
    assert not any(line.startswith("sudo") for line in script.splitlines())


def test_overlap_sms_and_fusions_off_the_defaults_are_named() -> None:
    default = get_runtime("vllm").fusions_at()
    off = sorted(default)[0]
    notes = _notes(Deployment(overlap_sms=16, fusion=(default - {off}) | {"epilogue_quant"}))
    assert [n for n in notes if n.startswith("16 SMs per GPU kept for communication")]
    fusion = [n for n in notes if "kernel fusions other than vllm's defaults" in n]
    assert len(fusion) == 1 and f"on: epilogue_quant; off: {off})" in fusion[0]


def test_a_decode_phase_clock_is_a_note_of_the_study_points_script() -> None:
    """A static batch decoding at 0.6 of the boost clock (decode_clock_fraction) and
    prefilling at 0.9: both locks are named, the decode one for after the prompts."""
    from energylens.study.launch_report import point_commands
    from energylens.study.objective import DeploymentProblem

    gpu = load_gpu("H100")
    problem = DeploymentProblem(model=MODEL, workload=Workload(kind="batch", batch=8))
    commands = point_commands(problem=problem, params={
        "gpu": "H100", "clock_fraction": 0.9, "decode_clock_fraction": 0.6})
    notes = commands[""].notes
    prefill, decode = (round(f * gpu.boost_clock_mhz) for f in (0.9, 0.6))
    assert [n for n in notes if n.startswith(f"GPU clock {prefill} MHz")]
    assert [n for n in notes if n.startswith(f"decode-phase clock {decode} MHz")
            and "once the batch's prompts are prefilled" in n]
