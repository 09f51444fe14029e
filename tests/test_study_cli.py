"""`energylens study` on the real objective: SLOs, recorded reasons, one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest

from energylens.cli import main
from energylens.deployment import Deployment, Workload
from energylens.predict import predict

SPACE = """
knobs:
  tp: {type: ordinal, values: [1, 2, 4, 8, 16]}
  batch: {type: ordinal, values: [1, 8, 64, 256]}
  fuse_attention: {type: bool, baseline: false}
fixed: {gpu: H100, num_gpus: 8}
"""


def _study(tmp_path: Path, body: str) -> Path:
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """
name: tiny
space: space.yaml
model: llama-3.1-70b
workload: {kind: batch, input_tokens: 512, output_tokens: 64}
objectives: [minimize energy_per_output_token_j, minimize tpot_s]
constraints: ["tpot_s <= 0.03"]
engine: grid
results: out
"""


def test_grid_study_respects_slo_and_records_reasons(tmp_path, capsys):
    path = _study(tmp_path, GOOD)
    assert main(["study", "run", str(path)]) == 0
    trials = pd.read_csv(tmp_path / "out" / "trials.csv")
    assert len(trials) == 5 * 4 * 2  # every grid point is a trial, none skipped
    bad_tp = trials[trials["tp"] == 16]
    assert not bad_tp["feasible"].any()
    assert bad_tp["infeasible_reason"].str.contains("exceed num_gpus").all()
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    assert len(front) > 0
    for row in front.itertuples():
        p = predict(model="llama-3.1-70b", gpu="H100",
                    deployment=Deployment(num_gpus=8, tp=int(row.tp)),
                    workload=Workload(batch=int(row.batch), input_tokens=512, output_tokens=64))
        assert p.tpot_s <= 0.03 + 1e-12
    violating = trials[trials["tpot_s"] > 0.03]
    assert not violating["feasible"].any()


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (("llama-3.1-70b", "llama-9"), "model"),
        (("output_tokens: 64}", "output_tokens: 64, colour: red}"), "workload.colour"),
        (("output_tokens: 64}", "output_tokens: 0}"), "workload.output_tokens: expected a finite number > 0"),
        (("space.yaml", "missing.yaml"), "missing.yaml"),
        (("engine: grid", "engine: magic"), "engine"),
    ],
)
def test_bad_study_files_give_one_line_and_exit_2(tmp_path, capsys, edit, fragment):
    path = _study(tmp_path, GOOD.replace(*edit))
    code = main(["study", "run", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("knob", ["{type: float, low: 0.5, high: 8}",
                                  "{type: float, low: 1.0, high: 64.0, step: 1.0}",
                                  "{type: ordinal, values: [1, 2.5, 4]}"])
def test_a_batch_knob_takes_whole_sequences_only(tmp_path, capsys, knob):
    """A batch is a number of sequences, as ``predict --batch`` takes it: a fractional
    (or float) batch knob is refused at check, one line, exit 2."""
    (tmp_path / "study.yaml").write_text(
        "model: llama-3.1-8b\nworkload: {kind: batch}\nobjectives: [minimize tpot_s]\n"
        f"space:\n  knobs:\n    batch: {knob}\n  fixed: {{gpu: H100}}\nengine: grid\n")
    code = main(["study", "check", str(tmp_path / "study.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "knobs.batch" in lines[0] and "an integer >= 1" in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


def test_output_into_a_closed_pipe_still_writes_every_file(tmp_path):
    """``study run ... | head``: the reader is gone before the first line. Every report
    file, the launch scripts included, is written before anything is printed, and the
    closed pipe ends the command with exit 0 and no traceback (rich would exit 1)."""
    import os
    import subprocess
    import sys

    (tmp_path / "study.yaml").write_text(
        "model: llama-3.1-8b\nworkload: {kind: batch, batch: 8, input_tokens: 512, "
        "output_tokens: 64}\nobjectives: [minimize energy_per_request_j, minimize num_gpus]\n"
        "space:\n  knobs: {tp: {type: ordinal, values: [1, 2]}}\n  fixed: {gpu: H100}\n"
        "engine: grid\nresults: out\n")
    read, write = os.pipe()
    os.close(read)  # as head does once it has its lines
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        done = subprocess.run([sys.executable, "-m", "energylens.cli", "study", "run",
                               "study.yaml"], cwd=tmp_path, env=env, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    assert front["launch_command"].str.startswith("vllm serve").all()
    assert len(list((tmp_path / "out" / "launch").glob("*.sh"))) == len(front)
    assert (tmp_path / "out" / "breakdown.csv").exists()


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


TINY = ("model: llama-3.1-8b\nworkload: {kind: batch, batch: 8}\n"
        "objectives: [minimize energy_per_request_j, minimize num_gpus]\n"
        "space:\n  knobs: {tp: {type: ordinal, values: [1, 2]}}\n  fixed: {gpu: H100}\n"
        "engine: grid\n")


def test_the_interrupt_hint_continues_the_study_that_was_interrupted(tmp_path, capsys,
                                                                      monkeypatch):
    """Ctrl-C in a run under --storage and --new-study: the hint resumes that study, in that
    storage (it named neither, so it resumed the file's own study); in a ranking it reruns
    the ranking (with its --budget), not resume."""
    import search.commands

    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(TINY)
    flags = ["--storage", "sqlite:///x.db", "--new-study", "sq"]
    monkeypatch.setattr(search.commands, "run_study", _interrupt)
    assert main(["study", "run", "study.yaml", *flags]) == 130
    err = capsys.readouterr().err.strip()
    assert err.endswith("continue with: energylens study resume study.yaml --trials N "
                        "--storage sqlite:///x.db --new-study sq"), err
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert main(["study", "run", "study.yaml", *flags]) == 0
    monkeypatch.setattr(search.commands, "rank_optimizations", _interrupt)
    capsys.readouterr()
    assert main(["study", "rank", "study.yaml", *flags, "--budget", "2"]) == 130
    err = capsys.readouterr().err.strip()
    assert "resume" not in err and err.endswith(
        "energylens study rank study.yaml --storage sqlite:///x.db --new-study sq --budget 2"), err


def test_a_storage_password_stays_out_of_the_hint():
    from search.commands import Overrides, _flags

    flags = _flags(Overrides(storage="postgresql+psycopg://me:s3cret@db/energylens"))
    assert "s3cret" not in flags and "--storage 'postgresql+psycopg://me:***@db" in flags


@pytest.mark.parametrize(("url", "package"), [("mysql://bob:s3cret@localhost/x", "mysqlclient"),
                                              ("mysql+pymysql://bob:s3cret@localhost/x", "PyMySQL")])
def test_a_missing_mysql_driver_names_its_pip_package(tmp_path, capsys, monkeypatch, url, package):
    """SQLAlchemy's default MySQL driver is the module MySQLdb, which pip installs as
    mysqlclient (there is no 'MySQLdb' package); PyMySQL's module is pymysql."""
    import sys

    monkeypatch.setitem(sys.modules, "MySQLdb", None)  # importing them fails, installed or not
    monkeypatch.setitem(sys.modules, "pymysql", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(TINY)
    assert main(["study", "run", "study.yaml", "--storage", url]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].endswith(f"install it with: pip install {package}"), err
    assert "s3cret" not in err


def test_float_knob_values_on_a_step_grid_read_as_written(tmp_path):
    """A clock_fraction grid of step 0.05: trials.csv and pareto.csv hold 0.85, not the
    0.8500000000000001 of 0.5 + 7 x 0.05."""
    (tmp_path / "study.yaml").write_text(
        "model: llama-3.1-8b\nworkload: {kind: batch, batch: 8, input_tokens: 256, "
        "output_tokens: 32}\nobjectives: [minimize energy_per_request_j, minimize tpot_s]\n"
        "space:\n  knobs: {clock_fraction: {type: float, low: 0.5, high: 1.0, step: 0.05}}\n"
        "  fixed: {gpu: H100}\nengine: grid\nresults: out\n")
    assert main(["study", "run", str(tmp_path / "study.yaml")]) == 0
    for name in ("trials.csv", "pareto.csv"):
        cells = pd.read_csv(tmp_path / "out" / name, dtype={"clock_fraction": str})["clock_fraction"]
        assert all(len(cell.partition(".")[2]) <= 2 for cell in cells), list(cells)
    trials = pd.read_csv(tmp_path / "out" / "trials.csv")
    assert sorted(trials["clock_fraction"]) == [round(0.5 + 0.05 * k, 2) for k in range(11)]
