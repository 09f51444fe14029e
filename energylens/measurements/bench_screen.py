"""LLM-Inference-Bench rows faster than any execution could be: screened from every fit.

A batch that generates L tokens runs L forward passes (the prefill, then L - 1 decode
steps), and every pass reads each GPU's share of the weights from memory at least once.
So no row can finish in less than

    L x weight_bytes_per_gpu / peak_memory_bandwidth

with ``weight_bytes_per_gpu`` the active parameters (the routed experts of one token: the
least a MoE step can read) in the checkpoint's dtype over the row's devices (an even split:
a pipeline, which reads its stages one after another, is slower still) and the GPU's
datasheet peak bandwidth. Caches cannot hold the weights of the bench's models (>= 6B
parameters, >= 12 GB in BF16, against <= 0.1 GB of L2). A row below this floor did not run
as described (in the bench: 6-7B models at 2,048 tokens in 0.04-3.4 s on H100 and GH200, and
one Qwen2-72B row at 1,024 tokens in 0.96 s): it is still predicted
and listed, but excluded from fitting and from the headline MAPE.

The same floor screens the rows of a measurement CSV (:func:`user_row_impossible`): a
mean time per output token below one pass, or an end-to-end time below ``output_tokens``
passes, unless the row ran speculative decoding (several tokens per pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from energylens.cost.gguf import FILE_DTYPE, MIXES
from energylens.cost.work import DTYPE_BYTES
from energylens.errors import EnergyLensError
from energylens.hardware import load_gpu
from energylens.measurements.formats import bench_gpu
from energylens.measurements.inference_bench import bench_devices
from energylens.model.config import ModelConfig
from energylens.model.params import parameter_count
from energylens.model.zoo import get_model

#: Name of the screened group in summaries and the reason attached to a screened row.
SCREEN = "impossible"

Row = TypeVar("Row")
Stat = TypeVar("Stat")


def screen_kind(reason: str | None) -> str | None:
    """The kind of a screen reason (``impossible``, ``host-bound``: its text before the
    first colon), or None for a row not screened."""
    return None if reason is None else reason.split(":", 1)[0].strip()


def screened_summary(rows: Sequence[Row], *, summary: Callable[[list[Row]], dict[str, Stat]],
                     kind: Callable[[Row], str | None]) -> dict[str, Stat]:
    """``summary`` per metric over the rows not screened; where some are, beside each
    metric ``<metric>[<kind>]`` over each kind's rows alone (``[impossible]``,
    ``[host-bound]``) and ``<metric>[with <kinds>]`` over all (``[with impossible]``; the
    convention of every validation summary)."""
    out = summary([r for r in rows if kind(r) is None])
    kinds = sorted({k for k in map(kind, rows) if k is not None})
    for name in kinds:
        out.update({f"{metric}[{name}]": v
                    for metric, v in summary([r for r in rows if kind(r) == name]).items()})
    if kinds:
        out.update({f"{metric}[with {' and '.join(kinds)}]": v
                    for metric, v in summary(list(rows)).items()})
    return out


def decode_floor_s(*, output_tokens: float, weight_bytes_per_gpu: float,
                   hbm_bandwidth_bytes_per_s: float) -> float:
    """Least time (s) of ``output_tokens`` passes each reading the weights once."""
    return output_tokens * weight_bytes_per_gpu / hbm_bandwidth_bytes_per_s


def floor_s(*, model: str, gpu: str, devices: int, output_tokens: int) -> float | None:
    """The floor of ``output_tokens`` passes of ``model`` over ``devices`` GPUs ``gpu``;
    None when the model or GPU is unknown."""
    try:
        config = get_model(model)
        card = load_gpu(gpu)
    except (EnergyLensError, ValueError):
        return None
    _, active = parameter_count(config)
    return decode_floor_s(output_tokens=output_tokens,
                          weight_bytes_per_gpu=active * DTYPE_BYTES[config.weight_dtype] / devices,
                          hbm_bandwidth_bytes_per_s=card.hbm_bandwidth_bytes_per_s)


def row_floor_s(values: Mapping[str, Any]) -> float | None:
    """The floor of one bench row's ``input``; None when its model or GPU is unknown."""
    return floor_s(model=str(values["Model"]), gpu=bench_gpu(str(values["Hardware"])),
                   devices=bench_devices(values),
                   output_tokens=int(values["Input Output Length"]))


def impossible(values: Mapping[str, Any], *, latency_s: float) -> str | None:
    """Why a row measured in ``latency_s`` cannot have run, or None when it could."""
    floor = row_floor_s(values)
    if floor is None or latency_s >= floor:
        return None
    return (f"{SCREEN}: measured {latency_s:.3g} s, below the {floor:.3g} s of reading the "
            "weights once per token at peak memory bandwidth")


#: Measured metrics of the measurement CSV each bounded below by passes over the weights:
#: the metric and how many passes it holds (``None``: the row's output tokens); a
#: percentile of the per-token times is no shorter than the fastest of them.
PER_PASS_METRICS: dict[str, int | None] = {
    **{f"{m}{s}": 1 for m in ("tpot", "itl") for s in ("_s", "_p50_s", "_p90_s", "_p99_s")},
    "e2e_s": None, "e2e_p50_s": None, "e2e_p90_s": None, "e2e_p99_s": None}


def least_weight_bytes(config: ModelConfig, weight_dtype: str) -> float:
    """The fewest bytes any weight of ``config`` takes under ``weight_dtype``, for a floor:
    a GGUF file type's base format (its more-bits tensors take more), a GGUF file's
    least-stored weight (dtype ``gguf``), else the dtype's bytes."""
    if weight_dtype == FILE_DTYPE:
        return min((b for _, b in config.gguf_storage), default=DTYPE_BYTES["fp16"])
    return DTYPE_BYTES[MIXES.get(weight_dtype, (weight_dtype,))[0]]


def user_row_impossible(*, config: ModelConfig, gpu: str, num_gpus: int, weight_dtype: str | None,
                        output_tokens: float, speculative_tokens: int,
                        measured: Mapping[str, float]) -> str | None:
    """Why a measurement-CSV row cannot have run as described, or None: a per-token or
    end-to-end time below reading ``config``'s active weights (in ``weight_dtype``, else
    its checkpoint's) over all ``num_gpus`` GPUs once per pass at peak bandwidth. Rows
    with speculative decoding are never screened (a pass may yield several tokens)."""
    if speculative_tokens > 0:
        return None
    _, active = parameter_count(config)
    weight_bytes = active * least_weight_bytes(config, weight_dtype or config.weight_dtype) / num_gpus
    bandwidth = load_gpu(gpu).hbm_bandwidth_bytes_per_s
    for metric, passes in PER_PASS_METRICS.items():
        if metric not in measured:
            continue
        count = float(output_tokens if passes is None else passes)
        floor = decode_floor_s(output_tokens=count, weight_bytes_per_gpu=weight_bytes,
                               hbm_bandwidth_bytes_per_s=bandwidth)
        if measured[metric] < floor:
            passes_read = "once" if count == 1 else f"{count:g} times"
            return (f"{SCREEN}: measured {metric} {measured[metric]:.3g} s, below the "
                    f"{floor:.3g} s of reading the weights {passes_read} at peak memory "
                    "bandwidth")
    return None
