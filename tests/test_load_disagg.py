"""Disaggregated prefill/decode pools (``--prefill-pool``/``--decode-pool``)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.predict import predict
from energylens.workloads import Workload
from energylens.workloads.load.disagg import (
    REQUEST_HANDOFF_S,
    Pool,
    predict_disaggregated,
    transfer_cost,
)
from energylens.workloads.load.kind import LoadPrediction

MODEL = "llama-3.1-8b"


def _pools(prefill: str = "H100", decode: str = "H100", tp: int = 1) -> dict[str, Pool]:
    return {"prefill": Pool(gpu=prefill, deployment=Deployment(tp=tp)),
            "decode": Pool(gpu=decode, deployment=Deployment(tp=tp))}


def test_at_vanishing_load_ttft_is_one_prefill_plus_the_cache_transfer() -> None:
    """With nothing queued, TTFT is a batch-1 prefill, the cache's transfer and the
    request path's fixed handoff; TPOT a batch-1 decode step."""
    workload = Workload(kind="load", request_rate=0.01, num_requests=30, input_tokens=1024,
                        output_tokens=64)
    split = predict_disaggregated(model=MODEL, workload=workload, **_pools())
    alone = predict(model=MODEL, gpu="H100", workload=Workload(
        kind="batch", batch=1, input_tokens=1024, output_tokens=64))
    moved = float(split.load["kv_transfer_mean_s"])
    assert 0 < moved < 0.01
    assert split.load["request_handoff_s"] == REQUEST_HANDOFF_S
    assert split.load["ttft_p50_s"] == pytest.approx(alone.ttft_s + moved + REQUEST_HANDOFF_S,
                                                     rel=2e-3)
    assert split.load["tpot_p50_s"] == pytest.approx(alone.tpot_s, rel=1e-2)
    assert split.num_gpus == 2


def test_the_cache_crosses_nodes_slower_than_nvlink_and_grows_with_the_prompt() -> None:
    from energylens.calibration.file import default_calibration
    from energylens.model.zoo import get_model
    from energylens.workloads.load.disagg import bind_pool

    model, cal = get_model(MODEL), default_calibration()
    h100 = bind_pool(model=model, pool=_pools()["prefill"], calibration=cal, longest=4096)
    h200 = bind_pool(model=model, pool=_pools(decode="H200")["decode"], calibration=cal,
                 longest=4096)
    tokens = np.array([256, 1024, 4096])
    near_s, near_j = transfer_cost(prefill=h100.placement, decode=h100.placement, tokens=tokens)
    far_s, _ = transfer_cost(prefill=h100.placement, decode=h200.placement, tokens=tokens)
    assert np.all(np.diff(near_s) > 0) and np.all(np.diff(near_j) > 0)
    assert np.all(far_s > near_s)


def test_pools_split_the_work_and_add_their_power() -> None:
    workload = Workload(kind="load", request_rate=10.0, num_requests=600, input_tokens=2048,
                        output_tokens=128, slo=("ttft_p90_s<=1",))
    split = predict_disaggregated(model=MODEL, workload=workload, **_pools())
    assert isinstance(split, LoadPrediction) and split.feasible
    assert float(split.load["requests_per_s"]) == pytest.approx(10.0, rel=0.1)
    assert split.avg_power_w == pytest.approx(split.energy_per_output_token_j
                                              * split.output_tokens_per_s, rel=1e-12)
    # the prefill pool runs no decode steps, the decode pool no prompt (no preemption here)
    assert split.load["preemptions"] == 0
    assert split.prefill.energy_j > 0 and split.decode.energy_j > 0


