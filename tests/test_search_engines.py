"""Engine-specific behaviour, storage and reports on the toy problem (what every engine must
do is in test_search_engine_conformance.py)."""

from __future__ import annotations

import pickle
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from search.config import StudyConfig, load_study
from search.engines.pymoo_engine import checkpoint_path
from search.outcome import completed_trials
from search.report import write_report
from search.runner import StudyStateError, resume_study, run_study, run_worker
from search.toy import ToyDeployment, write_toy_study

TINY_SPACE = {
    "knobs": {
        "gpu": {"type": "categorical", "values": ["small", "medium", "large"]},
        "gpus": {"type": "ordinal", "values": [1, 2, 4]},
        "tp": {"type": "ordinal", "values": [1, 2, 4]},
        "batch": {"type": "int", "low": 4, "high": 32, "step": 7},
        "freq": {"type": "float", "low": 0.6, "high": 1.0, "step": 0.2},
        "fuse": {"type": "bool"},
    },
}
OBJECTIVES = ["minimize energy_per_token_j", "maximize tokens_per_s"]
CONSTRAINTS = ["latency_s <= 0.05", "tokens_per_s >= 100"]


def tiny(tmp_path: Path, engine: str, **overrides) -> StudyConfig:
    study = {
        "space": TINY_SPACE,
        "objectives": OBJECTIVES,
        "constraints": CONSTRAINTS,
        "engine": engine,
        "population_size": 20,
        "seed": 0,
        "trials": 60,
        **overrides,
    }
    return load_study(write_toy_study(tmp_path, name=f"tiny-{engine}", **study))


def test_pymoo_resume_continues_the_checkpoint_or_seeds_from_storage(tmp_path) -> None:
    config = tiny(tmp_path, "pymoo")
    run_study(config=config, problem=ToyDeployment(), n_trials=40)  # 2 generations of 20
    resume_study(config=config, problem=ToyDeployment(), n_trials=60)
    with checkpoint_path(config).open("rb") as f:
        assert pickle.load(f)["algorithm"].n_iter == 4  # 3 generations told, not restarted
    checkpoint_path(config).unlink()
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=80)
    assert len(completed_trials(study)) == 80


def test_pymoo_resume_with_another_sampler_or_population_leaves_the_checkpoint(tmp_path) -> None:
    config = tiny(tmp_path, "pymoo", population_size=10)
    run_study(config=config, problem=ToyDeployment(), n_trials=20)  # NSGA-II, 2 generations of 10
    changed = replace(config, sampler="nsga3", population_size=30)
    with pytest.warns(UserWarning, match=r"checkpoint .*nsga2, population 10.* nsga3, population 30"):
        resume_study(config=changed, problem=ToyDeployment(), n_trials=50)
    with checkpoint_path(config).open("rb") as f:
        algorithm = pickle.load(f)["algorithm"]
    assert (type(algorithm).__name__, algorithm.pop_size) == ("NSGA3", 30)
    assert algorithm.n_iter == 3  # told the study's 20 trials as a population, then one generation of 30


def test_the_progress_of_a_grid_ends_with_the_grid_when_the_budget_exceeds_it(tmp_path, monkeypatch) -> None:
    import search.runner

    shown = []
    real = search.runner.trial_progress

    @contextmanager
    def spy(**kwargs):
        with real(**kwargs) as bar:
            shown.append(kwargs["total"])
            yield bar

    monkeypatch.setattr(search.runner, "trial_progress", spy)
    space = {"knobs": {"gpu": {"type": "categorical", "values": ["small", "large"]},
                       "tp": {"type": "ordinal", "values": [1, 2, 4]}},
             "fixed": {"gpus": 4, "batch": 8, "freq": 1.0, "fuse": False}}
    study = run_study(config=tiny(tmp_path, "grid", space=space), problem=ToyDeployment(), n_trials=100)
    assert len(completed_trials(study)) == 6 and shown == [6]  # 6 of 6, not 6 of 100


def test_run_refuses_an_existing_study_and_workers_join_it(tmp_path) -> None:
    config = tiny(tmp_path, "optuna", trials=25)
    run_study(config=config, problem=ToyDeployment(), n_trials=10)
    with pytest.raises(StudyStateError, match="already has 10 completed trials"):
        run_study(config=config, problem=ToyDeployment())
    study = run_worker(config=config, problem=ToyDeployment())
    assert len(completed_trials(study)) == 25
    with pytest.raises(StudyStateError, match="directions"):
        resume_study(
            config=replace(config, objectives=config.objectives[:1]), problem=ToyDeployment(), n_trials=30
        )
    with pytest.raises(StudyStateError, match="engine 'optuna'"):
        run_worker(config=config.with_engine("pymoo"), problem=ToyDeployment())


