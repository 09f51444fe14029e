"""Nothing lost, nothing stuck: stale trials and journal locks of killed processes, and
several workers on one study with one of them SIGKILLed mid-trial (journal file, and
PostgreSQL when a server can be started here)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from search.config import StudyConfig, load_study
from search.runner import create_study, open_study
from search.storage import HEARTBEAT_KEY, HOST, OwnedLock, open_storage
from search.toy import write_toy_study

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
ROOT = Path(__file__).resolve().parents[1]
WORKER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from search.commands import Application, Overrides, cmd_worker
    from search.toy import ToyDeployment

    class Slow(ToyDeployment):
        def evaluate(self, params):
            time.sleep(0.1)  # the trial's heartbeat is recorded meanwhile
            Path(sys.argv[3]).touch()  # now inside a trial
            time.sleep(0.1)
            return super().evaluate(params)

    app = Application(problem_factory=lambda config: Slow())
    overrides = Overrides(storage=sys.argv[2], trials=int(sys.argv[4]))
    sys.exit(cmd_worker(sys.argv[1], app=app, overrides=overrides))
    """)


def dead_pid() -> int:
    """The id of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def toy(folder: Path, **overrides: object) -> StudyConfig:
    return load_study(write_toy_study(folder, engine="optuna", sampler="random", **overrides))


def test_a_running_trial_of_a_dead_process_is_failed_and_requeued(tmp_path) -> None:
    config = toy(tmp_path, trials=5)
    study = create_study(config=config)
    storage = study._storage
    trial = study.ask()
    trial.suggest_categorical("gpu", ["small", "medium", "large"])
    storage.set_trial_system_attr(trial._trial_id, HEARTBEAT_KEY, [HOST, dead_pid(), time.time()])
    alive = study.ask()  # running in this (live) process: not stale
    storage.set_trial_system_attr(alive._trial_id, HEARTBEAT_KEY, [HOST, os.getpid(), time.time()])
    far = study.ask()  # another host, heartbeat 2 minutes old: stale
    storage.set_trial_system_attr(far._trial_id, HEARTBEAT_KEY, ["elsewhere", 1, time.time() - 120])

    trials = open_study(config=config).trials
    states = {t.number: t.state for t in trials}
    assert states[trial.number] == TrialState.FAIL and states[far.number] == TrialState.FAIL
    assert states[alive.number] == TrialState.RUNNING
    retried = [t for t in trials if t.state == TrialState.WAITING]
    assert sorted(RetryHeartbeatStaleTrialCallback.retried_trial_number(t) for t in retried) == sorted(
        [trial.number, far.number]
    )
    waiting = next(
        t for t in retried if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == trial.number
    )
    assert waiting.params == {"gpu": trials[trial.number].params["gpu"]}  # re-run with the same params


def test_a_journal_lock_of_a_dead_process_is_taken_over_at_once(tmp_path) -> None:
    journal = tmp_path / "storage.journal"
    storage = open_storage(str(journal))
    os.symlink(f"{HOST}:{dead_pid()}:x", str(journal) + ".lock")
    start = time.monotonic()
    optuna.create_study(study_name="s", storage=storage).optimize(lambda t: t.suggest_float("x", 0, 1), 3)
    assert time.monotonic() - start < 5  # Optuna's own lock waits 30 s
    assert not Path(str(journal) + ".lock").exists()
    # a lock held by a live process of this host is respected until it is released
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.symlink(f"{HOST}:{holder.pid}:y", str(journal) + ".lock")
        took: list[bool] = []
        thread = threading.Thread(target=lambda: took.append(OwnedLock(str(journal)).acquire()), daemon=True)
        thread.start()
        thread.join(timeout=1.0)
        assert not took  # still waiting on the live holder
        os.unlink(str(journal) + ".lock")
        thread.join(timeout=5)
        assert took == [True]
    finally:
        holder.kill()
        holder.wait()


def run_workers(
    folder: Path, study_file: Path, storage: str, *, total: int, workers: int = 3
) -> dict[str, object]:
    """Start ``workers`` worker processes, SIGKILL the first once it is inside a trial, wait
    for the others; returns what happened."""
    script = folder / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    markers = [folder / f"in-trial-{i}" for i in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(study_file), storage, str(marker), str(total)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for marker in markers
    ]
    deadline = time.monotonic() + 120
    while not markers[0].exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    procs[0].send_signal(signal.SIGKILL)
    outputs = [proc.communicate(timeout=300) for proc in procs]
    return {"codes": [p.returncode for p in procs], "outputs": outputs}


def check_recovered(config: StudyConfig, result: dict[str, object], *, total: int, workers: int = 3) -> None:
    codes = result["codes"]
    assert codes[0] == -signal.SIGKILL and codes[1:] == [0] * (workers - 1), result["outputs"]
    trials = optuna.load_study(study_name=config.name, storage=open_storage(config.storage)).trials
    states = [t.state for t in trials]
    completed = states.count(TrialState.COMPLETE)
    # the killed worker's trial was failed by a live worker, never left RUNNING ...
    assert TrialState.RUNNING not in states
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1
    # ... and re-run with its parameters
    retried = [
        t for t in trials if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == failed[0].number
    ]
    assert retried and retried[0].params == failed[0].params
    # workers stop at the total; each live one may finish the trial it had started
    assert total <= completed <= total + workers - 1


def test_three_journal_workers_one_killed_mid_trial(tmp_path) -> None:
    config = toy(tmp_path, trials=30)
    create_study(config=config)
    result = run_workers(tmp_path, config.source, config.storage, total=30)
    check_recovered(config, result, total=30)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on a Unix socket; skips the test when none can start."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="energylens-pg-", dir="/tmp"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        try:
            shutil.chown(folder, user="postgres")
        except (LookupError, PermissionError):
            pytest.skip("running as root and there is no 'postgres' user to start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
    folder.chmod(0o755)
    data, socket_dir = folder / "data", folder
    port = "54329"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *argv], capture_output=True, text=True, check=False, timeout=120)

    init = run(initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr.strip()[-200:]}")
    options = f"-c listen_addresses='' -k {socket_dir} -p {port} -c fsync=off"
    start = run(pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start")
    if start.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {start.stderr.strip()[-200:]}")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={socket_dir}&port={port}"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def test_three_postgresql_workers_one_killed_mid_trial(tmp_path) -> None:
    with postgres_server() as url:
        config = toy(tmp_path, trials=30, storage=url)
        create_study(config=config)
        result = run_workers(tmp_path, config.source, url, total=30)
        check_recovered(config, result, total=30)


def test_three_energylens_workers_on_a_real_study_one_killed(tmp_path) -> None:
    """``energylens study worker`` processes on a deployment study sharing a journal file: one
    is SIGKILLed while the others run (inside a trial or an append, wherever it is); the others
    reach the total and no trial is left RUNNING."""
    (tmp_path / "space.yaml").write_text(
        textwrap.dedent("""\
        knobs:
          tp: {type: ordinal, values: [1, 2, 4, 8]}
          batch: {type: int, low: 1, high: 256}
          clock_fraction: {type: float, low: 0.5, high: 1.0}
        fixed: {gpu: H100, num_gpus: 8}
        """)
    )
    (tmp_path / "study.yaml").write_text(
        textwrap.dedent("""\
        name: shared
        space: space.yaml
        model: llama-3.1-8b
        workload: {kind: batch, input_tokens: 256, output_tokens: 32}
        objectives: [minimize energy_per_output_token_j, minimize tpot_s]
        constraints: ["tpot_s <= 0.05"]
        engine: optuna
        sampler: random
        trials: 400
        results: out
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "energylens.cli", "study"]
    first = subprocess.run(
        [*cli, "run", "study.yaml", "--trials", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    journal = tmp_path / "out" / "storage.journal"
    start = journal.stat().st_size
    procs = [
        subprocess.Popen(
            [*cli, "worker", "study.yaml"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    deadline = time.monotonic() + 120
    while journal.stat().st_size < start + 100_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    procs[0].send_signal(signal.SIGKILL)
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [p.returncode for p in procs] == [-signal.SIGKILL, 0, 0], outputs
    trials = optuna.load_study(study_name="shared", storage=open_storage(str(journal))).trials
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states
    assert 400 <= states.count(TrialState.COMPLETE) <= 402
