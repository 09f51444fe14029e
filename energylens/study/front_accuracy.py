"""The error to expect of each Pareto point, as columns of a study's ``pareto.csv``.

Two points of a front whose energies differ by less than the error either should expect
are not told apart by the model; the columns say how far each can be trusted
(:func:`energylens.validation.expected_error.expected_error`: the worst held-out regime
fold the point falls in).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energylens.calibration.file import resolve_calibration
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.study.objective import (
    DeploymentProblem,
    deployment_from_params,
    workload_from_params,
)
from energylens.validation.expected_error import ExpectedError, expected_error
from energylens.workloads.load.study import pools_from_params

#: Columns written: held-out MAPE (a share) of energy per output token and of TPOT, and
#: the folds they come from.
COLUMNS = ("expected_energy_error", "expected_tpot_error", "expected_error_folds")


def point_expected_error(*, problem: DeploymentProblem,
                         params: Mapping[str, Any]) -> ExpectedError | None:
    """The expected error of one configuration of ``problem`` (None if it has none)."""
    gpu = load_gpu(str(params.get("gpu", "H100")))
    deployment = deployment_from_params(params=params, boost_mhz=gpu.boost_clock_mhz,
                                        routing=problem.routing)
    pools = pools_from_params(params=params, base=deployment)
    if pools is not None:
        gpu = load_gpu(pools[1].gpu)  # priced at the decode pool's GPU, as the trial was
    return expected_error(model=problem.model, gpu=gpu, deployment=deployment,
                          workload=workload_from_params(params=params, base=problem.workload),
                          calibration=resolve_calibration(problem.calibration))


def write_front_expected_error(*, results: Path, problem: DeploymentProblem,
                               fixed: dict[str, Any], knobs: tuple[str, ...]) -> int:
    """Add :data:`COLUMNS` to ``results/pareto.csv``; the number of points given one."""
    import pandas as pd

    path = results / "pareto.csv"
    if not path.is_file():
        return 0
    front = pd.read_csv(path)
    cells: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for row in front.to_dict("records"):
        params = {**fixed, **{k: row[k] for k in knobs if k in row and row[k] == row[k]}}
        try:
            found = point_expected_error(problem=problem, params=params)
        except ConfigError:
            found = None
        fields = {} if found is None else {e.field: e for e in found.errors}
        energy, tpot = fields.get("energy_per_output_token_j"), fields.get("tpot_s")
        cells["expected_energy_error"].append(None if energy is None else energy.mape)
        cells["expected_tpot_error"].append(None if tpot is None else tpot.mape)
        cells["expected_error_folds"].append(
            "" if found is None else "; ".join(sorted({e.fold for e in found.errors})))
    for name, values in cells.items():
        front[name] = values
    tmp = path.with_suffix(".csv.tmp")
    front.to_csv(tmp, index=False)
    tmp.replace(path)
    return sum(value is not None for value in cells["expected_energy_error"])


__all__ = ["COLUMNS", "point_expected_error", "write_front_expected_error"]
