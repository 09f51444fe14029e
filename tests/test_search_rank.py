"""Ranking optimizations by constrained ablation and importance."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest

from search.config import StudyConfig, StudyError, load_study
from search.rank import _noise_pct, rank_optimizations
from search.runner import open_study, run_study
from search.storage import open_storage
from search.toy import ToyDeployment, write_toy_study

SPACE = {
    "knobs": {
        "gpu": {"type": "categorical", "values": ["small", "medium", "large"]},
        "gpus": {"type": "ordinal", "values": [1, 2, 4]},
        "tp": {"type": "ordinal", "values": [1, 2, 4]},
        "batch": {"type": "int", "low": 4, "high": 32, "step": 14},
        "freq": {"type": "float", "low": 0.6, "high": 1.0, "step": 0.2, "baseline": 1.0},
        "fuse": {"type": "bool"},
        "colour": {"type": "categorical", "values": ["red", "green", "blue"]},  # ignored
    },
}


def test_ignored_knob_ranks_last_and_lost_feasibility_first(tmp_path) -> None:
    config = load_study(
        write_toy_study(
            tmp_path, space=SPACE, engine="grid", constraints=["latency_s <= 0.05", "tokens_per_s >= 300"]
        )
    )
    study = run_study(config=config, problem=ToyDeployment())
    ranking = rank_optimizations(
        config=config, problem=ToyDeployment(), budget_per_ablation=None, study=study
    )

    assert list(ranking["rank"]) == list(range(1, 8))
    assert set(ranking["knob"]) == set(SPACE["knobs"])
    last = ranking.iloc[-1]
    assert last["knob"] == "colour" and last["loss_pct"] == 0.0 and last["importance"] < 0.01
    # The small GPU cannot meet the throughput SLO with this model: feasibility is lost.
    first = ranking.iloc[0]
    assert first["knob"] == "gpu" and first["feasibility_lost"]
    others = ranking[~ranking["feasibility_lost"] & (ranking["knob"] != "colour")]
    assert (others["loss_pct"] > 0).all()  # freq=1.0, fuse off, batch=4... all cost energy
    assert (others["best_pinned"] > others["best"]).all()  # minimised: pinned is worse
    # The grid is exhaustive and deterministic: the control is the main study, no noise.
    assert (ranking["best_control"] == ranking["best"]).all() and (ranking["noise_pct"] == 0).all()

    assert pd.read_csv(config.results / "ranking.csv")["knob"].tolist() == list(ranking["knob"])
    assert (config.results / "ranking.png").stat().st_size > 0
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(config.storage))}
    assert names == {"toy"} | {f"toy/ablate/{k}" for k in SPACE["knobs"]}
    pinned = optuna.load_study(study_name="toy/ablate/freq", storage=open_storage(config.storage))
    assert "freq" not in pinned.trials[0].params


def best_of(config: StudyConfig, name: str) -> float:
    """Best feasible energy per token of study ``name``, computed from the raw trials."""
    study = optuna.load_study(study_name=name, storage=open_storage(config.storage))
    feasible = [t for t in study.trials if all(v <= 0 for v in t.constraints.values())]
    return min(t.user_attrs["metrics"]["energy_per_token_j"] for t in feasible)


def ranked(folder, *, budget: int, trials: int = 400) -> tuple[StudyConfig, pd.DataFrame]:
    space = {"knobs": {**SPACE["knobs"], "colour": {"type": "categorical", "values": ["red"]}}}
    study_file = write_toy_study(
        folder,
        space=space,
        engine="optuna",
        sampler="random",
        seed=0,
        trials=trials,
        constraints=["latency_s <= 0.05", "tokens_per_s >= 300"],
    )
    config = load_study(study_file)
    if (config.results / "ranking.csv").exists():  # ranked before: rank again
        study = open_study(config=config)
    else:
        study = run_study(config=config, problem=ToyDeployment())
    ranking = rank_optimizations(
        config=config, problem=ToyDeployment(), budget_per_ablation=budget, study=study
    )
    return config, ranking.set_index("knob")


def test_ablations_are_compared_with_an_unpinned_control_of_the_same_budget(tmp_path) -> None:
    config, ranking = ranked(tmp_path, budget=40)
    storage = open_storage(config.storage)
    names = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}
    assert names.pop("toy") == 400
    controls = ["_control", "_control_2", "_control_3"]
    assert names == {f"toy/ablate/{k}": 40 for k in [*SPACE["knobs"], *controls]}

    best, control = best_of(config, "toy"), best_of(config, "toy/ablate/_control")
    seeds = [best_of(config, f"toy/ablate/{name}") for name in controls]
    assert (ranking["best"] == best).all() and (ranking["best_control"] == control).all()
    assert best < control  # 400 trials beat 40: the reason for the control
    expected = (ranking["best_pinned"] - control) / control * 100
    assert np.allclose(ranking["loss_pct"].dropna(), expected.dropna())
    # the spread of the difference of two bests: sqrt(2) * std, in % of the mean
    assert np.allclose(ranking["noise_pct"], 2**0.5 * np.std(seeds, ddof=1) / np.mean(seeds) * 100)
    # "colour" has one value and the toy ignores it: with the same seed its pinned study
    # samples exactly what the control samples, so it loses nothing against the control,
    # although it looks worse than the main study's best.
    colour = ranking.loc["colour"]
    assert colour["loss_pct"] == 0.0 and colour["best_pinned"] > colour["best"]

    frame = pd.read_csv(config.results / "ranking.csv")
    assert {"best", "best_control", "best_pinned", "loss_pct", "noise_pct"} <= set(frame.columns)


def test_leftover_ablations_of_a_larger_budget_do_not_change_the_ranking(tmp_path) -> None:
    _, fresh = ranked(tmp_path / "fresh", budget=20, trials=50)
    ranked(tmp_path / "again", budget=40, trials=50)
    _, again = ranked(tmp_path / "again", budget=20, trials=50)  # reuses the studies of 40 trials
    pd.testing.assert_frame_equal(fresh, again)


def test_a_knob_named_like_the_control_is_refused(tmp_path) -> None:
    space = {"knobs": {**SPACE["knobs"], "_control": {"type": "bool"}}}
    config = load_study(write_toy_study(tmp_path, space=space, trials=10))
    study = run_study(config=config, problem=ToyDeployment())
    with pytest.raises(StudyError, match="knobs._control: expected a knob name not starting with"):
        rank_optimizations(config=config, problem=ToyDeployment(), budget_per_ablation=5, study=study)


def test_noise_of_two_seeds_is_their_relative_difference() -> None:
    assert _noise_pct([1.0, 1.1]) == pytest.approx(0.1 / 1.05 * 100)
    assert _noise_pct([1.0, np.nan]) != _noise_pct([1.0, np.nan])  # NaN: one feasible best
