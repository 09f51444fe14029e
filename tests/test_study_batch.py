"""A deployment study's batch hooks (evaluate_many, evaluate_table) equal evaluate one by one."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from energylens.cost.moe import Routing
from energylens.deployment import Workload
from energylens.model.zoo import get_model
from energylens.study.objective import DeploymentProblem
from search.problem import REASON_COLUMN

BASE = {"gpu": "H100", "num_gpus": 8, "tp": 2, "pp": 1, "batch": 16, "overlap_sms": 0,
        "clock_fraction": 1.0, "dtype": "bf16", "fuse_attention": True, "fuse_act": False}
BATCH: list[dict[str, Any]] = [
    BASE,
    {**BASE, "gpu": "A100-80GB", "tp": 4, "batch": 200, "clock_fraction": 0.55, "dtype": "fp8"},
    {**BASE, "num_gpus": 4, "tp": 8},  # more ranks than GPUs
    {**BASE, "tp": 3},  # does not divide the heads
    {**BASE, "overlap_sms": 400},  # more than the GPU's SMs: the objective's own words
    {**BASE, "gpu": "no-such-gpu"},
    {**BASE, "gpu": "H200", "pp": 2, "overlap_sms": 16, "fuse_attention": False, "batch": 3},
    {**BASE, "num_gpus": 1, "tp": 1, "batch": 256},  # too big for one GPU's memory
    {**BASE, "clock_fraction": 0.3},  # below the GPU's minimum clock
]


@pytest.fixture(autouse=True)
def columnar_for_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small tables go row by row in studies (faster there); these tests price them with
    the columnar path, which is what they check against ``evaluate``."""
    from energylens.study import batch_objective

    monkeypatch.setattr(batch_objective, "MIN_COLUMNAR_ROWS", 0)


def _same(batch: list[dict[str, Any]], problem: DeploymentProblem) -> None:
    many = problem.evaluate_many(batch)
    assert len(many) == len(batch)
    for params, got in zip(batch, many, strict=True):
        want = problem.evaluate(params)
        assert got.infeasible_reason == want.infeasible_reason, params
        assert set(got.metrics) == set(want.metrics), params
        for name, value in want.metrics.items():
            assert got.metrics[name] == pytest.approx(value, rel=1e-9, abs=0.0), (params, name)


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_evaluate_many_equals_evaluate_one_by_one(kind: str) -> None:
    problem = DeploymentProblem(model=get_model("llama-3.1-70b"),
                                workload=Workload(kind=kind, input_tokens=1024, output_tokens=256),
                                gpu_cost_per_hour={"H100-SXM": 2.5})
    _same(BATCH, problem)


def test_moe_with_skew_and_lengths_per_configuration() -> None:
    problem = DeploymentProblem(model=get_model("qwen3-30b-a3b"), workload=Workload(kind="serving"),
                                routing=Routing(kind="zipf", skew=1.1))
    batch = [{"gpu": "H100", "tp": 1, "ep": ep, "num_gpus": ep, "batch": b, "input_tokens": n,
              "output_tokens": 128, "fusion": fusion}
             for ep in (1, 4) for b in (1, 64) for n in (128, 2048)
             for fusion in ("none", "qkv,gate_up")]
    _same(batch, problem)


def test_evaluate_table_keeps_the_index_and_reports_reasons() -> None:
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload())
    table = pd.DataFrame(BATCH[:4], index=[10, 11, 12, 13])
    frame = problem.evaluate_table(table)
    assert list(frame.index) == [10, 11, 12, 13]
    assert frame.loc[10, REASON_COLUMN] is None and frame.loc[12, REASON_COLUMN]
    assert math.isnan(frame.loc[12, "tpot_s"]) and frame.loc[10, "tpot_s"] > 0