def test_one_client_over_two_pools_waits_for_nothing() -> None:
    """A closed loop of one client: each request finds both pools idle, so TTFT is one
    prefill plus the cache transfer and the handoff, TPOT a decode step of one, and the
    client sends its next request as the last one ends (requests/s = 1 / end-to-end)."""
    workload = Workload(kind="load", concurrency=1, num_requests=12, input_tokens=1024,
                        output_tokens=64, warmup_fraction=0.0)
    split = predict_disaggregated(model=MODEL, workload=workload, **_pools())
    alone = predict(model=MODEL, gpu="H100", workload=Workload(
        kind="batch", batch=1, input_tokens=1024, output_tokens=64))
    moved = float(split.load["kv_transfer_mean_s"])
    assert split.load["ttft_p90_s"] == pytest.approx(alone.ttft_s + moved + REQUEST_HANDOFF_S,
                                                     rel=2e-3)
    assert split.load["tpot_p50_s"] == pytest.approx(alone.tpot_s, rel=1e-2)
    assert float(split.load["requests_per_s"]) == pytest.approx(
        1 / float(split.load["e2e_mean_s"]), rel=0.02)


@pytest.mark.parametrize(("clients", "decode_replicas"), [(8, 1), (24, 2)])
def test_a_closed_loop_over_two_pools_keeps_its_clients_busy(clients: int,
                                                             decode_replicas: int) -> None:
    """Little's law on the fixed point of arrivals and completions: the clients are the
    throughput times the mean end-to-end latency (each client always has one request in
    flight), and queueing grows TTFT past the idle pools' (8 or 24 prompts at once; the
    handoff is the same for both)."""
    workload = Workload(kind="load", concurrency=clients, num_requests=10 * clients,
                        input_tokens=2048, output_tokens=128, warmup_fraction=0.0)
    pools = {"prefill": Pool(gpu="H100", deployment=Deployment()),
             "decode": Pool(gpu="H100", deployment=Deployment(dp=decode_replicas))}
    split = predict_disaggregated(model=MODEL, workload=workload, **pools)
    load = split.load
    in_flight = float(load["requests_per_s"]) * float(load["e2e_mean_s"])
    assert in_flight == pytest.approx(clients, rel=0.1)
    one = predict_disaggregated(model=MODEL, workload=replace(
        workload, concurrency=1, num_requests=10), **pools)
    queued, idle = (float(x["ttft_mean_s"]) - REQUEST_HANDOFF_S for x in (load, one.load))
    assert queued > 2 * idle
    parts = float(load["iteration_energy_j"]) + float(load["idle_energy_j"]) \
        + float(load["kv_transfer_energy_j"])
    assert float(load["total_energy_j"]) == pytest.approx(parts, rel=1e-12)


def test_each_attention_rank_of_a_pool_schedules_its_own_requests() -> None:
    """Under attention DP a pool's ranks are streams of their own, as in a colocated
    replica: each rank of Qwen3-30B-A3B's decode pool holds its half of the replica's KV
    cache and its share of the clients' requests (one scheduler with one rank's cap held a
    whole replica's)."""
    from energylens.calibration.file import default_calibration
    from energylens.model.zoo import get_model
    from energylens.workloads.load.disagg import bind_pool
    from energylens.workloads.load.kind import kv_pool_tokens

    model, cal = get_model("qwen3-30b-a3b"), default_calibration()
    bound = bind_pool(model=model, pool=Pool(gpu="H100", deployment=Deployment(
        tp=1, attention_dp=2, ep=2, dp=3)), calibration=cal, longest=4096)
    assert bound.engines == 2 and bound.streams == 6
    # each rank's scheduler holds the tokens of its own half of the replica's cache
    replica_tokens = kv_pool_tokens(bound.placement.ctx, budget=bound.limits.token_budget)
    assert bound.limits.kv_tokens == replica_tokens // 2
    # 8 clients on 3 replicas of 2 ranks: requests go round robin over the 6 streams
    split = predict_disaggregated(model=model, workload=Workload(
        kind="load", concurrency=8, num_requests=80, input_tokens=1024, output_tokens=64,
        warmup_fraction=0.0), prefill=Pool(gpu="H100", deployment=Deployment(tp=2)),
        decode=Pool(gpu="H100", deployment=Deployment(tp=1, attention_dp=2, ep=2, dp=3)))
    assert split.num_gpus == 2 + 6
    in_flight = float(split.load["requests_per_s"]) * float(split.load["e2e_mean_s"])
    assert in_flight == pytest.approx(8, rel=0.1)


