"""Turn a study's problem section into an objective for the generic search engine.

Study keys read here (everything else belongs to ``search``)::

    model: llama-3.1-70b
    workload: {kind: batch, batch: 16, input_tokens: 1024, output_tokens: 256}
    # or a request-length trace summarised into a workload:
    workload: {kind: serving, trace: ../data/measurements/traces/splitwise_conv.csv, batch: 64}
    gpu_cost_per_hour: {H100: 2.5, H200: 3.2}   # $/GPU-hour; else each GPU file's price_per_hour
    calibration: path/to/calibration.yaml                     # optional

Knobs a space may use: ``gpu, num_gpus, tp, pp, ep, dp, batch, input_tokens,
output_tokens, fusion`` (comma list) or ``fuse_<name>`` booleans, ``overlap_sms``,
``runtime``, ``freq_mhz`` or ``clock_fraction`` (of the GPU's boost clock; with
``decode_clock_fraction`` the decode phase runs at its own clock), ``dtype``, ``moe_skew``.
A configuration that cannot run comes back with its reason, never as an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from energylens.calibration.file import CalibrationFileError, load_calibration
from energylens.cost.constants import Calibration
from energylens.cost.moe import Routing
from energylens.deployment import FUSIONS, Deployment, Workload
from energylens.errors import ConfigError, ProblemError
from energylens.hardware import GPU, UnknownGPUError, load_gpu
from energylens.model.zoo import get_model
from energylens.predict import Prediction, predict
from energylens.runtime import DEFAULT_RUNTIME, get_runtime
from search.problem import Evaluation

WORKLOAD_KEYS = ("kind", "batch", "input_tokens", "output_tokens", "trace")




@dataclass(frozen=True, kw_only=True)
class DeploymentProblem:
    """Predict one deployment per configuration and report every metric."""

    model: str
    workload: Workload
    gpu_cost_per_hour: dict[str, float] = field(default_factory=dict)
    calibration: Calibration | None = None

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        """Metrics of one configuration, or the reason it cannot run."""
        try:
            gpu = load_gpu(str(params.get("gpu", "H100")))
            deployment = deployment_from_params(params=params, boost_mhz=gpu.boost_clock_mhz)
            workload = workload_from_params(params=params, base=self.workload)
            result = predict(model=self.model, gpu=gpu, deployment=deployment, workload=workload,
                             calibration=self.calibration)
            if "decode_clock_fraction" in params and workload.kind == "batch":
                decode_at = replace(deployment, freq_mhz=float(params["decode_clock_fraction"])
                                    * gpu.boost_clock_mhz)
                result = with_decode_from(
                    prefill_run=result, workload=workload,
                    decode_run=predict(model=self.model, gpu=gpu, deployment=decode_at,
                                       workload=workload, calibration=self.calibration))
        except (ConfigError, UnknownGPUError) as exc:
            return Evaluation(metrics={}, infeasible_reason=str(exc))
        return Evaluation(metrics=self._metrics(result, gpu),
                          infeasible_reason=result.infeasible_reason)

    def _metrics(self, result: Prediction, gpu: GPU) -> dict[str, float]:
        # $/GPU-hour: the study's price, else the GPU file's (``price_per_hour``, with source)
        price = self.gpu_cost_per_hour.get(gpu.name, gpu.price_per_hour)
        dollars_per_s = price * result.num_gpus / 3600.0
        return {
            "energy_per_output_token_j": result.energy_per_output_token_j,
            "energy_per_request_j": result.energy_per_request_j,
            "tpot_s": result.tpot_s,
            "ttft_s": result.ttft_s,
            "output_tokens_per_s": result.output_tokens_per_s,
            "num_gpus": float(result.num_gpus),
            "cost_per_million_tokens": dollars_per_s / result.output_tokens_per_s * 1e6,
            "avg_power_w": result.avg_power_w,
            "memory_per_gpu_gb": result.memory_per_gpu_gb,
            "prefill_energy_j": result.prefill.energy_j,
            "decode_energy_j": result.decode.energy_j,
        }


def with_decode_from(*, prefill_run: Prediction, decode_run: Prediction,
                     workload: Workload) -> Prediction:
    """Per-phase DVFS: prefill from one prediction, decode from another (same workload)."""
    energy = prefill_run.prefill.energy_j + decode_run.decode.energy_j
    wall = prefill_run.prefill.latency_s + decode_run.decode.latency_s
    tokens = workload.batch * workload.output_tokens
    return replace(prefill_run, decode=decode_run.decode, tpot_s=decode_run.tpot_s,
                   energy_per_output_token_j=energy / tokens,
                   energy_per_request_j=energy / workload.batch,
                   avg_power_w=energy / wall, output_tokens_per_s=tokens / wall)


def deployment_from_params(*, params: Mapping[str, Any], boost_mhz: float) -> Deployment:
    """A :class:`Deployment` from knob values (missing knobs take their defaults)."""
    runtime = str(params.get("runtime", DEFAULT_RUNTIME))
    fusion: frozenset[str] | None = None  # the runtime's defaults
    if "fusion" in params:
        text = str(params["fusion"])
        fusion = frozenset() if text in ("", "none") else frozenset(text.split(","))
    flags = {name: params[f"fuse_{name}"] for name in FUSIONS if f"fuse_{name}" in params}
    if flags:
        base = get_runtime(runtime).default_fusions if fusion is None else fusion
        fusion = frozenset(n for n in base if flags.get(n, True)) | {
            n for n, on in flags.items() if on}
    freq = params.get("freq_mhz")
    if freq is None and "clock_fraction" in params:
        freq = float(params["clock_fraction"]) * boost_mhz
    skew = float(params.get("moe_skew", 0.0))
    return Deployment(
        num_gpus=_int_or_none(params.get("num_gpus")),
        tp=int(params.get("tp", 1)), pp=int(params.get("pp", 1)), ep=int(params.get("ep", 1)),
        dp=_int_or_none(params.get("dp")),
        weight_dtype=params.get("dtype"),
        fusion=fusion,
        overlap_sms=int(params.get("overlap_sms", 0)),
        freq_mhz=None if freq is None else float(freq),
        routing=Routing(kind="zipf", skew=skew) if skew > 0 else Routing(),
        runtime=runtime,
    )


def workload_from_params(*, params: Mapping[str, Any], base: Workload) -> Workload:
    """The study's workload with any workload knobs of this configuration applied."""
    return Workload(kind=base.kind, batch=float(params.get("batch", base.batch)),
                    input_tokens=float(params.get("input_tokens", base.input_tokens)),
                    output_tokens=float(params.get("output_tokens", base.output_tokens)))


