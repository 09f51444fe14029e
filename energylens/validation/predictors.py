"""Predict every row of a measurement file and compare: ``energylens validate FORMAT FILE``.

One predictor per format turns a loaded row into predicted values under the source's
own metric names and units (ms stay ms). A row the model cannot predict keeps its place
with the reason; it is never dropped. Metrics are the mean and median absolute
percentage errors over the rows that have both a measurement and a prediction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.file import resolve_calibration
from energylens.cost.comm import collective_cost, link_for_group
from energylens.cost.constants import Calibration
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import ClockState, kernel_cost
from energylens.cost.work import Size, tensor_bytes
from energylens.deployment import Deployment, Workload
from energylens.errors import ConfigError, SpecError, UnknownGPUError, UnknownModelError
from energylens.hardware import GPU, load_gpu
from energylens.measurements import bench_screen, inference_bench, mlenergy
from energylens.measurements.bench_screen import screen_kind, screened_summary
from energylens.measurements.formats import (
    LLMCOMPASS_LAYER_OPS,
    LLMCOMPASS_LAYER_SETUP,
    MeasurementRow,
    load_measurements,
)
from energylens.measurements.topology import link_of
from energylens.measurements.vidur_ops import HEAD_OPS, VIDUR_OPS, Geometry, op_latency_s
from energylens.model.families import build_graph
from energylens.model.spec import LayerSpec, parse_einsum
from energylens.model.zoo import get_model
from energylens.predict import calibration_for_gpu, predict

Calibrated = Calibration | str | Path | None


@dataclass
class RowResult:
    """One row: the source's key fields, measured and predicted values, or why not."""

    input: dict[str, Any]
    measured: dict[str, float]
    predicted: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    #: why a predicted row is kept out of fits and headline errors (a physical screen)
    screened: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``screened`` only on a screened row)."""
        out = {"input": self.input, "measured": self.measured, "predicted": self.predicted,
               "error": self.error}
        return out if self.screened is None else {**out, "screened": self.screened}


@dataclass
class MetricError:
    """Errors of one metric over the predicted rows (fractions, not percent)."""

    mape: float
    median_ape: float
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON form (NaN as null)."""
        def clean(x: float) -> float | None:
            return None if not np.isfinite(x) else round(float(x), 6)
        return {"mape": clean(self.mape), "median_ape": clean(self.median_ape), "n": self.n}