def test_cli_pools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", MODEL, "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--num-requests", "200", "--prefill-pool", "H100:1",
                 "--decode-pool", "H200:1:2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_gpus"] == 3 and out["decode_pool_gpus"] == 2
    assert out["gpu"] == "1 x H100-SXM (prefill) + 2 x H200-SXM (decode)"
    code = main(["predict", "--model", MODEL, "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--prefill-pool", "H100:1"])
    assert code == 2 and "needs both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["predict", "--model", MODEL, "--gpu", "H100", "--prefill-pool", "H100:x"])
    assert "expected GPU:TP[:REPLICAS]" in capsys.readouterr().err


def test_capacity_of_two_pools() -> None:
    slos = ("ttft_p90_s<=0.5", "tpot_p90_s<=0.03")
    found = predict_disaggregated(model=MODEL, workload=Workload(
        kind="load", request_rate=1.0, num_requests=300, slo=slos, capacity_attainment=0.9),
        **_pools())
    capacity = float(found.load["capacity_requests_per_s"])
    assert found.load["capacity_per_gpu"] == pytest.approx(capacity / 2)
    at = predict_disaggregated(model=MODEL, workload=Workload(
        kind="load", request_rate=capacity, num_requests=300, slo=slos), **_pools())
    assert float(at.load["slo_attainment"]) >= 0.9


def test_a_closed_loops_capacity_is_probed_in_open_loops() -> None:
    """--capacity beside --concurrency: the capacity is a request rate, probed in open
    loops as a colocated deployment's is (a probe kept the concurrency beside its rate,
    which a workload refuses)."""
    slos = ("ttft_p90_s<=0.5", "tpot_p90_s<=0.03")
    closed = predict_disaggregated(model=MODEL, workload=Workload(
        kind="load", concurrency=4, num_requests=300, slo=slos, capacity_attainment=0.9),
        **_pools())
    opened = predict_disaggregated(model=MODEL, workload=Workload(
        kind="load", request_rate=1.0, num_requests=300, slo=slos, capacity_attainment=0.9),
        **_pools())
    assert float(closed.load["capacity_requests_per_s"]) == pytest.approx(
        float(opened.load["capacity_requests_per_s"]), rel=1e-12)


