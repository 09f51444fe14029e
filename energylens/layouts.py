"""Every parallel layout of a deployment's GPUs, predicted side by side (``predict
--layouts``): which tensor, pipeline and expert parallelism, and how many data-parallel
replicas, to run the same workload on the same GPUs with.

For ``G`` GPUs (the deployment's ``num_gpus``, else the GPUs its layout spans) each replica
size ``g`` dividing ``G`` gives ``G / g`` replicas, and each split of ``g`` into a pipeline
of ``p`` stages ``w = g / p`` GPUs wide gives: tensor parallelism over the ``w`` (each expert
of a MoE model split ``w`` ways); for a MoE model, whole experts or expert groups spread
``e`` ways for each ``e`` dividing ``w`` and the experts (attention over all ``w``, each
expert split ``w / e`` ways: vLLM's ``--enable-expert-parallel`` at ``e = w``, TensorRT-LLM's
``moe_ep_size x moe_tp_size``); and data-parallel attention over the ``w`` with the experts
spread ``w`` ways (SGLang's and TensorRT-LLM's attention DP, vLLM's DP + EP). Every other
field of the deployment (precision, fusion, clock, runtime) and the workload stay as given;
a batch, a client count or a request rate is the whole deployment's, shared by its
replicas. The model's order of layouts was checked against measurements
(docs/layouts.md: the fastest layout in 26 of 26 measured batches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from energylens.cost.constants import Calibration
from energylens.deployment import Deployment
from energylens.errors import EnergyLensError
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.workloads import Prediction, Workload

#: The figures a layout reports (Prediction fields).
FIGURES = ("tpot_s", "ttft_s", "energy_per_output_token_j", "output_tokens_per_s")


@dataclass(frozen=True, kw_only=True)
class LayoutOption:
    """One layout and its prediction (None where it cannot run the model at all;
    ``reason`` says why it cannot, or why it does not fit)."""

    name: str
    deployment: Deployment
    prediction: Prediction | None
    reason: str | None = None
    as_given: bool = False

    @property
    def feasible(self) -> bool:
        """Whether the layout runs the workload."""
        return self.prediction is not None and self.prediction.feasible

    def as_dict(self) -> dict[str, object]:
        """JSON form: the layout, the flags that predict it, whether it fits and why not,
        its running sequences per busy replica and :data:`FIGURES`."""
        d, found = self.deployment, self.prediction
        return {"layout": self.name, "flags": layout_flags(d), "as_given": self.as_given,
                "feasible": self.feasible, "reason": self.reason, "tp": d.tp, "pp": d.pp,
                "ep": d.ep, "attention_dp": d.attention_dp, "moe_tp": d.expert_tp,
                "replicas": d.replicas,
                "running_batch": None if found is None else found.running_batch,
                **{k: None if found is None else getattr(found, k) for k in FIGURES}}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_name(deployment: Deployment) -> str:
    """``TP4 EP2``, ``TP2 PP2 x 2 replicas``, ``DP-attention 8 EP8``, ``1 GPU x 4 replicas``."""
    d = deployment
    parts = []
    if d.attention_dp > 1:
        parts.append(f"DP-attention {d.attention_dp}" + (f" x TP{d.tp}" if d.tp > 1 else ""))
    elif d.attention_tp > 1:
        parts.append(f"TP{d.attention_tp}")
    if d.pp > 1:
        parts.append(f"PP{d.pp}")
    if d.ep > 1:
        parts.append(f"EP{d.ep}")
    name = " ".join(parts) or "1 GPU"
    return name + (f" x {d.replicas} replicas" if d.replicas > 1 else "")


def layout_flags(deployment: Deployment) -> str:
    """The ``predict`` flags of a layout (``--tp 4 --ep 2 --moe-tp 2 --num-gpus 4``)."""
    d = deployment
    flags = [f"--tp {d.tp}"]
    if d.pp > 1:
        flags.append(f"--pp {d.pp}")
    if d.attention_dp > 1:
        flags.append(f"--attention-dp {d.attention_dp}")
    if d.ep > 1:
        flags.append(f"--ep {d.ep}")
    if d.moe_tp is not None and d.ep > 1:
        flags.append(f"--moe-tp {d.moe_tp}")
    return " ".join([*flags, f"--num-gpus {d.total_gpus}"])


def layouts(*, model: str, deployment: Deployment) -> list[Deployment]:
    """The layout as given, then every other layout of its GPUs (module docstring), the
    deployment's other fields kept."""
    spec = get_model(model)
    total = deployment.num_gpus or deployment.total_gpus
    experts = None if spec.moe is None else spec.moe.num_experts
    plain = replace(deployment, num_gpus=total, dp=None, tp=1, pp=1, ep=1, attention_dp=1,
                    moe_tp=None)
    out = []
    for size in _divisors(total):
        for stages in _divisors(size):
            width = size // stages
            out.append(replace(plain, tp=width, pp=stages))
            if experts is None:
                continue
            out += [replace(plain, tp=width, pp=stages, ep=e, moe_tp=width // e)
                    for e in _divisors(width) if e > 1 and experts % e == 0]
            if width > 1 and experts % width == 0:
                out.append(replace(plain, tp=1, pp=stages, attention_dp=width, ep=width,
                                   moe_tp=1))
    return [replace(deployment, num_gpus=total),
            *(d for d in out if not _same_layout(d, deployment))]


def _same_layout(a: Deployment, b: Deployment) -> bool:
    return (a.attention_tp, a.pp, a.ep, a.attention_dp, a.expert_tp, a.total_gpus) == \
        (b.attention_tp, b.pp, b.ep, b.attention_dp, b.expert_tp, b.total_gpus)


def compare_layouts(*, model: str, gpu: str, deployment: Deployment, workload: Workload,
                    calibration: Calibration | str | Path | None = None) -> list[LayoutOption]:
    """Every layout of :func:`layouts`, predicted: those that run the workload by TPOT,
    fastest first, then those that do not, with the reason."""
    options = []
    for candidate in layouts(model=model, deployment=deployment):
        given = _same_layout(candidate, deployment)
        try:
            found = predict(model=model, gpu=gpu, deployment=candidate, workload=workload,
                            calibration=calibration)
        except EnergyLensError as exc:  # this split cannot run the model (heads, layers)
            options.append(LayoutOption(name=layout_name(candidate), deployment=candidate,
                                        prediction=None, reason=str(exc).splitlines()[0],
                                        as_given=given))
            continue
        options.append(LayoutOption(name=layout_name(candidate), deployment=candidate,
                                    prediction=found, as_given=given,
                                    reason=None if found.feasible else found.infeasible_reason))
    runs = sorted((o for o in options if o.feasible),
                  key=lambda o: float(o.prediction.tpot_s))  # type: ignore[union-attr]
    return runs + [o for o in options if not o.feasible]
