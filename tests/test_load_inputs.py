"""Bad input to the ``load`` workload: one line, ConfigError in Python, exit 2 on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.predict import predict
from energylens.workloads import Workload
from energylens.workloads.load.kind import LoadPrediction
from energylens.workloads.load.metrics import SLO
from energylens.workloads.workload import MIN_REQUEST_RATE

TRACES = Path(__file__).resolve().parents[1] / "data" / "measurements" / "traces"


@pytest.mark.parametrize(("fields", "message"), [
    ({"request_rate": float("nan")}, "request_rate must be a finite number > 0"),
    ({"request_rate": -2.0}, "request_rate must be a finite number > 0"),
    ({"request_rate": float("inf")}, "request_rate must be a finite number > 0"),
    ({"request_rate": 1e-7}, "request_rate must be at least 1e-06 requests/s"),
    ({"request_rate": 1e-300}, "request_rate must be at least 1e-06 requests/s"),
    ({"arrival_cv": 0.0}, "arrival_cv must be a finite number > 0"),
    ({"length_cv": float("nan")}, r"length_cv must be a number in \[0, 3\]"),
    ({"length_cv": 5.0}, "a gamma of larger CV puts most requests at one token"),
    ({"concurrency": 0}, "concurrency must be an integer >= 1"),
    ({"num_requests": -5}, "num_requests must be an integer >= 1"),
    ({"num_requests": 2.5}, "num_requests must be an integer >= 1"),
    ({"request_rate": 1.0, "concurrency": 4}, "not both"),
    ({"shared_prefix_tokens": -1}, "shared_prefix_tokens must be an integer >= 0"),
    ({"shared_prefix_tokens": 2.5}, "shared_prefix_tokens must be an integer >= 0"),
    ({"shared_prefix_tokens": 2**31 + 1}, r"shared_prefix_tokens must be at most 2\*\*31"),
    ({"input_tokens": 1e20}, r"input_tokens must be at most 2\*\*31 = 2,147,483,648"),
    ({"output_tokens": 2**31 + 1}, r"output_tokens must be at most 2\*\*31"),
    ({"num_requests": 10**6 + 1}, "num_requests must be at most 1,000,000"),
    ({"num_requests": 10**11}, "num_requests must be at most 1,000,000"),
    ({"concurrency": 50_001}, "concurrency must be at most 50,000"),
])
def test_bad_load_fields_are_one_line_config_errors(fields: dict[str, object],
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Workload(kind="load", **fields)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_other_kinds_refuse_load_fields() -> None:
    with pytest.raises(ConfigError, match="only a 'load' workload reads it"):
        Workload(kind="batch", request_rate=2.0)
    with pytest.raises(ConfigError, match="request_rate, slo: only a 'load' workload"):
        Workload(kind="serving", request_rate=2.0, slo=("ttft_p90_s<=1",))
    with pytest.raises(ConfigError, match="shared_prefix_tokens: only a 'load' workload"):
        Workload(kind="batch", shared_prefix_tokens=100)


@pytest.mark.parametrize("text", ["ttft<=1", "ttft_p90_s<=-1", "ttft_p90_s<=nan",
                                  "itl_p90_s<=1", "ttft_p90_s>=1", "ttft_p90_s<=1s", ""])
def test_bad_slos_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="expected <latency>_<pNN|mean>_s<=") as info:
        SLO.parse(text)
    assert "\n" not in str(info.value)


def test_slo_parses_percentile_and_mean() -> None:
    slo = SLO.parse(" tpot_p99_s <= 0.05 ")
    assert (slo.latency, slo.statistic, slo.bound_s, slo.metric) == ("tpot", "p99", 0.05,
                                                                     "tpot_p99_s")
    assert SLO.parse("e2e_mean_s<=2e1").bound_s == 20.0


def _trace(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("text", "message"), [
    ("a,b\n1,2\n", "trace lacks column num_prefill_tokens, num_decode_tokens"),
    ("num_prefill_tokens,num_decode_tokens\n", "trace has no requests"),
    ("num_prefill_tokens,num_decode_tokens\n10,0\n", "num_decode_tokens: expected numbers"),
    ("num_prefill_tokens,num_decode_tokens\nx,3\n", "num_prefill_tokens: expected numbers"),
    ("num_prefill_tokens,num_decode_tokens\n1e30,5\n",
     r"num_prefill_tokens: expected numbers from 1 to 2\*\*31"),
    ("num_prefill_tokens,num_decode_tokens\n100,5\n5,2147483649\n",
     r"num_decode_tokens: expected numbers from 1 to 2\*\*31"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n2,10,3\n1,10,3\n",
     "arrived_at: expected non-decreasing"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,3\n1e30,10,3\n",
     "spanning at most 1e"),
])
def test_bad_traces_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    workload = Workload(kind="load", trace=_trace(tmp_path, text), request_rate=1.0)
    with pytest.raises(ConfigError, match=message) as info:
        predict(model="llama-3.1-8b", gpu="H100", workload=workload)
    assert "\n" not in str(info.value)


def test_a_missing_trace_is_a_one_line_cli_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--trace", str(tmp_path / "none.csv"), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot read trace" in err


@pytest.mark.parametrize("argv", [
    ["--request-rate", "nan"], ["--request-rate", "-1"], ["--concurrency", "0"],
    ["--request-rate", "1", "--concurrency", "2"], ["--slo", "ttft<1"],
    ["--num-requests", "1.5"], ["--shared-prefix-tokens", "-5"],
    ["--shared-prefix-tokens", "many"], ["--num-requests", "100000000000"],
    ["--concurrency", "100000000"], ["--shared-prefix-tokens", "3000000000"],
])
def test_bad_cli_options_exit_2_in_one_line(argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
              *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_rate_below_the_floor_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
                 "--request-rate", "1e-300"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "at least 1e-06 requests/s" in err


def test_at_the_lowest_rate_every_step_still_counts() -> None:
    """Requests 11.6 days apart (their arrival times up to 1e9 s) never meet: TTFT and TPOT
    are one request's alone, as at 0.01 requests/s; no step is lost to rounding."""
    def run(rate: float) -> dict[str, float | int | bool]:
        found = predict(model="llama-3.1-8b", gpu="H100", workload=Workload(
            kind="load", request_rate=rate, num_requests=30))
        assert isinstance(found, LoadPrediction)
        return found.load

    slowest, slow = run(MIN_REQUEST_RATE), run(0.01)
    for key in ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s"):
        assert float(slowest[key]) == pytest.approx(float(slow[key]), rel=1e-6), key
    assert float(slowest["ttft_p50_s"]) > 0