def test_a_cache_transfer_counts_its_bytes_once_and_the_links_power_at_both_ends() -> None:
    """By hand, per TP rank pair: sent bytes x energy per byte + 2 x link power x time
    (each byte once, as a collective's are per sending GPU; it was charged twice)."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.comm import link_for_group
    from energylens.model.zoo import get_model
    from energylens.workloads.load.disagg import bind_pool

    model, cal = get_model(MODEL), default_calibration()
    pool = bind_pool(model=model, pool=_pools(tp=2)["prefill"], calibration=cal, longest=4096)
    tokens = np.array([1024, 4096])
    seconds, joules = transfer_cost(prefill=pool.placement, decode=pool.placement, tokens=tokens)
    kind, _ = link_for_group(gpu=pool.placement.ctx.gpu, group_size=4)
    link = cal.link(gpu="H100-SXM", kind=kind)
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K, V) x 2 B = 131,072 B a token, half a rank
    sent = tokens * 131_072 / 2
    expected = 2 * (sent * link.energy_per_byte_j + 2 * link.power_w * seconds)
    assert joules == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("prefill", "decode"), [(1, 1), (4, 1), (1, 2)])
def test_the_energy_totals_cover_every_replica_of_both_pools(prefill: int, decode: int) -> None:
    """Whole-run energy = iterations + idle + cache transfers, over every replica of both
    pools, and per request it is what energy_per_request_j says (every request measured):
    prefill replicas that mostly wait add their static power. It covered decode replica 0
    alone: 75.7 kJ for 600 requests with 1 or 4 prefill replicas, against 101.6 and
    168.1 kJ from energy_per_request_j."""
    workload = Workload(kind="load", request_rate=4.0, num_requests=600, warmup_fraction=0.0)
    split = predict_disaggregated(
        model=MODEL, workload=workload,
        prefill=Pool(gpu="H100", deployment=Deployment(dp=prefill)),
        decode=Pool(gpu="H100", deployment=Deployment(dp=decode)))
    load = split.load
    parts = float(load["iteration_energy_j"]) + float(load["idle_energy_j"]) \
        + float(load["kv_transfer_energy_j"])
    assert float(load["total_energy_j"]) == pytest.approx(parts, rel=1e-12)
    assert float(load["kv_transfer_energy_j"]) == pytest.approx(
        600 * float(load["kv_transfer_j_per_request"]), rel=1e-9)
    assert float(load["total_energy_j"]) == pytest.approx(600 * split.energy_per_request_j,
                                                          rel=0.03)


def test_pools_that_do_not_fit_one_node_ship_the_cache_over_the_scale_out_network() -> None:
    """Prefill TP4 x 1 with decode TP4 x 1 fill one 8-GPU node: NVLink. With decode TP4 x 3
    (16 GPUs) the prefill replica sends to three decode replicas, at most one on its node:
    the scale-out network, as collective_cost prices a send over it (every transfer was
    priced over NVLink, each replica pair fitting a node)."""
    from energylens.calibration.file import default_calibration
    from energylens.cost.comm import collective_cost, link_for_group
    from energylens.model.zoo import get_model
    from energylens.workloads.load.disagg import bind_pool

    model, cal = get_model(MODEL), default_calibration()

    def placement(replicas: int):  # type: ignore[no-untyped-def]
        pool = Pool(gpu="H100", deployment=Deployment(tp=4, dp=replicas))
        return bind_pool(model=model, pool=pool, calibration=cal, longest=4096).placement

    prefill = placement(1)
    tokens = np.array([1024, 4096])
    near_s, _ = transfer_cost(prefill=prefill, decode=placement(1), tokens=tokens)
    far_s, _ = transfer_cost(prefill=prefill, decode=placement(3), tokens=tokens)
    gpu = prefill.ctx.gpu
    for seconds, group in ((near_s, 8), (far_s, gpu.gpus_per_node + 1)):
        kind, bandwidth = link_for_group(gpu=gpu, group_size=group)
        expected = collective_cost(kind="send_recv", message_bytes=tokens * 131_072 / 4,
                                   group_size=2, bandwidth=bandwidth,
                                   constants=cal.link(gpu=gpu.name, kind=kind)).latency_s
        assert seconds == pytest.approx(np.asarray(expected, dtype=float), rel=1e-9)
    assert np.all(far_s > near_s)


def test_each_pools_memory_is_the_kv_it_held_at_its_peak() -> None:
    """Disaggregated, the memory reported is the fuller pool's at its peak: the decode
    pool's cache grows with the rate (it was one request's working set at any rate)."""
    found = [predict_disaggregated(model=MODEL, workload=Workload(
        kind="load", request_rate=rate, num_requests=400, input_tokens=2048,
        output_tokens=512), **_pools()) for rate in (0.5, 8.0)]
    held = (float(found[1].load["peak_kv_tokens"]) - float(found[0].load["peak_kv_tokens"])) \
        * 131_072 / 1e9
    assert held > 10.0
    assert found[1].memory_per_gpu_gb - found[0].memory_per_gpu_gb == pytest.approx(held,
                                                                                   rel=1e-9)


@pytest.mark.parametrize("flags", [["--attention-dp", "4"], ["--ep", "2"], ["--pp", "2"],
                                   ["--num-gpus", "8"], ["--tp", "2"]])
def test_layout_flags_beside_pools_are_refused(capsys: pytest.CaptureFixture[str],
                                               flags: list[str]) -> None:
    """The pools carry the layout: a layout flag beside them was silently dropped (or, for
    --attention-dp 4, multiplied each pool's GPUs by 4)."""
    code = main(["predict", "--model", MODEL, "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--num-requests", "100", "--prefill-pool", "H100:1",
                 "--decode-pool", "H100:1", *flags])
    err = capsys.readouterr().err
    assert code == 2 and flags[0] in err and len(err.strip().splitlines()) == 1


def test_a_full_decode_pool_holds_requests_back_until_their_cache_fits() -> None:
    """Prompts of 4,096 tokens at 2 a second, each decoding 2,048 tokens: one H100
    prefills them as they come, but one H100 decoding holds ~70 of them (6,144 tokens of
    128 KiB), not the ~230 that arrive over a request's life. vLLM's decode pool admits a
    cache once it fits and preempts when the decodes outgrow it; TensorRT-LLM's reserves
    every request's output, so it never preempts: a request waits for room before its
    first token (the TTFT holds the wait, seconds where the prefill takes 0.3 s) and then
    decodes at the pool's full batch (TPOT p99 = p50; when the first token was counted at
    the cache's arrival, the wait fell into the TPOT)."""
    workload = Workload(kind="load", request_rate=2.0, num_requests=300, input_tokens=4096,
                        output_tokens=2048)
    found = {}
    for runtime in ("vllm", "trtllm"):
        pool = Pool(gpu="H100", deployment=Deployment(runtime=runtime))
        found[runtime] = predict_disaggregated(model=MODEL, workload=workload, prefill=pool,
                                               decode=pool).load
    assert int(found["vllm"]["preemptions"]) > 0
    trt = found["trtllm"]
    assert int(trt["preemptions"]) == 0
    assert float(trt["ttft_p50_s"]) > 5.0
    assert float(trt["tpot_p99_s"]) == pytest.approx(float(trt["tpot_p50_s"]), rel=0.05)


def test_cli_pools_take_expert_parallelism_and_attention_dp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pool's options are the layout flags of one replica: the CLI's decode pool
    ``H100:1:1:ep=2,attention-dp=2`` is the API's Deployment(tp=1, ep=2, attention_dp=2)
    (two GPUs, two attention ranks, the experts split over both); before, a pool could be
    given only a TP size."""
    model = "qwen3-30b-a3b"
    workload = Workload(kind="load", request_rate=2.0, num_requests=100, input_tokens=512,
                        output_tokens=64)
    assert main(["predict", "--model", model, "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--num-requests", "100", "--input-tokens", "512",
                 "--output-tokens", "64", "--prefill-pool", "H100:1",
                 "--decode-pool", "H100:1:1:ep=2,attention-dp=2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    api = predict_disaggregated(
        model=model, workload=workload, prefill=Pool(gpu="H100", deployment=Deployment()),
        decode=Pool(gpu="H100", deployment=Deployment(tp=1, ep=2, attention_dp=2)))
    assert out["decode_pool_gpus"] == 2 and out["num_gpus"] == 3
    assert out["tpot_s"] == pytest.approx(api.tpot_s, rel=1e-9)
    assert out["ttft_s"] == pytest.approx(api.ttft_s, rel=1e-9)
    for bad in ("H100:1:ep=2,ep=2", "H100:1:1:dp=2", "H100:1:1:ep=0", "H100:1:ep"):
        with pytest.raises(SystemExit):
            main(["predict", "--model", model, "--gpu", "H100", "--decode-pool", bad])
        assert "expected GPU:TP[:REPLICAS][:ep=N" in capsys.readouterr().err
