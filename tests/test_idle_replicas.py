"""Fewer sequences or clients than replicas: a replica runs whole sequences, so the others
idle at static power instead of each running a fraction of a sequence."""

from __future__ import annotations

import pandas as pd
import pytest

from energylens.calibration.file import default_calibration
from energylens.deployment import Deployment
from energylens.predict import predict, predict_many
from energylens.workloads import Workload

MODEL, GPU = "llama-3.1-8b", "H100"
STATIC_W = default_calibration().kernel("H100-SXM").static_power_w


@pytest.mark.parametrize("kind", ["batch", "serving"])
def test_one_sequence_on_six_replicas_runs_on_one_the_others_idle(kind: str) -> None:
    """Batch 1 on 6 one-GPU replicas: the latencies and throughput of one GPU; the energy
    per token adds 5 GPUs' static power over the time the one takes per token."""
    work = Workload(kind=kind, batch=1, input_tokens=512, output_tokens=128)
    one = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=1), workload=work)
    six = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=6), workload=work)
    assert six.ttft_s == pytest.approx(one.ttft_s)
    assert six.tpot_s == pytest.approx(one.tpot_s)
    assert six.output_tokens_per_s == pytest.approx(one.output_tokens_per_s)
    assert six.running_batch == pytest.approx(1.0)
    extra = six.energy_per_output_token_j - one.energy_per_output_token_j
    assert extra == pytest.approx(5 * STATIC_W / one.output_tokens_per_s, rel=1e-6)


def test_three_sequences_on_six_replicas_keep_three_busy() -> None:
    work = Workload(kind="serving", batch=3, input_tokens=512, output_tokens=128)
    one = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=1),
                  workload=Workload(kind="serving", batch=1, input_tokens=512, output_tokens=128))
    six = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=6), workload=work)
    assert six.tpot_s == pytest.approx(one.tpot_s)
    assert six.output_tokens_per_s == pytest.approx(3 * one.output_tokens_per_s)


def test_one_client_on_four_replicas_is_served_by_one() -> None:
    """A closed loop of one client on 4 one-GPU replicas: one replica's requests/s and
    throughput (not four); the power adds 3 idle GPUs' static power."""
    work = Workload(kind="load", concurrency=1, input_tokens=512, output_tokens=128,
                    num_requests=40)
    one = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=1), workload=work)
    four = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=4), workload=work)
    assert four.output_tokens_per_s == pytest.approx(one.output_tokens_per_s)
    assert four.avg_power_w == pytest.approx(one.avg_power_w + 3 * STATIC_W)
    assert four.energy_per_output_token_j > one.energy_per_output_token_j


def test_predict_many_agrees_where_the_batch_is_smaller_than_the_replicas() -> None:
    table = pd.DataFrame({"gpu": [GPU] * 3, "num_gpus": [1, 4, 8], "tp": [1, 1, 2],
                          "batch": [1, 2, 3]})
    work = Workload(kind="serving", input_tokens=512, output_tokens=128)
    many = predict_many(model=MODEL, workload=work, table=table)
    for i, row in table.iterrows():
        one = predict(model=MODEL, gpu=GPU, workload=Workload(
            kind="serving", batch=float(row["batch"]), input_tokens=512, output_tokens=128),
            deployment=Deployment(num_gpus=int(row["num_gpus"]), tp=int(row["tp"])))
        assert many.loc[i, "tpot_s"] == pytest.approx(one.tpot_s)
        assert many.loc[i, "energy_per_output_token_j"] == pytest.approx(
            one.energy_per_output_token_j)


def test_a_closed_loops_idle_replicas_count_in_the_runs_energy() -> None:
    """The same one-client run on 1 and on 4 replicas: the iterations cost the same, the
    3 idle replicas add static power to the idle energy, and the total stays iterations +
    idle."""
    work = Workload(kind="load", concurrency=1, input_tokens=512, output_tokens=128,
                    num_requests=40)
    one = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=1), workload=work)
    four = predict(model=MODEL, gpu=GPU, deployment=Deployment(num_gpus=4), workload=work)
    a, b = one.load, four.load  # type: ignore[attr-defined]
    assert b["iteration_energy_j"] == pytest.approx(a["iteration_energy_j"])
    assert b["idle_energy_j"] > a["idle_energy_j"] + 3 * STATIC_W * 1.0  # a run of seconds
    assert b["total_energy_j"] == pytest.approx(b["iteration_energy_j"] + b["idle_energy_j"])
