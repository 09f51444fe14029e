"""A load on a deployment whose memory holds not even one request is reported infeasible,
and its figures price it as if it fit (what the CLI says of them): the requests run
together, not one at a time behind a KV cache of none."""

from __future__ import annotations

from energylens.deployment import Deployment
from energylens.predict import predict
from energylens.workloads import Workload
from energylens.workloads.load.disagg import Pool, predict_disaggregated

# DeepSeek-V3 on 8 H100: 85 GB of weights per GPU against 84 usable
MODEL, GPU = "deepseek-v3", "H100"


def test_a_closed_loop_that_does_not_fit_runs_its_clients_together() -> None:
    workload = Workload(kind="load", concurrency=8, num_requests=80, input_tokens=1024,
                        output_tokens=128)
    run = predict(model=MODEL, gpu=GPU, deployment=Deployment(tp=8), workload=workload)
    assert not run.feasible and "GB per GPU" in (run.infeasible_reason or "")
    # one at a time, it ran 1 request with 7 queued: TTFT 9.2 s, a batch of one's ITL
    assert run.load["mean_running"] > 7.5 and run.load["preemptions"] == 0
    alone = predict(model=MODEL, gpu=GPU, deployment=Deployment(tp=8), workload=Workload(
        kind="batch", batch=1, input_tokens=1024, output_tokens=128))
    assert run.tpot_s > alone.tpot_s  # eight sequences decode per step, not one
    assert run.ttft_s < 8 * alone.ttft_s  # no request waits for seven others' whole runs


def test_a_decode_pool_that_does_not_fit_decodes_its_requests_together() -> None:
    workload = Workload(kind="load", request_rate=4.0, num_requests=200, input_tokens=1024,
                        output_tokens=128)
    split = predict_disaggregated(
        model=MODEL, workload=workload,
        prefill=Pool(gpu="H200", deployment=Deployment(tp=8)),
        decode=Pool(gpu=GPU, deployment=Deployment(tp=8)))
    assert not split.feasible
    assert split.load["mean_running"] > 2 and split.load["preemptions"] == 0
    assert split.load["keeps_up"]
