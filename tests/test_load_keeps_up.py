"""Whether an open-loop run keeps up with its arrivals: requests still in flight at the end
of a short stable run do not count against it, a queue that grows does, and capacity
probes are never shorter than the default run."""

from __future__ import annotations

import numpy as np
import pytest

from energylens.predict import predict
from energylens.workloads import Workload
from energylens.workloads.load.kind import LoadPrediction
from energylens.workloads.load.metrics import KEEPS_UP_SHARE, keeping_up

MODEL, GPU = "llama-3.1-8b", "H100"


def _kept(n: int) -> np.ndarray:
    """The measured requests of ``n`` (10 % left out at each end)."""
    return np.arange(n // 10, n - n // 10)


def _fifo(arrival_s: np.ndarray, service_s: float) -> np.ndarray:
    """Finish times of one server taking the requests in turn, ``service_s`` each."""
    finish = np.empty_like(arrival_s)
    free = 0.0
    for k, at in enumerate(arrival_s):
        free = finish[k] = max(at, free) + service_s
    return finish


def test_a_stable_run_still_holding_requests_at_its_end_keeps_up() -> None:
    """100 requests at 12/s, each 1.13 s: 13 are in flight at the last arrival (16 % of
    the 80 measured), yet every request completes one E2E after it arrived."""
    arrival = np.arange(100) / 12.0
    finish = arrival + 1.13
    kept = _kept(100)
    assert np.sum(finish[kept] > arrival[kept[-1]]) > 0.1 * len(kept)
    assert keeping_up(arrival_s=arrival, finish_s=finish, kept=kept) == (1.0, True)


def test_past_the_service_rate_the_share_is_the_served_over_the_offered_rate() -> None:
    """20 requests/s at one server of 10/s: request k finishes at 0.1 (k + 1) s. Measured
    arrivals 5.0-44.95 s, mean E2E 25.075 s: 297 arrive in (5, 19.875] s, 149 finish in
    (30.075, 44.95] s."""
    arrival = np.arange(1000) / 20.0
    finish = _fifo(arrival, 0.1)
    share, keeps = keeping_up(arrival_s=arrival, finish_s=finish, kept=_kept(1000))
    assert share == pytest.approx(149 / 297) and not keeps
    assert share == pytest.approx(10 / 20, abs=0.01)


def test_a_flood_does_not_keep_up_and_one_request_does() -> None:
    arrival = np.zeros(300)
    flood = keeping_up(arrival_s=arrival, finish_s=_fifo(arrival, 0.1), kept=_kept(300))
    assert flood == (0.0, False)
    one = np.zeros(1)
    assert keeping_up(arrival_s=one, finish_s=one + 5.0, kept=np.arange(1)) == (1.0, True)


def test_a_shortfall_within_counting_noise_keeps_up() -> None:
    """Completions due before the last measured arrival that come just after it: 2 short
    of 33 offered (6 %) is within twice the square root of 33, 280 short of 3,983 (7 %)
    is not."""
    for n, late, keeps in ((50, 2, True), (5000, 281, False)):
        arrival = np.arange(n) / 10.0
        finish = arrival + 0.55
        kept = _kept(n)
        end = arrival[kept[-1]]
        due = np.flatnonzero(finish <= end)
        finish[due[-late:]] = end + 1e-3
        share, kept_up = keeping_up(arrival_s=arrival, finish_s=finish, kept=kept)
        offered = round(late / (1 - share))
        assert late / offered > 1 - KEEPS_UP_SHARE
        assert kept_up == keeps, (n, share, offered)


def _load(**fields: object) -> LoadPrediction:
    result = predict(model=MODEL, gpu=GPU, workload=Workload(kind="load", **fields))
    assert isinstance(result, LoadPrediction)
    return result


@pytest.mark.parametrize("seed", range(4))
def test_a_short_run_at_a_third_of_the_service_rate_keeps_up(seed: int) -> None:
    """The reviewer's run: 100 requests at 12/s (the engine serves about 37/s), no queue."""
    run = _load(request_rate=12.0, num_requests=100, seed=seed)
    assert run.load["mean_queue_length"] == pytest.approx(0.0, abs=1e-3)
    assert run.load["keeps_up"] and float(run.load["completed_share"]) >= KEEPS_UP_SHARE


def test_a_long_run_keeps_up_at_38_per_s_and_not_at_40() -> None:
    """3,000 Poisson requests (docs/load.md): the requests in flight level off at 38/s,
    and 10,000 show them still growing at 40/s."""
    assert _load(request_rate=38.0, num_requests=3000).load["keeps_up"]
    assert not _load(request_rate=40.0, num_requests=3000).load["keeps_up"]


def test_capacity_probes_are_never_shorter_than_the_default_run() -> None:
    """With 100 requests the capacity is the one found without a request count, and it
    follows the SLO bound."""
    def capacity(bound: float, num_requests: int | None) -> float:
        return float(_load(request_rate=2.0, num_requests=num_requests,
                           slo=(f"ttft_p90_s<={bound}",),
                           capacity_attainment=0.9).load["capacity_requests_per_s"])

    tight, loose = capacity(0.03, 100), capacity(5.0, 100)
    assert tight == capacity(0.03, None) and loose == capacity(5.0, None)
    assert loose > 2 * tight


def test_a_short_run_with_too_few_requests_to_count_is_judged_by_its_spans() -> None:
    """100 requests at 10/s on a server taking 0.25 s each (40 % of the rate): the mean E2E
    (7.7 s) leaves 2 arrivals one E2E before the last, 1 of them served: a shortfall that
    twice the square root of the count would pass. Too few to count, so the spans decide:
    the measured arrivals over 7.9 s, their completions over 19.75 s."""
    arrival = np.arange(100) / 10.0
    finish = _fifo(arrival, 0.25)
    kept = _kept(100)
    share, keeps_up = keeping_up(arrival_s=arrival, finish_s=finish, kept=kept)
    assert not keeps_up
    assert share == pytest.approx(7.9 / 19.75, rel=1e-9)
