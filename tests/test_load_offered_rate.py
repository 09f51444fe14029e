"""The rate at which the measured requests arrive (``offered_requests_per_s``), and the note
a bursty trace clock earns: Splitwise's code trace, rescaled to a rate over its first 800
rows, has an idle gap of ~380 s in its first 80 (the warm-up), so its measured requests
arrive ~2.6x faster than the rate asked for."""

from __future__ import annotations

import numpy as np
import pytest

from energylens.deployment import Deployment, Workload
from energylens.predict import predict
from energylens.workloads.load.arrivals import replica_requests
from energylens.workloads.load.cli import trace_rate_note

CODE = "data/measurements/traces/splitwise_code.csv"


def _run(workload: Workload):
    return predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(), workload=workload)


def test_poisson_arrivals_come_at_the_rate_asked_for() -> None:
    workload = Workload(kind="load", request_rate=5.0, input_tokens=512, output_tokens=64,
                        num_requests=2000)
    result = _run(workload)
    assert result.load["offered_requests_per_s"] == pytest.approx(5.0, rel=0.08)
    # a stable engine serves what it is offered in the same window
    assert result.load["requests_per_s"] == pytest.approx(result.load["offered_requests_per_s"],
                                                          rel=0.05)
    assert trace_rate_note(result, workload=workload) is None


def test_a_closed_loop_is_offered_what_it_serves() -> None:
    result = _run(Workload(kind="load", concurrency=16, input_tokens=512, output_tokens=64))
    assert result.load["offered_requests_per_s"] == pytest.approx(result.load["requests_per_s"],
                                                                  rel=0.02)


def test_a_bursty_trace_clock_is_named_with_the_rate_it_brings() -> None:
    workload = Workload(kind="load", trace=CODE, request_rate=1.0, num_requests=800)
    arrivals = np.sort(replica_requests(workload=workload, replicas=1, count=800).arrival_s)
    # the rows from the 80th to the 720th by arrival (the measured ones) come ~2.6x faster
    local = (720 - 80) / (arrivals[720] - arrivals[80])
    assert local > 2.0
    result = _run(workload)
    assert result.load["offered_requests_per_s"] == pytest.approx(local, rel=0.05)
    note = trace_rate_note(result, workload=workload)
    assert note is not None and "bursty" in note and "1 requests/s" in note


def test_replicas_are_offered_the_deployment_s_rate() -> None:
    """Two replicas behind a balancer: the rates reported are the deployment's, offered and
    served alike."""
    workload = Workload(kind="load", request_rate=6.0, input_tokens=512, output_tokens=64,
                        num_requests=2000)
    result = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(num_gpus=2, dp=2),
                     workload=workload)
    assert result.load["offered_requests_per_s"] == pytest.approx(6.0, rel=0.08)
    assert result.load["requests_per_s"] == pytest.approx(6.0, rel=0.08)
