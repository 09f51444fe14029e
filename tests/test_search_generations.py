"""The Optuna engine a generation at a time: the same samples as Optuna's own NSGA-II, one
journal append per generation, a lost generation recorded as such, resumes that continue the
generations."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.samplers import NSGAIISampler
from optuna.trial import TrialState

from search.config import load_study
from search.engines.optuna_engine import MemoNSGAII
from search.outcome import completed_trials
from search.runner import open_study, resume_study, run_study
from search.storage import lost_generations, open_storage
from search.toy import ToyDeployment, write_toy_study

ROOT = Path(__file__).resolve().parents[1]
GENERATION = "NSGAIISampler:generation"


def toy(folder: Path, **overrides):
    return load_study(write_toy_study(folder, engine="optuna", population_size=10, seed=3, **overrides))


def test_the_memoised_sampler_samples_what_optunas_nsga2_samples(tmp_path) -> None:
    config = toy(tmp_path)
    problem = ToyDeployment()

    def sample(sampler) -> list[dict]:
        study = optuna.create_study(directions=config.directions, sampler=sampler)
        for _ in range(5):
            asked = [study.ask() for _ in range(10)]
            params = [config.space.suggest(t) for t in asked]
            for trial, evaluation in zip(asked, problem.evaluate_many(params), strict=True):
                values = [evaluation.metrics.get(o.metric, 1e30) for o in config.objectives]
                study.tell(trial, values)
        return [t.params for t in study.trials]

    stock = sample(NSGAIISampler(population_size=10, seed=5))
    memo = sample(MemoNSGAII(population_size=10, seed=5, space=config.space.distributions()))
    assert memo == stock and len({str(p) for p in memo}) > 30


def test_a_generation_is_one_journal_append_and_trials_keep_their_generation(tmp_path) -> None:
    config = toy(tmp_path)
    run_study(config=config, problem=ToyDeployment(), n_trials=30)
    lines = Path(config.storage).read_text().splitlines()
    # study creation and definition, then per generation: the in-flight mark, 10 trials in
    # one append, the mark cleared -> 12 lines, never one line per parameter
    assert len(lines) < 12 + 3 * 12
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=50)
    trials = completed_trials(study)
    assert len(trials) == 50
    assert [t.system_attrs[GENERATION] for t in trials] == [g for g in range(5) for _ in range(10)]


def test_a_killed_run_loses_only_its_generation_in_flight_and_it_is_recorded(tmp_path) -> None:
    config = toy(tmp_path)
    script = tmp_path / "die.py"
    script.write_text(textwrap.dedent(f"""\
        import os
        from search.config import load_study
        from search.runner import run_study
        from search.toy import ToyDeployment

        class DiesInThirdGeneration(ToyDeployment):
            calls = 0
            def evaluate_many(self, params):
                DiesInThirdGeneration.calls += 1
                if DiesInThirdGeneration.calls == 3:
                    os.kill(os.getpid(), 9)
                return super().evaluate_many(params)

        run_study(config=load_study({str(config.source)!r}), problem=DiesInThirdGeneration(), n_trials=50)
        """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([sys.executable, str(script)], env=env, check=False).returncode == -9
    with pytest.warns(UserWarning, match="a generation of 10 configurations"):
        study = open_study(config=config)
    assert len(completed_trials(study)) == 20
    assert TrialState.RUNNING not in {t.state for t in study.trials}
    assert [m["size"] for m in lost_generations(study)] == [10]
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=40)
    assert len(completed_trials(study)) == 40
    reopened = optuna.load_study(study_name=config.name, storage=open_storage(config.storage))
    assert len(lost_generations(reopened)) == 1  # recorded once, not again on every open
