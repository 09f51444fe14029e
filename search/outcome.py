"""How an evaluation is stored as an Optuna trial, identically for every engine.

Conventions:

* ``values``: the objectives in config order, raw (Optuna applies the directions).
* constraints (Optuna ``trial.set_constraint`` system attrs, feasible when all <= 0):
  one per SLO, keyed ``str(constraint)`` (e.g. ``"tpot_s <= 0.05"``), holding the relative
  violation; plus ``"valid"``: 0 for a configuration that can run, ``INVALID_VIOLATION``
  for one with an ``infeasible_reason``, so every invalid configuration ranks behind
  every runnable one in constrained domination.
* An invalid configuration's missing objective gets ``PENALTY`` in its worse direction
  and a missing SLO metric gets ``INVALID_VIOLATION``; such a trial is infeasible through
  ``"valid"``, so it never reaches a feasible front.
* user attrs: ``metrics`` (everything the problem computed, the truth that reports show)
  and ``infeasible_reason`` (None when valid).

A valid evaluation missing an objective or SLO metric, or with a non-finite one, is a bug
in the problem and raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.problem import Evaluation
from search.space import Space

if TYPE_CHECKING:
    from search.config import StudyConfig

VALID_KEY = "valid"
PENALTY = 1e30
INVALID_VIOLATION = 1e6


@dataclass(frozen=True)
class Outcome:
    """What gets written for one evaluated configuration."""

    values: list[float]
    constraints: dict[str, float]
    user_attrs: dict[str, Any]


def make_outcome(config: StudyConfig, evaluation: Evaluation) -> Outcome:
    """Turn an evaluation into objective values, constraint values and user attrs.

    Raises:
        ValueError: a valid evaluation lacks a needed metric or has a non-finite one.
    """
    metrics = {str(k): float(v) for k, v in evaluation.metrics.items()}
    reason = evaluation.infeasible_reason
    values = []
    for objective in config.objectives:
        value = _metric(metrics, objective.metric, reason)
        worse = PENALTY if objective.direction == "minimize" else -PENALTY
        values.append(worse if value is None else value)
    constraints = {VALID_KEY: 0.0 if reason is None else INVALID_VIOLATION}
    for constraint in config.constraints:
        value = _metric(metrics, constraint.metric, reason)
        constraints[str(constraint)] = INVALID_VIOLATION if value is None else constraint.violation(value)
    return Outcome(values, constraints, {"metrics": metrics, "infeasible_reason": reason})


def _metric(metrics: Mapping[str, float], name: str, reason: str | None) -> float | None:
    value = metrics.get(name)
    if value is not None and math.isfinite(value):
        return value
    if reason is not None:
        return None
    problem = "is missing" if value is None else f"is {value}"
    raise ValueError(
        f"metric {name!r} {problem} in a valid evaluation (metrics: {', '.join(sorted(metrics)) or 'none'})"
    )


def record(trial: optuna.Trial, outcome: Outcome) -> None:
    """Write an outcome's constraints and user attrs into a running Optuna trial."""
    for key, value in outcome.constraints.items():
        trial.set_constraint(key, value)
    for key, value in outcome.user_attrs.items():
        trial.set_user_attr(key, value)


def frozen_trial(space: Space, params: Mapping[str, Any], outcome: Outcome) -> FrozenTrial:
    """A completed trial for ``study.add_trials`` (engines that do not ask Optuna)."""
    return optuna.trial.create_trial(
        params=dict(params),
        distributions=space.distributions(),
        values=outcome.values,
        constraints=outcome.constraints,
        user_attrs=outcome.user_attrs,
    )


def is_feasible(trial: FrozenTrial) -> bool:
    """Optuna's and pymoo's rule: every constraint value <= 0."""
    return all(v <= 0 for v in trial.constraints.values())


def completed_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's COMPLETE trials, in number order (what budgets count)."""
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
