"""Ranking optimizations by constrained ablation and importance."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest

from search.config import StudyConfig, StudyError, load_study
from search.pareto import hypervolume
from search.rank import _noise_pct, _tied_ranks, ablation_storage, rank_optimizations
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

    assert set(ranking["knob"]) == set(SPACE["knobs"])
    # exhaustive: no noise, so only equal losses tie; ranks are dense and in order
    assert (ranking["noise_pct"] == 0).all() and (ranking["ci95_pct"] == 0).all()
    assert list(ranking["rank"]) == sorted(ranking["rank"]) and ranking["rank"].iloc[0] == 1
    assert set(np.diff(ranking["rank"])) <= {0, 1}
    for _, group in ranking.groupby("rank"):
        assert group["hv_loss_pct"].nunique(dropna=False) == 1 and group["tie"].all() == (len(group) > 1)
    last = ranking.iloc[-1]
    energy = "energy_per_token_j"
    assert last["knob"] == "colour" and last["hv_loss_pct"] == 0.0 and last[f"loss_pct[{energy}]"] == 0.0
    assert last[f"importance[{energy}]"] < 0.01 and last["within_noise"]
    # The small GPU cannot meet the throughput SLO with this model: feasibility is lost.
    first = ranking.iloc[0]
    assert first["knob"] == "gpu" and first["feasibility_lost"]
    others = ranking[~ranking["feasibility_lost"] & (ranking["knob"] != "colour")]
    assert (others["hv_loss_pct"] > 0).all() and not others["within_noise"].any()
    assert (others[f"loss_pct[{energy}]"] > 0).all()  # freq=1.0, fuse off, batch=4... all cost energy
    assert (others[f"best_pinned[{energy}]"] > others[f"best[{energy}]"]).all()  # minimised: pinned is worse
    # The grid is exhaustive and deterministic: the control is the main study.
    for objective in ("energy_per_token_j", "latency_s"):
        assert (ranking[f"best_control[{objective}]"] == ranking[f"best[{objective}]"]).all()

    text = (config.results / "ranking.csv").read_text()
    assert text.startswith("# method: constrained ablation") and "PED-ANOVA" in text
    assert pd.read_csv(config.results / "ranking.csv", comment="#")["knob"].tolist() == list(ranking["knob"])
    assert (config.results / "ranking.png").stat().st_size > 0
    # the ablations live in their own storage: the main one holds the main study only
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(config.storage))}
    assert names == {"toy"}
    ablations = open_storage(ablation_storage(config))
    names = {s.study_name for s in optuna.get_all_study_summaries(ablations)}
    assert names == {f"toy/ablate/{k}" for k in SPACE["knobs"]}
    pinned = optuna.load_study(study_name="toy/ablate/freq", storage=ablations)
    assert "freq" not in pinned.trials[0].params


def feasible_points(config: StudyConfig, name: str) -> np.ndarray:
    """(energy per token, latency) of the feasible trials of study ``name`` (main storage for
    the main study, the ablation storage otherwise), from the raw trials."""
    storage = config.storage if name == config.name else ablation_storage(config)
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    feasible = [t for t in study.trials if all(v <= 0 for v in t.constraints.values())]
    names = ("energy_per_token_j", "latency_s")
    return np.array([[t.user_attrs["metrics"][m] for m in names] for t in feasible])


def best_of(config: StudyConfig, name: str) -> float:
    """Best feasible energy per token of study ``name``."""
    return float(feasible_points(config, name)[:, 0].min())


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
    names = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(open_storage(config.storage))}
    assert names == {"toy": 400}
    ablations = optuna.get_all_study_summaries(open_storage(ablation_storage(config)))
    controls = ["_control", "_control_2", "_control_3"]
    assert {s.study_name: s.n_trials for s in ablations} == {
        f"toy/ablate/{k}": 40 for k in [*SPACE["knobs"], *controls]
    }

    energy = "energy_per_token_j"
    best, control = best_of(config, "toy"), best_of(config, "toy/ablate/_control")
    assert (ranking[f"best[{energy}]"] == best).all()
    assert (ranking[f"best_control[{energy}]"] == control).all()
    assert best < control  # 400 trials beat 40: the reason for the control
    expected = (ranking[f"best_pinned[{energy}]"] - control) / control * 100
    assert np.allclose(ranking[f"loss_pct[{energy}]"].dropna(), expected.dropna())
    # hypervolumes in the box of the main study's feasible points
    main = feasible_points(config, "toy")
    ideal, nadir = main.min(axis=0), main.max(axis=0)

    def hv(name: str) -> float:
        points = feasible_points(config, name)
        if not len(points):
            return 0.0
        return hypervolume(points, directions=["minimize"] * 2, ideal=ideal, nadir=nadir)

    seeds = [hv(f"toy/ablate/{name}") for name in controls]
    for knob, row in ranking.iterrows():
        assert row["hv_loss_pct"] == pytest.approx((seeds[0] - hv(f"toy/ablate/{knob}")) / seeds[0] * 100)
    # the spread of the difference of two runs: sqrt(2) * std, in % of the mean
    noise = 2**0.5 * np.std(seeds, ddof=1) / np.mean(seeds) * 100
    assert np.allclose(ranking["noise_pct"], noise) and np.allclose(ranking["ci95_pct"], 1.96 * noise)
    assert (ranking["within_noise"] == (ranking["hv_loss_pct"].abs() <= 1.96 * noise)).all()
    # rows within the noise of each other share a rank
    for (_, a), (_, b) in zip(ranking.iterrows(), ranking.iloc[1:].iterrows(), strict=False):
        if a["feasibility_lost"] == b["feasibility_lost"] and a["rank"] != b["rank"]:
            assert a["hv_loss_pct"] - b["hv_loss_pct"] > 0  # sorted, and apart from its group
    # "colour" has one value and the toy ignores it: with the same seed its pinned study
    # samples exactly what the control samples, so it loses nothing against the control,
    # although it looks worse than the main study's best.
    colour = ranking.loc["colour"]
    assert colour["hv_loss_pct"] == 0.0 and colour[f"loss_pct[{energy}]"] == 0.0
    assert colour[f"best_pinned[{energy}]"] > colour[f"best[{energy}]"] and colour["within_noise"]

    frame = pd.read_csv(config.results / "ranking.csv", comment="#")
    expected_columns = {"rank", "tie", "hv_loss_pct", "noise_pct", "ci95_pct", f"loss_pct[{energy}]"}
    assert expected_columns <= set(frame.columns)


def test_leftover_ablations_of_a_larger_budget_do_not_change_the_ranking(tmp_path) -> None:
    _, fresh = ranked(tmp_path / "fresh", budget=20, trials=50)
    ranked(tmp_path / "again", budget=40, trials=50)
    _, again = ranked(tmp_path / "again", budget=20, trials=50)  # reuses the studies of 40 trials
    pd.testing.assert_frame_equal(fresh, again)


def test_a_continued_ranking_does_not_replay_the_first_trials_of_its_ablations(tmp_path) -> None:
    config, _ = ranked(tmp_path, budget=10, trials=30)
    ranked(tmp_path, budget=20, trials=30)  # each ablation study continued from 10 to 20 trials
    storage = open_storage(ablation_storage(config))
    for summary in optuna.get_all_study_summaries(storage):
        trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
        params = [tuple(sorted(t.params.items())) for t in trials]
        assert len(params) == 20 and params[10:] != params[:10], summary.study_name
        assert len(set(params)) > 10, summary.study_name  # a replay would give 10 at most


def test_a_knob_named_like_the_control_is_refused(tmp_path) -> None:
    space = {"knobs": {**SPACE["knobs"], "_control": {"type": "bool"}}}
    config = load_study(write_toy_study(tmp_path, space=space, trials=10))
    study = run_study(config=config, problem=ToyDeployment())
    with pytest.raises(StudyError, match="knobs._control: expected a knob name not starting with"):
        rank_optimizations(config=config, problem=ToyDeployment(), budget_per_ablation=5, study=study)


def test_noise_of_two_seeds_is_their_relative_difference() -> None:
    assert _noise_pct([1.0, 1.1]) == pytest.approx(0.1 / 1.05 * 100)
    assert _noise_pct([1.0, np.nan]) != _noise_pct([1.0, np.nan])  # NaN: one feasible run


def test_ties_group_losses_within_the_noise_of_the_group_leader() -> None:
    # sorted losses 10, 9.5, 9, 5 with a 1 % band: 10, 9.5 and 9 tie (within 1 of 10), 5 does not
    assert _tied_ranks([False] * 4, [10.0, 9.5, 9.0, 5.0], 1.0) == [1, 1, 1, 2]
    assert _tied_ranks([False] * 3, [10.0, 9.5, 8.9], 1.0) == [1, 1, 2]
    # lost feasibility never ties with kept feasibility; no noise: only equal values tie
    assert _tied_ranks([True, False, False, False], [np.nan, 3.0, 3.0, 0.0], 0.0) == [1, 2, 2, 3]