def test_search_uses_the_columnar_hook() -> None:
    from search.problem import evaluate_batch, evaluate_frame

    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload())
    frame = evaluate_frame(problem, pd.DataFrame(BATCH[:3]))
    assert frame.loc[0, "tpot_s"] == pytest.approx(problem.evaluate(BATCH[0]).metrics["tpot_s"])
    assert [e.infeasible_reason for e in evaluate_batch(problem, BATCH[:3])] == [
        problem.evaluate(p).infeasible_reason for p in BATCH[:3]]


def test_knobs_the_columns_do_not_cover_are_evaluated_one_by_one() -> None:
    """A per-phase clock prices decode at another clock: evaluate's own path, row by row."""
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload())
    batch = [{**BASE, "num_gpus": 1, "tp": 1, "decode_clock_fraction": f} for f in (0.6, 1.0)]
    _same(batch, problem)


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_batch_per_replica_is_the_batch_that_runs(kind: str) -> None:
    """4,096 sequences over 2 replicas of one H100 do not fit the KV cache: each replica runs
    fewer than the 2,048 asked (serving: a capped batch; batch: waves), and batch_per_replica
    is that running batch, on the row-by-row and the columnar path alike."""
    from energylens.deployment import Deployment
    from energylens.predict import predict

    workload = Workload(kind=kind, input_tokens=2048, output_tokens=512)
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=workload)
    params = {"gpu": "H100", "num_gpus": 2, "tp": 1, "batch": 4096}
    found = problem.evaluate(params).metrics["batch_per_replica"]
    running = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(num_gpus=2),
                      workload=Workload(kind=kind, batch=4096, input_tokens=2048,
                                        output_tokens=512)).running_batch
    assert running is not None and found == pytest.approx(running) and 1 <= found < 2048
    assert problem.evaluate_many([params])[0].metrics["batch_per_replica"] == pytest.approx(found)
    assert problem.evaluate({**params, "batch": 8}).metrics["batch_per_replica"] == 4


def test_a_configuration_proposed_again_is_not_predicted_again(monkeypatch) -> None:
    """The objective keeps what it evaluated: the same configuration gets equal metrics
    (a copy, so a caller's edit cannot leak into the next trial) without a second
    prediction; another configuration is predicted."""
    import energylens.study.objective as objective

    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload())
    calls = []
    original = objective.predict
    monkeypatch.setattr(objective, "predict", lambda **kw: calls.append(1) or original(**kw))
    params = {"gpu": "H100", "num_gpus": 2, "tp": 2, "batch": 16}
    first = problem.evaluate(params)
    first.metrics["tpot_s"] = -1.0
    again = problem.evaluate(dict(reversed(params.items())))
    assert len(calls) == 1 and again.metrics["tpot_s"] > 0
    assert again.metrics.keys() == first.metrics.keys()
    other = problem.evaluate({**params, "batch": 32})
    assert len(calls) == 2 and other.metrics["tpot_s"] != again.metrics["tpot_s"]
    refused = problem.evaluate({**params, "tp": 3})
    assert problem.evaluate({**params, "tp": 3}) == refused and refused.infeasible_reason


def test_a_kv_dtype_knob_prices_the_same_columnar_and_one_by_one() -> None:
    """``kv_dtype``: auto is the runtime's default; an FP8 cache on H100 holds half the
    bytes (a longer context decodes faster); llama.cpp's q8_0 is refused by vLLM."""
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"),
                                workload=Workload(kind="serving", input_tokens=8192,
                                                  output_tokens=256))
    batch = [{"gpu": "H100", "tp": 1, "batch": 64, "kv_dtype": kv}
             for kv in ("auto", "bf16", "fp8", "q8_0")]
    _same(batch, problem)
    auto, bf16, fp8, q8 = (problem.evaluate(p) for p in batch)
    assert auto.metrics == bf16.metrics
    assert fp8.metrics["tpot_s"] < bf16.metrics["tpot_s"]
    assert q8.infeasible_reason is not None and "no q8_0 KV cache" in q8.infeasible_reason
