"""LLM-Inference-Bench rows as deployments: which runtime ran each framework's rows and
what one row ran, shared by ``validate`` and ``calibrate`` (one reading of the file).

A row is ``Batch Size`` prompts of ``Input Output Length`` tokens in and as many out, on
``Num of Hardware`` devices (:func:`bench_devices`: MI250 packages are two GPUs each),
timed end to end. llama.cpp is the exception: its ``Batch
Size`` is its prompt batch (``-b``), so a row is one sequence whose prompt runs in
ceil(L / b) forward passes, split layer-wise over the devices (``-sm layer``).

A row with a ``Parallelism Type`` (the bench's ``Fig_5_b/TP_EP_PP_results.csv``) ran the
layout it names (:data:`LAYOUTS`); without one, tensor parallelism over every device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energylens.cost.constants import Calibration
from energylens.cost.moe import Routing
from energylens.deployment import Deployment, Workload
from energylens.model.config import ModelConfig
from energylens.predict import Prediction, predict

#: The bench's framework names -> runtime profiles.
RUNTIMES = {"TensorRT-LLM": "trtllm", "Deepspeed-MII": "deepspeed-mii", "llama.cpp": "llama.cpp",
            "vLLM": "vllm", "Deepspeed": "deepspeed-habana", "sambaflow": "sambaflow"}
#: The release a framework's rows ran where a profile fact changes since: TensorRT-LLM as
#: some 0.x release ("0"; the data does not name it), since the bench (repository data of
#: 2024, arXiv 2411.00136) predates TensorRT-LLM 1.0 (2025) and ran TensorRT engines, not the
#: PyTorch backend whose overlap scheduler 1.0 made the default (runtimes/trtllm.yaml).
#: vLLM as 0.6 (the data does not name it; a 2024 release is 0.6.x or earlier, 0.7.0
#: shipped in January 2025), so its V0 engine (before 0.8.0, runtimes/vllm.yaml).
RELEASES = {"TensorRT-LLM": "0", "vLLM": "0.6"}
#: Frameworks whose batches are one prompt repeated (:class:`Routing` identical_sequences):
#: TensorRT-LLM's and DeepSpeed-MII's. TensorRT-LLM's Mixtral-8x7B rows (the bench's one
#: MoE model there) at 16-64 sequences of 128 tokens take 1.3-1.8x batch 1's time where
#: vLLM's take 2.0-2.9x (8 experts read per layer instead of 2), and at 16 sequences of
#: 128-512 tokens they run faster than reading the experts 16 distinct tokens route to
#: (7.9 of 8 per layer) in BF16 at peak bandwidth (H100: 0.86 s against 0.88 s at 128
#: tokens; A100 40 GB: 1.41 s against 1.90 s), while their batch-1 rows agree with BF16
#: weights (not a narrower checkpoint: INT8 weights would make them 15-24 % faster than
#: measured). TensorRT-LLM's C++ session benchmark of 2024 fed every sequence the same
#: input ids (recalled, not re-read: assumed). DeepSpeed-MII's Mixtral on four A100 40 GB
#: decodes 16 sequences of 128 tokens at about 18 ms a step (2.41 s), its dense Mistral-7B
#: at batch 1 on the same four GPUs at about 14 ms (1.80 s), of which reading its weights
#: is 2 ms: the engine's own step time alone leaves no room for the 14 ms of reading the
#: experts 16 distinct tokens route to (22 GB per GPU), and room for one sequence's (2 of
#: 8); the bench's MII script is not re-read (assumed).
IDENTICAL_PROMPTS = frozenset({"TensorRT-LLM", "Deepspeed-MII"})
#: GPUs one counted ``Hardware`` unit holds where the bench counts packages: an AMD MI250
#: OAM package is two graphics compute dies, which ROCm (and so every framework) shows as
#: two GPUs, each with half the package's HBM and bandwidth (the MI250 GPU file describes
#: one). The rows agree: vLLM serves Llama-2-7B on one package at 7.1 ms a decode step,
#: faster than one die's 1.64 TB/s can read its 13.5 GB of weights (8.2 ms), and Mixtral-8x7B
#: (94 GB in BF16) on one package, more than one die's 64 GB.
DEVICES_PER_UNIT = {"AMD MI250 GPU": 2}


def bench_devices(values: Mapping[str, Any]) -> int:
    """The GPUs a row ran on: its ``Num of Hardware`` times the devices in each unit."""
    return int(values["Num of Hardware"]) * DEVICES_PER_UNIT.get(str(values.get("Hardware")), 1)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A row's parallel layout (:class:`~energylens.deployment.Deployment` fields)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    moe_tp: int | None = None


#: The bench's ``Parallelism Type`` labels (its ``Fig_5_b`` file: TensorRT-LLM on four
#: A100s, spelt as there, typos included) -> the layout over the row's ``n`` devices, as
#: :class:`~energylens.deployment.Deployment` fields. TensorRT-LLM splits attention over its
#: whole ``tp_size`` and each MoE layer ``moe_tp_size x moe_ep_size = tp_size`` ways
#: (TensorRT-LLM's expert-parallelism documentation; recalled, assumed): ``EP`` is
#: attention over all ``n`` and whole experts spread ``n`` ways, ``Hybrid TP = 2 and EP =
#: 2`` experts in two groups each split two ways. The hybrids name their split of four
#: devices (2 x 2), as every one of the file's ran.
LAYOUTS: dict[str, Callable[[int], Layout]] = {
    "Tensor Parallelism": lambda n: Layout(tp=n),
    "TP": lambda n: Layout(tp=n),
    "Pipeline Parallelism": lambda n: Layout(pp=n),
    "PP": lambda n: Layout(pp=n),
    "EP": lambda n: Layout(tp=n, ep=n, moe_tp=1),
    "Hybrid TP = 2 and EP = 2": lambda n: Layout(tp=4, ep=2, moe_tp=2),
    "Hybrid TP = 2 and PP = 2": lambda n: Layout(tp=2, pp=2),
    "Hybird Tensor (2) and Pipeline (2) Parallelism": lambda n: Layout(tp=2, pp=2),
}


class UnmodelledRow(Exception):
    """A row this reading does not price (a framework no runtime profile describes, a
    layout it does not know); the message is the reason reported."""


@dataclass(frozen=True, kw_only=True)
class BenchSetup:
    """What one row ran: the deployment and its sequences."""

    runtime: str
    deployment: Deployment
    sequences: int  # sequences in the batch
    tokens: int  # L in and L out

    @property
    def prompt_passes(self) -> int:
        """Forward passes of the prompt (llama.cpp: ceil(L / its -b), the deployment's
        ``prefill_chunk_tokens``; one elsewhere)."""
        chunk = self.deployment.prefill_chunk_tokens
        return 1 if chunk is None else math.ceil(self.tokens / chunk)


def bench_layout(values: Mapping[str, Any]) -> Layout:
    """The layout a row's ``Parallelism Type`` names over its devices (tensor parallelism
    over all of them without one); raises :class:`UnmodelledRow` for a label it does not
    read or a layout of another number of devices than the row's."""
    n = bench_devices(values)
    label = values.get("Parallelism Type")
    layout_of = LAYOUTS.get(str(label)) if label else LAYOUTS["TP"]
    if layout_of is None:
        raise UnmodelledRow(f"parallelism type {label!r} is not read (known: "
                            f"{', '.join(sorted(LAYOUTS))})")
    layout = layout_of(n)
    if layout.tp * layout.pp != n:
        raise UnmodelledRow(f"parallelism type {label!r} names a layout of "
                            f"{layout.tp * layout.pp} GPUs; the row ran on {n}")
    return layout


