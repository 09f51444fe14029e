"""What the search engine optimises: anything that maps a configuration to metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Evaluation:
    """Result of evaluating one configuration.

    Attributes:
        metrics: Every number the objective computed; objectives and constraints are read
            from it by name. May be partial or empty when ``infeasible_reason`` is set.
        infeasible_reason: Why the configuration cannot run at all (e.g.
            ``"tp*pp=16 > num_gpus=8"``), or None when it can. Such a configuration becomes
            an infeasible trial with this reason recorded; it is never raised or skipped.
    """

    metrics: dict[str, float]
    infeasible_reason: str | None = None


class Problem(Protocol):
    """An objective. Engines call ``evaluate_many`` for batches when it exists."""

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        """Evaluate one configuration (knob values plus the space's fixed values)."""
        ...


ValueCheck = Callable[[Any], str | None]
"""Check of one parameter value: None when legal, else what a legal value is
(``"one of H100, H200"``), which the error message shows after ``expected``."""


@dataclass(frozen=True, kw_only=True)
class ProblemSchema:
    """What a problem reads from a study file, so that the file is checked before anything runs.

    Attributes:
        keys: Top-level study keys of the problem (beside the generic ones of
            :mod:`search.config`), each with a one-line description.
        params: Every knob or fixed name the problem reads, with the check of one value.
            Knob names outside it are refused (they would be silently ignored).
        metrics: Every metric an evaluation may report, with its unit or meaning;
            objectives and constraints must name one.
        color_by: Parameter that plots colour points by, when the space has it.
    """

    keys: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, ValueCheck]
    metrics: Mapping[str, str]
    color_by: str | None = None


def evaluate_batch(problem: Problem, batch: Sequence[Mapping[str, Any]]) -> list[Evaluation]:
    """Evaluate ``batch`` with ``problem.evaluate_many`` if present, else one by one."""
    many = getattr(problem, "evaluate_many", None)
    results = list(many(batch)) if many is not None else [problem.evaluate(p) for p in batch]
    if len(results) != len(batch):
        raise ValueError(f"evaluate_many returned {len(results)} evaluations for {len(batch)} configurations")
    return results
