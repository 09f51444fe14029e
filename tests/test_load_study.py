"""Studies on a ``load`` workload: its keys, knobs and percentile metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.errors import ProblemError
from energylens.study.objective import SCHEMA, problem_from_study

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "azure_conv_goodput.yaml"
WORKLOAD = {"kind": "load", "trace": "../data/measurements/traces/splitwise_conv.csv",
            "request_rate": 4, "num_requests": 400, "slo": ["ttft_p90_s<=1", "tpot_p90_s<=0.05"]}


def test_a_load_study_reports_percentiles_goodput_and_attainment() -> None:
    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": WORKLOAD},
                                 source=STUDY)
    assert problem.workload.trace and Path(problem.workload.trace).is_file()
    low = problem.evaluate({"gpu": "H100", "tp": 1})
    high = problem.evaluate({"gpu": "H100", "tp": 1, "request_rate": 40.0})
    for evaluation in (low, high):
        assert evaluation.infeasible_reason is None
        assert set(evaluation.metrics) >= {"ttft_p90_s", "tpot_p99_s", "goodput_per_gpu",
                                           "slo_attainment", "itl_p50_s", "requests_per_s"}
        assert set(evaluation.metrics) <= set(SCHEMA.metrics)
    assert low.metrics["slo_attainment"] > high.metrics["slo_attainment"]
    assert low.metrics["ttft_p90_s"] < high.metrics["ttft_p90_s"]
    assert low.metrics["requests_per_s"] == pytest.approx(4.0, rel=0.15)


def test_a_concurrency_knob_makes_a_closed_loop() -> None:
    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": WORKLOAD},
                                 source=STUDY, params=["concurrency"])
    few = problem.evaluate({"gpu": "H100", "concurrency": 2})
    many = problem.evaluate({"gpu": "H100", "concurrency": 32})
    assert few.metrics["mean_running"] == pytest.approx(2, rel=0.05)
    assert many.metrics["mean_running"] > 20


def test_a_study_workload_may_share_a_prompt_prefix() -> None:
    """``shared_prefix_tokens`` in a study's workload reaches the simulator: 1,500 of 2,000
    prompt tokens cached shorten TTFT at the same request rate."""
    fixed = {"kind": "load", "input_tokens": 2000, "output_tokens": 64, "request_rate": 2,
             "num_requests": 200}
    cold = problem_from_study(problem={"model": "llama-3.1-8b", "workload": fixed},
                              source=STUDY).evaluate({"gpu": "H100", "tp": 1})
    warm = problem_from_study(problem={"model": "llama-3.1-8b", "workload": {
        **fixed, "shared_prefix_tokens": 1500}}, source=STUDY).evaluate({"gpu": "H100", "tp": 1})
    assert warm.metrics["ttft_p50_s"] < 0.5 * cold.metrics["ttft_p50_s"]


@pytest.mark.parametrize(("workload", "params", "message"), [
    ({**WORKLOAD, "slo": "ttft<=1"}, (), "workload.slo: SLO 'ttft<=1'"),
    ({**WORKLOAD, "slo": [1]}, (), "workload.slo: expected a bound"),
    ({**WORKLOAD, "request_rate": -1}, (), "request_rate must be a finite number > 0"),
    ({**WORKLOAD, "num_requests": "many"}, (), "workload.num_requests: expected a number"),
    ({**WORKLOAD, "shared_prefix_tokens": -3}, (), "shared_prefix_tokens must be an integer"),
    ({**WORKLOAD, "trace": "missing.csv"}, (), "workload.trace: "),
    ({"kind": "batch", "request_rate": 3}, (), "only a 'load' workload reads it"),
    ({"kind": "serving"}, ("request_rate",), "request_rate: expected workload kind 'load'"),
])
def test_bad_load_study_keys_are_one_line_problem_errors(
        workload: dict[str, object], params: tuple[str, ...], message: str) -> None:
    with pytest.raises(ProblemError, match=message) as info:
        problem_from_study(problem={"model": "llama-3.1-8b", "workload": workload},
                           source=STUDY, params=params)
    assert "\n" not in str(info.value) and str(STUDY) in str(info.value)


def test_a_disaggregated_configuration_is_priced_as_two_pools() -> None:
    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": WORKLOAD},
                                 source=STUDY, params=["mode", "prefill_tp", "decode_dp"])
    split = problem.evaluate({"mode": "disaggregated", "gpu": "H100", "prefill_tp": 1,
                              "decode_dp": 2})
    together = problem.evaluate({"mode": "colocated", "gpu": "H100", "dp": 3})
    assert split.infeasible_reason is None and together.infeasible_reason is None
    assert split.metrics["num_gpus"] == together.metrics["num_gpus"] == 3
    assert split.metrics["goodput_per_gpu"] > 0
    with pytest.raises(ProblemError, match="mode: expected workload kind 'load'"):
        problem_from_study(problem={"model": "llama-3.1-8b", "workload": {"kind": "batch"}},
                           source=STUDY, params=["mode"])


@pytest.mark.parametrize(("workload", "metrics", "fragment"), [
    ("{kind: serving, batch: 8}", "objectives: [maximize capacity_per_gpu]",
     "objectives[0]: capacity_per_gpu: expected workload kind 'load'"),
    ("{kind: load, request_rate: 2, num_requests: 50, slo: ['ttft_p90_s<=1']}",
     "objectives: [minimize energy_per_request_j, maximize capacity_requests_per_s]",
     "objectives[1]: capacity_requests_per_s: expected workload.capacity_attainment"),
    ("{kind: batch, batch: 8}",
     "objectives: [minimize energy_per_request_j]\nconstraints: ['tpot_p90_s <= 0.05']",
     "constraints[0]: tpot_p90_s: expected workload kind 'load'"),
])
@pytest.mark.parametrize("action", ["check", "run"])
def test_a_metric_the_workload_never_reports_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str, metrics: str,
        fragment: str, action: str) -> None:
    """A load-only metric on another workload, or a capacity without capacity_attainment,
    would be missing from every trial: check and run refuse it in one line (exit 2) and
    create nothing."""
    from energylens.cli.main import main

    study = tmp_path / "study.yaml"
    study.write_text(f"model: llama-3.1-8b\nworkload: {workload}\n{metrics}\nspace:\n"
                     "  knobs: {tp: {type: ordinal, values: [1, 2]}}\n  fixed: {gpu: H100}\n"
                     "engine: grid\n")
    code = main(["study", action, str(study)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and fragment in lines[0], err
    assert [p.name for p in tmp_path.iterdir()] == ["study.yaml"]


def test_batch_per_replica_of_a_load_run_is_its_mean_running_batch() -> None:
    """Under load batch_per_replica is the time-average running requests of a replica: two
    closed-loop clients over two replicas keep about one running on each (not the
    workload's batch over the replicas)."""
    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": WORKLOAD},
                                 source=STUDY, params=["concurrency"])
    metrics = problem.evaluate({"gpu": "H100", "dp": 2, "concurrency": 2}).metrics
    assert metrics["batch_per_replica"] == metrics["mean_running"]
    assert metrics["batch_per_replica"] == pytest.approx(1.0, rel=0.05)


