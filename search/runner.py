"""Create, run, resume and join studies.

Budgets count COMPLETE trials of the study: ``run_study`` starts an empty study,
``resume_study`` tops an existing one up to a total, ``run_worker`` joins a shared one
until the study file's ``trials`` are done.

Every study records its definition (objectives, constraints, space, problem section) in
the storage when it is created (study user attr ``definition``) and its metric names
(shown by optuna-dashboard). Opening it again with a study file that defines something
else is refused with the difference: trials of different objectives or spaces never mix.
Trials left RUNNING by a crashed worker are failed and re-queued whenever a study is
opened (see :mod:`search.storage`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from typing import Any

import optuna
from optuna.storages import BaseStorage

from search.config import StudyConfig
from search.engines import ENGINES, get_engine
from search.outcome import completed_trials
from search.problem import Problem
from search.progress import stop_on_interrupt, trial_progress
from search.storage import display_storage, fail_stale_trials, open_storage, storage_exists, sync_storage

DEFINITION_KEY = "definition"
"""Study user attr holding :func:`definition` of the study file that created it."""


class StudyStateError(RuntimeError):
    """The study is missing, already run, or was created with another definition."""


def definition(config: StudyConfig) -> dict[str, Any]:
    """What the trials of a study mean: objectives, constraints, space and problem section
    (JSON types only). Engine, sampler, budget, seed and storage may change between runs."""
    knobs = {}
    for knob in config.space.knobs:
        fields = {k: v for k, v in asdict(knob).items() if k not in ("name", "baseline")}
        knobs[knob.name] = {"type": type(knob).__name__, **fields}
    raw = {
        "objectives": [str(o) for o in config.objectives],
        "constraints": [str(c) for c in config.constraints],
        "space": {"knobs": knobs, "fixed": dict(config.space.fixed)},
        "problem": config.problem,
    }
    return json.loads(json.dumps(raw, default=str))


def create_study(*, config: StudyConfig) -> optuna.Study:
    """Create the (empty) study in ``config.storage``, or load it if it exists.

    Raises:
        StudyStateError: it exists with another definition.
    """
    return _create(config, open_storage(config.storage))


def open_study(*, config: StudyConfig) -> optuna.Study:
    """Load an existing study (failing and re-queueing trials of crashed workers).

    Raises:
        StudyStateError: no such study, or it has another definition.
    """
    study = optuna.load_study(study_name=config.name, storage=_existing(config))
    fail_stale_trials(study)
    return study


def completed_in_storage(config: StudyConfig, *, check_definition: bool = False) -> int:
    """Completed trials of the study ``config.name`` (0 if it or its journal does not exist);
    opens nothing that does not exist and writes nothing.

    Raises:
        StudyStateError: with ``check_definition``, the study holds completed trials of
            another definition (as resume, report and rank would refuse).
    """
    if not storage_exists(config.storage):
        return 0
    storage = open_storage(config.storage, create=False)
    try:
        study = optuna.load_study(study_name=config.name, storage=storage)
    except KeyError:
        return 0
    done = len(completed_trials(study))
    if done and check_definition:  # none: a new run records the file's definition afresh
        _check_definition(config, study)
    return done


def refuse_existing(config: StudyConfig) -> None:
    """Raise if the study already has completed trials (a new run would mix with them).

    Raises:
        StudyStateError: it has.
    """
    n_done = completed_in_storage(config)
    if n_done:
        raise StudyStateError(
            f"study {config.name!r} already has {n_done} completed trials in "
            f"{display_storage(config.storage)}; resume it (`study resume`), run it under "
            "--new-study NAME, or remove that storage to start over"
        )


def run_study(
    *,
    config: StudyConfig,
    problem: Problem,
    n_trials: int | None = None,
    progress: bool = False,
) -> optuna.Study:
    """Run a new study up to ``n_trials`` completed trials (default: the config's budget).

    Raises:
        StudyStateError: the study already has completed trials (resume it instead).
        StudyError: no budget for a grid too large to run whole.
    """
    n_total = config.budget() if n_trials is None else n_trials
    refuse_existing(config)
    store = open_storage(config.storage)
    _create(config, store, restamp=True)
    return _drive(config, problem, store, n_total, config.seed, progress)


def resume_study(
    *, config: StudyConfig, problem: Problem, n_trials: int, progress: bool = False
) -> optuna.Study:
    """Continue a study until it holds ``n_trials`` completed trials in total.

    The sampler seed is offset by the number of completed trials so a resumed random or
    initial phase does not replay the first run (pymoo continues from its checkpoint).

    Raises:
        StudyStateError: no such study in the storage, or it has another definition.
    """
    store = _existing(config)
    return _drive(config, problem, store, n_trials, _continued_seed(config, store), progress)


def run_worker(
    *,
    config: StudyConfig,
    problem: Problem,
    n_trials: int | None = None,
    progress: bool = False,
) -> optuna.Study:
    """Join a shared study (an engine with ``shared_study``, e.g. optuna) until it holds
    ``n_trials`` completed trials in total, by default the study file's budget.

    Workers sample with unseeded samplers so they do not propose the same points.

    Raises:
        StudyStateError: the study does not exist yet, has another definition, or its
            engine cannot share it.
    """
    if not get_engine(config.engine).shared_study:
        shared = " or ".join(repr(e.name) for e in ENGINES if e.shared_study)
        raise StudyStateError(f"workers need engine {shared}, the study file has {config.engine!r}")
    n_total = config.budget() if n_trials is None else n_trials
    return _drive(config, problem, _existing(config), n_total, None, progress, shared=True)


def ensure_study(
    *, config: StudyConfig, problem: Problem, n_trials: int, progress: bool = False
) -> optuna.Study:
    """Create the study if needed, then run it up to ``n_trials`` completed trials (the seed
    offset by the trials it holds, as :func:`resume_study` does: a continued study does not
    replay its first trials)."""
    store = open_storage(config.storage)
    _create(config, store)
    return _drive(config, problem, store, n_trials, _continued_seed(config, store), progress)


def _continued_seed(config: StudyConfig, storage: BaseStorage) -> int | None:
    """``config.seed`` plus the study's completed trials (None stays unseeded)."""
    if config.seed is None:
        return None
    return config.seed + len(completed_trials(optuna.load_study(study_name=config.name, storage=storage)))


def _create(config: StudyConfig, storage: BaseStorage, *, restamp: bool = False) -> optuna.Study:
    """Create or load the study; a new one (or, with ``restamp``, one without completed
    trials) records the config's definition and metric names."""
    study = optuna.create_study(
        study_name=config.name, storage=storage, directions=config.directions, load_if_exists=True
    )
    if DEFINITION_KEY not in study.user_attrs or (restamp and not completed_trials(study)):
        _check_directions(config, study)
        study.set_user_attr(DEFINITION_KEY, definition(config))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.metric for o in config.objectives])
    _check_definition(config, study)
    return study


