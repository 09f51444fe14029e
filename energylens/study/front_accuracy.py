"""The error to expect of each Pareto point, as columns of a study's front.

Two points of a front whose metrics differ by less than the error either should expect are
not told apart by the model; the columns say how far each can be trusted
(:func:`energylens.validation.expected_error.expected_error`: the worst held-out regime
fold the point falls in). ``search`` writes them into ``pareto.csv`` and draws them as
error bars on the Pareto plot (:data:`search.problem.ERROR_PREFIX` columns).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from energylens.calibration.file import resolve_calibration
from energylens.errors import ConfigError
from energylens.hardware import UnknownGPUError
from energylens.model.hf import ModelApproximationWarning
from energylens.study.objective import DeploymentProblem, row_params, study_problem
from energylens.validation.expected_error import METRICS, ExpectedError, expected_error
from search.problem import ERROR_PREFIX

if TYPE_CHECKING:
    import pandas as pd

    from search.config import StudyConfig

#: The prediction fields with an expected error (TTFT: under load only); their columns are
#: ERROR_PREFIX + field, written when some point has a value.
FIELDS = (*METRICS.values(), "ttft_s")
#: Column naming the folds the errors come from.
FOLDS_COLUMN = "expected_error_folds"
#: Metrics whose relative error is a validated field's: ML.ENERGY's energy per output token
#: is the run's energy over its output tokens, so a request's energy (its share of the run)
#: carries the same relative error.
SAME_ERROR = {"energy_per_request_j": "energy_per_output_token_j"}


def point_expected_error(*, problem: DeploymentProblem, params: Mapping[str, Any],
                         kv_limited: bool = False) -> ExpectedError | None:
    """The expected error of one configuration of ``problem`` (None if it has none), at the
    configuration's GPU (a disaggregated one's decode pool's, with the disaggregated rows'
    error under load); ``kv_limited``: its load run preempted requests."""
    gpu, deployment, workload, pools = problem.setup(params)
    return expected_error(model=problem.model, gpu=gpu, deployment=deployment,
                          workload=workload, calibration=resolve_calibration(problem.calibration),
                          kv_limited=kv_limited, disaggregated=pools is not None)


def annotate_front(config: StudyConfig, front: pd.DataFrame) -> pd.DataFrame:
    """``front`` with an expected-error column per field of :data:`FIELDS` that some point
    has (a share; empty where a point has none) and :data:`FOLDS_COLUMN` (a ``search``
    front annotator)."""
    if front.empty:
        return front
    knobs, fixed = tuple(config.space.names), dict(config.space.fixed)
    with warnings.catch_warnings():  # a config.json's approximations were reported already
        warnings.simplefilter("ignore", ModelApproximationWarning)
        problem = study_problem(config)
    cells: dict[str, list[Any]] = {name: [] for name in (*FIELDS, FOLDS_COLUMN)}
    for row in front.to_dict("records"):
        params = row_params(row, knobs=knobs, fixed=fixed)
        try:
            found = point_expected_error(problem=problem, params=params,
                                         kv_limited=float(row.get("preemptions") or 0) > 0)
        except (ConfigError, UnknownGPUError):
            found = None
        errors = {} if found is None else {e.field: e for e in found.errors}
        for field in FIELDS:
            cells[field].append(errors[field].mape if field in errors else None)
        cells[FOLDS_COLUMN].append("; ".join(sorted({e.fold for e in errors.values()})))
    out = front.copy()
    for field in FIELDS:
        if any(value is not None for value in cells[field]):
            out[ERROR_PREFIX + field] = cells[field]
    for metric, field in SAME_ERROR.items():
        if metric in front.columns and ERROR_PREFIX + field in out.columns:
            out[ERROR_PREFIX + metric] = out[ERROR_PREFIX + field]
    out[FOLDS_COLUMN] = cells[FOLDS_COLUMN]
    return out


__all__ = ["FIELDS", "FOLDS_COLUMN", "SAME_ERROR", "annotate_front", "point_expected_error"]
