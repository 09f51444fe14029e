"""What the search engine optimises: anything that maps a configuration to metrics."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from search.config import StudyConfig

#: Adds columns to a front before ``pareto.csv`` and the Pareto plots are written (an
#: application's own, e.g. each point's expected error; columns named
#: :data:`ERROR_PREFIX` + metric get error bars on the plot).
FrontAnnotator = Callable[["StudyConfig", pd.DataFrame], pd.DataFrame]
#: A front column ``expected_error_<metric>`` holds the relative error (a share) to expect
#: of that metric at each point.
ERROR_PREFIX = "expected_error_"


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
    """An objective. Optional batch hooks, used when present (see :func:`evaluate_batch` and
    :func:`evaluate_frame`):

    * ``evaluate_many(list[params]) -> list[Evaluation]``: a batch of configurations;
    * ``evaluate_table(table: pandas.DataFrame) -> pandas.DataFrame``: a columnar batch, one
      row per configuration and one column per knob or fixed value; the result has the same
      index, one float column per metric and an ``infeasible_reason`` column (None or ""
      when the configuration can run).
    """

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        """Evaluate one configuration (knob values plus the space's fixed values)."""
        ...


ValueCheck = Callable[[Any], str | None]
"""Check of one parameter value: None when legal, else what a legal value is
(``"one of H100, H200"``), which the error message shows after ``expected``."""


class InactiveParams(Protocol):
    """:attr:`ProblemSchema.inactive`: the parameters of ``params`` that a configuration does
    not read, under the study's ``problem`` section (``StudyConfig.problem``)."""

    def __call__(self, params: Mapping[str, Any], *, problem: Mapping[str, Any]) -> Collection[str]: ...


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
        color_by: Parameters that plots colour points by, in order of preference: the
            first that is a knob of the space.
        inactive: The parameters a configuration (knob and fixed values) sets but does not
            read (a knob its mode ignores), given the study's problem section; reports leave
            their cells empty, so that one deployment reads as one configuration. None: every
            parameter is read.
    """

    keys: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, ValueCheck]
    metrics: Mapping[str, str]
    color_by: tuple[str, ...] = ()
    inactive: InactiveParams | None = None


def evaluate_batch(problem: Problem, batch: Sequence[Mapping[str, Any]]) -> list[Evaluation]:
    """Evaluate ``batch`` with ``problem.evaluate_many`` if present, else one by one."""
    many = getattr(problem, "evaluate_many", None)
    results = list(many(batch)) if many is not None else [problem.evaluate(p) for p in batch]
    if len(results) != len(batch):
        raise ValueError(f"evaluate_many returned {len(results)} evaluations for {len(batch)} configurations")
    return results


REASON_COLUMN = "infeasible_reason"
"""Column of :func:`evaluate_frame` results: why a configuration cannot run (None when it can)."""


def evaluate_frame(problem: Problem, table: pd.DataFrame) -> pd.DataFrame:
    """Evaluate every row of ``table`` (knob and fixed values) into a metrics table.

    Uses ``problem.evaluate_table`` when present, else :func:`evaluate_batch` on the rows.
    The result has ``table``'s index, one float column per metric (NaN where a configuration
    did not report it) and :data:`REASON_COLUMN` (object: None when the configuration runs).

    Raises:
        ValueError: the hook returned another number of rows or no reason column.
    """
    columnar = getattr(problem, "evaluate_table", None)
    if columnar is not None:
        result = columnar(table)
        if len(result) != len(table) or REASON_COLUMN not in result.columns:
            raise ValueError(
                f"evaluate_table returned {len(result)} rows for {len(table)} configurations"
                f" (columns: {', '.join(map(str, result.columns))}; {REASON_COLUMN!r} is required)"
            )
        result = result.set_axis(table.index)
        reasons = result[REASON_COLUMN].astype(object)
        reasons = reasons.where(reasons.notna() & (reasons != ""), None)
        metrics = result.drop(columns=[REASON_COLUMN]).astype(float)
        return metrics.assign(**{REASON_COLUMN: reasons})
    rows = [{str(k): v for k, v in row.items()} for row in table.to_dict("records")]
    evaluations = evaluate_batch(problem, rows)
    names = list(dict.fromkeys(k for e in evaluations for k in e.metrics))
    values = np.full((len(rows), len(names)), np.nan)
    column = {name: j for j, name in enumerate(names)}
    for i, evaluation in enumerate(evaluations):
        for name, value in evaluation.metrics.items():
            values[i, column[name]] = value
    frame = pd.DataFrame(values, index=table.index, columns=names)
    reasons = [e.infeasible_reason for e in evaluations]
    frame[REASON_COLUMN] = pd.Series(reasons, index=table.index, dtype=object)
    return frame
