"""Non-dominated sorting and hypervolume invariants."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from search.config import StudyConfig, load_study
from search.frame import front_frame
from search.pareto import hypervolume, hypervolume_history, non_dominated_mask
from search.plots import axis_label, pareto_figure, spans_decades
from search.toy import write_toy_study


def naive_mask(points: np.ndarray, directions: list[str]) -> np.ndarray:
    signs = np.array([1 if d == "minimize" else -1 for d in directions])
    f = points * signs
    return np.array(
        [
            not any((f[j] <= f[i]).all() and (f[j] < f[i]).any() for j in range(len(f)) if j != i)
            for i in range(len(f))
        ]
    )


@pytest.mark.parametrize(
    "directions",
    [list(d) for d in itertools.product(["minimize", "maximize"], repeat=2)]
    + [["minimize", "maximize", "minimize"]],
)
def test_mask_matches_pairwise_definition_with_ties(directions) -> None:
    rng = np.random.default_rng(len(directions))
    for _ in range(20):
        points = rng.integers(0, 6, size=(40, len(directions))).astype(float)  # many ties
        assert (non_dominated_mask(points, directions=directions) == naive_mask(points, directions)).all()


def test_every_domination_case() -> None:
    mm = ["minimize", "maximize"]
    # equal points are both kept; better-in-one-equal-in-other dominates; trade-offs coexist
    assert non_dominated_mask(np.array([[1, 1], [1, 1]]), directions=mm).tolist() == [True, True]
    assert non_dominated_mask(np.array([[1, 2], [1, 1]]), directions=mm).tolist() == [True, False]
    assert non_dominated_mask(np.array([[1, 1], [2, 2]]), directions=mm).tolist() == [True, True]
    assert non_dominated_mask(np.array([[2, 1], [1, 2]]), directions=mm).tolist() == [False, True]
    assert non_dominated_mask(np.empty((0, 2)), directions=mm).tolist() == []


def test_hypervolume_of_two_corners() -> None:
    ideal, nadir = np.zeros(2), np.ones(2)
    corners = np.array([[0.0, 1.0], [1.0, 0.0]])
    # Union of [0,1.1]x[1,1.1] and [1,1.1]x[0,1.1].
    assert hypervolume(corners, directions=["minimize"] * 2, ideal=ideal, nadir=nadir) == pytest.approx(0.21)
    # Maximising the second objective mirrors it; the box is given in minimisation form.
    mirrored = corners * [1, -1]
    assert hypervolume(
        mirrored, directions=["minimize", "maximize"], ideal=ideal, nadir=nadir
    ) == pytest.approx(0.21)
    assert hypervolume(np.array([[2.0, 2.0]]), directions=["minimize"] * 2, ideal=ideal, nadir=nadir) == 0.0


def test_history_is_monotone_and_ignores_infeasible_points() -> None:
    rng = np.random.default_rng(1)
    points = rng.random((60, 2))
    feasible = rng.random(60) < 0.7
    history = hypervolume_history(
        points, feasible, directions=["minimize"] * 2, ideal=np.zeros(2), nadir=np.ones(2)
    )
    assert (np.diff(history) >= -1e-12).all()
    final = hypervolume(points[feasible], directions=["minimize"] * 2, ideal=np.zeros(2), nadir=np.ones(2))
    assert history[-1] == pytest.approx(final)
    assert (history[~feasible.cumsum().astype(bool)] == 0).all()


def test_axis_labels_carry_units() -> None:
    assert axis_label("energy_per_output_token_j") == "energy per output token [J]"
    assert axis_label("output_tokens_per_s") == "output tokens [1/s]"
    assert axis_label("tpot_s") == "tpot [s]"
    assert axis_label("power_w") == "power [W]"
    assert axis_label("score") == "score"


def frames(
    folder: Path, energy: list[float], tpot: list[float]
) -> tuple[StudyConfig, pd.DataFrame, pd.DataFrame]:
    config = load_study(
        write_toy_study(
            folder,
            objectives=["minimize energy_per_token_j", "minimize latency_s"],
            constraints=["latency_s <= 0.05"],
        )
    )
    trials = pd.DataFrame(
        {
            "number": range(len(energy)),
            "energy_per_token_j": energy,
            "latency_s": tpot,
            "feasible": [t <= 0.05 for t in tpot],
        }
    )
    front = trials[trials["feasible"]].iloc[:2]
    return config, trials, front


def test_pareto_axes_are_logarithmic_past_one_decade_and_keep_slo_and_front_lines(tmp_path) -> None:
    # energy spans 0.5-100 J (2.3 decades), latency 0.01-0.08 s (less than one)
    config, trials, front = frames(tmp_path, [0.5, 0.8, 3.0, 100.0], [0.04, 0.01, 0.02, 0.08])
    ax = pareto_figure(config=config, trials=trials, front=front).axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "linear")
    slo = [line for line in ax.get_lines() if list(line.get_ydata()) == [0.05, 0.05]]
    steps = [line for line in ax.get_lines() if line.get_drawstyle() == "steps-post"]
    assert len(slo) == 1 and len(steps) == 1
    # 9x is less than a decade: linear
    config, trials, front = frames(tmp_path, [1.0, 2.0, 5.0, 9.0], [0.04, 0.01, 0.02, 0.08])
    assert pareto_figure(config=config, trials=trials, front=front).axes[0].get_xscale() == "linear"


def test_spans_decades() -> None:
    assert spans_decades([0.5, 100.0]) and spans_decades([0.5, np.nan, 5.1])
    assert not spans_decades([0.5, 5.0]) and not spans_decades([0.0, 100.0])
    assert not spans_decades([-1.0, 100.0]) and not spans_decades([np.nan]) and not spans_decades([])


def test_front_lists_each_configuration_once_despite_float_noise(tmp_path) -> None:
    config, _, _ = frames(tmp_path, [1.0], [0.01])
    knobs = {"gpu": "large", "gpus": 2, "tp": 2, "batch": 8, "fuse": True}
    trials = pd.DataFrame(
        [
            {"number": 0, **knobs, "freq": 0.85, "energy_per_token_j": 1.0, "latency_s": 0.02},
            {"number": 1, **knobs, "freq": 0.8500000000000001, "energy_per_token_j": 1.0, "latency_s": 0.02},
            {"number": 2, **knobs, "freq": 0.9, "energy_per_token_j": 1.0, "latency_s": 0.02},
        ]
    ).assign(feasible=True, infeasible_reason="")
    front = front_frame(config=config, trials=trials)
    assert front["number"].tolist() == [0, 2]


def test_expected_error_columns_become_error_bars_scaled_by_each_point(tmp_path) -> None:
    from matplotlib.container import ErrorbarContainer

    from search.problem import ERROR_PREFIX

    config, trials, front = frames(tmp_path, [1.0, 2.0, 5.0, 9.0], [0.04, 0.01, 0.02, 0.08])
    plain = pareto_figure(config=config, trials=trials, front=front).axes[0]
    assert not [c for c in plain.containers if isinstance(c, ErrorbarContainer)]
    front = front.assign(**{ERROR_PREFIX + "latency_s": [0.10, 0.25]})
    ax = pareto_figure(config=config, trials=trials, front=front).axes[0]
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert bars.has_yerr and not bars.has_xerr
    segments = bars.lines[2][0].get_segments()  # one vertical segment per front point
    line = front.sort_values("energy_per_token_j")
    for (lo, hi), y, share in zip(segments, line["latency_s"], line[ERROR_PREFIX + "latency_s"],
                                  strict=True):
        assert (lo[1], hi[1]) == pytest.approx((y * (1 - share), y * (1 + share)))