def bench_setup(values: Mapping[str, Any]) -> BenchSetup:
    """The setup of a loaded row's ``input``; raises :class:`UnmodelledRow`."""
    framework = str(values["Framework"])
    runtime = RUNTIMES.get(framework)
    if runtime is None:
        raise UnmodelledRow(f"framework {framework} has no runtime profile")
    n, tokens = bench_devices(values), int(values["Input Output Length"])
    batch = int(values["Batch Size"])
    if runtime == "llama.cpp":
        return BenchSetup(runtime=runtime,
                          deployment=Deployment(runtime=runtime, pp=n, num_gpus=n,
                                                prefill_chunk_tokens=batch),
                          sequences=1, tokens=tokens)
    layout = bench_layout(values)
    return BenchSetup(runtime=runtime,
                      deployment=Deployment(runtime=runtime, num_gpus=n, tp=layout.tp,
                                            pp=layout.pp, ep=layout.ep, moe_tp=layout.moe_tp,
                                            runtime_version=RELEASES.get(framework),
                                            routing=Routing(identical_sequences=framework
                                                            in IDENTICAL_PROMPTS)),
                      sequences=batch, tokens=tokens)


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    """A row priced: prefill and decode wall time (s) and the whole-batch prediction (a
    llama.cpp prompt in passes of its ``-b``: the deployment's ``prefill_chunk_tokens``)."""

    prefill_s: float
    decode_s: float
    prediction: Prediction

    @property
    def latency_s(self) -> float:
        """The row's end-to-end latency."""
        return self.prefill_s + self.decode_s


def price(*, model: str | ModelConfig, gpu: str, setup: BenchSetup,
          calibration: Calibration | str | Path | None) -> BenchRun:
    """Price one row (a batch larger than the KV space runs in waves: see
    :mod:`energylens.workloads.static_batch`). Raises what :func:`predict` raises; an
    infeasible prediction comes back as it is."""
    run = predict(model=model, gpu=gpu, deployment=setup.deployment,
                  workload=Workload(kind="batch", batch=setup.sequences,
                                    input_tokens=setup.tokens, output_tokens=setup.tokens),
                  calibration=calibration)
    return BenchRun(prefill_s=run.prefill.latency_s, decode_s=run.decode.latency_s,
                    prediction=run)
