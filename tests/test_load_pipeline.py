"""Pipeline parallelism under load: ``pp`` virtual engines, each stepping one micro-batch
through every stage (issue 12 leftovers)."""

from __future__ import annotations

from typing import Any

import pytest

from energylens.deployment import Deployment
from energylens.predict import predict
from energylens.workloads import Workload
from energylens.workloads.load.kind import LoadPrediction

MODEL, GPU = "llama-3.1-8b", "H100"
PIPE = Deployment(pp=2)


def _load(deployment: Deployment, **fields: Any) -> LoadPrediction:
    result = predict(model=MODEL, gpu=GPU, deployment=deployment,
                     workload=Workload(kind="load", **fields))
    assert isinstance(result, LoadPrediction)
    return result


def test_vanishing_load_is_one_prefill_through_every_stage() -> None:
    """Requests 100 s apart: TTFT is one prompt through both stages and both sends, as the
    static-batch kind prices one micro-batch at pp = 2 (fill and drain of one)."""
    alone = predict(model=MODEL, gpu=GPU, deployment=PIPE,
                    workload=Workload(kind="batch", batch=1, input_tokens=512, output_tokens=128))
    load = _load(PIPE, request_rate=0.01, num_requests=30, input_tokens=512, output_tokens=128)
    assert load.load["ttft_p50_s"] == pytest.approx(alone.ttft_s, rel=2e-3)
    assert load.load["tpot_p50_s"] == pytest.approx(alone.tpot_s, rel=1e-2)


def test_saturated_pipeline_runs_pp_micro_batches_per_pp_stage_times() -> None:
    """64 clients on pp = 2: two engines of 32 running requests, each stepping once per
    pp x (stage time + send); the replica's throughput is 64 tokens per such step, i.e.
    twice the steady state of 32 sequences through the whole model, less the sends."""
    load = _load(PIPE, concurrency=64, input_tokens=512, output_tokens=256)
    running = float(load.load["mean_running"]) / 2  # of one engine
    assert running == pytest.approx(32, rel=0.02)
    flat = predict(model=MODEL, gpu=GPU, deployment=Deployment(),
                   workload=Workload(kind="serving", batch=running, input_tokens=512,
                                     output_tokens=256))
    assert load.output_tokens_per_s == pytest.approx(2 * flat.output_tokens_per_s, rel=0.05)


def test_pipeline_never_beats_pp_times_one_stage_pipeline() -> None:
    """pp = 2 with the same clients: at most twice pp = 1's throughput (the bug it
    replaces gave three times), and no less than pp = 1's."""
    one = _load(Deployment(), concurrency=64, input_tokens=512, output_tokens=256)
    two = _load(PIPE, concurrency=64, input_tokens=512, output_tokens=256)
    ratio = two.output_tokens_per_s / one.output_tokens_per_s
    assert 1.0 <= ratio <= 2.0


def test_one_client_uses_one_engine() -> None:
    """A closed loop of one client keeps one micro-batch in flight: TPOT is the batch-1
    step through both stages and the throughput one token per TPOT."""
    load = _load(PIPE, concurrency=1, input_tokens=512, output_tokens=128, num_requests=40)
    assert load.output_tokens_per_s == pytest.approx(1 / load.tpot_s, rel=0.1)


def test_pipeline_and_data_parallelism_over_the_same_gpus_come_out_alike() -> None:
    """Two virtual engines of one pp = 2 replica serve like two replicas: same throughput
    and energy per token, less the stage-to-stage sends (and the KV pool each holds)."""
    pipe = _load(PIPE, concurrency=64, input_tokens=512, output_tokens=256)
    data = _load(Deployment(dp=2), concurrency=64, input_tokens=512, output_tokens=256)
    assert pipe.num_gpus == data.num_gpus == 2
    assert pipe.output_tokens_per_s == pytest.approx(data.output_tokens_per_s, rel=0.05)
    assert pipe.output_tokens_per_s <= data.output_tokens_per_s
    assert pipe.energy_per_output_token_j == pytest.approx(data.energy_per_output_token_j,
                                                           rel=0.05)
