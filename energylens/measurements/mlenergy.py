"""ML.ENERGY leaderboard rows -> steady-state ``serving`` predictions.

Each configuration is one vLLM 0.11 deployment serving a task at a measured mean number
of running sequences (``avg_batch_size``) and mean output length (``avg_output_len``).
Input lengths are not in the data; :data:`TASK_INPUT_TOKENS` holds the per-task values
used, with the reasoning. Layout assumptions:

- ``tensor_parallel = t, expert_parallel = 1``: TP over t GPUs.
- ``tensor_parallel = 1, expert_parallel = n, data_parallel = 1`` (MoE): vLLM's
  ``--enable-expert-parallel`` with TP size n, i.e. attention and dense layers are
  tensor-parallel over all n GPUs and the experts are split n ways (EP group = TP group).
  That is ``Deployment(tp=1, ep=n, num_gpus=n)`` here.
- ``data_parallel = expert_parallel = n`` (MoE): vLLM's ``--data-parallel-size n
  --enable-expert-parallel``: n attention ranks, each with its own batch share and KV
  cache, the experts split n ways over the same GPUs, tokens exchanged all-to-all. That
  is ``Deployment(tp=t, attention_dp=n, ep=n, num_gpus=n)`` here (t = 1 in the data).
  ``avg_batch_size`` is the running sequences of all n ranks together, not of one: the
  measured throughput is at most ``avg_batch_size / ITL`` (Qwen3-Coder-480B on 8 B200,
  sourcegraph-fim, ``max_num_seqs`` 8: 188 tokens/s at 25.8 ms ITL and 8 running,
  where 8 per rank would be 64 running and ~2,500 tokens/s).
- ``weight_precision``: ``bfloat16`` -> bf16, ``fp8`` -> fp8 (all linear layers),
  ``mxfp4`` -> MXFP4 routed experts with bf16 attention (gpt-oss checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError, UnknownGPUError, UnknownModelError
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import Prediction, predict

#: Mean prompt tokens per task (the data does not record them).
#:
#: - ``lm-arena-chat``: 473, read from the data: the median over the 9 transformer chat
#:   runs (6 models, H100 and B200) whose running batch stayed below its cap, i.e. was
#:   limited by the KV cache, of the prompt length at which the memory model holds the
#:   measured running batch (``energylens.measurements.mlenergy_lengths``; the runs give
#:   393-601: H100 median 473, B200 468). The same runs identify vLLM's memory reserve
#:   (``data/runtimes/vllm.yaml``: 4 GB, where the two GPUs' runs agree best).
#:   ``tests/test_mlenergy_lengths.py`` re-derives it. (It was 400, an assumption
#:   chosen with the validation errors in view.)
#: - ``gpqa``: a GPQA Diamond question with four options and an instruction, ~150-400
#:   tokens with the chat template; 256, assumed. The KV-limited runs do not identify it
#:   (209-1,189 from 3 runs: outputs of 1.7k-8k tokens dominate their contexts), and the
#:   sensitivity is small (7.8-9.4 % for 128-1024).
#: - ``sourcegraph-fim``: fill-in-the-middle code completion with long prefix+suffix
#:   context and short outputs (~250 tokens); 2048, assumed (B200 rows only; not tuned).
#:   One KV-limited run gives 1,550: one run does not identify a constant.
TASK_INPUT_TOKENS: dict[str, float] = {"lm-arena-chat": 473.0, "gpqa": 256.0,
                                       "sourcegraph-fim": 2048.0}
#: The serving runtime every ML.ENERGY row ran on (leaderboard v3: vLLM 0.11).
RUNTIME = "vllm"

#: Metric name in the data -> (Prediction attribute, factor to the data's unit).
METRICS: dict[str, tuple[str, float]] = {
    "energy_per_token_joules": ("energy_per_output_token_j", 1.0),
    "median_itl_ms": ("tpot_s", 1e3),
    "avg_power_watts": ("avg_power_w", 1.0),
    "output_throughput_tokens_per_sec": ("output_tokens_per_s", 1.0),
}
_PRECISION = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
              "fp8": "fp8", "mxfp4": "mxfp4"}


class UnsupportedRow(Exception):
    """A row the model cannot predict; the message is the reason reported."""


@dataclass(frozen=True, kw_only=True)
class ServingCase:
    """The predict() inputs for one row."""

    model: Any
    gpu: str
    deployment: Deployment
    workload: Workload


def serving_case(values: dict[str, Any], *, gpu: str | None = None,
                 input_tokens: dict[str, float] | None = None) -> ServingCase:
    """Build the prediction inputs of one ML.ENERGY row; raises UnsupportedRow."""
    model_id = str(values["model_id"])
    try:
        model = get_model(model_id)
    except UnknownModelError:
        raise UnsupportedRow(f"model {model_id} is not in the zoo") from None
    precision = str(values["weight_precision"]).lower()
    if precision not in _PRECISION:
        raise UnsupportedRow(f"weight precision {precision!r} is not modelled")
    model = replace(model, weight_dtype=_PRECISION[precision])
    try:
        gpu_name = load_gpu(gpu or str(values["gpu_model"])).name
    except UnknownGPUError as exc:
        raise UnsupportedRow(str(exc)) from None
    n, tp, ep, dp = (int(values[k]) for k in ("num_gpus", "tensor_parallel", "expert_parallel",
                                              "data_parallel"))
    try:
        if ep > 1 and dp > 1:  # data-parallel attention, experts over all n GPUs
            deployment = Deployment(num_gpus=n, tp=tp, ep=ep, attention_dp=dp, runtime=RUNTIME)
        else:
            deployment = Deployment(num_gpus=n, tp=tp, ep=ep, dp=dp, runtime=RUNTIME)
    except ConfigError as exc:
        raise UnsupportedRow(str(exc)) from None
    tasks = input_tokens or TASK_INPUT_TOKENS
    task = str(values["task"])
    if task not in tasks:
        raise UnsupportedRow(f"no input length known for task {task!r}")
    workload = Workload(kind="serving", batch=float(values["avg_batch_size"]),
                        input_tokens=tasks[task], output_tokens=float(values["avg_output_len"]))
    return ServingCase(model=model, gpu=gpu_name, deployment=deployment, workload=workload)


def predicted_metrics(prediction: Prediction) -> dict[str, float]:
    """The data's metrics from a prediction, in the data's units."""
    return {name: float(getattr(prediction, attr)) * factor
            for name, (attr, factor) in METRICS.items()}


def predict_row(values: dict[str, Any], *, gpu: str | None = None, calibration: Any = None,
                input_tokens: dict[str, float] | None = None) -> dict[str, float]:
    """Predicted metrics of one row; raises UnsupportedRow with the reason."""
    case = serving_case(values, gpu=gpu, input_tokens=input_tokens)
    try:
        result = predict(model=case.model, gpu=case.gpu, deployment=case.deployment,
                         workload=case.workload, calibration=calibration)
    except ConfigError as exc:
        raise UnsupportedRow(str(exc)) from None
    if not result.feasible:
        raise UnsupportedRow(f"infeasible: {result.infeasible_reason}")
    return predicted_metrics(result)