def _existing(config: StudyConfig) -> BaseStorage:
    missing = StudyStateError(
        f"no study {config.name!r} in {display_storage(config.storage)}; run it first"
    )
    if not storage_exists(config.storage):
        raise missing
    storage = open_storage(config.storage, create=False)
    try:
        storage.get_study_id_from_name(config.name)
    except KeyError:
        raise missing from None
    _check_definition(config, optuna.load_study(study_name=config.name, storage=storage))
    return storage


def _check_directions(config: StudyConfig, study: optuna.Study) -> None:
    expected = [optuna.study.StudyDirection[d.upper()] for d in config.directions]
    if list(study.directions) != expected:
        found = [d.name.lower() for d in study.directions]
        raise StudyStateError(
            f"study {config.name!r} in {display_storage(config.storage)} has directions {found}, "
            f"the study file asks {config.directions}; run it under --new-study NAME"
        )


def _check_definition(config: StudyConfig, study: optuna.Study) -> None:
    _check_directions(config, study)
    stored = study.user_attrs.get(DEFINITION_KEY)
    if stored is None:  # a study of an older version: nothing to compare with
        return
    changes = differences(stored, definition(config))
    if changes:
        shown = "; ".join(changes[:3]) + (f"; {len(changes) - 3} more" if len(changes) > 3 else "")
        raise StudyStateError(
            f"study {config.name!r} in {display_storage(config.storage)} was created from another "
            f"definition ({shown}); run the edited file under --new-study NAME, or undo the edit"
        )


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """``"<path>: <old> -> <new>"`` for every leaf that differs between two JSON trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in [*old, *(k for k in new if k not in old)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                changes.append(f"{where}: removed")
            elif key not in old:
                changes.append(f"{where}: added")
            else:
                changes += differences(old[key], new[key], where)
        return changes
    if old == new:
        return []
    return [f"{path}: {_short(old)} -> {_short(new)}"]


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _drive(
    config: StudyConfig,
    problem: Problem,
    storage: BaseStorage,
    n_total: int,
    seed: int | None,
    progress: bool,
    *,
    shared: bool = False,
) -> optuna.Study:
    if config.writes_parquet:
        raise StudyStateError(
            f"{config.source}: sampler exhaustive writes the grid to Parquet, not to a study; "
            "run it with search.exhaustive.run_exhaustive (energylens study run)"
        )
    study = optuna.load_study(study_name=config.name, storage=storage)
    fail_stale_trials(study)
    n_done = len(completed_trials(study))
    engine = get_engine(config.engine)
    # an exhaustive engine stops at the end of the grid, whatever the budget
    n_last = min(n_total, config.space.grid_size) if engine.exhaustive else n_total
    with trial_progress(
        enabled=progress, description=config.name, done=n_done, total=max(n_last, n_done)
    ) as bar:
        try:
            with stop_on_interrupt(bar):
                run = engine.run_shared if shared else engine.run
                run(config=config, problem=problem, storage=storage, n_total=n_total, seed=seed, progress=bar)
        finally:
            sync_storage(storage)
    return optuna.load_study(study_name=config.name, storage=storage)
