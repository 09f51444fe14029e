"""A study's completed trials as a table, whatever engine wrote them."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pandas as pd

from search.config import StudyConfig, exact_number
from search.knobs import FloatKnob
from search.outcome import VALID_KEY, completed_trials, is_feasible
from search.pareto import non_dominated_mask


def constraint_column(key: str) -> str:
    """Column holding a constraint value (relative violation, feasible when <= 0)."""
    return f"constraint[{key}]"


def metric_columns(config: StudyConfig) -> list[str]:
    """Objective metrics, then SLO metrics that are not objectives."""
    names = [o.metric for o in config.objectives]
    return names + [c.metric for c in config.constraints if c.metric not in names]


def trials_frame(*, config: StudyConfig, study: optuna.Study) -> pd.DataFrame:
    """One row per completed trial.

    Columns: ``number``, the knobs, the objective and SLO metrics, then every other metric
    the problem computed (empty when an invalid configuration has none),
    ``constraint[<key>]`` values, ``feasible`` and ``infeasible_reason``: why the
    configuration cannot run, or which SLOs it misses and by how much (empty when feasible).
    """
    trials = completed_trials(study)
    knobs = set(config.space.names)
    metrics = metric_columns(config)
    reported = {m for trial in trials for m in trial.user_attrs.get("metrics", {})}
    order = list(config.schema.metrics) if config.schema is not None else []
    # other metrics in the schema's order, then by name; one named like a knob (e.g.
    # num_gpus) is the knob's column
    metrics += [m for m in [*order, *sorted(reported - set(order))] if m in reported
                and m not in metrics and m not in knobs]
    keys = [VALID_KEY] + [str(c) for c in config.constraints]
    # a value on a float knob's step grid as written (0.85, not Optuna's 0.8500000000000001)
    stepped = {k.name for k in config.space.knobs if isinstance(k, FloatKnob) and k.step is not None}
    rows = []
    for trial in trials:
        values = trial.user_attrs.get("metrics", {})
        row: dict[str, Any] = {"number": trial.number}
        row |= {name: trial.params.get(name) for name in config.space.names}
        row |= {name: float(f"{row[name]:.12g}") for name in stepped if row[name] is not None}
        row |= {name: values.get(name, np.nan) for name in metrics}
        row |= {constraint_column(k): trial.constraints.get(k, np.nan) for k in keys}
        row["feasible"] = is_feasible(trial)
        row["infeasible_reason"] = trial.user_attrs.get("infeasible_reason") or slo_misses(config, values)
        rows.append(row)
    columns = [
        "number",
        *config.space.names,
        *metrics,
        *map(constraint_column, keys),
        "feasible",
        "infeasible_reason",
    ]
    return blank_inactive(config, pd.DataFrame(rows, columns=columns).astype({"feasible": bool}))


def blank_inactive(config: StudyConfig, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the knob cells each row's configuration does not read emptied (the
    problem schema's ``inactive``, under the study's problem section; integer and bool columns
    become nullable)."""
    inactive = None if config.schema is None else config.schema.inactive
    knobs = [k for k in config.space.names if k in frame.columns]
    if inactive is None or frame.empty or not knobs:
        return frame
    fixed = dict(config.space.fixed)
    unread: dict[str, list[bool]] = {k: [] for k in knobs}
    for row in frame[knobs].to_dict("records"):
        params = {**fixed, **{str(k): v for k, v in row.items() if not pd.isna(v)}}
        names = set(inactive(params, problem=config.problem))
        for knob in knobs:
            unread[knob].append(knob in names)
    out = frame.copy()
    for knob, mask in unread.items():
        if any(mask):
            column = out[knob]
            if pd.api.types.is_integer_dtype(column) or pd.api.types.is_bool_dtype(column):
                column = column.convert_dtypes()
            out[knob] = column.mask(np.array(mask))
    return out


def slo_misses(config: StudyConfig, metrics: dict[str, float]) -> str:
    """``"tpot_s = 0.062 > 0.05 (+24 %)"`` for every SLO ``metrics`` miss, joined by '; '."""
    misses = []
    for constraint in config.constraints:
        value = metrics.get(constraint.metric)
        if value is None or constraint.satisfied(value):
            continue
        sign = ">" if constraint.op == "<=" else "<"
        excess = f" ({constraint.violation(value) * 100:+.0f} %)" if constraint.bound else ""
        bound = exact_number(constraint.bound)
        misses.append(f"SLO {constraint.metric} = {value:.4g} {sign} {bound}{excess}")
    return "; ".join(misses)


def front_frame(*, config: StudyConfig, trials: pd.DataFrame) -> pd.DataFrame:
    """The feasible, non-dominated rows of ``trials``, best first objective first.

    A configuration evaluated several times appears once (its first trial, see
    :func:`distinct_configurations`).
    """
    feasible = trials[trials["feasible"]]
    names = [o.metric for o in config.objectives]
    mask = non_dominated_mask(feasible[names].to_numpy(dtype=float), directions=config.directions)
    first = config.objectives[0]
    front = distinct_configurations(config, feasible[mask])
    front = front.sort_values(first.metric, ascending=first.direction == "minimize", kind="stable")
    return front.drop(columns=["feasible", "infeasible_reason"]).reset_index(drop=True)


def distinct_configurations(config: StudyConfig, trials: pd.DataFrame) -> pd.DataFrame:
    """The first row of every configuration (knob values) in ``trials``.

    Float knob values are compared at 12 significant digits, so that e.g. a pymoo
    log-scale round trip does not make one configuration look like two.
    """
    key = trials[list(config.space.names)].apply(_comparable)
    return trials[~key.duplicated()]


def _comparable(column: pd.Series) -> pd.Series:
    if pd.api.types.is_float_dtype(column):
        return column.map(lambda v: float(f"{v:.12g}"))
    return column
