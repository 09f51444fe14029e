"""Workload-level energy regression (Wilkins et al. 2024, arXiv 2407.04014).

Fits ``e = a0*tau_in + a1*tau_out + a2*tau_in*tau_out`` (J per request; no intercept, as
published) by least squares to EnergyLens's own predictions over a grid of input and
output lengths for one model and deployment, and reports R^2. Wilkins et al. measured
R^2 0.96-0.98 on A100s with HF Transformers and no KV cache, so their coefficients are
not comparable to a KV-cached engine; only the functional form is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from energylens.cost.constants import Calibration
from energylens.deployment import Deployment, Workload
from energylens.errors import RegressionError
from energylens.predict import predict

DEFAULT_INPUT_TOKENS = (64, 128, 256, 512, 1024, 2048)
DEFAULT_OUTPUT_TOKENS = (32, 64, 128, 256, 512, 1024)




@dataclass
class EnergyRegression:
    """Coefficients (J per token, J per token^2), fit quality and the grid behind them."""

    model: str
    gpu: str
    deployment: dict[str, Any]
    workload: str
    batch: float
    a0: float
    a1: float
    a2: float
    r2: float
    n: int
    grid: list[dict[str, float]] = field(default_factory=list)

    def energy_j(self, input_tokens: float, output_tokens: float) -> float:
        """Energy per request the regression predicts."""
        return (self.a0 * input_tokens + self.a1 * output_tokens
                + self.a2 * input_tokens * output_tokens)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


def fit_energy_regression(*, model: str, gpu: str, deployment: Deployment | None = None,
                          batch: float = 32, workload: str = "batch",
                          input_tokens: Sequence[float] = DEFAULT_INPUT_TOKENS,
                          output_tokens: Sequence[float] = DEFAULT_OUTPUT_TOKENS,
                          calibration: Calibration | str | Path | None = None) -> EnergyRegression:
    """Predict energy per request on the grid and fit the Wilkins form to it.

    Infeasible grid points (memory) are left out of the fit and listed with ``feasible``
    false; :class:`RegressionError` is raised when fewer than four points remain.
    """
    deployment = deployment or Deployment()
    grid: list[dict[str, float]] = []
    for tin in input_tokens:
        for tout in output_tokens:
            result = predict(model=model, gpu=gpu, deployment=deployment,
                             workload=Workload(kind=workload, batch=batch, input_tokens=tin,
                                               output_tokens=tout),
                             calibration=calibration)
            grid.append({"input_tokens": float(tin), "output_tokens": float(tout),
                         "energy_per_request_j": result.energy_per_request_j,
                         "feasible": result.feasible})
    used = [g for g in grid if g["feasible"]]
    if len(used) < 4:
        raise RegressionError(f"only {len(used)} feasible grid points for {model} on {gpu}; "
                              "need at least 4 to fit three coefficients")
    tins = np.array([g["input_tokens"] for g in used])
    touts = np.array([g["output_tokens"] for g in used])
    energy = np.array([g["energy_per_request_j"] for g in used])
    design = np.stack([tins, touts, tins * touts], axis=1)
    coef, *_ = np.linalg.lstsq(design, energy, rcond=None)
    fitted = design @ coef
    ss_res = float(np.sum((energy - fitted) ** 2))
    ss_tot = float(np.sum((energy - energy.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    name = model if isinstance(model, str) else getattr(model, "name", str(model))
    return EnergyRegression(
        model=name, gpu=gpu, workload=workload, batch=float(batch),
        deployment={"tp": deployment.tp, "pp": deployment.pp, "ep": deployment.ep,
                    "num_gpus": deployment.total_gpus},
        a0=float(coef[0]), a1=float(coef[1]), a2=float(coef[2]), r2=float(r2), n=len(used),
        grid=grid)
