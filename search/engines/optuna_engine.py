"""Optuna engine: NSGA-II, TPE or random sampling, one trial at a time.

Constraints go through ``trial.set_constraint`` (Optuna 5), which every Optuna sampler
reads; several processes may run this engine on one shared study at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna
from optuna.samplers import BaseSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.storages import BaseStorage
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState

from search.engines.base import Engine
from search.outcome import completed_trials, make_outcome, record
from search.problem import Problem
from search.progress import TrialProgress
from search.storage import claim_trial

if TYPE_CHECKING:
    from search.config import StudyConfig


def make_sampler(config: StudyConfig, seed: int | None) -> BaseSampler:
    """The Optuna sampler named by ``config.sampler`` (one of ``OptunaEngine.samplers``)."""
    factories: dict[str, Callable[[], BaseSampler]] = {
        "nsga2": lambda: NSGAIISampler(population_size=config.population_size, seed=seed),
        "tpe": lambda: TPESampler(seed=seed),
        "random": lambda: RandomSampler(seed=seed),
    }
    if set(factories) != set(OptunaEngine.samplers):  # a listed sampler must be built
        raise RuntimeError("OptunaEngine.samplers and make_sampler disagree")
    return factories[config.sampler]()


class OptunaEngine(Engine):
    """Optuna samplers, one trial at a time; workers may share the study."""

    name = "optuna"
    samplers = ("nsga2", "tpe", "random")
    shared_study = True

    def run(
        self,
        *,
        config: StudyConfig,
        problem: Problem,
        storage: BaseStorage,
        n_total: int,
        seed: int | None,
        progress: TrialProgress,
    ) -> None:
        """Ask, evaluate and tell until the study holds ``n_total`` completed trials."""
        study = optuna.load_study(study_name=config.name, storage=storage, sampler=make_sampler(config, seed))
        remaining = n_total - len(completed_trials(study))
        if remaining <= 0:
            return

        def objective(trial: optuna.Trial) -> list[float]:
            claim_trial(trial)
            params = config.space.suggest(trial)
            outcome = make_outcome(config, problem.evaluate(config.space.with_fixed(params)))
            record(trial, outcome)
            return outcome.values

        def advance(study: optuna.Study, trial: FrozenTrial) -> None:
            if trial.state == TrialState.COMPLETE:
                progress.advance()
            if progress.stop_requested:
                study.stop()

        # MaxTrialsCallback stops at the total even when other workers add trials meanwhile.
        study.optimize(
            objective,
            n_trials=remaining,
            callbacks=[advance, MaxTrialsCallback(n_total, states=(TrialState.COMPLETE,))],
        )
