"""What every registered engine must do (``search/engines/README.md``), on the toy problem.

Parametrised over the registry, so a new engine is held to this suite once registered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from search.config import StudyConfig, StudyError, load_study
from search.engines import ENGINES, Engine, engine_names, get_engine, grid_engine
from search.frame import front_frame, trials_frame
from search.outcome import completed_trials, is_feasible, make_outcome
from search.progress import TrialProgress
from search.runner import create_study, resume_study, run_study
from search.toy import ToyDeployment, write_toy_study

SPACE = {  # 810 points; the last knob varies fastest in grid order, so that even the first
    "knobs": {  # 30 grid points mix invalid, SLO-violating and feasible configurations
        "batch": {"type": "int", "low": 4, "high": 32, "step": 7},
        "freq": {"type": "float", "low": 0.6, "high": 1.0, "step": 0.2},
        "fuse": {"type": "bool"},
        "gpu": {"type": "categorical", "values": ["small", "medium", "large"]},
        "gpus": {"type": "ordinal", "values": [1, 2, 4]},
        "tp": {"type": "ordinal", "values": [1, 2, 4]},
    },
}
OBJECTIVES = ["minimize energy_per_token_j", "maximize tokens_per_s"]
CONSTRAINTS = ["latency_s <= 0.05", "tokens_per_s >= 100"]

every_engine = pytest.mark.parametrize("engine", ENGINES, ids=engine_names())


def study(folder: Path, engine: Engine, **overrides: Any) -> StudyConfig:
    fields = {
        "space": SPACE,
        "objectives": OBJECTIVES,
        "constraints": CONSTRAINTS,
        "engine": engine.name,
        "population_size": 10,
        "seed": 0,
        **overrides,
    }
    return load_study(write_toy_study(folder, name=f"conformance-{engine.name}", **fields))


def snapshot(trials: list[FrozenTrial]) -> list[tuple[Any, ...]]:
    return [(t.number, t.params, t.values, t.constraints, t.user_attrs) for t in trials]


def test_the_registry_names_each_engine_once() -> None:
    names = engine_names()
    assert len(set(names)) == len(names) == len(ENGINES) > 0
    for engine in ENGINES:
        assert isinstance(engine, Engine) and engine.samplers
        assert get_engine(engine.name) is engine
        assert engine.needs_enumerable_space or not engine.exhaustive  # it enumerates the space
    with pytest.raises(KeyError, match="no engine"):
        get_engine("no-such-engine")


@every_engine
def test_study_files_accept_the_engine_and_its_samplers(tmp_path, engine) -> None:
    assert study(tmp_path, engine).sampler == engine.samplers[0]
    assert all(study(tmp_path, engine, sampler=s).sampler == s for s in engine.samplers)
    with pytest.raises(StudyError, match="sampler"):
        study(tmp_path, engine, sampler="no-such-sampler")
    for other in ENGINES:
        assert study(tmp_path, other).with_engine(engine.name).sampler == engine.samplers[0]


@every_engine
def test_every_evaluation_is_stored_with_its_outcome_and_infeasible_reason(tmp_path, engine) -> None:
    config = study(tmp_path, engine, trials=40)
    problem, kinds = ToyDeployment(), set()
    for trial in completed_trials(run_study(config=config, problem=problem)):
        evaluation = problem.evaluate(config.space.with_fixed(trial.params))
        expected = make_outcome(config, evaluation)
        assert trial.values == pytest.approx(expected.values, rel=1e-12)
        assert trial.constraints == pytest.approx(expected.constraints, rel=1e-12)
        assert trial.user_attrs["metrics"] == pytest.approx(evaluation.metrics, rel=1e-12)
        reason = trial.user_attrs["infeasible_reason"]
        assert reason == evaluation.infeasible_reason
        meets = reason is None and all(c.satisfied(evaluation.metrics[c.metric]) for c in config.constraints)
        assert is_feasible(trial) == meets
        kinds.add("invalid" if reason else "feasible" if meets else "violates an SLO")
    assert kinds == {"invalid", "violates an SLO", "feasible"}


def dominates(a: FrozenTrial, b: FrozenTrial, signs: list[float]) -> bool:
    x, y = np.multiply(a.values, signs), np.multiply(b.values, signs)
    return bool((x <= y).all() and (x < y).any())


@every_engine
def test_the_front_is_non_dominated_under_the_declared_directions(tmp_path, engine) -> None:
    config = study(tmp_path, engine, trials=60)
    result = run_study(config=config, problem=ToyDeployment())
    signs = [1.0 if d == "minimize" else -1.0 for d in config.directions]
    feasible = [t for t in completed_trials(result) if is_feasible(t)]
    truth = {tuple(t.values) for t in feasible if not any(dominates(o, t, signs) for o in feasible)}
    front = front_frame(config=config, trials=trials_frame(config=config, study=result))
    reported = {tuple(row) for row in front[[o.metric for o in config.objectives]].itertuples(index=False)}
    assert len(truth) > 1 and reported == truth


@every_engine
def test_the_search_heads_the_declared_way(tmp_path, engine) -> None:
    def run(direction: str) -> list[FrozenTrial]:
        objectives = [f"{direction} tokens_per_s"]
        config = study(tmp_path / direction, engine, objectives=objectives, constraints=[], trials=100)
        return completed_trials(run_study(config=config, problem=ToyDeployment()))

    def late_mean(trials: list[FrozenTrial]) -> float:
        late = [t.user_attrs["metrics"].get("tokens_per_s") for t in trials[-40:]]
        return float(np.mean([v for v in late if v is not None]))

    up, down = run("maximize"), run("minimize")
    if engine.exhaustive:  # every point in a fixed order, whatever the objectives
        assert [t.params for t in up] == [t.params for t in down]
    else:
        assert late_mean(up) > 1.5 * late_mean(down)


@every_engine
def test_resume_keeps_earlier_trials_and_tops_up_to_the_new_total(tmp_path, engine) -> None:
    config, problem = study(tmp_path, engine), ToyDeployment()
    first = snapshot(completed_trials(run_study(config=config, problem=problem, n_trials=25)))
    assert len(first) == 25  # not a whole number of pymoo generations (population_size 10)
    after = snapshot(completed_trials(resume_study(config=config, problem=problem, n_trials=65)))
    assert len(after) == 65 and after[:25] == first
    assert [t[1] for t in after[25:50]] != [t[1] for t in first]  # continues, does not replay
    assert len({repr(t[1]) for t in after[25:]}) > 1
    assert snapshot(completed_trials(resume_study(config=config, problem=problem, n_trials=50))) == after


@every_engine
def test_only_complete_trials_count_toward_the_total(tmp_path, engine) -> None:
    config, problem = study(tmp_path, engine), ToyDeployment()
    params, distributions = next(config.space.grid()), config.space.distributions()
    for state in (TrialState.FAIL, TrialState.PRUNED, TrialState.RUNNING):  # e.g. a crashed worker
        create_study(config=config).add_trial(
            optuna.trial.create_trial(state=state, params=params, distributions=distributions)
        )
    assert len(completed_trials(run_study(config=config, problem=problem, n_trials=15))) == 15
    result = resume_study(config=config, problem=problem, n_trials=27)
    assert len(completed_trials(result)) == 27 and len(result.trials) == 30


class StopAfter(TrialProgress):
    """A progress that asks for a stop (as Ctrl-C does) once ``after`` trials are reported."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.seen = after, 0

    def advance(self, n: int = 1) -> None:
        self.seen += n
        self.stop_requested = self.seen >= self.after


@every_engine
def test_a_stop_request_returns_after_the_current_trial_or_batch(tmp_path, monkeypatch, engine) -> None:
    monkeypatch.setattr(grid_engine, "BATCH_SIZE", 4)  # the grid engine's unit of work
    config, problem = study(tmp_path, engine, trials=500), ToyDeployment()
    storage = create_study(config=config)._storage
    progress = StopAfter(3)
    engine.run(config=config, problem=problem, storage=storage, n_total=500, seed=0, progress=progress)
    trials = optuna.load_study(study_name=config.name, storage=storage).trials
    assert 3 <= len(trials) == progress.seen < 500  # stopped early, nothing half-written
    assert all(t.state == TrialState.COMPLETE for t in trials)
    again = resume_study(config=config, problem=problem, n_trials=len(trials) + 5)  # and it resumes
    assert len(completed_trials(again)) == len(trials) + 5
