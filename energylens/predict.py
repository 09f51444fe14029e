"""Predict latency and energy of a deployment under a workload: the facade.

Resolves the model, GPU, runtime and calibration, checks the deployment, sizes memory,
and hands the bound deployment to the workload kind's scheduler
(:mod:`energylens.workloads`), which prices the batches it forms with
:func:`energylens.cost.step.step_cost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import resolve_calibration
from energylens.cost.constants import Calibration
from energylens.cost.memory import MemoryUse, memory_use, startup_tokens
from energylens.cost.roofline import ClockState
from energylens.cost.step import StepContext
from energylens.cost.work import Size
from energylens.deployment import Deployment, check_deployment, sharded_model
from energylens.hardware import GPU, load_gpu
from energylens.model.config import ModelConfig
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.runtime import get_runtime
from energylens.workloads import Placement, Workload, WorkloadKind, get_kind
from energylens.workloads.result import PhaseResult, Prediction

if TYPE_CHECKING:  # pandas is loaded by predict_many only (a fresh `predict` stays light)
    import pandas as pd

__all__ = ["PhaseResult", "Prediction", "calibration_for_gpu", "checked_context", "place",
           "predict", "predict_many", "step_context"]


def predict(*, model: str | ModelConfig, gpu: str | GPU, deployment: Deployment | None = None,
            workload: Workload | None = None,
            calibration: Calibration | str | Path | None = None) -> Prediction:
    """Predict one deployment. Raises an :class:`energylens.errors.EnergyLensError` for
    impossible configurations and unknown names; a valid configuration that does not fit
    in memory comes back with ``feasible=False`` and the reason."""
    deployment = deployment or Deployment()
    workload = workload or Workload()
    model_cfg, ctx = checked_context(model=model, gpu=gpu, deployment=deployment,
                                     calibration=calibration)
    kind = get_kind(workload.kind)
    placement, memory = place(ctx=ctx, model=model_cfg, kind=kind, workload=workload,
                              batch=workload.batch, replicas=deployment.replicas,
                              gpus=deployment.total_gpus, max_num_seqs=deployment.max_num_seqs,
                              prefill_chunk_tokens=deployment.prefill_chunk_tokens)
    return kind.run(placement=placement, workload=workload, memory=memory)


def checked_context(*, model: str | ModelConfig, gpu: str | GPU, deployment: Deployment,
                    calibration: Calibration | str | Path | None = None,
                    ) -> tuple[ModelConfig, StepContext]:
    """The model as ``deployment`` shards it and its step context, the deployment checked
    (a one-line error for an impossible one) and the GPU's calibration resolved."""
    model_cfg = get_model(model) if isinstance(model, str) else model
    gpu_spec = load_gpu(gpu) if isinstance(gpu, str) else gpu
    cal = calibration_for_gpu(resolve_calibration(calibration), gpu_spec)  # own or borrowed
    model_cfg = sharded_model(deployment=deployment, model=model_cfg)
    check_deployment(deployment=deployment, model=model_cfg, gpu_name=gpu_spec.name,
                     gpu_clock_range=(gpu_spec.min_clock_mhz, gpu_spec.boost_clock_mhz),
                     gpu_sm_count=gpu_spec.sm_count)
    return model_cfg, step_context(model=model_cfg, gpu=gpu_spec, deployment=deployment,
                                   calibration=cal)


