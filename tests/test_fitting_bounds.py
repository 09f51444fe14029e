"""One bound rule for every bounded fit: within 0.1 % of the (log) range of either end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from energylens.calibration.fit_serving import FLOP_SHARE, serving_params
from energylens.calibration.fitting import Param, fit_bounded, near_bound


def test_near_bound_by_hand():
    # range 0.93: 0.1 % of it is 0.00093
    assert near_bound(value=0.02028, low=0.02, high=0.95)
    assert near_bound(value=0.9492, low=0.02, high=0.95)
    assert not near_bound(value=0.021, low=0.02, high=0.95)
    assert not near_bound(value=0.5, low=0.02, high=0.95)


def test_log_param_judged_on_its_log_range():
    param = Param("f", 1.0, 0.2, 5.0, log=True)  # log range ln 25 = 3.219: 0.1 % is 0.00322
    assert param.at_bound(0.2 * math.exp(0.003))
    assert param.at_bound(5.0 * math.exp(-0.003))
    assert not param.at_bound(0.2 * math.exp(0.004))


def test_b200_task_fold_tensor_power_share_is_at_its_bound():
    """The B200 task fold's 0.02028 (lower bound 0.02: 0.03 % of the range) is at it."""
    share = next(p for p in serving_params("B200") if p.name == FLOP_SHARE)
    assert (share.low, share.high) == (0.02, 0.95)
    assert share.at_bound(0.02028)


def test_fit_bounded_flags_an_optimum_within_the_share_of_a_bound():
    """Optimum 0.02028 in [0.02, 0.95]: logistic variable ~ -8.1, which the old |z| > 9
    rule let through."""
    params = [Param("x", 0.5, 0.02, 0.95), Param("y", 0.5, 0.02, 0.95)]
    values, _, at_bound = fit_bounded(
        params=params, residuals=lambda v: 100.0 * np.array([v["x"] - 0.02028, v["y"] - 0.4]))
    assert abs(values["x"] - 0.02028) < 1e-4
    assert at_bound == ["x"]


def test_a_second_start_finds_the_deeper_basin_and_the_lowest_residual_wins():
    """r(x) = ((x - 1)(x - 4), 0.3 (x - 1)): zero at x = 1, a local minimum near 3.97
    (squared sum 0.81 there). From 5 the solver stops in the shallow one; a start at 0.5
    finds x = 1, and adding the worse start back changes nothing."""
    def residuals(values):
        x = values["x"]
        return np.array([(x - 1.0) * (x - 4.0), 0.3 * (x - 1.0)])

    param = Param("x", 5.0, 0.0, 10.0)
    alone, rms_alone, _ = fit_bounded(params=[param], residuals=residuals)
    assert alone["x"] == pytest.approx(3.97, abs=0.01) and rms_alone > 0.5
    both, rms_both, _ = fit_bounded(params=[param], residuals=residuals, starts=({"x": 0.5},))
    assert both["x"] == pytest.approx(1.0, abs=1e-4) and rms_both < 1e-4
    again, _, _ = fit_bounded(params=[param], residuals=residuals,
                              starts=({"x": 0.5}, {"x": 6.0}))
    assert again["x"] == pytest.approx(1.0, abs=1e-4)


def test_a_constant_the_fit_brings_into_play_is_fitted_too():
    """r(a, b) = (a - 3, min(a, b) - 1) from a = 1, b = 1.9: at the start min(a, b) is a, so
    no residual depends on b, and b is held; once a passes 1.9 the second residual is b's.
    Held at 1.9 it stops at (3, 1.9), rms 0.64; resumed with b free it reaches (3, 1)
    exactly. A constant no residual ever depends on (c) keeps its initial value."""
    def residuals(values):
        return np.array([values["a"] - 3.0, min(values["a"], values["b"]) - 1.0])

    params = [Param("a", 1.0, 0.0, 10.0), Param("b", 1.9, 0.0, 10.0), Param("c", 4.0, 0.0, 10.0)]
    values, rms, _ = fit_bounded(params=params, residuals=residuals)
    assert values["a"] == pytest.approx(3.0, abs=1e-4)
    assert values["b"] == pytest.approx(1.0, abs=1e-4)
    assert rms < 1e-4
    assert values["c"] == 4.0
