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

Crashes. A process killed while it appends leaves the journal's lock behind; the lock
written here records its owner (host and process id), so the next writer on the same host
removes a lock whose owner is dead at once instead of waiting (Optuna's own lock waits
30 s). A trial left RUNNING by a killed worker is failed and re-queued (Optuna's
``RetryHeartbeatStaleTrialCallback``): RDB storages use Optuna's heartbeat; journal files
get the same through :class:`HeartbeatJournalStorage`, which records each running trial's
owner and time, so a trial of a dead process on this host is stale at once and one of
another host after :data:`GRACE_PERIOD_S` without a heartbeat.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import math
import os
import re
import socket
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

SYNC_INTERVAL_S = 1.0
"""Seconds between fsyncs of a journal file being written."""
HEARTBEAT_INTERVAL_S = 10
"""Seconds between heartbeats of a running trial."""
GRACE_PERIOD_S = 60
"""A running trial without a heartbeat for this long is failed and re-queued."""
MAX_RETRY = 3
"""Times a trial of a crashed worker is re-queued."""
LOCK_GRACE_PERIOD_S = 30
"""A journal lock of an owner this process cannot check (another host, or Optuna's own lock)
is broken after this many seconds unchanged."""
HOST = socket.gethostname()
HEARTBEAT_KEY = "search:heartbeat"
GENERATION_KEY = "search:generation:"
"""Prefix of the study system attrs recording a generation in flight (one per process)."""


class StorageError(RuntimeError):
    """A storage that cannot be opened (one line; a password in a URL is never shown)."""


def display_storage(spec: str) -> str:
    """``spec`` with the password of a URL (``user:password@`` or ``password=`` in the query)
    replaced by ``***``."""
    if "://" not in spec:
        return spec
    scheme, rest = spec.split("://", 1)
    credentials, at, host = rest.rpartition("@")
    if at and ":" in credentials:
        rest = f"{credentials.split(':', 1)[0]}:***@{host}"
    return f"{scheme}://" + re.sub(r"(?i)\b(password=)[^&]*", r"\1***", rest)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OwnedLock(JournalFileSymlinkLock):
    """Optuna's symlink lock, whose link names its owner (``host:pid:token``).

    Same lock file as Optuna's, so stock Optuna writers and these exclude each other. A lock
    whose owner is a dead process of this host is removed at once; any other lock is
    broken after ``LOCK_GRACE_PERIOD_S`` seconds unchanged, as Optuna does.
    """

    def __init__(self, filepath: str) -> None:
        super().__init__(filepath, grace_period=LOCK_GRACE_PERIOD_S)

    def acquire(self) -> bool:
        """Take the lock, recovering one left by a dead process of this host at once."""
        owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex}"
        sleep_s, first_seen = 0.001, time.monotonic()
        seen: tuple[float, str] | None = None
        while True:
            try:
                os.symlink(owner, self._lock_file)
                return True
            except FileExistsError:
                pass
            try:
                holder = os.readlink(self._lock_file)
                state = (os.lstat(self._lock_file).st_mtime, holder)
            except OSError:
                continue  # released meanwhile
            if state != seen:
                seen, first_seen = state, time.monotonic()
            if _dead_owner(holder) or time.monotonic() - first_seen > LOCK_GRACE_PERIOD_S:
                self._break(holder)
                continue
            time.sleep(sleep_s)
            sleep_s = min(sleep_s * 2, 0.1)

    def _break(self, holder: str) -> None:
        """Remove the lock if it is still ``holder``'s (renamed first, so that two processes
        breaking it at once cannot remove a lock a third one took meanwhile)."""
        grave = f"{self._lock_file}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self._lock_file, grave)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return
            raise
        if os.readlink(grave) == holder:
            os.unlink(grave)
        else:  # released and taken by another process in between: give it back
            with contextlib.suppress(OSError):
                os.rename(grave, self._lock_file)


def _dead_owner(holder: str) -> bool:
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return host == HOST and pid.isdigit() and not _alive(int(pid))