def place(*, ctx: StepContext, model: ModelConfig, kind: WorkloadKind, workload: Workload,
          batch: Size, replicas: Size, gpus: Size,
          max_num_seqs: int | None = None,
          prefill_chunk_tokens: int | None = None) -> tuple[Placement, MemoryUse]:
    """A deployment bound to its context and the memory the kind needs per GPU; numbers for
    one configuration, arrays over the configurations of one ``predict_many`` group."""
    busy = kind.busy_replicas(workload=workload, batch=batch, replicas=replicas)
    sequences = batch / busy
    demand = kind.memory_demand(workload=workload, sequences=cast(float, sequences))
    memory = memory_use(graph=ctx.graph, gpu=ctx.gpu, runtime=ctx.runtime,
                        degrees=dict(ctx.degrees), pp=ctx.pp, weight_dtype=ctx.weight_dtype,
                        kv_dtype=ctx.kv_dtype, sequences=demand.sequences,
                        context_tokens=demand.context_tokens,
                        token_budget=startup_tokens(runtime=ctx.runtime, gpu=ctx.gpu,
                                                    attention_ranks=ctx.attention_ranks,
                                                    budget=prefill_chunk_tokens,
                                                    offline=demand.offline),
                        draft_layers=ctx.draft_layers)
    placement = Placement(ctx=ctx, model=model, replicas=cast(int, busy),
                          gpus=cast(int, gpus), sequences=cast(float, sequences),
                          max_num_seqs=max_num_seqs, prefill_chunk_tokens=prefill_chunk_tokens)
    return placement, memory


def predict_many(*, model: str | ModelConfig, workload: Workload, table: pd.DataFrame,
                 calibration: Calibration | str | Path | None = None) -> pd.DataFrame:
    """Predict every row of ``table`` at once: see :func:`energylens.batch_predict.predict_many`."""
    from energylens.batch_predict import predict_many as many

    return many(model=model, workload=workload, table=table, calibration=calibration)


#: Calibrations by (calibration, GPU name): a borrowed copy is built once, not per call.
_FOR_GPU: dict[tuple[Calibration, str], Calibration] = {}
_FOR_GPU_LIMIT = 256


def calibration_for_gpu(calibration: Calibration, gpu: GPU) -> Calibration:
    """The calibration ``gpu`` is predicted with: ``calibration`` itself, or a copy with
    constants borrowed from a relative (built once per calibration and GPU name)."""
    key = (calibration, gpu.name)
    found = _FOR_GPU.get(key)
    if found is None:
        found = require_constants(calibration=calibration, gpu=gpu)
        if len(_FOR_GPU) >= _FOR_GPU_LIMIT:
            _FOR_GPU.clear()
        _FOR_GPU[key] = found
    return found


def step_context(*, model: ModelConfig, gpu: GPU, deployment: Deployment,
                 calibration: Calibration) -> StepContext:
    """Everything fixed across the steps of one deployment (checked already)."""
    runtime = get_runtime(deployment.runtime)
    calibration = runtime.calibration_for(calibration=calibration, gpu=gpu.name,
                                          version=deployment.runtime_version,
                                          mha=model.mla is None
                                          and model.num_kv_heads == model.num_heads,
                                          paged_decode=runtime.decodes_paged(
                                              gpu_vendor=gpu.vendor,
                                              sliding_window=model.sliding_window is not None))
    constants = calibration.kernel(gpu.name)
    return StepContext(
        graph=build_graph(model), gpu=gpu, calibration=calibration,
        degrees=tuple(sorted(deployment.degrees(model).items())),
        fusion=frozenset(runtime.fusions_at(version=deployment.runtime_version)
                         if deployment.fusion is None else deployment.fusion),
        weight_dtype=deployment.weight_dtype or model.weight_dtype,
        # ``auto`` (None): the runtime's default for the checkpoint in its release (vLLM
        # before 0.12: the activations' bf16; TensorRT-LLM: what the checkpoint declares).
        kv_dtype=deployment.kv_dtype or runtime.auto_kv(model=model, gpu=gpu,
                                                        version=deployment.runtime_version),
        overlap_sms=deployment.overlap_sms,
        clock=ClockState.at(gpu=gpu, freq_mhz=deployment.freq_mhz, constants=constants),
        routing=deployment.routing, pp=deployment.pp, runtime=runtime,
        speculation=deployment.speculation,
        cpu_overlapped=runtime.overlaps_cpu(version=deployment.runtime_version,
                                            pp=deployment.pp),
    )
