"""Study files that never surprise: check/dry-run/init, definitions recorded in the storage,
results folders that belong to one study, a grid that streams and samples uniformly, and
reports with every metric and the reason for every infeasible trial."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from energylens.cli import main
from energylens.study.objective import METRICS
from search.commands import Application, Overrides, cmd_run
from search.config import load_study
from search.outcome import completed_trials
from search.problem import Evaluation
from search.runner import resume_study, run_study
from search.space import permuted_range
from search.storage import open_storage
from search.toy import ToyDeployment, toy_problem, write_toy_study

SPACE = """\
knobs:
  tp: {type: ordinal, values: [1, 2, 4]}
  batch: {type: int, low: 1, high: 64, log: true}
  gpu: {type: categorical, values: [H100, A100-80GB]}
fixed: {num_gpus: 4}
"""
STUDY = """\
name: small
space: space.yaml
model: llama-3.1-8b
workload: {kind: batch, input_tokens: 256, output_tokens: 32}
objectives: [minimize energy_per_output_token_j, minimize tpot_s]
constraints: ["tpot_s <= 0.02", "ttft_s <= 0.5"]
engine: optuna
sampler: random
seed: 0
trials: 40
results: out
"""


def study(folder: Path, text: str = STUDY, space: str = SPACE) -> Path:
    (folder / "space.yaml").write_text(space)
    path = folder / "study.yaml"
    path.write_text(text)
    return path


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_check_prints_the_resolved_study_and_creates_nothing(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    study(tmp_path)
    before = listing(tmp_path)
    for argv in (["study", "check", "study.yaml"], ["study", "run", "study.yaml", "--dry-run"]):
        assert main(argv) == 0
        out = " ".join(capsys.readouterr().out.split())  # spacing aside
        assert "3 knobs, 384 grid points" in out  # 3 tp x 64 batch x 2 GPUs
        assert "tp ordinal 1, 2, 4" in out and "batch int 1 .. 64 step 1 log" in out
        assert "num_gpus fixed at 4" in out
        assert "minimize energy_per_output_token_j (energy per generated token [J])" in out
        assert "constraints tpot_s <= 0.02; ttft_s <= 0.5" in out
        assert "budget 40 completed trials" in out
        assert f"storage {tmp_path / 'out' / 'storage.journal'} (new study)" in out
        assert listing(tmp_path) == before
    assert main(["study", "check", "study.yaml", "--engine", "grid", "--trials", "500"]) == 0
    assert "500 completed trials (the whole grid)" in capsys.readouterr().out


def test_init_writes_a_starter_that_checks_and_runs(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["study", "init", "first study.yaml"]) == 0
    text = (tmp_path / "first study.yaml").read_text()
    assert text.count("#") > 20  # commented
    data = yaml.safe_load(text)
    assert data["name"] == "first-study" and data["workload"]["moe_skew"] == 0
    assert main(["study", "check", "first study.yaml"]) == 0
    assert main(["study", "run", "first study.yaml", "--trials", "8"]) == 0
    assert "first-study: feasible Pareto front" in capsys.readouterr().out
    assert main(["study", "init", "first study.yaml"]) == 2  # exists
    (tmp_path / "first study.yaml").write_text("mine")
    assert main(["study", "init", "first study.yaml", "--force"]) == 0
    assert (tmp_path / "first study.yaml").read_text() == text


def test_every_shipped_study_passes_the_strict_check(capsys) -> None:
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "studies").glob("*.yaml")):
        assert main(["study", "check", str(path)]) == 0, capsys.readouterr().err
    assert "moe_skew" not in (root / "spaces" / "moe_parallelism.yaml").read_text().split("knobs:")[1]


def test_resuming_an_edited_study_is_refused_unless_it_is_a_new_study(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = study(tmp_path)
    assert main(["study", "run", "study.yaml", "--trials", "10"]) == 0
    edits = {
        "constraints": STUDY.replace("tpot_s <= 0.02", "tpot_s <= 0.03"),
        "problem.model": STUDY.replace("llama-3.1-8b", "qwen3-8b"),
        "space.knobs.tp.values": None,
    }
    for where, text in edits.items():
        study(tmp_path, text or STUDY, SPACE.replace("[1, 2, 4]", "[1, 2]") if text is None else SPACE)
        for argv in (["resume", "study.yaml", "--trials", "20"], ["check", "study.yaml"]):
            assert main(["study", *argv]) == 2  # check refuses what resume would
            err = capsys.readouterr().err
            assert "was created from another definition" in err and f"({where}: " in err, err
    assert main(["study", "check", "study.yaml", "--new-study", "small-v2"]) == 0
    # an edited file runs beside the original under another name; the original is intact
    assert main(["study", "resume", "study.yaml", "--trials", "12", "--new-study", "small-v2"]) == 0
    storage = open_storage(str(tmp_path / "out" / "storage.journal"))
    studies = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}
    assert studies == {"small": 10, "small-v2": 12}
    assert (tmp_path / "small-v2" / "pareto.csv").exists()  # its reports beside the original's
    study(tmp_path)  # the original file again
    assert main(["study", "resume", "study.yaml", "--trials", "15"]) == 0
    assert len(completed_trials(optuna.load_study(study_name="small", storage=storage))) == 15
    assert path.exists()


def test_force_writes_into_a_folder_another_storage_wrote(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    study(tmp_path)
    assert main(["study", "run", "study.yaml", "--trials", "5"]) == 0
    assert main(["study", "run", "study.yaml", "--trials", "5", "--storage", "b.journal"]) == 2
    assert main(["study", "run", "study.yaml", "--trials", "5", "--storage", "b.journal", "--force"]) == 0
    trials = pd.read_csv(tmp_path / "out" / "trials.csv")
    assert len(trials) == 5 and (tmp_path / "b.journal").exists()
    owner = (tmp_path / "out" / ".study.json").read_text()
    assert "b.journal" in owner


def test_optuna_sees_metric_names_and_constraints(tmp_path, monkeypatch) -> None:
    """What optuna-dashboard shows, read through Optuna's own API."""
    monkeypatch.chdir(tmp_path)
    study(tmp_path)
    assert main(["study", "run", "study.yaml", "--trials", "6"]) == 0
    loaded = optuna.load_study(
        study_name="small", storage=open_storage(str(tmp_path / "out" / "storage.journal"))
    )
    assert loaded.metric_names == ["energy_per_output_token_j", "tpot_s"]
    for trial in loaded.trials:
        assert set(trial.constraints) == {"valid", "tpot_s <= 0.02", "ttft_s <= 0.5"}
        feasible = all(v <= 0 for v in trial.constraints.values())
        metrics = trial.user_attrs["metrics"]
        if trial.user_attrs["infeasible_reason"] is None:
            assert feasible == (metrics["tpot_s"] <= 0.02 and metrics["ttft_s"] <= 0.5)


