"""Exhaustive grids written to Parquet (search.exhaustive): the exact front, shards, crashes,
the columnar objective hook, and the fast non-dominated filter they rely on."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from search.commands import Application, Overrides, cmd_report, cmd_run
from search.config import StudyConfig, load_study
from search.exhaustive import (
    Shard,
    chunk_files,
    exhaustive_folder,
    parse_shard,
    run_exhaustive,
)
from search.exhaustive_report import write_grid_report
from search.files import ResultsError
from search.frame import front_frame, trials_frame
from search.pareto import non_dominated_mask
from search.problem import Evaluation, evaluate_frame
from search.runner import StudyStateError, run_study
from search.toy import TOY_SPACE, ToyDeployment, toy_problem, write_toy_study

SPACE = {"knobs": {**TOY_SPACE["knobs"], "batch": {"type": "int", "low": 1, "high": 16, "step": 3}}}
"""5,184 points: small enough to compare with one Optuna trial per point."""
APP = Application(problem_factory=toy_problem)


def study(tmp_path: Path, **overrides) -> StudyConfig:
    fields = {"space": SPACE, "engine": "grid", "sampler": "exhaustive", **overrides}
    return load_study(write_toy_study(tmp_path, **fields))


def keys(config: StudyConfig, frame: pd.DataFrame) -> list[tuple]:
    return sorted(frame[list(config.space.names)].astype(str).itertuples(index=False, name=None))


class FailingAfter(ToyDeployment):
    """The toy, failing (as a killed process would stop) once ``rows`` rows were evaluated."""

    def __init__(self, rows: int) -> None:
        self.left = rows

    def evaluate_table(self, table: pd.DataFrame) -> pd.DataFrame:
        self.left -= len(table)
        if self.left < 0:
            raise RuntimeError("killed")
        return super().evaluate_table(table)


class RowByRow:
    """The toy without batch hooks: one ``evaluate`` per configuration."""

    def evaluate(self, params) -> Evaluation:
        return ToyDeployment().evaluate(params)


def test_the_exhaustive_front_is_the_grid_engines_front(tmp_path) -> None:
    config = study(tmp_path)
    state = run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=1000)
    assert (state.chunks, state.evaluated, state.complete) == (6, 5184, True)
    grid = replace(config, sampler="grid", results=tmp_path / "grid", storage=str(tmp_path / "grid.journal"))
    trials = trials_frame(config=grid, study=run_study(config=grid, problem=ToyDeployment()))
    expected = front_frame(config=grid, trials=trials)
    report = write_grid_report(config=config)
    assert keys(config, report.front) == keys(config, expected) and len(expected) > 5
    assert report.feasible == trials["feasible"].sum() and report.evaluated == 5184
    names = [o.metric for o in config.objectives]
    knobs = list(config.space.names)
    by_key = expected.astype({k: str for k in knobs}).set_index(knobs)[names].sort_index()
    got = report.front.astype({k: str for k in knobs}).set_index(knobs)[names].sort_index()
    np.testing.assert_allclose(got.to_numpy(), by_key.to_numpy(), rtol=1e-12)
    written = pd.read_csv(config.results / "pareto.csv")
    assert len(written) == len(expected) and (config.results / "pareto.png").stat().st_size > 0
    # every row of every chunk is stored, with its reason when it cannot run
    rows = pd.concat(pd.read_parquet(p) for p in chunk_files(exhaustive_folder(config) / "shard-1-of-1"))
    assert rows["grid_index"].tolist() == list(range(5184))
    invalid = rows[(rows["tp"] > rows["gpus"])]
    assert invalid["infeasible_reason"].str.startswith("tp=").all() and not invalid["feasible"].any()


def test_shards_merge_into_the_whole_grid_front(tmp_path) -> None:
    config = study(tmp_path)
    whole = run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=1000)
    split = replace(config, results=tmp_path / "split")
    states = [run_exhaustive(config=split, problem=ToyDeployment(), shard=Shard(k, 3), chunk_rows=1000)
              for k in (3, 1)]
    assert write_grid_report(config=split).missing == ["2/3"]
    states.append(run_exhaustive(config=split, problem=ToyDeployment(), shard=Shard(2, 3), chunk_rows=1000))
    assert sum(s.evaluated for s in states) == 5184
    report = write_grid_report(config=split)
    assert report.missing == [] and keys(config, report.front) == keys(config, whole.front)
    run_exhaustive(config=split, problem=ToyDeployment(), shard=Shard(1, 2), chunk_rows=1000)
    with pytest.raises(ResultsError, match="different splits"):
        write_grid_report(config=split)


def test_a_crash_keeps_complete_chunks_and_a_rerun_resumes_after_them(tmp_path) -> None:
    config = study(tmp_path)
    with pytest.raises(RuntimeError, match="killed"):
        run_exhaustive(config=config, problem=FailingAfter(2500), chunk_rows=1000)
    folder = exhaustive_folder(config) / "shard-1-of-1"
    assert len(chunk_files(folder)) == 2 and not (folder / ".lock").exists()
    # a crash between a chunk and its state: the state still names one chunk
    state = json.loads((folder / "state.json").read_text())
    front = sorted(folder.glob("front-*.parquet"))[0]
    (folder / "front-000000.parquet").write_bytes(front.read_bytes())
    (folder / "state.json").write_text(json.dumps({**state, "chunks": 1, "evaluated": 1000,
                                                   "feasible": 0, "front": "front-000000.parquet"}))
    (folder / ".chunk-000002.x.tmp.parquet").write_bytes(b"half a file")
    counting = FailingAfter(10_000)
    resumed = run_exhaustive(config=config, problem=counting, chunk_rows=1000)
    assert 10_000 - counting.left == 5184 - 2000  # only the chunks not written were evaluated
    assert not list(folder.glob(".*.tmp*"))
    clean = run_exhaustive(config=replace(config, results=tmp_path / "clean"), problem=ToyDeployment(),
                           chunk_rows=1000)
    assert keys(config, resumed.front) == keys(config, clean.front)
    assert (resumed.evaluated, resumed.chunks) == (5184, 6)


def test_a_shard_folder_of_another_definition_or_a_live_owner_is_refused(tmp_path) -> None:
    config = study(tmp_path)
    run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=4000)
    edited = replace(config, constraints=config.constraints[:1])
    with pytest.raises(StudyStateError, match="another study"):
        run_exhaustive(config=edited, problem=ToyDeployment(), chunk_rows=4000)
    with pytest.raises(StudyStateError, match="chunk_rows"):
        run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=1000)
    assert run_exhaustive(config=config, problem=ToyDeployment()).chunks == 2  # the folder's own size
    lock = exhaustive_folder(config) / "shard-1-of-1" / ".lock"
    lock.write_text(f"{os.uname().nodename}:{os.getppid()}")  # alive: the test runner's parent
    with pytest.raises(ResultsError, match="another process"):
        run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=4000)
    lock.write_text(f"{os.uname().nodename}:999999999")  # no such process
    assert run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=4000).complete


def test_evaluate_frame_falls_back_to_one_evaluation_per_row(tmp_path) -> None:
    config = study(tmp_path)
    table = config.space.grid_block(0, 3000)
    columnar = evaluate_frame(ToyDeployment(), table)
    rows = evaluate_frame(RowByRow(), table)
    pd.testing.assert_frame_equal(rows[columnar.columns], columnar, check_dtype=False)
    assert columnar["infeasible_reason"].notna().any() and columnar["infeasible_reason"].isna().any()
    assert set(columnar.columns) == {"latency_s", "tokens_per_s", "energy_per_token_j", "power_w",
                                     "memory_bytes", "infeasible_reason"}


def test_grid_blocks_are_the_grid_points(tmp_path) -> None:
    space = study(tmp_path).space
    block = space.grid_block(1234, 2345)
    for index in (1234, 1500, 2344):
        assert block.loc[index].to_dict() == space.grid_point(index)
    assert block.index.tolist() == list(range(1234, 2345))


@pytest.mark.parametrize("n_objectives", [1, 2, 3, 4])
def test_the_non_dominated_mask_matches_the_definition(n_objectives) -> None:
    rng = np.random.default_rng(n_objectives)
    for _ in range(20):
        points = rng.integers(0, 5, size=(rng.integers(1, 60), n_objectives)).astype(float)
        directions = [("minimize", "maximize")[j % 2] for j in range(n_objectives)]
        f = points * np.where(np.array(directions) == "minimize", 1.0, -1.0)
        dominated = [any((g <= p).all() and (g < p).any() for g in f) for p in f]
        assert non_dominated_mask(points, directions=directions).tolist() == [not d for d in dominated]


def test_the_command_line_runs_shards_and_reports_them(tmp_path, capsys) -> None:
    path = write_toy_study(tmp_path, space=SPACE, trials=50)  # an optuna study file
    assert cmd_run(path, app=APP, overrides=Overrides(shard="1/2")) == 0
    assert "shards still to run: 2/2" in capsys.readouterr().out
    assert cmd_run(path, app=APP, overrides=Overrides(shard="2/2")) == 0
    out = capsys.readouterr().out
    assert "exact feasible Pareto front" in out and "5,184 of 5,184 evaluated" in out
    assert cmd_report(path, app=APP) == 0
    assert "the whole grid" in capsys.readouterr().out
    assert cmd_run(path, app=APP, overrides=Overrides(shard="3/2")) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert parse_shard(" 2 / 5 ") == Shard(2, 5)


def test_a_shard_does_not_write_over_the_report_of_a_study_run_trial_by_trial(tmp_path, capsys) -> None:
    """After the file's Optuna study ran, a shard of the same study would replace its
    pareto.csv: refused in one line (exit 2) with the report untouched; --new-study gives
    the grid its own study, --force replaces the report."""
    path = write_toy_study(tmp_path, space=SPACE, trials=20)
    assert cmd_run(path, app=APP) == 0
    config = load_study(path)
    pareto = config.results / "pareto.csv"
    before = pareto.read_bytes()
    capsys.readouterr()
    assert cmd_run(path, app=APP, overrides=Overrides(shard="1/2")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already has 20 completed trials" in err and "--new-study" in err
    assert pareto.read_bytes() == before and not exhaustive_folder(config).exists()
    grid = Overrides(shard="1/1", new_study="grid")
    assert cmd_run(path, app=APP, overrides=grid) == 0
    assert pareto.read_bytes() == before and (grid.apply(config).results / "pareto.csv").is_file()
    assert cmd_run(path, app=APP, overrides=Overrides(shard="1/1"), force=True) == 0
    assert pareto.read_bytes() != before


def test_ctrl_c_on_the_command_line_keeps_the_chunks_and_says_how_to_continue(tmp_path, capsys) -> None:
    path = write_toy_study(tmp_path, space=SPACE, engine="grid", sampler="exhaustive")

    class CtrlC(ToyDeployment):
        def evaluate_table(self, table):
            raise KeyboardInterrupt

    app = Application(problem_factory=lambda config: CtrlC())
    assert cmd_run(path, app=app) == 130
    assert "run the same command again to continue" in capsys.readouterr().err
    assert cmd_run(path, app=APP) == 0


def test_the_documented_recipe_reads_every_evaluated_configuration(tmp_path, monkeypatch) -> None:
    """docs/study-files.md's Python block reads an exhaustive grid's chunks (its shard
    folders also hold manifest.json and front-*.parquet): every grid point once."""
    import re

    from energylens.cli.main import main

    docs = (Path(__file__).resolve().parents[1] / "docs" / "study-files.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", docs, flags=re.S) if "read_parquet" in b]
    assert len(blocks) == 1
    recipe = "\n".join(line.removeprefix("  ") for line in blocks[0].splitlines())
    (tmp_path / "study.yaml").write_text(
        "name: llama70b-tpot\nmodel: llama-3.1-8b\nworkload: {kind: batch, batch: 8}\n"
        "objectives: [minimize energy_per_request_j, minimize tpot_s]\nspace:\n  knobs:\n"
        "    tp: {type: ordinal, values: [1, 2, 3]}\n    batch: {type: ordinal, values: [1, 4]}\n"
        "  fixed: {gpu: H100}\nengine: grid\nsampler: exhaustive\nresults: results/llama70b-tpot\n")
    monkeypatch.chdir(tmp_path)
    for shard in ("1/2", "2/2"):
        assert main(["study", "run", "study.yaml", "--shard", shard]) == 0
    assert any(p.name == "manifest.json" for p in tmp_path.rglob("*"))
    scope: dict[str, object] = {}
    exec(recipe, scope)  # noqa: S102  # the documented code, as a user runs it
    grid = scope["grid"]
    assert isinstance(grid, pd.DataFrame)
    assert sorted(grid["grid_index"]) == list(range(6))
    assert {"tp", "batch", "tpot_s", "feasible", "infeasible_reason"} <= set(grid.columns)


def test_a_grid_of_one_objective_is_reported_against_the_grid_index(tmp_path) -> None:
    config = study(tmp_path, objectives=["minimize energy_per_token_j"])
    run_exhaustive(config=config, problem=ToyDeployment(), chunk_rows=2000)
    report = write_grid_report(config=config)
    rows = pd.concat(map(pd.read_parquet, chunk_files(exhaustive_folder(config) / "shard-1-of-1")))
    best = rows.loc[rows["feasible"], "energy_per_token_j"].min()
    assert report.front["energy_per_token_j"].tolist() == [best]
    assert "number" not in pd.read_csv(config.results / "pareto.csv").columns
    assert (config.results / "pareto.png").stat().st_size > 0


def test_a_chunk_where_nothing_runs_lacks_metric_columns_and_is_infeasible(tmp_path) -> None:
    space = {
        "knobs": {"tp": {"type": "ordinal", "values": [1, 8]}, "batch": {"type": "int", "low": 1, "high": 4}},
        "fixed": {"gpu": "large", "gpus": 1, "freq": 1.0, "fuse": False},
    }
    config = study(tmp_path, space=space, constraints=["tokens_per_s >= 1"])
    # one row a chunk, one evaluation a row: a tp=8 chunk (tp > gpus) reports no metric at all
    state = run_exhaustive(config=config, problem=RowByRow(), chunk_rows=1)
    assert (state.evaluated, state.feasible) == (8, 4)  # the four tp=1 rows fit and meet the SLO
    assert set(write_grid_report(config=config).front["tp"]) == {1}