def _calibration(source: Path, name: str) -> Calibration:
    try:
        return load_calibration((source.parent / name).resolve())
    except CalibrationFileError as exc:
        raise ProblemError(f"{source}: calibration: {exc}") from None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def summarise_trace(path: Path) -> tuple[float, float]:
    """Mean prompt and output lengths of a request trace (``num_prefill_tokens``,
    ``num_decode_tokens`` columns, as in the Splitwise/Azure traces)."""
    try:
        frame = pd.read_csv(path, usecols=["num_prefill_tokens", "num_decode_tokens"])
    except FileNotFoundError:
        raise ProblemError(f"{path}: trace file not found") from None
    except ValueError as exc:
        raise ProblemError(f"{path}: {exc}") from None
    if frame.empty:
        raise ProblemError(f"{path}: trace has no requests")
    return float(frame["num_prefill_tokens"].mean()), float(frame["num_decode_tokens"].mean())


def problem_from_study(*, problem: Mapping[str, Any], source: Path) -> DeploymentProblem:
    """Build the objective from a study's problem keys; errors name the study file."""
    if "model" not in problem:
        raise ProblemError(f"{source}: model: required (a zoo name or HF id)")
    try:
        get_model(str(problem["model"]))
    except ValueError as exc:
        raise ProblemError(f"{source}: model: {exc}") from None
    spec = problem.get("workload", {})
    if not isinstance(spec, Mapping):
        raise ProblemError(f"{source}: workload: expected a mapping of {', '.join(WORKLOAD_KEYS)}")
    unknown = set(spec) - set(WORKLOAD_KEYS)
    if unknown:
        raise ProblemError(f"{source}: workload.{sorted(unknown)[0]}: unknown key; "
                           f"expected {', '.join(WORKLOAD_KEYS)}")
    values = {k: spec[k] for k in ("kind", "batch", "input_tokens", "output_tokens") if k in spec}
    if "trace" in spec:
        values["input_tokens"], values["output_tokens"] = summarise_trace(
            (source.parent / str(spec["trace"])).resolve())
    try:
        workload = Workload(**values)
    except (ConfigError, TypeError) as exc:
        raise ProblemError(f"{source}: workload: {exc}") from None
    costs = problem.get("gpu_cost_per_hour", {})
    if not isinstance(costs, Mapping):
        raise ProblemError(f"{source}: gpu_cost_per_hour: expected a mapping GPU -> $/hour")
    try:
        resolved = {load_gpu(str(name)).name: float(price) for name, price in costs.items()}
    except (UnknownGPUError, ValueError) as exc:
        raise ProblemError(f"{source}: gpu_cost_per_hour: {exc}") from None
    calibration = problem.get("calibration")
    return DeploymentProblem(
        model=str(problem["model"]), workload=workload, gpu_cost_per_hour=resolved,
        calibration=None if calibration is None else _calibration(source, str(calibration)),
    )