@dataclass
class ValidationReport:
    """Everything ``energylens validate`` prints."""

    format: str
    file: str
    rows: list[RowResult]
    notes: dict[str, str] = field(default_factory=dict)  # metric -> why it is not predicted

    @property
    def metrics(self) -> dict[str, MetricError]:
        """MAPE per metric, in the order metrics first appear."""
        return metric_errors(self.rows)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object."""
        out: dict[str, Any] = {"format": self.format, "file": self.file,
                               "metrics": {k: v.as_dict() for k, v in self.metrics.items()},
                               "rows": [r.as_dict() for r in self.rows]}
        if self.notes:
            out["unpredicted_metrics"] = self.notes
        return out


def metric_errors(rows: list[RowResult],
                  keep: Callable[[RowResult], bool] | None = None) -> dict[str, MetricError]:
    """Mean/median absolute percentage error per metric over rows with a prediction.

    Screened rows (:mod:`energylens.measurements.bench_screen`) are left out of each
    metric and reported beside it: ``<metric>[<kind>]`` over each kind's rows alone
    (``[impossible]``) and ``<metric>[with <kinds>]`` over every row."""
    return screened_summary([r for r in rows if r.error is None and (keep is None or keep(r))],
                            summary=_ape_summary, kind=lambda r: screen_kind(r.screened))


def _ape_summary(rows: list[RowResult]) -> dict[str, MetricError]:
    ape: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for name, measured in row.measured.items():
            if name in row.predicted and measured > 0:
                ape[name].append(abs(row.predicted[name] / measured - 1.0))
    return {name: MetricError(mape=float(np.mean(v)), median_ape=float(np.median(v)), n=len(v))
            for name, v in ape.items()}


# --- ML.ENERGY ---------------------------------------------------------------------------


def _mlenergy(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
              **_: Any) -> list[RowResult]:
    out = []
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        try:
            result.predicted = mlenergy.predict_row(row.input, gpu=gpu, calibration=cal)
        except mlenergy.UnsupportedRow as exc:
            result.error = str(exc)
        out.append(result)
    return out


# --- Vidur per-op compute ------------------------------------------------------------------


def _vidur_mlp(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
               **_: Any) -> list[RowResult]:
    results = [RowResult(input=dict(r.input), measured=dict(r.measured)) for r in rows]
    groups: dict[tuple[str, Geometry], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[(gpu or str(row.context["gpu"]), Geometry.of(row.input))].append(i)
    for (gpu_name, geometry), index in groups.items():
        try:
            spec = load_gpu(gpu_name)
            if geometry.n_head % geometry.tp or geometry.n_embd % geometry.n_head:
                raise SpecError(f"{geometry.n_head} heads do not split over TP {geometry.tp}")
            constants = cal.kernel(spec.name)
            tokens = np.array([rows[i].input["num_tokens"] for i in index], dtype=float)
            ops = [op for op in (*VIDUR_OPS, *HEAD_OPS) if op in rows[index[0]].measured]
            times = {op: np.atleast_1d(op_latency_s(op=op, geometry=geometry, num_tokens=tokens,
                                                    gpu=spec, constants=constants)) * 1e3
                     for op in ops}
        except (UnknownGPUError, SpecError, KeyError) as exc:
            for i in index:
                results[i].error = str(exc)
            continue
        for j, i in enumerate(index):
            results[i].predicted = {op: float(v[j]) for op, v in times.items()}
    return results


def _row_gpu(*, row: MeasurementRow, gpu: str | None, result: RowResult) -> GPU | None:
    """The GPU a row was measured on (``gpu`` overrides the file's); None, with the reason
    in ``result.error``, for a name the hardware database does not know."""
    try:
        return load_gpu(gpu or str(row.context["gpu"]))
    except UnknownGPUError as exc:
        result.error = str(exc)
        return None


# --- Vidur collectives ---------------------------------------------------------------------


def _vidur_network(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
                   topology: str | None = None, **_: Any) -> list[RowResult]:
    results = []
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        results.append(result)
        collective = str(row.input["collective"])
        spec = _row_gpu(row=row, gpu=gpu, result=result)
        if spec is None:
            continue
        workers, per_node = int(row.input["num_workers"]), int(row.input["devices_per_node"])
        kind, bandwidth = link_of(gpu=spec, num_workers=workers, devices_per_node=per_node,
                                  topology=topology or row.context.get("link"),
                                  collective=collective)
        constants = cal.link(gpu=spec.name, kind=kind)
        try:
            cost = collective_cost(kind=collective, message_bytes=float(row.input["size"]),
                                   group_size=2 if collective == "send_recv" else workers,
                                   bandwidth=bandwidth, constants=constants)
        except KeyError:
            result.error = f"collective {collective!r} is not modelled"
            continue
        result.predicted = {collective: float(cost.latency_s) * 1e3}
    return results


# --- Splitwise-style prompt/token timings --------------------------------------------------


def _splitwise(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
               **_: Any) -> list[RowResult]:
    out = []
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        out.append(result)
        values = row.input
        try:
            model = get_model(str(values["model"]))
            tp = int(values["tensor_parallel"])
            prediction = predict(
                model=model, gpu=gpu or str(values["hardware"]),
                deployment=Deployment(tp=tp, num_gpus=tp),
                workload=Workload(kind="batch", batch=int(values["batch_size"]),
                                  input_tokens=int(values["prompt_size"]),
                                  output_tokens=int(values["token_size"])),
                calibration=cal)
        except (UnknownModelError, UnknownGPUError, ConfigError) as exc:
            result.error = str(exc)
            continue
        if not prediction.feasible:
            result.error = f"infeasible: {prediction.infeasible_reason}"
            continue
        result.predicted = {"prompt_time": prediction.ttft_s * 1e3,
                            "token_time": prediction.tpot_s * 1e3}
    return out


# --- LLMCompass GEMMs ----------------------------------------------------------------------


@cache
def _gemm_layer() -> LayerSpec:
    op = parse_einsum(name="matmul", text="Y[m,n] = X[m,k] * W[k,n]")
    return LayerSpec(name="matmul", ops=(op,))


def _llmcompass_matmul(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
                       **_: Any) -> list[RowResult]:
    out = []
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        out.append(result)
        spec = _row_gpu(row=row, gpu=gpu, result=result)
        if spec is None:
            continue
        sizes = {"m": int(row.input["M"]), "n": int(row.input["N"]), "k": int(row.input["K"])}
        kernel = compile_layer(layer=_gemm_layer(), sizes=sizes, degrees={},
                               fusion=frozenset()).kernels[0]
        cost = kernel_cost(kernel=kernel, phase={}, window=None, gpu=spec,
                           constants=cal.kernel(spec.name),
                           clock=ClockState(ratio=1.0, dynamic_scale=1.0), weight_dtype="fp16")
        result.predicted = {"time_s": float(cost.latency_s)}
    return out


# --- LLMCompass GPT-3-175B layer ops ------------------------------------------------------

#: Each LLMCompass layer op -> the kernel of the compiled layer that prices it (the
#: all-reduces: the collective the sharding derives after that op).
LLMCOMPASS_LAYER_KERNELS: dict[str, str] = {
    "qkv": "q+k+v", "q_mul_k": "qk", "a_mul_v": "av", "wo": "o", "w1": "up", "w2": "down",
    "softmax": "soft", "layernorm_mha": "norm1", "layernorm_ffn": "norm2", "gelu": "act",
    "allreduce_mha": "o", "allreduce_ffn": "down"}


@dataclass(frozen=True, kw_only=True)
class LayerOpPrice:
    """The cost model's price of one LLMCompass layer op on one GPU of the TP group."""

    op: str
    kernel: str  # the compiled kernel (or, for an all-reduce, the op it follows)
    latency_s: float
    flops: float
    bytes: float
    message_bytes: float = 0.0  # all-reduces: the full tensor each GPU contributes


@cache
def _gpt3_layer() -> tuple[LayerSpec, dict[str, int]]:
    """GPT-3-175B's layer as OPT's family spec builds it, with the causal masks removed:
    LLMCompass times each op in PyTorch eager on its full shape (Q·K^T over every query-key
    pair, softmax over the whole square), not a masked kernel."""
    # GPT-3-175B (Brown et al. 2020, Table 2.1: d_model 12,288, 96 heads of 128, 96 layers;
    # FFN 4 x d_model = 49,152, GeLU, LayerNorm) on OPT's zoo entry: OPT-175B has the same
    # shapes and the same pre-LayerNorm MHA layer, plain MLP and learned positions. No
    # Hugging Face checkpoint: an empty id.
    model = replace(get_model("opt-6.7b"), name="gpt3-175b", hf_id="", hidden_size=12288,
                    num_heads=96, num_kv_heads=96, head_dim=128, ffn_size=49152,
                    num_layers=96)
    group = build_graph(model).groups[0]
    layer = replace(group.layer, ops=tuple(replace(op, causal=None) for op in group.layer.ops))
    return layer, dict(group.sizes)


def llmcompass_layer_prices(*, phase: str, gpu: GPU, cal: Calibration) -> dict[str, LayerOpPrice]:
    """Every op of LLMCompass's GPT-3-175B layer (batch 8, 2,048 tokens, TP 4) priced by the
    cost model: GEMMs, the unfused Q·K and A·V batched GEMMs and the small memory-bound
    kernels at the GPU's calibrated constants and boost clock (fp16 weights, QKV as one
    GEMM), the all-reduces by the collective model on the GPU's scale-up link (NCCL's
    constants, no serving engine's own all-reduce)."""
    setup = LLMCOMPASS_LAYER_SETUP
    tokens = float(setup["tokens"])
    sizes_phase: dict[str, Size] = {"b": float(setup["batch"]), "p": tokens, "n": 1.0, "t": 1.0,
                                    "m": tokens if phase == "prefill" else 1.0}
    layer, sizes = _gpt3_layer()
    tp = int(setup["tp"])
    compiled = compile_layer(layer=layer, sizes=sizes, degrees={"tp": tp},
                             fusion=frozenset({"qkv"}))
    constants = calibration_for_gpu(cal, gpu).kernel(gpu.name)
    clock = ClockState.at(gpu=gpu, freq_mhz=None, constants=constants)
    kernels = {k.name: k for k in compiled.kernels}
    collectives = {c.after_op: c for c in compiled.collectives if c.kind == "all_reduce"}
    kind, bandwidth = link_for_group(gpu=gpu, group_size=tp)
    link = calibration_for_gpu(cal, gpu).link(gpu=gpu.name, kind=kind)
    out = {}
    for op in LLMCOMPASS_LAYER_OPS:
        name = LLMCOMPASS_LAYER_KERNELS[op]
        if op.startswith("allreduce"):
            c = collectives[name]
            message = float(tensor_bytes(tensor=c.tensor, sizes={**c.sizes, **sizes_phase},
                                         weight_dtype="fp16", window=None))
            comm = collective_cost(kind="all_reduce", message_bytes=message, group_size=tp,
                                   bandwidth=bandwidth, constants=link)
            out[op] = LayerOpPrice(op=op, kernel=f"all_reduce after {name}",
                                   latency_s=float(comm.latency_s), flops=0.0,
                                   bytes=message, message_bytes=message)
            continue
        cost = kernel_cost(kernel=kernels[name], phase=sizes_phase, window=None, gpu=gpu,
                           constants=constants, clock=clock, weight_dtype="fp16")
        out[op] = LayerOpPrice(op=op, kernel=name, latency_s=float(cost.latency_s),
                               flops=float(cost.flops), bytes=float(cost.bytes))
    return out


def _llmcompass_layer(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
                      **_: Any) -> list[RowResult]:
    out = []
    prices: dict[tuple[str, str], dict[str, LayerOpPrice]] = {}  # (phase, GPU) -> op prices
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        out.append(result)
        spec = _row_gpu(row=row, gpu=gpu, result=result)
        if spec is None:
            continue
        phase = str(row.context["phase"])
        if (phase, spec.name) not in prices:
            prices[(phase, spec.name)] = llmcompass_layer_prices(phase=phase, gpu=spec, cal=cal)
        price = prices[(phase, spec.name)][str(row.input["op"])]
        result.predicted = {"time_s": price.latency_s}
    return out


# --- LLM-Inference-Bench static batches ----------------------------------------------------

def _llm_inference_bench(rows: list[MeasurementRow], *, gpu: str | None, cal: Calibration,
                         **_: Any) -> list[RowResult]:
    out = []
    for row in rows:
        result = RowResult(input=dict(row.input), measured=dict(row.measured))
        out.append(result)
        try:
            setup = inference_bench.bench_setup(row.input)
            run = inference_bench.price(model=str(row.input["Model"]),
                                        gpu=gpu or str(row.context["gpu"]), setup=setup,
                                        calibration=cal)
        except (inference_bench.UnmodelledRow, UnknownModelError, UnknownGPUError,
                ConfigError) as exc:
            result.error = str(exc)
            continue
        prediction = run.prediction
        if not prediction.feasible:
            result.error = f"infeasible: {prediction.infeasible_reason}"
            continue
        if "latency_s" in row.measured:
            result.screened = bench_screen.impossible(row.input,
                                                      latency_s=row.measured["latency_s"])
        result.predicted = {"latency_s": run.latency_s,
                            "throughput_tokens_per_s": setup.sequences * 2 * setup.tokens
                            / run.latency_s}
        if "avg_power_w" in row.measured:
            result.predicted["avg_power_w"] = prediction.avg_power_w
    return out


PREDICTORS: dict[str, Callable[..., list[RowResult]]] = {
    "mlenergy": _mlenergy,
    "vidur-mlp": _vidur_mlp,
    "vidur-network": _vidur_network,
    "aiconfigurator-nccl": _vidur_network,  # the same rows, one host's table
    "splitwise": _splitwise,
    "llmcompass-matmul": _llmcompass_matmul,
    "llmcompass-layer": _llmcompass_layer,
    "llm-inference-bench": _llm_inference_bench,
}


def validate(*, format: str, path: str | Path, gpu: str | None = None,
             calibration: Calibrated = None, topology: str | None = None) -> ValidationReport:
    """Predict every row of ``path`` (a ``format`` measurement file) and compare."""
    measurements = load_measurements(format=format, path=path, gpu=gpu)
    cal = resolve_calibration(calibration)
    rows = PREDICTORS[format](measurements.rows, gpu=gpu, cal=cal, topology=topology)
    present = dict.fromkeys(m for r in measurements.rows for m in r.measured)
    predicted = {m for r in rows for m in r.predicted}
    notes = {m: "measured, predicted for no row" for m in present if m not in predicted}
    return ValidationReport(format=format, file=str(path), rows=rows, notes=notes)