def test_trials_csv_has_every_metric_and_the_reason_of_every_infeasible_trial(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    study(tmp_path, STUDY.replace("trials: 40", "trials: 60").replace("tpot_s <= 0.02", "tpot_s <= 0.005"))
    assert main(["study", "run", "study.yaml"]) == 0
    trials = pd.read_csv(tmp_path / "out" / "trials.csv", keep_default_na=False)
    assert set(METRICS) - {"num_gpus"} <= set(trials.columns)  # num_gpus is a knob of this space too
    valid = trials["constraint[valid]"] <= 0
    assert (trials.loc[trials["feasible"], "infeasible_reason"] == "").all()
    assert (trials.loc[~trials["feasible"], "infeasible_reason"] != "").all()
    misses = trials[valid & ~trials["feasible"]]
    assert len(misses) > 0
    for row in misses.itertuples():
        assert ("SLO tpot_s = " in row.infeasible_reason) == (row.tpot_s > 0.005)
        assert ("SLO ttft_s = " in row.infeasible_reason) == (row.ttft_s > 0.5)
    with_metrics = trials[valid]
    per_gpu = with_metrics["output_tokens_per_s"] / with_metrics["num_gpus"]
    assert (abs(with_metrics["output_tokens_per_s_per_gpu"] / per_gpu - 1) < 1e-9).all()
    assert (with_metrics["avg_power_w"] > 0).all() and (with_metrics["memory_per_gpu_gb"] > 0).all()
    html = (tmp_path / "out" / "pareto.html").read_text()
    assert "plotly" in html and "gpu = " in html and "SLO tpot_s" in html
    # the figure is plotly.js data: every trial plotted once, the front as its own trace
    figure = json.loads(html.split("var figure = ", 1)[1].split(";\nPlotly.newPlot", 1)[0])
    traces = {t["name"]: t for t in figure["data"]}
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    assert len(traces["feasible front"]["x"]) == len(front)
    plotted = sum(len(t["x"]) for name, t in traces.items() if name != "feasible front")
    objectives = ["energy_per_output_token_j", "tpot_s"]  # refused configurations have none
    assert plotted == len(trials[trials[objectives].ne("").all(axis=1)])


@given(n=st.integers(min_value=1, max_value=3000), seed=st.integers(min_value=-(2**40), max_value=2**40))
@settings(max_examples=40, deadline=None)
def test_the_shuffled_grid_is_a_permutation(n: int, seed: int) -> None:
    assert sorted(permuted_range(n, seed=seed)) == list(range(n))


def test_a_grid_budget_samples_the_whole_grid_uniformly(tmp_path) -> None:
    """The toy grid in grid order puts the first knob (gpu) last to vary: 300 trials in
    grid order would all be the small GPU. A budget samples uniformly instead."""
    config = load_study(write_toy_study(tmp_path, engine="grid", trials=300, seed=3))
    study = run_study(config=config, problem=ToyDeployment())
    params = [t.params for t in completed_trials(study)]
    assert len({tuple(p.values()) for p in params}) == 300
    for knob in config.space.knobs:
        count = knob.grid_count()
        assert count is not None
        seen = Counter(p[knob.name] for p in params)
        # every value of every knob turns up about 300 / count times (binomial, 5 sigma)
        expected = 300 / count
        spread = 5 * (expected * (1 - 1 / count)) ** 0.5
        assert all(abs(seen[knob.grid_value(i)] - expected) <= spread for i in range(count)), (
            knob.name,
            seen,
        )
    # a resume tops up without repeating a point
    study = resume_study(config=config, problem=ToyDeployment(), n_trials=500)
    points = [tuple(t.params.values()) for t in completed_trials(study)]
    assert len(points) == len(set(points)) == 500


class Cheap:
    """A problem over two integer knobs, for grids too large to enumerate."""

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        return Evaluation(
            {"cost": float(params["x"] + params["y"]), "gap": float(abs(params["x"] - params["y"]))}
        )


def test_a_huge_grid_streams_and_needs_a_budget(tmp_path, capsys) -> None:
    space = {
        "knobs": {
            "x": {"type": "int", "low": 0, "high": 10**9},
            "y": {"type": "int", "low": 0, "high": 10**9},
        }
    }
    path = write_toy_study(
        tmp_path, space=space, engine="grid", objectives=["minimize cost", "minimize gap"], constraints=[]
    )
    app = Application(problem_factory=lambda config: Cheap())
    assert cmd_run(path, app=app) == 2
    assert "expected a budget for a grid of 1,000,000,002,000,000,001 points" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
    start = time.perf_counter()
    assert cmd_run(path, app=app, overrides=Overrides(trials=200)) == 0
    assert time.perf_counter() - start < 60
    trials = pd.read_csv(tmp_path / "results" / "toy" / "trials.csv")
    assert len(trials) == 200 and trials["x"].max() > 5 * 10**8 > trials["x"].min()


def test_a_killed_report_leaves_the_previous_files_whole(tmp_path, monkeypatch) -> None:
    config = load_study(write_toy_study(tmp_path, trials=20, seed=0))
    study = run_study(config=config, problem=toy_problem(config))
    from search.report import write_report

    write_report(config=config, study=study)
    before = {p.name: p.read_bytes() for p in config.results.iterdir() if p.suffix in (".csv", ".png")}

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", killed)
    with pytest.raises(KeyboardInterrupt):
        write_report(config=config, study=study)
    after = {p.name: p.read_bytes() for p in config.results.iterdir() if p.suffix in (".csv", ".png")}
    assert after == before
    assert not [p for p in config.results.iterdir() if ".tmp" in p.name]  # no temporary left


def test_calibrate_output_is_refused_before_fitting_and_written_atomically(tmp_path, monkeypatch) -> None:
    from energylens.calibration import run

    target = tmp_path / "cal.yaml"
    target.write_text("old")
    monkeypatch.setattr(run, "to_yaml", lambda outcome: "version: 2\n")
    run.write(None, target)  # type: ignore[arg-type]
    assert target.read_text() == "version: 2\n" and os.listdir(tmp_path) == ["cal.yaml"]

    def broken(outcome):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "to_yaml", broken)
    with pytest.raises(KeyboardInterrupt):
        run.write(None, target)  # type: ignore[arg-type]
    assert target.read_text() == "version: 2\n" and os.listdir(tmp_path) == ["cal.yaml"]