def test_each_pool_of_a_disaggregated_point_is_priced_at_its_own_gpu() -> None:
    """2 H100 prefilling and 2 H200 decoding cost 2 x 2.5 + 2 x 3.2 = 11.4 $/h (the GPU
    files' prices; a study's gpu_cost_per_hour beats them), not 4 GPUs at the H200 rate;
    the colocated gpu knob, which the pools override, plays no part."""
    params = {"mode": "disaggregated", "gpu": "B200", "prefill_gpu": "H100", "decode_gpu": "H200",
              "prefill_tp": 2, "decode_tp": 2}
    for costs, hourly in (({}, 2 * 2.5 + 2 * 3.2), ({"H100": 1.0}, 2 * 1.0 + 2 * 3.2)):
        problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": WORKLOAD,
                                              "gpu_cost_per_hour": costs},
                                     source=STUDY, params=list(params))
        metrics = problem.evaluate(params).metrics
        assert metrics["num_gpus"] == 4
        assert metrics["cost_per_million_tokens"] == pytest.approx(
            hourly / 3600 / metrics["output_tokens_per_s"] * 1e6)


def test_a_parameter_its_configuration_does_not_read_changes_nothing() -> None:
    """What inactive_params names is what the objective ignores: changing it leaves every
    metric as it was (a disaggregated point's colocated gpu, tp and layout, at a clock
    fraction of each pool's own GPU; a colocated point's pool knobs)."""
    from energylens.study.objective import inactive_params

    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": {
        **WORKLOAD, "num_requests": 100}}, source=STUDY, params=["mode"])
    split = {"mode": "disaggregated", "prefill_gpu": "H100", "decode_gpu": "H200",
             "prefill_tp": 1, "decode_tp": 1, "decode_dp": 2, "clock_fraction": 0.9,
             "gpu": "B200", "tp": 2, "dp": 3, "num_gpus": 8, "draft_acceptance": 0.5,
             "attention_dp": 1}
    together = {"mode": "colocated", "gpu": "H100", "tp": 2, "prefill_gpu": "H200",
                "prefill_tp": 4, "decode_dp": 3}
    others = {"gpu": "H100", "tp": 4, "dp": 1, "num_gpus": 2, "prefill_gpu": "A100-80GB",
              "prefill_tp": 2, "decode_dp": 1, "draft_acceptance": 0.9, "attention_dp": 2}
    assert inactive_params(split) == {"gpu", "tp", "dp", "num_gpus", "draft_acceptance",
                                      "attention_dp"}
    assert inactive_params(together) == {"prefill_gpu", "prefill_tp", "decode_dp"}
    for params in (split, together):
        base = problem.evaluate(params)
        assert base.infeasible_reason is None
        changed = problem.evaluate({**params, **{k: others[k] for k in inactive_params(params)}})
        assert changed.metrics == base.metrics


def test_a_pools_expert_and_attention_layout_are_knobs_of_their_own() -> None:
    """``decode_ep: 2, decode_attention_dp: 2`` lays the decode pool out as
    ``predict --decode-pool H100:1:1:ep=2,attention-dp=2`` does (two GPUs, the experts over
    both); before, every pool ran tensor parallelism only and took the colocated
    ``attention_dp`` with ``ep`` 1."""
    from energylens.deployment import Deployment
    from energylens.workloads import Workload
    from energylens.workloads.load.disagg import Pool, predict_disaggregated

    workload = {"kind": "load", "request_rate": 2, "num_requests": 100, "input_tokens": 512,
                "output_tokens": 64}
    problem = problem_from_study(problem={"model": "qwen3-30b-a3b", "workload": workload},
                                 source=STUDY, params=["mode", "decode_ep",
                                                       "decode_attention_dp"])
    found = problem.evaluate({"mode": "disaggregated", "gpu": "H100", "tp": 1,
                              "decode_ep": 2, "decode_attention_dp": 2})
    assert found.infeasible_reason is None and found.metrics["num_gpus"] == 3
    api = predict_disaggregated(
        model="qwen3-30b-a3b", workload=Workload(**workload),
        prefill=Pool(gpu="H100", deployment=Deployment()),
        decode=Pool(gpu="H100", deployment=Deployment(ep=2, attention_dp=2)))
    assert found.metrics["tpot_mean_s"] == pytest.approx(api.tpot_s, rel=1e-9)