def test_a_window_without_output_tokens_is_a_config_error() -> None:
    """The guard behind the rate floor: no token in the window is one line, not a division
    by zero."""
    from dataclasses import replace

    from energylens.predict import checked_context
    from energylens.workloads import Placement
    from energylens.workloads.load.kind import load_prediction, minimal_memory, simulate_replica

    workload = Workload(kind="load", request_rate=1.0, num_requests=20)
    model, ctx = checked_context(model="llama-3.1-8b", gpu="H100", deployment=Deployment())
    placement = Placement(ctx=ctx, model=model, replicas=1, gpus=1, sequences=1.0)
    run = simulate_replica(placement=placement, workload=workload)
    metrics = replace(run.summary(ctx=ctx, slos=()), window_output_tokens=0.0)
    with pytest.raises(ConfigError, match="no output token in its measured window") as info:
        load_prediction(placement=placement, workload=workload, metrics=metrics, name="load",
                        memory=minimal_memory(ctx=ctx, workload=workload,
                                              token_budget=8192))
    assert "\n" not in str(info.value)


def test_the_largest_counts_and_lengths_are_taken() -> None:
    """The bounds themselves are valid, for every kind."""
    for kind in ("batch", "serving", "load"):
        Workload(kind=kind, input_tokens=2**31, output_tokens=2**31)
    Workload(kind="load", num_requests=10**6, shared_prefix_tokens=2**31)
    Workload(kind="load", concurrency=50_000)


def test_arrivals_past_the_clocks_resolution_are_one_line() -> None:
    """A million requests at the lowest rate would arrive over 1e12 s, where a float's
    rounding (2e-4 s) swallows the steps: refused, where 1,000 of them (1e9 s) run."""
    workload = Workload(kind="load", request_rate=MIN_REQUEST_RATE, num_requests=10**6)
    with pytest.raises(ConfigError, match="would arrive over 1e\\+12 s") as info:
        predict(model="llama-3.1-8b", gpu="H100", workload=workload)
    assert "\n" not in str(info.value)


