"""Create, run, resume and join studies.

Budgets count COMPLETE trials of the study: ``run_study`` starts an empty study,
``resume_study`` tops an existing one up to a total, ``run_worker`` joins a shared one
until the study file's ``trials`` are done.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
from optuna.storages import BaseStorage

from search.config import StudyConfig, resolve_storage
from search.engines import ENGINES, get_engine
from search.outcome import completed_trials
from search.problem import Problem
from search.progress import trial_progress
from search.storage import open_storage, storage_exists, sync_storage


class StudyStateError(RuntimeError):
    """The study is missing, already run, or was created with other objectives."""


def create_study(*, config: StudyConfig) -> optuna.Study:
    """Create the (empty) study in ``config.storage``, or load it if it exists.

    Raises:
        StudyStateError: it exists with different objective directions.
    """
    return _create(config, open_storage(config.storage))


def open_study(*, config: StudyConfig) -> optuna.Study:
    """Load an existing study.

    Raises:
        StudyStateError: no such study, or it has other objective directions.
    """
    return optuna.load_study(study_name=config.name, storage=_existing(config))


def run_study(
    *,
    config: StudyConfig,
    problem: Problem,
    n_trials: int | None = None,
    engine: str | None = None,
    storage: str | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> optuna.Study:
    """Run a new study (overrides beat the study file; ``storage`` is relative to the CWD).

    Raises:
        StudyStateError: the study already has completed trials (resume it instead).
    """
    if engine is not None:
        config = config.with_engine(engine)
    if storage is not None:
        config = replace(config, storage=resolve_storage(storage, base=Path.cwd()))
    if seed is not None:
        config = replace(config, seed=seed)
    store = open_storage(config.storage)
    n_done = len(completed_trials(_create(config, store)))
    if n_done:
        raise StudyStateError(
            f"study {config.name!r} already has {n_done} completed trials in "
            f"{config.storage}; resume it, or remove that storage"
        )
    n_total = config.budget() if n_trials is None else n_trials
    return _drive(config, problem, store, n_total, config.seed, progress)


def resume_study(
    *, config: StudyConfig, problem: Problem, n_trials: int, progress: bool = False
) -> optuna.Study:
    """Continue a study until it holds ``n_trials`` completed trials in total.

    The sampler seed is offset by the number of completed trials so a resumed random or
    initial phase does not replay the first run (pymoo continues from its checkpoint).

    Raises:
        StudyStateError: no such study in the storage.
    """
    store = _existing(config)
    n_done = len(completed_trials(optuna.load_study(study_name=config.name, storage=store)))
    seed = None if config.seed is None else config.seed + n_done
    return _drive(config, problem, store, n_trials, seed, progress)


def run_worker(
    *,
    config: StudyConfig,
    problem: Problem,
    storage: str | None = None,
    n_trials: int | None = None,
    progress: bool = False,
) -> optuna.Study:
    """Join a shared study (an engine with ``shared_study``, e.g. optuna) until it holds
    ``n_trials`` completed trials in total, by default the study file's budget.

    Workers sample with unseeded samplers so they do not propose the same points.

    Raises:
        StudyStateError: the study does not exist yet, or its engine cannot share it.
    """
    if not get_engine(config.engine).shared_study:
        shared = " or ".join(repr(e.name) for e in ENGINES if e.shared_study)
        raise StudyStateError(f"workers need engine {shared}, the study file has {config.engine!r}")
    if storage is not None:
        config = replace(config, storage=resolve_storage(storage, base=Path.cwd()))
    n_total = config.budget() if n_trials is None else n_trials
    return _drive(config, problem, _existing(config), n_total, None, progress)


def ensure_study(
    *, config: StudyConfig, problem: Problem, n_trials: int, progress: bool = False
) -> optuna.Study:
    """Create the study if needed, then run it up to ``n_trials`` completed trials."""
    store = open_storage(config.storage)
    _create(config, store)
    return _drive(config, problem, store, n_trials, config.seed, progress)


def _create(config: StudyConfig, storage: BaseStorage) -> optuna.Study:
    study = optuna.create_study(
        study_name=config.name, storage=storage, directions=config.directions, load_if_exists=True
    )
    _check_directions(config, study)
    return study


def _existing(config: StudyConfig) -> BaseStorage:
    missing = StudyStateError(f"no study {config.name!r} in {config.storage}; run it first")
    if not storage_exists(config.storage):
        raise missing
    storage = open_storage(config.storage)
    try:
        storage.get_study_id_from_name(config.name)
    except KeyError:
        raise missing from None
    _check_directions(config, optuna.load_study(study_name=config.name, storage=storage))
    return storage


def _check_directions(config: StudyConfig, study: optuna.Study) -> None:
    expected = [optuna.study.StudyDirection[d.upper()] for d in config.directions]
    if list(study.directions) != expected:
        found = [d.name.lower() for d in study.directions]
        raise StudyStateError(
            f"study {config.name!r} in {config.storage} has directions {found}, "
            f"the study file asks {config.directions}"
        )


def _drive(
    config: StudyConfig,
    problem: Problem,
    storage: BaseStorage,
    n_total: int,
    seed: int | None,
    progress: bool,
) -> optuna.Study:
    study = optuna.load_study(study_name=config.name, storage=storage)
    n_done = len(completed_trials(study))
    with trial_progress(
        enabled=progress, description=config.name, done=n_done, total=max(n_total, n_done)
    ) as bar:
        try:
            get_engine(config.engine).run(
                config=config, problem=problem, storage=storage, n_total=n_total, seed=seed, progress=bar
            )
        finally:
            sync_storage(storage)
    return optuna.load_study(study_name=config.name, storage=storage)
