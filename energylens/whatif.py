"""What one change to a deployment would do (``predict --what-if``): the deployment
predicted again with each of a few single changes an engineer would try first (no fused
kernels, an FP8 KV cache, FP8 weights, a lower clock, twice the tensor parallelism, twice
the batch, SMs for overlapped communication), beside the original."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from energylens.cost.constants import Calibration
from energylens.deployment import Deployment
from energylens.errors import EnergyLensError
from energylens.hardware import load_gpu
from energylens.model.context import context_shortfall
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.workloads import Prediction, Workload

#: Share of the boost clock the "lower clock" change runs at.
CLOCK_SHARE = 0.8
#: SMs the "overlapped communication" change gives the collectives.
OVERLAP_SMS = 16


#: The figures a variant reports (Prediction fields).
FIGURES = ("energy_per_output_token_j", "tpot_s", "ttft_s", "output_tokens_per_s", "num_gpus")


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One change and its prediction (None where the change cannot run at all; ``reason``
    says why it cannot, or why it does not fit)."""

    change: str
    deployment: Deployment
    workload: Workload
    prediction: Prediction | None
    reason: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON form: the change, whether it fits and why not, and :data:`FIGURES`."""
        found = self.prediction
        return {"change": self.change, "feasible": found is not None and found.feasible,
                "reason": self.reason,
                **{k: None if found is None else getattr(found, k) for k in FIGURES}}


def changes(*, model: str, gpu: str, deployment: Deployment,
            workload: Workload) -> list[tuple[str, Deployment, Workload]]:
    """The single changes that differ from ``deployment`` and ``workload`` as given."""
    spec = load_gpu(gpu)
    tp = deployment.tp
    out: list[tuple[str, Deployment, Workload]] = []
    if deployment.fusion != frozenset():
        out.append(("no fused kernels", replace(deployment, fusion=frozenset()), workload))
    if deployment.kv_dtype != "fp8":
        out.append(("FP8 KV cache", replace(deployment, kv_dtype="fp8"), workload))
    weights = deployment.weight_dtype or get_model(model).weight_dtype
    if weights in ("bf16", "fp16") and "fp8" in spec.dense_flops_per_s:
        out.append(("FP8 weights", replace(deployment, weight_dtype="fp8"), workload))
    clock = deployment.freq_mhz or spec.boost_clock_mhz
    out.append((f"clock x{CLOCK_SHARE:g}",
                replace(deployment, freq_mhz=max(CLOCK_SHARE * clock, spec.min_clock_mhz)),
                workload))
    gpus = deployment.num_gpus
    out.append(("2x tensor parallel",
                replace(deployment, tp=2 * tp, num_gpus=None if gpus is None else 2 * gpus),
                workload))
    if deployment.overlap_sms == 0 and tp > 1:
        out.append((f"{OVERLAP_SMS} SMs overlap the collectives",
                    replace(deployment, overlap_sms=OVERLAP_SMS), workload))
    if workload.kind == "load" and workload.concurrency is not None:
        out.append(("2x clients", deployment, replace(workload, concurrency=2 * workload.concurrency)))
    elif workload.kind == "load" and workload.request_rate is not None:
        out.append(("2x request rate", deployment,
                    replace(workload, request_rate=2 * workload.request_rate)))
    elif workload.kind != "load":
        out.append(("2x batch", deployment, replace(workload, batch=2 * workload.batch)))
    return out


def what_if(*, model: str, gpu: str, deployment: Deployment, workload: Workload,
            calibration: Calibration | str | Path | None = None) -> list[Variant]:
    """The deployment as given, then each of :func:`changes`, predicted."""
    rows = [("as given", deployment, workload),
            *changes(model=model, gpu=gpu, deployment=deployment, workload=workload)]
    out = []
    for change, dep, load in rows:
        try:
            found = predict(model=model, gpu=gpu, deployment=dep, workload=load,
                            calibration=calibration)
        except EnergyLensError as exc:  # the change cannot run this model at all
            out.append(Variant(change=change, deployment=dep, workload=load, prediction=None,
                               reason=str(exc).splitlines()[0]))
            continue
        out.append(Variant(change=change, deployment=dep, workload=load, prediction=found,
                           reason=None if found.feasible else found.infeasible_reason))
    return out


#: GPUs per replica the fitting hint tries at most when the deployment names no GPU count.
HINT_MAX_GPUS = 64


def smallest_fitting_split(*, model: str, gpu: str, deployment: Deployment,
                           workload: Workload,
                           calibration: Calibration | str | Path | None = None) -> Deployment | None:
    """A deployment that does not fit in memory, with its tensor parallelism doubled until it
    does: the first that fits (None if none does). With ``num_gpus`` given the GPU count stays
    and the replicas become fewer; without it each doubling doubles the GPUs."""
    if context_shortfall(model=get_model(model), input_tokens=workload.input_tokens,
                         output_tokens=workload.output_tokens):
        return None  # no split lengthens the model's context
    total = deployment.num_gpus or HINT_MAX_GPUS
    tp = 2 * deployment.tp
    while (candidate := replace(deployment, tp=tp, dp=None)).gpus_per_replica <= total:
        try:
            found = predict(model=model, gpu=gpu, deployment=candidate, workload=workload,
                            calibration=calibration)
        except EnergyLensError:  # this split cannot run the model (heads, experts)
            found = None
        if found is not None and found.feasible:
            return candidate
        tp *= 2
    return None
