"""Where studies live: an Optuna journal file by default, any SQLAlchemy URL otherwise.

The journal file is the default because it is the faster embedded storage: on 2,000
trials of a cheap objective it records 463 vs 15 trials/s one at a time (Optuna engine)
and 5,277 vs 97 trials/s batched (grid/pymoo) against SQLite
(``benchmarks/bench_search_storage.py``).

Optuna's ``JournalFileBackend`` fsyncs the file on every append, and the Optuna engine
appends about 18 log lines per trial (params, constraints, attrs, state): on the dev
container fsync was over half the time of a 2,000-trial study on the real objective, and
far more when the disk is busy (``energylens study run studies/llama70b_tpot.yaml``:
15-85 s, then ``resume --trials 2500``: 6-17 s; with :class:`JournalFile` 9.3-11.4 s and
4.1-5.3 s, interleaved runs, 2026-11). :class:`JournalFile` writes the same format
under the same lock, so other processes (workers, stock Optuna) see every line as soon as
it is written, but fsyncs at most every :data:`SYNC_INTERVAL_S` seconds and when the
process exits. A killed process loses nothing; an OS crash or power loss can lose the
last second of trials, which a resume re-runs.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

SYNC_INTERVAL_S = 1.0
"""Seconds between fsyncs of a journal file being written."""


class JournalFile(JournalFileBackend):
    """An Optuna journal file backend that fsyncs at most every ``sync_interval_s`` (default
    :data:`SYNC_INTERVAL_S`; 0 fsyncs every append, like Optuna's backend).

    Same file format and lock (a symlink lock, NFS-safe) as ``JournalFileBackend``;
    only the per-append fsync is relaxed (see the module docstring).
    """

    def __init__(self, file_path: str, *, sync_interval_s: float | None = None) -> None:
        self._append_lock = JournalFileSymlinkLock(file_path)
        super().__init__(file_path, lock_obj=self._append_lock)
        interval = SYNC_INTERVAL_S if sync_interval_s is None else sync_interval_s
        self._durability = _Durability(file_path, interval)
        # Last fsync on garbage collection or at interpreter exit, whichever comes first.
        weakref.finalize(self, self._durability.sync)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append ``logs`` (one JSON line each) under the lock; fsync if one is due."""
        text = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
        self._append_lock.acquire()
        try:
            with open(self._durability.path, "ab") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                self._durability.appended(f.fileno())
        finally:
            self._append_lock.release()

    def sync(self) -> None:
        """fsync the file now if anything was appended since the last fsync."""
        self._durability.sync()


class _Durability:
    """When a journal file was last fsynced, and whether it has been written since."""

    def __init__(self, path: str, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self.last_sync = time.monotonic()
        self.dirty = False

    def appended(self, fd: int) -> None:
        now = time.monotonic()
        if now - self.last_sync >= self.interval_s:
            os.fsync(fd)
            self.last_sync, self.dirty = now, False
        else:
            self.dirty = True

    def sync(self) -> None:
        if not self.dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return  # the file was removed meanwhile: nothing left to make durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.last_sync, self.dirty = time.monotonic(), False


_JOURNALS: weakref.WeakKeyDictionary[BaseStorage, JournalFile] = weakref.WeakKeyDictionary()


def open_storage(spec: str) -> BaseStorage:
    """Open ``spec``: a URL with ``://`` (``sqlite:///x.db``, ``postgresql+psycopg://...``)
    as an RDB storage, anything else as a journal file path (created with its folder)."""
    if "://" in spec:
        return RDBStorage(spec)
    path = Path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    backend = JournalFile(str(path))
    storage = JournalStorage(backend)
    _JOURNALS[storage] = backend
    return storage


def sync_storage(storage: BaseStorage) -> None:
    """fsync a journal opened by :func:`open_storage` now (RDB storages commit anyway)."""
    backend = _JOURNALS.get(storage)
    if backend is not None:
        backend.sync()


def storage_exists(spec: str) -> bool:
    """False for a journal file that does not exist yet; URLs are assumed to exist."""
    return "://" in spec or Path(spec).exists()
