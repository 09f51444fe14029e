"""pymoo engine: NSGA-II, NSGA-III or SMS-EMOA (hypervolume-contribution survival) on mixed
variables, one generation per batch.

The algorithm is driven by ask/tell: each generation is decoded, evaluated (in one
``evaluate_many`` call when the problem has it), told back with objectives converted to
minimisation in ``F`` and constraint values in ``G`` (feasible when <= 0), and written to
the study in one append (a killed run loses at most the generation in flight, which the next
open records as lost: :func:`search.storage.generation_in_flight`). After each generation
the algorithm is pickled to ``<results>/checkpoints/<study>.pkl`` with a fingerprint of the study; a resume
continues from it when the study still matches (same number of completed trials, same
first trial), and otherwise seeds the first population with the study's completed trials.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial
from pymoo.algorithms.moo.nsga2 import NSGA2, binary_tournament
from pymoo.algorithms.moo.nsga3 import NSGA3
from pymoo.algorithms.moo.sms import SMSEMOA, cv_and_dom_tournament
from pymoo.core.algorithm import Algorithm
from pymoo.core.evaluator import Evaluator
from pymoo.core.mixed import (
    MixedVariableDuplicateElimination,
    MixedVariableMating,
    MixedVariableSampling,
)
from pymoo.core.population import Population
from pymoo.core.problem import Problem as PymooProblem
from pymoo.core.termination import NoTermination
from pymoo.operators.selection.tournament import TournamentSelection
from pymoo.problems.static import StaticProblem
from pymoo.util.ref_dirs import get_reference_directions

from search.engines.base import Engine
from search.outcome import VALID_KEY, Outcome, completed_trials, frozen_trial, make_outcome
from search.problem import Problem, evaluate_batch
from search.progress import TrialProgress
from search.storage import batched_writes, generation_in_flight

if TYPE_CHECKING:
    from search.config import StudyConfig


class _Shape(PymooProblem):
    """Variables and objective/constraint counts only: evaluation happens outside pymoo."""

    def __init__(self, config: StudyConfig) -> None:
        super().__init__(
            vars=config.space.pymoo_variables(),
            n_obj=len(config.objectives),
            n_ieq_constr=len(_constraint_keys(config)),
        )


class PymooEngine(Engine):
    """NSGA-II, NSGA-III or SMS-EMOA, one generation per batch, resumable from a checkpoint."""

    name = "pymoo"
    samplers = ("nsga2", "nsga3", "smsemoa")

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
        """Run generations until the study holds ``n_total`` completed trials.

        Stops early if the algorithm cannot propose a new configuration (tiny spaces).
        """
        study = optuna.load_study(study_name=config.name, storage=storage)
        done = completed_trials(study)
        algorithm = _load_checkpoint(config, _fingerprint(done)) or _new_algorithm(config, seed, done)
        n_done = len(done)
        while n_done < n_total and not progress.stop_requested:
            pop = algorithm.ask()
            if pop is None or len(pop) == 0:
                break
            pop = pop[: n_total - n_done]
            params = [config.space.decode(ind.X) for ind in pop]
            with generation_in_flight(study, len(pop)):
                evaluations = evaluate_batch(problem, [config.space.with_fixed(p) for p in params])
                outcomes = [make_outcome(config, e) for e in evaluations]
                _assign(config, pop, outcomes)
                algorithm.tell(infills=pop)
                with batched_writes(storage):
                    study.add_trials(
                        [frozen_trial(config.space, p, o) for p, o in zip(params, outcomes, strict=True)]
                    )
            n_done += len(pop)
            _save_checkpoint(config, algorithm, _fingerprint(completed_trials(study)))
            progress.advance(len(pop))


def checkpoint_path(config: StudyConfig) -> Path:
    """Where the algorithm state of this study is pickled."""
    return config.results / "checkpoints" / (config.name.replace("/", "__") + ".pkl")


def _new_algorithm(config: StudyConfig, seed: int | None, done: list[FrozenTrial]) -> Algorithm:
    elimination = MixedVariableDuplicateElimination()
    common = {
        "pop_size": config.population_size,
        "sampling": MixedVariableSampling(),
        "eliminate_duplicates": elimination,
        "seed": seed,
    }
    if config.sampler == "nsga3":
        ref_dirs = get_reference_directions(
            "energy", len(config.objectives), n_points=config.population_size, seed=seed or 0
        )
        algorithm: Algorithm = NSGA3(
            ref_dirs=ref_dirs, mating=MixedVariableMating(eliminate_duplicates=elimination), **common
        )
    elif config.sampler == "smsemoa":
        selection = TournamentSelection(func_comp=cv_and_dom_tournament)
        algorithm = SMSEMOA(
            mating=MixedVariableMating(selection=selection, eliminate_duplicates=elimination), **common
        )
    else:
        selection = TournamentSelection(func_comp=binary_tournament)
        algorithm = NSGA2(
            mating=MixedVariableMating(selection=selection, eliminate_duplicates=elimination), **common
        )
    algorithm.setup(_Shape(config), termination=NoTermination())
    seeds = _population_from_trials(config, done)
    if seeds is not None:
        algorithm.ask()  # initialises the algorithm; the random population is replaced
        algorithm.tell(infills=seeds)
    return algorithm


def _population_from_trials(config: StudyConfig, trials: list[FrozenTrial]) -> Population | None:
    names, keys = set(config.space.names), _constraint_keys(config)
    usable = [t for t in trials if set(t.params) == names and set(keys) <= set(t.constraints)]
    if not usable:
        return None
    pop = Population.new(X=[config.space.encode(t.params) for t in usable])
    outcomes = [Outcome(list(t.values), t.constraints, {}) for t in usable]
    _assign(config, pop, outcomes)
    return pop


def _assign(config: StudyConfig, pop: Population, outcomes: list[Outcome]) -> None:
    signs = np.array([1.0 if o.direction == "minimize" else -1.0 for o in config.objectives])
    f = np.array([o.values for o in outcomes], dtype=float) * signs
    g = np.array([[o.constraints[k] for k in _constraint_keys(config)] for o in outcomes], dtype=float)
    Evaluator().eval(StaticProblem(_Shape(config), F=f, G=g), pop)


def _constraint_keys(config: StudyConfig) -> list[str]:
    return [VALID_KEY] + [str(c) for c in config.constraints]


def _fingerprint(done: list[FrozenTrial]) -> tuple[int, str]:
    first = min(done, key=lambda t: t.number).datetime_start if done else None
    return len(done), str(first)


def _load_checkpoint(config: StudyConfig, fingerprint: tuple[int, str]) -> Algorithm | None:
    path = checkpoint_path(config)
    try:
        with path.open("rb") as f:
            state = pickle.load(f)
        return state["algorithm"] if state["fingerprint"] == fingerprint else None
    except Exception:  # none, or unreadable (another pymoo version, a damaged file): start from the trials
        return None


def _save_checkpoint(config: StudyConfig, algorithm: Algorithm, fingerprint: tuple[int, str]) -> None:
    """Pickle the algorithm; one that cannot be pickled (SMS-EMOA holds a local function)
    leaves no checkpoint, and a resume seeds its population from the study's trials."""
    path = checkpoint_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        state = pickle.dumps({"algorithm": algorithm, "fingerprint": fingerprint})
    except (pickle.PicklingError, AttributeError, TypeError):
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(state)
    os.replace(tmp, path)