def reported(config: StudyConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    study = run_study(config=config, problem=ToyDeployment())
    paths = write_report(config=config, study=study)
    assert paths.pareto_png.stat().st_size > 0 and paths.hypervolume_png.stat().st_size > 0
    return pd.read_csv(paths.trials_csv), pd.read_csv(paths.pareto_csv)


@pytest.mark.parametrize("engine", ["optuna", "pymoo", "grid"])
def test_constraints_and_invalid_configurations_are_infeasible(tmp_path, engine) -> None:
    trials, pareto = reported(tiny(tmp_path, engine, trials=None if engine == "grid" else 60))
    valid = trials["constraint[valid]"] <= 0
    meets = (trials["latency_s"] <= 0.05) & (trials["tokens_per_s"] >= 100)
    assert (trials["feasible"] == (valid & meets)).all()
    assert (valid & ~meets).any() and (~valid).any()
    # a runnable configuration that misses SLOs says which, with the value and the margin
    assert trials.loc[trials["feasible"], "infeasible_reason"].isna().all()
    for row in trials[valid & ~meets].itertuples():
        reason = row.infeasible_reason
        assert ("SLO latency_s = " in reason) == (row.latency_s > 0.05), reason
        assert ("SLO tokens_per_s = " in reason) == (row.tokens_per_s < 100), reason
        if row.latency_s > 0.05:
            assert f"({(row.latency_s - 0.05) / 0.05 * 100:+.0f} %)" in reason
    assert set(pareto["number"]) <= set(trials.loc[trials["feasible"], "number"])
    assert (pareto["latency_s"] <= 0.05).all() and (pareto["tokens_per_s"] >= 100).all()
    # infeasible_reason is recorded for every invalid configuration, with its cause.
    too_wide = trials["tp"] > trials["gpus"]
    expected = "tp=" + trials["tp"].astype(str) + " > gpus=" + trials["gpus"].astype(str)
    assert (trials.loc[too_wide, "infeasible_reason"] == expected[too_wide]).all()
    assert trials.loc[valid.eq(False) & ~too_wide, "infeasible_reason"].str.startswith("needs ").all()
    assert trials.loc[~valid, "energy_per_token_j"].isna().all()


def brute_force_front(config: StudyConfig) -> set[tuple]:
    """Feasible non-dominated grid points, computed without the search package's helpers."""
    problem, points = ToyDeployment(), []
    for params in config.space.grid():
        evaluation = problem.evaluate(params)
        m = evaluation.metrics
        if evaluation.infeasible_reason is None and m["latency_s"] <= 0.05 and m["tokens_per_s"] >= 100:
            points.append((tuple(params.values()), m["energy_per_token_j"], m["tokens_per_s"]))

    def dominates(a, b) -> bool:
        return a[1] <= b[1] and a[2] >= b[2] and (a[1] < b[1] or a[2] > b[2])

    return {p[0] for p in points if not any(dominates(q, p) for q in points)}


def test_grid_front_equals_brute_force_front(tmp_path) -> None:
    config = tiny(tmp_path, "grid", trials=None)
    trials, pareto = reported(config)
    assert len(trials) == config.space.grid_size
    found = {tuple(row) for row in pareto[list(config.space.names)].itertuples(index=False)}
    truth = brute_force_front(config)
    assert len(truth) > 3 and found == truth
    # The constraints bind: some infeasible point would otherwise be on the front.
    everything = trials.dropna(subset=["energy_per_token_j"])
    assert any(
        not (
            (everything["energy_per_token_j"] <= r.energy_per_token_j)
            & (everything["tokens_per_s"] >= r.tokens_per_s)
            & (
                (everything["energy_per_token_j"] < r.energy_per_token_j)
                | (everything["tokens_per_s"] > r.tokens_per_s)
            )
        ).any()
        for r in everything[~everything["feasible"]].itertuples()
    )


def test_grid_resume_skips_evaluated_points(tmp_path) -> None:
    config = tiny(tmp_path, "grid", trials=None)
    run_study(config=config, problem=ToyDeployment(), n_trials=100)
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=config.budget())
    params = [tuple(t.params.values()) for t in completed_trials(study)]
    assert len(params) == len(set(params)) == config.space.grid_size


def test_reports_have_the_same_columns_whatever_engine(tmp_path) -> None:
    frames = {e: reported(tiny(tmp_path / e, e, trials=40)) for e in ("optuna", "pymoo", "grid")}
    trials_columns = {e: list(f[0].columns) for e, f in frames.items()}
    pareto_columns = {e: list(f[1].columns) for e, f in frames.items()}
    assert trials_columns["optuna"] == trials_columns["pymoo"] == trials_columns["grid"]
    assert pareto_columns["optuna"] == pareto_columns["pymoo"] == pareto_columns["grid"]
    assert "constraint[latency_s <= 0.05]" in trials_columns["pymoo"]


@pytest.mark.parametrize(
    ("engine", "sampler", "objectives"),
    [
        ("optuna", "tpe", OBJECTIVES),
        ("optuna", "random", OBJECTIVES),
        ("pymoo", "nsga3", OBJECTIVES),
        ("pymoo", "smsemoa", OBJECTIVES),
        ("optuna", "nsga2", OBJECTIVES[:1]),
        ("pymoo", "nsga2", OBJECTIVES[:1]),
    ],
)
def test_every_sampler_and_single_objective_runs_and_reports(tmp_path, engine, sampler, objectives) -> None:
    config = tiny(tmp_path, engine, sampler=sampler, objectives=objectives, trials=30)
    trials, pareto = reported(config)
    assert len(trials) == 30 and len(pareto) >= 1
    if len(objectives) == 1:
        best = trials.loc[trials["feasible"], "energy_per_token_j"].min()
        assert set(pareto["energy_per_token_j"]) == {best}


def test_pymoo_resume_survives_a_damaged_checkpoint(tmp_path) -> None:
    config = tiny(tmp_path, "pymoo")
    run_study(config=config, problem=ToyDeployment(), n_trials=20)
    checkpoint_path(config).write_bytes(b"not a pickle")
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=40)
    assert len(completed_trials(study)) == 40
