"""How the calibration file records a constant and a fit: the provenance entry of one
value (its kind, the fit and files behind it) and the report of one fit (its data, its
in-sample and held-out errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from energylens.calibration.fitting import FitResult

REPO_ROOT = Path(__file__).resolve().parents[2]


def rel_path(path: Path | str) -> str:
    """``path`` relative to the repository root where it lies inside it, else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(REPO_ROOT))
    except ValueError:
        return str(p)


def fit_report(*, fit_id: str, result: FitResult, leave_out_kind: str) -> dict[str, Any]:
    """The ``fits`` section of one fit: its data, residual and errors, in sample and
    held out (under ``leave_out_kind``)."""
    out: dict[str, Any] = {
        "data": [rel_path(f) for f in result.fitted_on],
        "n_points": result.n_points,
        "rms_log_residual": round(result.rms_log_residual, 5),
        "in_sample": {k: v.as_dict() for k, v in sorted(result.in_sample.items())},
    }
    if result.leave_out:
        out[leave_out_kind] = {k: v.as_dict() for k, v in sorted(result.leave_out.items())}
    if result.at_bound:
        out["at_bound"] = sorted(result.at_bound)
    if result.notes:
        out["notes"] = list(result.notes)
    out["fit"] = fit_id
    return out


def entry(*, value: float, kind: str, fit_id: str | None = None, report: dict | None = None,
          note: str | None = None) -> dict[str, Any]:
    """The provenance entry of one constant: its value, kind (fitted, measured, assumed,
    default) and, for a fitted one, the fit, its files and residual."""
    out: dict[str, Any] = {"value": float(f"{value:.6g}"), "kind": kind}
    if fit_id is not None and report is not None:
        out["fit"] = fit_id
        out["fitted_on"] = report["data"]
        out["residual"] = {"rms_log": report["rms_log_residual"]}
    if note:
        out["note"] = note
    return out