def test_a_request_past_the_context_is_refused_before_any_simulation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """2**31-token prompts on Llama-3.1-8B (131,072 tokens of context): infeasible with the
    reason, nothing simulated (colocated or disaggregated), no figure and no goodput."""
    import energylens.workloads.load.disagg as disagg
    import energylens.workloads.load.kind as kind

    def no_simulation(**_: object) -> None:
        raise AssertionError("simulated")

    monkeypatch.setattr(kind, "simulate", no_simulation)
    monkeypatch.setattr(disagg, "simulate", no_simulation)
    workload = Workload(kind="load", request_rate=1.0, num_requests=2, input_tokens=2**31,
                        slo=("ttft_p90_s<=1",), capacity_attainment=0.9)
    pools = {p: disagg.Pool(gpu="H100", deployment=Deployment()) for p in ("prefill", "decode")}
    for result in (predict(model="llama-3.1-8b", gpu="H100", workload=workload),
                   disagg.predict_disaggregated(model="llama-3.1-8b", workload=workload,
                                                **pools)):
        assert isinstance(result, LoadPrediction) and not result.feasible
        assert result.infeasible_reason is not None
        assert result.infeasible_reason.startswith("prompt + output 2,147,483,776 tokens "
                                                   "exceed llama-3.1-8b's context of 131,072")
        assert np.isnan(result.ttft_s) and np.isnan(result.energy_per_output_token_j)
        assert result.load["goodput_requests_per_s"] == 0.0 and not result.load["slo_met"]
        assert result.load["capacity_requests_per_s"] == 0.0


def test_load_options_with_another_kind_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--request-rate", "3"])
    assert code == 2 and "only a 'load' workload" in capsys.readouterr().err


def test_the_conversation_trace_replays_its_own_clock_or_a_rescaled_one() -> None:
    trace = str(TRACES / "splitwise_conv.csv")
    arrived = np.loadtxt(trace, delimiter=",", skiprows=1, usecols=0, max_rows=600)
    own_rate = 599 / (arrived[-1] - arrived[0])
    runs = {rate: predict(model="llama-3.1-8b", gpu="H100", workload=Workload(
        kind="load", trace=trace, num_requests=600, request_rate=rate))
        for rate in (None, 1.0, 3.0)}
    for rate, run in runs.items():
        assert float(run.load["requests_per_s"]) == pytest.approx(rate or own_rate, rel=0.15)


@pytest.mark.parametrize(("fields", "message"), [
    ({"capacity_attainment": 0.9}, "needs at least one slo"),
    ({"capacity_attainment": 1.5, "slo": ("ttft_p90_s<=1",)}, "share in \\(0, 1\\]"),
    ({"capacity_attainment": float("nan"), "slo": ("ttft_p90_s<=1",)}, "share in"),
])
def test_bad_capacity_targets_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Workload(kind="load", **fields)  # type: ignore[arg-type]


def test_plot_writes_the_rate_sweep_and_time_series(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "load.png"
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
                 "--request-rate", "5", "--num-requests", "200", "--plot", str(picture),
                 "--json"]) == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000
    assert "wrote" in capsys.readouterr().err
    code = main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--plot",
                 str(tmp_path / "no.png")])
    assert code == 2 and not (tmp_path / "no.png").exists()


def test_an_open_loop_past_the_service_rate_is_flagged(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every request at once (1e9/s) cannot be kept up with; 2 requests/s of Llama-3.1-8B
    on an H100 (a service rate near 35/s) can, and neither a closed loop is flagged."""
    base = ["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
            "--num-requests", "300", "--json"]
    assert main([*base, "--request-rate", "1e9"]) == 0
    err = capsys.readouterr().err
    assert "does not keep up" in err and err.count("\n") == 1
    for load in (["--request-rate", "2"], ["--concurrency", "64"]):
        assert main([*base, *load]) == 0
        assert "keep up" not in capsys.readouterr().err


def test_a_rate_above_the_capacity_found_is_flagged_even_when_the_short_run_kept_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B TP4 on H100 at 6 requests/s of 2,048 + 256 tokens: 300 requests end
    before the backlog passes the keep-up test's noise allowance, yet the same output's
    --capacity finds about 4.3 requests/s: the run is flagged, once."""
    base = ["predict", "--model", "llama-3.1-70b", "--gpu", "H100", "--tp", "4", "--workload",
            "load", "--input-tokens", "2048", "--output-tokens", "256", "--num-requests", "300",
            "--slo", "e2e_p90_s<=1000", "--capacity", "0.9", "--json"]
    assert main([*base, "--request-rate", "6"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["capacity_requests_per_s"] < 6
    assert "exceed the capacity found" in captured.err and captured.err.count("\n") == 1
    assert main([*base, "--request-rate", "2"]) == 0
    assert "capacity found" not in capsys.readouterr().err