def test_tables_switch_to_a_vertical_layout_when_the_terminal_is_narrow(
    tmp_path, monkeypatch, capsys
) -> None:
    from rich.console import Console

    import search.commands as commands

    monkeypatch.setattr(
        commands, "_console", lambda: Console(width=60, force_terminal=True, color_system=None)
    )
    path = write_toy_study(tmp_path, trials=20, seed=0)
    assert cmd_run(path, app=Application(problem_factory=toy_problem)) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines() if not line.startswith("wrote")) <= 60
    front = pd.read_csv(tmp_path / "results" / "toy" / "pareto.csv")
    first = front.iloc[0]
    assert f"energy_per_token_j  {first['energy_per_token_j']:.4g}" in out  # whole numbers, never cut


def test_relative_model_paths_start_from_the_study_file(tmp_path, monkeypatch) -> None:
    config_json = {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 2048,
        "vocab_size": 32000,
    }
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config_json))
    study(folder, STUDY.replace("llama-3.1-8b", "config.json").replace("trials: 40", "trials: 4"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["study", "run", str(folder / "study.yaml")]) == 0
    assert (folder / "out" / "pareto.csv").exists() and not list(elsewhere.iterdir())


def test_a_results_folder_holding_the_studys_own_journal_is_its_own(tmp_path, monkeypatch) -> None:
    """Studies run before results folders had an owner file keep working."""
    monkeypatch.chdir(tmp_path)
    study(tmp_path)
    assert main(["study", "run", "study.yaml", "--trials", "4"]) == 0
    (tmp_path / "out" / ".study.json").unlink()
    assert main(["study", "report", "study.yaml"]) == 0
    assert (tmp_path / "out" / ".study.json").is_file()


def test_report_and_rank_take_the_storage_and_engine_of_the_run(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    study(tmp_path, STUDY.replace("trials: 40", "trials: 12"))
    assert main(["study", "run", "study.yaml", "--storage", "elsewhere.journal"]) == 0
    assert not (tmp_path / "out" / "storage.journal").exists()
    assert main(["study", "report", "study.yaml"]) == 2  # the file's own storage has no such study
    assert "no study 'small' in" in capsys.readouterr().err
    assert main(["study", "report", "study.yaml", "--storage", "elsewhere.journal"]) == 0
    assert main(["study", "rank", "study.yaml", "--storage", "elsewhere.journal", "--budget", "3"]) == 0
    grid = ["--engine", "grid", "--budget", "400"]  # every (pinned) grid whole
    assert main(["study", "rank", "study.yaml", "--storage", "elsewhere.journal", *grid]) == 0
    ranking = pd.read_csv(tmp_path / "out" / "ranking.csv", comment="#")
    assert set(ranking["knob"]) == {"tp", "batch", "gpu"} and (ranking["noise_pct"] == 0).all()
    ablations = optuna.get_all_study_summaries(open_storage(str(tmp_path / "out" / "ablation.journal")))
    trials = {s.study_name: s.n_trials for s in ablations}
    # the 12 optuna trials of the main study are not the whole grid: the grid control is run
    assert trials["small/ablate/_control"] == 384 and trials["small/ablate/tp"] == 128


def test_checking_a_study_on_a_new_sqlite_file_creates_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    study(tmp_path)
    before = listing(tmp_path)
    assert main(["study", "check", "study.yaml", "--storage", "sqlite:///new.db"]) == 0
    assert listing(tmp_path) == before
    assert main(["study", "run", "study.yaml", "--storage", "sqlite:///new.db", "--trials", "3"]) == 0
    assert (tmp_path / "new.db").is_file()
    assert main(["study", "report", "study.yaml", "--storage", "sqlite:///new.db"]) == 0


def test_a_config_json_model_is_read_once_per_study(tmp_path, capsys, monkeypatch) -> None:
    """An approximated config.json is reported once, not once per trial."""
    monkeypatch.chdir(tmp_path)
    generic = {
        "model_type": "not-a-known-type",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 2048,
        "vocab_size": 32000,
    }
    (tmp_path / "config.json").write_text(json.dumps(generic))
    study(tmp_path, STUDY.replace("llama-3.1-8b", "config.json").replace("trials: 40", "trials: 25"))
    assert main(["study", "run", "study.yaml"]) == 0
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "approximated" in err


def test_docs_list_every_key_knob_and_metric_a_study_may_use() -> None:
    """README points to docs/study-files.md for every key: each name the schema accepts
    (top-level and workload keys, knobs, metrics, fusions, weight dtypes) is in it."""
    from energylens.deployment import FUSIONS, WEIGHT_DTYPES
    from energylens.study.objective import PROBLEM_KEYS, SCHEMA, WORKLOAD_KEYS
    from search.config import _GENERIC_KEYS

    docs = (Path(__file__).resolve().parents[1] / "docs" / "study-files.md").read_text()
    knobs = [k for k in SCHEMA.params if not k.startswith("fuse_")] + ["fuse_<name>"]
    names = [*_GENERIC_KEYS, *PROBLEM_KEYS, *WORKLOAD_KEYS, *knobs, *SCHEMA.metrics, *FUSIONS,
             *WEIGHT_DTYPES]
    assert [n for n in names if f"`{n}`" not in docs] == []
    assert {k.removeprefix("fuse_") for k in SCHEMA.params if k.startswith("fuse_")} == set(FUSIONS)
