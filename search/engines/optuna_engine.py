"""Optuna engine: NSGA-II, TPE or random sampling.

A study's own run (``run``) goes a generation at a time: the sampler works on an in-memory
mirror of the study, ``population_size`` configurations are asked at once, evaluated in one
batch (``evaluate_many``), told, and written to the storage together with
``study.add_trials``; trials other processes wrote meanwhile are copied into the mirror
before each generation. A generation in flight is recorded in the storage
(:func:`search.storage.generation_in_flight`): a killed run loses at most that generation,
and the next open reports it lost. Workers (``run_shared``) ask one trial at a time in the
storage, with heartbeats, so that a killed worker's trial is failed and re-queued.

Constraints go through ``trial.set_constraint`` (Optuna 5), which every Optuna sampler reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.storages import BaseStorage
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState

from search.engines.base import Engine
from search.outcome import completed_trials, make_outcome, record
from search.problem import Problem, evaluate_batch
from search.progress import TrialProgress
from search.storage import HEARTBEAT_KEY, batched_writes, claim_trial, generation_in_flight

if TYPE_CHECKING:
    from search.config import Direction, StudyConfig

WRITER_KEY = "search:writer"
"""System attr of trials a :class:`Mirror` wrote: its token."""


def make_sampler(config: StudyConfig, seed: int | None, *, batched: bool = False) -> BaseSampler:
    """The Optuna sampler named by ``config.sampler`` (one of ``OptunaEngine.samplers``);
    ``batched``: several trials are asked before any is told (TPE then lies that the pending
    ones are bad, so that a batch spreads out)."""
    factories: dict[str, Callable[[], BaseSampler]] = {
        "nsga2": lambda: MemoNSGAII(
            population_size=config.population_size, seed=seed, space=config.space.distributions()
        ),
        "tpe": lambda: TPESampler(seed=seed, constant_liar=batched),
        "random": lambda: RandomSampler(seed=seed),
    }
    if set(factories) != set(OptunaEngine.samplers):  # a listed sampler must be built
        raise RuntimeError("OptunaEngine.samplers and make_sampler disagree")
    return factories[config.sampler]()


class MemoNSGAII(NSGAIISampler):
    """Optuna's NSGA-II, where the generation of a new trial is worked out once per number of
    completed trials instead of once per trial (a loop over every completed trial, which made
    each trial cost more as the study grew). The result only depends on the completed trials,
    and completed trials never become anything else, so their number is a sound cache key.
    The relative search space is the study's space (``space``, single-valued knobs left to
    independent sampling as Optuna does)."""

    @classmethod
    def _get_generation_key(cls) -> str:
        return NSGAIISampler._get_generation_key()  # trials look as Optuna's NSGA-II writes them

    @classmethod
    def _get_parent_cache_key_prefix(cls) -> str:
        return NSGAIISampler._get_parent_cache_key_prefix()

    def __init__(self, *, space: dict[str, BaseDistribution], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._memo: tuple[int, int] | None = None
        self._space = {name: d for name, d in sorted(space.items()) if not d.single()}  # as Optuna's

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        """The study's knobs (every trial of a study has them all), instead of the
        intersection of every trial's distributions, recomputed and deep-copied per trial."""
        return dict(self._space)

    def get_trial_generation(self, study: optuna.Study, trial: FrozenTrial) -> int:
        """The generation ``trial`` belongs to (recorded in its system attrs)."""
        key = self._get_generation_key()
        if key in trial.system_attrs:
            return int(trial.system_attrs[key])
        n_complete = len(study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True))
        if self._memo is not None and self._memo[0] == n_complete:
            study._storage.set_trial_system_attr(trial._trial_id, key, self._memo[1])
            return self._memo[1]
        generation = super().get_trial_generation(study, trial)
        self._memo = (n_complete, generation)
        return generation


class OptunaEngine(Engine):
    """Optuna samplers, a generation at a time; workers may share the study (one trial at a
    time each)."""

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
        """Ask, evaluate, tell and write ``population_size`` trials at a time until the study
        holds ``n_total`` completed trials."""
        study = optuna.load_study(study_name=config.name, storage=storage)
        mirror = Mirror(study, make_sampler(config, seed, batched=True), directions=config.directions)
        while not progress.stop_requested:
            remaining = n_total - mirror.pull()
            if remaining <= 0:
                return
            asked = [mirror.memory.ask() for _ in range(min(config.population_size, remaining))]
            params = [config.space.suggest(trial) for trial in asked]
            with generation_in_flight(study, len(asked)):
                evaluations = evaluate_batch(problem, [config.space.with_fixed(p) for p in params])
                for trial, evaluation in zip(asked, evaluations, strict=True):
                    outcome = make_outcome(config, evaluation)
                    record(trial, outcome)
                    mirror.memory.tell(trial, outcome.values)
                mirror.push([trial.number for trial in asked])
            progress.advance(len(asked))

    def run_shared(
        self,
        *,
        config: StudyConfig,
        problem: Problem,
        storage: BaseStorage,
        n_total: int,
        seed: int | None,
        progress: TrialProgress,
    ) -> None:
        """Ask, evaluate and tell one trial at a time in the storage (claimed, with heartbeats)
        until the study holds ``n_total`` completed trials."""
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


class Mirror:
    """An in-memory copy of a stored study's completed trials, where the sampler works.

    Trials written by this mirror carry :data:`WRITER_KEY` (a token of this mirror) so that
    pulling does not copy them back; the Optuna samplers' own system attributes (e.g.
    NSGA-II's generation) travel with the trials, so a resumed run continues its generations.
    """

    def __init__(self, study: optuna.Study, sampler: BaseSampler, *, directions: list[Direction]) -> None:
        self.study = study
        self.memory = optuna.create_study(directions=directions, sampler=sampler)
        self.token = uuid.uuid4().hex
        self._seen: set[int] = set()

    def pull(self) -> int:
        """Copy completed trials of the stored study not seen yet; returns how many it holds."""
        stored = completed_trials(self.study)
        new = [t for t in stored if t._trial_id not in self._seen]
        self._seen.update(t._trial_id for t in new)
        foreign = [t for t in new if t.system_attrs.get(WRITER_KEY) != self.token]
        self.memory.add_trials([_copy(t) for t in foreign])
        return len(stored)

    def push(self, numbers: list[int]) -> None:
        """Write the mirror's trials ``numbers`` (finished) to the stored study."""
        trials = self.memory.get_trials(deepcopy=False)
        with batched_writes(self.study._storage):
            self.study.add_trials([_copy(trials[n], writer=self.token) for n in numbers])


def _copy(trial: FrozenTrial, *, writer: str | None = None) -> FrozenTrial:
    """A finished copy of ``trial`` for ``add_trials`` (without a heartbeat; stamped with
    ``writer`` when given)."""
    attrs = {k: v for k, v in trial.system_attrs.items() if k not in (HEARTBEAT_KEY, WRITER_KEY)}
    if writer is not None:
        attrs[WRITER_KEY] = writer
    return optuna.trial.create_trial(
        state=trial.state,
        params=trial.params,
        distributions=trial.distributions,
        values=trial.values,
        user_attrs=trial.user_attrs,
        system_attrs=attrs,
    )
