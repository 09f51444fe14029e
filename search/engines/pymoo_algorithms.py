"""The pymoo side of the pymoo engine: the algorithms (NSGA-II, NSGA-III, SMS-EMOA on mixed
variables) and the hand-over of evaluated generations. Imported by
:class:`search.engines.pymoo_engine.PymooEngine` when it runs, so that loading the engine
registry does not import pymoo (and the scipy it brings, ~25 MiB and ~0.2 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
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

from search.outcome import VALID_KEY, Outcome

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


def new_algorithm(config: StudyConfig, seed: int | None, done: list[FrozenTrial]) -> Algorithm:
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
    assign(config, pop, outcomes)
    return pop


def assign(config: StudyConfig, pop: Population, outcomes: list[Outcome]) -> None:
    signs = np.array([1.0 if o.direction == "minimize" else -1.0 for o in config.objectives])
    f = np.array([o.values for o in outcomes], dtype=float) * signs
    g = np.array([[o.constraints[k] for k in _constraint_keys(config)] for o in outcomes], dtype=float)
    Evaluator().eval(StaticProblem(_Shape(config), F=f, G=g), pop)


def _constraint_keys(config: StudyConfig) -> list[str]:
    return [VALID_KEY] + [str(c) for c in config.constraints]
