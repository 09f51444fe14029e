"""The journal file storage: Optuna's format and lock, without an fsync per append."""

from __future__ import annotations

import os

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from search.config import load_study
from search.frame import trials_frame
from search.runner import run_study
from search.storage import JournalFile, open_storage, sync_storage
from search.toy import ToyDeployment, write_toy_study


def test_stock_optuna_reads_what_we_write_and_the_other_way_round(tmp_path) -> None:
    config = load_study(write_toy_study(tmp_path, trials=20, seed=0))
    ours = trials_frame(config=config, study=run_study(config=config, problem=ToyDeployment()))
    stock = JournalStorage(JournalFileBackend(config.storage))
    again = trials_frame(config=config, study=optuna.load_study(study_name="toy", storage=stock))
    assert ours.equals(again) and len(ours) == 20
    optuna.create_study(study_name="other", storage=stock).optimize(lambda t: t.suggest_float("x", 0, 1), 3)
    reread = optuna.load_study(study_name="other", storage=open_storage(config.storage))
    assert len(reread.trials) == 3


def test_appends_are_visible_at_once_and_fsynced_at_most_once_per_interval(tmp_path, monkeypatch) -> None:
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    path = str(tmp_path / "storage.journal")
    backend = JournalFile(path, sync_interval_s=3600)
    writer = JournalStorage(backend)
    reader = open_storage(path)  # another handle, as another worker process would have
    study = optuna.create_study(study_name="s", storage=writer)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_int("n", 0, 9), n_trials=10)
    assert len(optuna.load_study(study_name="s", storage=reader).trials) == 10
    assert fsyncs == []  # 40 appends, none fsynced within the interval
    backend.sync()
    assert len(fsyncs) == 1
    backend.sync()  # nothing new: no fsync
    assert len(fsyncs) == 1


def test_runs_leave_the_journal_synced(tmp_path, monkeypatch) -> None:
    synced = []
    monkeypatch.setattr(JournalFile, "sync", lambda self: synced.append(self))
    config = load_study(write_toy_study(tmp_path, trials=5))
    run_study(config=config, problem=ToyDeployment())
    assert len(synced) == 1
    sync_storage(optuna.storages.InMemoryStorage())  # other storages: nothing to do


def test_a_new_trial_names_its_owner_in_the_entry_that_creates_it(tmp_path):
    """Killed between creating a trial and its first heartbeat, a worker must still leave a
    trial the others can recognise as stale: the owner is in the creating log entry."""
    import optuna

    from search.storage import HEARTBEAT_KEY, open_storage

    storage = open_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()  # no heartbeat thread has run: only the creation was written
    again = open_storage(str(tmp_path / "s.journal"))  # another process's view of the file
    (frozen,) = optuna.load_study(study_name="s", storage=again).trials
    assert frozen.number == trial.number and frozen.state == optuna.trial.TrialState.RUNNING
    _, pid, _ = frozen.system_attrs[HEARTBEAT_KEY]
    assert pid == os.getpid()


def test_a_retried_trial_does_not_inherit_its_dead_owner(tmp_path):
    """Optuna copies system attributes into a retry; a copy naming the dead owner would be
    failed again under the live worker that claims it."""
    from search.storage import HEARTBEAT_KEY, _retry

    storage = open_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(storage=storage, study_name="s")
    study.ask()
    (dead,) = study.get_trials(deepcopy=True)
    dead.system_attrs = {**dead.system_attrs, HEARTBEAT_KEY: ["host", 1, 0.0]}
    _retry()(study, dead)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(waiting) == 1 and HEARTBEAT_KEY not in waiting[0].system_attrs
    assert waiting[0].system_attrs["failed_trial"] == dead.number
