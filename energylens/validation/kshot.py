"""``energylens validate measurements FILE.csv [--k-shot K --group-by COLS]``.

Plain validation predicts every row of a measurement CSV (:mod:`energylens.measurements.
user_csv`) with one calibration. K-shot validation splits the rows into groups (equal
values of the ``group_by`` columns); in each group it fits an overlay
(:mod:`energylens.calibration.overlay`) on K rows, chosen by ``seed`` and spread over the
group's batch and length range, and scores the group's other rows only. With K = 0 no
overlay is fitted and the result is the plain validation. With a :class:`BlindBase`, each
group starts from a base that forgets the engine constants fitted on the rows' own file
for the group's runtimes and GPUs (:mod:`energylens.calibration.forget`): a rig the
calibration never saw.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from energylens.calibration.forget import forget_fits
from energylens.calibration.overlay import FitRow, Overlay, apply_overlay, fit_overlay
from energylens.cost.constants import Calibration
from energylens.errors import EnergyLensError, MeasurementError
from energylens.hardware import load_gpu
from energylens.measurements.bench_screen import (
    screen_kind,
    screened_summary,
    user_row_impossible,
)
from energylens.measurements.user_csv import (
    SCREENED,
    Case,
    UnsupportedRow,
    UserMeasurements,
    UserRow,
    predicted_metrics,
    row_case,
)
from energylens.model.zoo import get_model, is_local_config
from energylens.predict import predict
from energylens.workloads import Prediction
from energylens.workloads.capacity import kv_cache_limit


@dataclass(frozen=True, kw_only=True)
class BlindBase:
    """Forget the runtime constants fitted on ``data_file`` (as a calibration file records
    it) for each group's (runtime, GPU): ``document`` is the calibration file's YAML."""

    document: dict[str, Any]
    data_file: str


@dataclass
class RowOutcome:
    """One row: its columns, what was predicted, why not, whether it was fitted on, and
    why it is screened (faster than reading the weights allows, or a run the host paced:
    predicted, never fitted on nor counted in the headline error), and what the KV cache
    decided in the prediction (``note``: a row whose unrecorded KV precision may matter)."""

    row: UserRow
    predicted: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    fitted_on: bool | None = None  # None outside k-shot validation
    screened: str | None = None
    note: str | None = None
    # what the group's base (no overlay: K = 0) predicted, so that a K > 0 figure can be
    # compared with K = 0 on the very rows it scores
    base_predicted: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``screened`` and ``note`` only where set)."""
        out: dict[str, Any] = {"input": self.row.as_input(), "predicted": self.predicted,
                               "error": self.error}
        if self.fitted_on is not None:
            out["fitted_on"] = self.fitted_on
        if self.screened is not None:
            out["screened"] = self.screened
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass
class MeasuredReport:
    """Every row's outcome, and the overlay fitted per group (k-shot only)."""

    rows: list[RowOutcome]
    overlays: dict[str, Overlay] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()  # the columns of the k-shot groups (none: one group)

    @property
    def metrics(self) -> dict[str, dict[str, float | int | None]]:
        """MAPE and count per measured metric over predicted rows not fitted on; screened
        rows apart, per kind (``<metric>[impossible]``, ``<metric>[host-bound]``), and with
        the others as ``<metric>[with <kinds>]`` (the convention of ``validate --all``)."""
        return _scored_summary(self.rows)

    @property
    def groups(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        """:attr:`metrics` per group (``col=value,...``) of the k-shot ``group_by``."""
        members: dict[str, list[RowOutcome]] = defaultdict(list)
        for outcome in self.rows:
            members[group_key(outcome.row, self.group_by)].append(outcome)
        return {key: _scored_summary(rows) for key, rows in sorted(members.items())} \
            if self.group_by else {}

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object (``groups`` where the rows were grouped)."""
        out = {"rows": [r.as_dict() for r in self.rows], "metrics": self.metrics}
        return out | {"groups": self.groups} if self.group_by else out


def _scored_summary(rows: list[RowOutcome]) -> dict[str, dict[str, float | int | None]]:
    """MAPE per metric over ``rows`` predicted and not fitted on, screened ones apart."""
    return screened_summary([o for o in rows if o.error is None and not o.fitted_on],
                            summary=_mape, kind=lambda o: screen_kind(o.screened))


def _mape(outcomes: list[RowOutcome]) -> dict[str, dict[str, float | int | None]]:
    ape: dict[str, list[float]] = defaultdict(list)
    for outcome in outcomes:
        for name, measured in outcome.row.measured.items():
            if name in outcome.predicted:
                ape[name].append(abs(outcome.predicted[name] / measured - 1.0))
    return {name: {"mape": round(float(np.mean(v)), 6), "n": len(v)} for name, v in ape.items()}


def screen(row: UserRow, case: Case) -> str | None:
    """Why ``row`` is no measurement of the deployment's GPU work, or None: its own
    ``screened`` reason (a host-paced run its converter or user marked), else why it cannot
    have run as described (:func:`user_row_impossible`)."""
    marked = row.values.get(SCREENED)
    if marked:
        return str(marked)
    return user_row_impossible(
        config=case.model, gpu=case.gpu, num_gpus=int(row.values["num_gpus"]),
        weight_dtype=case.deployment.weight_dtype, output_tokens=case.workload.output_tokens,
        speculative_tokens=case.deployment.speculative_tokens, measured=row.measured)


def predict_case(case: Case, calibration: Calibration) -> Prediction:
    """``case`` predicted: on its deployment, or on its prefill and decode pools."""
    if case.pools is None:
        return predict(model=case.model, gpu=case.gpu, deployment=case.deployment,
                       workload=case.workload, calibration=calibration)
    from energylens.workloads.load.disagg import Pool, predict_disaggregated

    prefill, decode = (Pool(gpu=case.gpu, deployment=d) for d in case.pools)
    return predict_disaggregated(model=case.model, workload=case.workload, prefill=prefill,
                                 decode=decode, calibration=calibration)


def _predictor(row: UserRow) -> Any:
    """``calibration -> metrics | None`` for ``row``; raises UnsupportedRow."""
    case = row_case(row)

    def run(calibration: Calibration) -> dict[str, float] | None:
        try:
            result = predict_case(case, calibration)
        except EnergyLensError:
            return None
        return predicted_metrics(result, case.workload) if result.feasible else None

    return run, case


def _outcome(row: UserRow, calibration: Calibration) -> RowOutcome:
    outcome = RowOutcome(row=row)
    try:
        case = row_case(row)
        result = predict_case(case, calibration)
    except UnsupportedRow as exc:
        outcome.error = str(exc)
        return outcome
    except EnergyLensError as exc:  # the deployment cannot run the model at all
        outcome.error = str(exc).strip().splitlines()[0]
        return outcome
    if not result.feasible:
        outcome.error = f"infeasible: {result.infeasible_reason}"
    else:
        outcome.predicted = predicted_metrics(result, case.workload)
        outcome.screened = screen(row, case)
        outcome.note = kv_cache_limit(result=result, workload=case.workload,
                                      deployment=case.deployment)
    return outcome


def validate_measured(measurements: UserMeasurements, *, calibration: Calibration,
                      on_row: Callable[[], None] | None = None) -> MeasuredReport:
    """Predict every row with ``calibration``; ``on_row`` is called after each (progress)."""
    outcomes = []
    for row in measurements.rows:
        outcomes.append(_outcome(row, calibration))
        if on_row is not None:
            on_row()
    return MeasuredReport(rows=outcomes)


def spread_pick(features: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` indices spread over ``features`` (rows x dims): a random first, then each the
    farthest from those picked (ties broken at random)."""
    n = len(features)
    if k >= n:
        return list(range(n))
    span = np.ptp(features, axis=0)
    scaled = (features - features.min(axis=0)) / np.where(span > 0, span, 1.0)
    picked = [int(rng.integers(n))]
    while len(picked) < k:
        distance = np.min(np.linalg.norm(scaled[:, None, :] - scaled[picked][None], axis=2), axis=1)
        distance += rng.random(n) * 1e-9
        distance[picked] = -1.0
        picked.append(int(np.argmax(distance)))
    return picked


def _features(row: UserRow) -> list[float]:
    v = row.values
    return [float(np.log(v[c] or 1.0)) for c in ("batch", "concurrency", "input_tokens",
                                                  "output_tokens")]


def group_key(row: UserRow, group_by: Sequence[str]) -> str:
    """``col=value,...`` of the row's group: a ``gpu`` or ``model`` column by the name it
    resolves to (``H100`` and ``NVIDIA H100 80GB HBM3`` are one GPU, a zoo alias and the
    Hugging Face id one model), any other column as written."""
    return ",".join(f"{c}={_canonical(c, row.columns.get(c, ''))}" for c in group_by)


def _canonical(column: str, text: str) -> str:
    """``text`` of ``column`` by the GPU or zoo model it names (as written where it names
    none: the row's own error says why)."""
    try:
        if column == "gpu":
            return load_gpu(text).name
        if column == "model" and not is_local_config(text):
            return get_model(text).name
    except EnergyLensError:
        pass
    return text


def _group_base(rows: Sequence[UserRow], *, calibration: Calibration,
                blind: BlindBase | None) -> Calibration:
    """The base a group starts from: ``calibration``, or its blind version."""
    if blind is None:
        return calibration
    pairs = set()
    for row in rows:
        try:
            case = row_case(row)
        except EnergyLensError:
            continue
        pairs.add((case.deployment.runtime, load_gpu(case.gpu).name))
    return forget_fits(calibration=calibration, document=blind.document,
                       data_file=blind.data_file, pairs=pairs)


def k_shot(measurements: UserMeasurements, *, k: int, group_by: Sequence[str], seed: int,
           calibration: Calibration, blind: BlindBase | None = None) -> MeasuredReport:
    """Per group, fit an overlay on ``k`` spread rows and predict the others with it (from
    the group's blind base if ``blind`` is given)."""
    unknown = [c for c in group_by if c not in measurements.rows[0].columns]
    if unknown:
        raise MeasurementError(f"{measurements.path}: --group-by column '{unknown[0]}' is not "
                               f"in the file")
    if k < 0:
        raise MeasurementError(f"--k-shot must be >= 0, got {k}")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(measurements.rows):
        groups[group_key(row, group_by)].append(i)
    bases = {key: _group_base([measurements.rows[i] for i in members],
                              calibration=calibration, blind=blind)
             for key, members in groups.items()}
    outcomes = MeasuredReport(rows=[_outcome(row, bases[group_key(row, group_by)])
                                    for row in measurements.rows], group_by=tuple(group_by))
    for outcome in outcomes.rows:
        outcome.fitted_on = False
        outcome.base_predicted = dict(outcome.predicted)
    for key in sorted(groups):
        base = bases[key]
        if k == 0:
            continue
        rng = np.random.default_rng([seed, zlib.crc32(key.encode())])  # one stream per group
        usable = [i for i in groups[key] if _not_fittable(outcomes.rows[i]) is None]
        if not usable:
            continue
        chosen = [usable[j] for j in spread_pick(
            np.array([_features(outcomes.rows[i].row) for i in usable]), k, rng)]
        fit = fit_overlay(rows=[_fit_row(outcomes.rows[i]) for i in chosen], base=base)
        outcomes.overlays[key] = fit.overlay
        tuned = apply_overlay(base, fit.overlay) if fit.overlay.factors else base
        for i in groups[key]:
            outcome = outcomes.rows[i]
            outcome.fitted_on = i in chosen
            if outcome.error is None and fit.overlay.factors:
                outcomes.rows[i] = _outcome(outcome.row, tuned)
                outcomes.rows[i].fitted_on = i in chosen
                outcomes.rows[i].base_predicted = outcome.base_predicted
    return outcomes


def _not_fittable(outcome: RowOutcome) -> str | None:
    """Why ``outcome`` cannot be fitted on, or None: it must be predicted, not screened,
    and carry a measured metric the prediction carries."""
    if outcome.error is not None:
        return outcome.error
    if outcome.screened is not None:
        return outcome.screened
    if not any(m in outcome.predicted for m in outcome.row.measured):
        return (f"a {outcome.row.values['workload']} row predicts none of its measured "
                f"metrics ({', '.join(outcome.row.measured)})")
    return None


def _fit_row(outcome: RowOutcome) -> FitRow:
    run, case = _predictor(outcome.row)
    return FitRow(gpu=case.gpu, measured=dict(outcome.row.measured), predict=run)


def fit_rows(measurements: UserMeasurements, *,
             calibration: Calibration) -> tuple[list[FitRow], list[tuple[int, str]]]:
    """The rows an overlay on ``calibration`` can be fitted on, and (row number, reason)
    for the others (unsupported, infeasible, screened, or predicting none of their
    measured metrics)."""
    rows, skipped = [], []
    for row in measurements.rows:
        outcome = _outcome(row, calibration)
        reason = _not_fittable(outcome)
        if reason is None:
            rows.append(_fit_row(outcome))
        else:
            skipped.append((row.number, reason))
    return rows, skipped