class JournalFile(JournalFileBackend):
    """An Optuna journal file backend that fsyncs at most every ``sync_interval_s`` (default
    :data:`SYNC_INTERVAL_S`; 0 fsyncs every append, like Optuna's backend).

    Same file format and lock (a symlink lock, NFS-safe) as ``JournalFileBackend``;
    only the per-append fsync is relaxed (see the module docstring).
    """

    def __init__(self, file_path: str, *, sync_interval_s: float | None = None) -> None:
        self._append_lock = OwnedLock(file_path)
        super().__init__(file_path, lock_obj=self._append_lock)
        interval = SYNC_INTERVAL_S if sync_interval_s is None else sync_interval_s
        self._durability = _Durability(file_path, interval)
        self._buffer: list[dict[str, Any]] | None = None
        # Last fsync on garbage collection or at interpreter exit, whichever comes first.
        weakref.finalize(self, self._durability.sync)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append ``logs`` (one JSON line each) under the lock; fsync if one is due. Inside
        :meth:`buffered`, keep them until the block ends."""
        if self._buffer is not None:
            self._buffer.extend(logs)
            return
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

    @contextlib.contextmanager
    def buffered(self) -> Iterator[None]:
        """Appends inside the block are written together, in one append, when it ends without
        an exception (and dropped otherwise). Only for writes whose effect nothing in the
        block reads back, e.g. ``study.add_trials`` (a trial's id is not read)."""
        self._buffer = []
        try:
            yield
            logs, self._buffer = self._buffer, None
            if logs:
                self.append_logs(logs)
        finally:
            self._buffer = None


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


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """A journal storage with Optuna's heartbeat: running trials record their owner and time.

    A RUNNING trial is stale when its owner is a dead process of this host, or when its
    last heartbeat is older than :data:`GRACE_PERIOD_S`; Optuna fails stale trials before
    each new one and the callback re-queues them.
    """

    def __init__(self, log_storage: JournalFile) -> None:
        super().__init__(log_storage)
        self._last_beat: dict[int, float] = {}

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        """A new running trial carries its owner in the log entry that creates it: a worker
        killed between creating a trial and its first heartbeat still leaves a trial that the
        other workers recognise as stale (a trial without an owner never would be)."""
        if template_trial is None:
            template_trial = FrozenTrial(
                number=-1, state=TrialState.RUNNING, value=None,
                datetime_start=datetime.now(tz=UTC), datetime_complete=None, params={},
                distributions={}, user_attrs={},
                system_attrs={HEARTBEAT_KEY: [HOST, os.getpid(), time.time()]},
                intermediate_values={}, trial_id=-1)
        return super().create_new_trial(study_id, template_trial)

    def record_heartbeat(self, trial_id: int) -> None:
        """Record that this process still runs the trial (skipped within half an interval of
        the last record: a trial's first beat usually follows its claim at once)."""
        now = time.time()
        if now - self._last_beat.get(trial_id, -math.inf) < HEARTBEAT_INTERVAL_S / 2:
            return
        self._last_beat[trial_id] = now
        self.set_trial_system_attr(trial_id, HEARTBEAT_KEY, [HOST, os.getpid(), now])

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get(HEARTBEAT_KEY)
            if beat is None:
                continue
            host, pid, at = beat
            if (host == HOST and not _alive(int(pid))) or now - float(at) > GRACE_PERIOD_S:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        """Seconds between heartbeats."""
        return HEARTBEAT_INTERVAL_S

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        """Re-queue a stale trial (up to :data:`MAX_RETRY` times)."""
        return _retry()


def _retry() -> Callable[[optuna.Study, FrozenTrial], None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-feature notes
        requeue = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)

    def retry(study: optuna.Study, trial: FrozenTrial) -> None:
        """Re-queue without the dead owner's heartbeat: Optuna copies system attributes into
        the retry, and a claimed copy naming a dead process would be failed again, under the
        worker now running it."""
        orphan = copy.copy(trial)
        orphan.system_attrs = {k: v for k, v in trial.system_attrs.items() if k != HEARTBEAT_KEY}
        requeue(study, orphan)

    return retry


_JOURNALS: weakref.WeakKeyDictionary[BaseStorage, JournalFile] = weakref.WeakKeyDictionary()


def open_storage(spec: str, *, create: bool = True) -> BaseStorage:
    """Open ``spec``: a URL with ``://`` (``sqlite:///x.db``, ``postgresql+psycopg://...``)
    as an RDB storage, anything else as a journal file path (created with its folder unless
    ``create`` is false). Both have heartbeats and re-queue trials of crashed workers.

    Raises:
        StorageError: a malformed URL, a missing database driver (its module named), a
            server that cannot be reached, a folder that cannot be written.
    """
    if "://" in spec:
        return _open_rdb(spec)
    path = Path(spec)
    if path.is_dir():
        raise StorageError(f"{spec}: storage: is a folder, expected a journal file path or URL")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFile(str(path))
    except OSError as exc:
        raise StorageError(f"{spec}: cannot open the journal file ({exc.strerror or exc})") from None
    storage = HeartbeatJournalStorage(backend)
    _JOURNALS[storage] = backend
    return storage


class HeartbeatRDBStorage(RDBStorage):
    """Optuna's RDB storage, where a running trial whose owner (:func:`claim_trial`) is a dead
    process of this host is stale at once, not only after :data:`GRACE_PERIOD_S` without a
    heartbeat (the rule for other hosts)."""

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = set(super()._get_stale_trial_ids(study_id))
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get(HEARTBEAT_KEY)
            if beat is not None and beat[0] == HOST and not _alive(int(beat[1])):
                stale.add(trial._trial_id)
        return sorted(stale)


def _open_rdb(spec: str) -> RDBStorage:
    shown = display_storage(spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeat is an experimental Optuna feature
            return HeartbeatRDBStorage(
                spec,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                heartbeat_stale_trial_callback=_retry(),
            )
    except ImportError as exc:  # Optuna re-raises the driver's ModuleNotFoundError as an ImportError
        missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__ or exc.__context__
        module = (
            getattr(missing, "name", None) or spec.split("://")[0].partition("+")[2] or "a database driver"
        )
        raise MissingDriverError(shown, module) from None
    except Exception as exc:  # SQLAlchemy and DBAPI errors come in many classes
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        cause = cause.replace(spec, shown)
        raise StorageError(f"{shown}: cannot open the storage ({cause[:200]})") from None


class MissingDriverError(StorageError):
    """The database driver a storage URL names is not installed."""

    def __init__(self, shown: str, module: str) -> None:
        self.module = module
        super().__init__(f"{shown}: the database driver {module!r} is not installed")


@contextlib.contextmanager
def batched_writes(storage: BaseStorage) -> Iterator[None]:
    """Write what the block appends to a journal file in one append (:meth:`JournalFile.buffered`);
    other storages write as usual."""
    backend = _JOURNALS.get(storage)
    if backend is None:
        yield
        return
    # Optuna's create_new_trial reads back the id of the trial this process created last,
    # which only exists once one was replayed; add_trials does not use the id.
    replay = storage._replay_result  # type: ignore[attr-defined]
    if not hasattr(replay, "_last_created_trial_id_by_this_process"):
        replay._last_created_trial_id_by_this_process = -1
    with backend.buffered():
        yield
    storage._sync_with_backend()  # type: ignore[attr-defined]  # replay the appended logs


def sync_storage(storage: BaseStorage) -> None:
    """fsync a journal opened by :func:`open_storage` now (RDB storages commit anyway)."""
    backend = _JOURNALS.get(storage)
    if backend is not None:
        backend.sync()


def storage_exists(spec: str) -> bool:
    """False for a journal file or SQLite database file that does not exist yet (so that
    checking a new study creates nothing); other URLs are assumed to exist."""
    if spec.startswith("sqlite:///"):
        return Path(spec.removeprefix("sqlite:///").split("?")[0]).exists()
    return "://" in spec or Path(spec).exists()


def claim_trial(trial: optuna.Trial) -> None:
    """Record this process as the owner of a running trial, before it is evaluated (the
    heartbeat thread may start late on a busy machine): if the process dies, the trial is
    stale at once for the other workers of this host."""
    storage = trial.storage
    if isinstance(storage, HeartbeatJournalStorage):
        storage.record_heartbeat(trial._trial_id)
    else:
        storage.set_trial_system_attr(trial._trial_id, HEARTBEAT_KEY, [HOST, os.getpid(), time.time()])


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail (and re-queue) the study's running trials whose worker is gone, and record as lost
    the generations in flight of processes of this host that died (:func:`generation_in_flight`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-feature notes
        optuna.storages.fail_stale_trials(study)
    for key, mark in study._storage.get_study_system_attrs(study._study_id).items():
        if not key.startswith(GENERATION_KEY) or not isinstance(mark, dict) or mark.get("lost"):
            continue
        if mark["host"] == HOST and not _alive(int(mark["pid"])):
            study._storage.set_study_system_attr(study._study_id, key, {**mark, "lost": True})
            warnings.warn(
                f"study {study.study_name!r}: a generation of {mark['size']} configurations that "
                f"process {mark['pid']} was evaluating when it died is lost (not stored)",
                stacklevel=2,
            )


def lost_generations(study: optuna.Study) -> list[dict[str, Any]]:
    """Generations recorded as lost by :func:`fail_stale_trials` (host, pid, size, started)."""
    marks = study._storage.get_study_system_attrs(study._study_id)
    return [
        m for k, m in marks.items() if k.startswith(GENERATION_KEY) and isinstance(m, dict) and m.get("lost")
    ]


@contextlib.contextmanager
def generation_in_flight(study: optuna.Study, size: int) -> Iterator[None]:
    """Record in the study that this process evaluates a generation of ``size`` configurations
    not stored yet, until the block ends normally: if the process dies meanwhile, the next
    :func:`fail_stale_trials` of this host records the generation as lost. One study system
    attr per process, written twice per generation."""
    key = f"{GENERATION_KEY}{HOST}:{os.getpid()}"
    mark: dict[str, Any] = {"host": HOST, "pid": os.getpid(), "size": size, "started": time.time()}
    study._storage.set_study_system_attr(study._study_id, key, mark)
    yield
    study._storage.set_study_system_attr(study._study_id, key, None)
