"""Study files: parsing, and one clear error line with exit code 2 for bad files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from search.commands import Application, Overrides, cmd_check, cmd_report, cmd_resume, cmd_run, cmd_worker
from search.config import Constraint, Objective, load_study
from search.outcome import make_outcome
from search.problem import Evaluation
from search.runner import definition
from search.toy import TOY_SCHEMA, TOY_SPACE, toy_problem, write_toy_study

APP = Application(problem_factory=toy_problem)


def test_study_file_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "toy.yaml").write_text(yaml.safe_dump(TOY_SPACE))
    path = tmp_path / "studies" / "s.yaml"
    path.parent.mkdir()
    path.write_text(
        yaml.safe_dump(
            {
                "space": "../spaces/toy.yaml",
                "objectives": [
                    "minimize energy_per_token_j",
                    {"metric": "tokens_per_s", "direction": "maximize"},
                ],
                "constraints": ["latency_s <= 0.05", "tokens_per_s >= 1e3"],
                "engine": "pymoo",
                "sampler": "nsga3",
                "trials": 10,
                "seed": 3,
                "model": {"name": "llama"},
                "workload": {"batch": 8},
            }
        )
    )
    config = load_study(path)
    assert config.name == "s"
    assert config.objectives == (
        Objective("energy_per_token_j", "minimize"),
        Objective("tokens_per_s", "maximize"),
    )
    assert config.constraints == (
        Constraint("latency_s", "<=", 0.05),
        Constraint("tokens_per_s", ">=", 1000.0),
    )
    assert config.problem == {"model": {"name": "llama"}, "workload": {"batch": 8}}
    assert config.results == tmp_path / "studies" / "results" / "s"
    assert config.storage == str(config.results / "storage.journal")
    assert (config.engine, config.sampler, config.trials, config.seed) == ("pymoo", "nsga3", 10, 3)


def test_constraint_violation_is_relative_and_signed() -> None:
    assert Constraint("tpot_s", "<=", 0.05).violation(0.06) == pytest.approx(0.2)
    assert Constraint("tpot_s", "<=", 0.05).violation(0.04) == pytest.approx(-0.2)
    assert Constraint("tps", ">=", 1000).violation(900) == pytest.approx(0.1)
    assert Constraint("x", ">=", 0).violation(-2) == 2


def test_constraint_keys_keep_every_digit_of_the_bound_and_the_old_text_where_it_was_exact(
    tmp_path,
) -> None:
    assert str(Constraint("tokens_per_s", ">=", 1234567.0)) == "tokens_per_s >= 1234567"
    assert str(Constraint("x", "<=", 0.1 + 0.2)) == "x <= 0.30000000000000004"
    # :g text wherever :g was exact: stored studies' definitions and constraint keys still match
    for bound, text in ((0.05, "0.05"), (1000.0, "1000"), (1e-7, "1e-07"), (2.5e9, "2.5e+09"), (0.0, "0")):
        assert str(Constraint("m", "<=", bound)) == f"m <= {text}" == f"m <= {bound:g}"
    # two bounds on one metric agreeing to 6 digits are two constraints, each with its own value
    config = load_study(
        write_toy_study(tmp_path, constraints=["tokens_per_s <= 1234567", "tokens_per_s <= 1234568"])
    )
    outcome = make_outcome(config, Evaluation({"energy_per_token_j": 1.0, "latency_s": 0.1,
                                               "tokens_per_s": 1234568.0}))
    assert outcome.constraints == {
        "valid": 0.0, "tokens_per_s <= 1234567": pytest.approx(1 / 1234567), "tokens_per_s <= 1234568": 0.0
    }
    other = load_study(write_toy_study(tmp_path / "b", constraints=["tokens_per_s <= 1234568"]))
    assert definition(other) != definition(replace(other, constraints=config.constraints[:1]))


BAD_STUDIES = [
    ({"objectives": ["minimise energy_j"]}, "objectives[0]"),
    ({"objectives": [{"metric": "e_j", "direction": "down"}]}, "objectives[0].direction"),
    ({"constraints": ["tpot_s < 0.05"]}, "constraints[0]"),
    ({"constraints": ["tpot_s <= fast"]}, "constraints[0]"),
    ({"engine": "hyperopt"}, "engine"),
    ({"engine": "pymoo", "sampler": "tpe"}, "sampler"),
    ({"population_size": 1}, "population_size"),
    ({"trials": "many"}, "trials"),
    ({"objectives": ["minimize gpu"]}, "objectives[0]"),
    ({"space": {"knobs": {"tp": {"type": "ordinal", "values": []}}}}, "space.knobs.tp.values"),
    ({"engine": "grid", "space": {"knobs": {"x": {"type": "float", "low": 0, "high": 1}}}}, "engine"),
]


@pytest.mark.parametrize(("overrides", "where"), BAD_STUDIES)
def test_bad_study_gives_one_error_line_and_exit_code_2(tmp_path, capsys, overrides, where) -> None:
    path = write_toy_study(tmp_path, **overrides)
    assert cmd_run(path, app=APP, overrides=Overrides(trials=5)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: {where}: expected")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", [cmd_check, cmd_run])
@pytest.mark.parametrize("overrides", [Overrides(engine="grid", trials=5), Overrides(shard="1/1")])
def test_a_grid_engine_chosen_on_the_command_line_refuses_a_continuous_space(
    tmp_path, capsys, command, overrides
) -> None:
    space = {"knobs": {**TOY_SPACE["knobs"], "freq": {"type": "float", "low": 0.6, "high": 1.0}}}
    path = write_toy_study(tmp_path, space=space)
    assert command(path, app=APP, overrides=overrides) == 2  # check refuses what run would refuse
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: engine: expected a space without continuous knobs for grid")
    assert not (tmp_path / "results").exists()


def test_bad_space_file_names_the_space_file(tmp_path, capsys) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  tp: {type: ordinal, values: [1, 2, four]}\n")
    path = write_toy_study(tmp_path, space="space.yaml")
    assert cmd_run(path, app=APP, overrides=Overrides(trials=5)) == 2
    assert (
        capsys.readouterr().err == f"error: {space}: knobs.tp.values[2]: expected a number "
        "(ordinal values are ordered numbers), got 'four'\n"
    )


@pytest.mark.parametrize("text", ["space: [unclosed\n", "- just\n- a list\n"])
def test_malformed_study_file(tmp_path, capsys, text) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    assert cmd_run(path, app=APP, overrides=Overrides(trials=5)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ")


def test_missing_file_and_missing_study(tmp_path, capsys) -> None:
    assert cmd_report(tmp_path / "nope.yaml", app=APP) == 2
    assert "cannot read file" in capsys.readouterr().err
    assert cmd_report(write_toy_study(tmp_path), app=APP) == 2
    assert capsys.readouterr().err.startswith("error: no study 'toy' in ")
    assert not (tmp_path / "results").exists()


def test_commands_run_resume_report_and_refuse_a_rerun(tmp_path, capsys) -> None:
    path = write_toy_study(tmp_path, population_size=10, seed=0)
    assert cmd_run(path, app=APP, overrides=Overrides(trials=20)) == 0
    out = capsys.readouterr().out
    assert "toy: feasible Pareto front" in out and "20 trials" in out
    assert cmd_resume(path, app=APP, overrides=Overrides(trials=30)) == 0
    assert "30 trials" in capsys.readouterr().out
    assert cmd_report(path, app=APP) == 0
    assert (tmp_path / "results" / "toy" / "pareto.csv").exists()
    assert cmd_run(path, app=APP, overrides=Overrides(trials=20)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already has 30 completed trials" in err


def table_rows(out: str) -> list[list[str]]:
    lines = [line for line in out.splitlines() if line.startswith("│")]
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in lines]


def test_tables_are_wide_with_four_significant_digits_and_distinct_rows(tmp_path, capsys) -> None:
    knobs = {k: v for k, v in TOY_SPACE["knobs"].items() if k != "batch"}
    space = {"knobs": knobs, "fixed": {"batch": 8}}  # 864 points
    path = write_toy_study(tmp_path, space=space, population_size=10, seed=0, sampler="random")
    assert cmd_run(path, app=APP, overrides=Overrides(trials=300)) == 0  # many repeated points
    out = capsys.readouterr().out
    assert "…" not in out and "energy_per_token_j" in out  # not cut to 80 columns
    pareto = pd.read_csv(tmp_path / "results" / "toy" / "pareto.csv")
    rows = table_rows(out)
    assert len(rows) == min(len(pareto), 20) and len({tuple(r) for r in rows}) == len(rows)
    energy = rows[0][len(space["knobs"])]
    assert energy == f"{pareto['energy_per_token_j'].iloc[0]:.4g}"
    trials = pd.read_csv(tmp_path / "results" / "toy" / "trials.csv")
    feasible = trials[trials["feasible"]].drop_duplicates(subset=list(space["knobs"]))
    assert len(feasible) < trials["feasible"].sum()  # the random sampler repeated itself
    assert f"({len(pareto)} of {len(feasible)} distinct feasible configurations, 300 trials)" in out


def test_worker_stops_at_the_requested_total(tmp_path, capsys) -> None:
    path = write_toy_study(tmp_path, trials=25, seed=0)
    assert cmd_run(path, app=APP, overrides=Overrides(trials=10)) == 0
    assert cmd_worker(path, app=APP, overrides=Overrides(trials=15)) == 0
    assert "toy: 15 completed trials in the study" in capsys.readouterr().out
    assert cmd_worker(path, app=APP) == 0  # the study file's budget
    assert "toy: 25 completed trials in the study" in capsys.readouterr().out


STRICT = [
    ({"notez": "x"}, "notez: unknown key 'notez'; did you mean 'notes'?"),
    (
        {"space": {"knobs": {"gpuz": {"type": "bool"}}}},
        "space.knobs.gpuz: unknown knob 'gpuz'; did you mean 'gpu'?",
    ),
    (
        {"space": {"knobs": {"gpu": {"type": "categorical", "values": ["small", "huge"]}}}},
        "space.knobs.gpu.values[1]: expected one of small, medium, large, got 'huge'",
    ),
    (
        {"space": {"knobs": {"freq": {"type": "float", "low": 0.5, "high": 2.0}}}},
        "space.knobs.freq.high: expected a clock fraction in (0, 1], got 2.0",
    ),
    (
        {"space": {"knobs": {"tp": {"type": "ordinal", "values": [1]}}, "fixed": {"colour": "red"}}},
        "space.fixed.colour: unknown parameter 'colour'",
    ),
    (
        {"objectives": ["minimize energy_per_token"]},
        "objectives[0]: unknown metric 'energy_per_token'; did you mean 'energy_per_token_j'?",
    ),
    (
        {"constraints": ["latency <= 1"]},
        "constraints[0]: unknown metric 'latency'; did you mean 'latency_s'?",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), STRICT)
def test_a_schema_refuses_unknown_keys_knobs_values_and_metrics(tmp_path, capsys, overrides, message) -> None:
    path = write_toy_study(tmp_path, **overrides)
    load_study(path)  # without a schema the problem's keys and names are not checked
    assert cmd_run(path, app=Application(problem_factory=toy_problem, schema=TOY_SCHEMA)) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: {message}\n" or err.startswith(f"error: {path}: {message} (known: ")
    assert not (tmp_path / "results").exists()


def test_the_toy_study_passes_its_own_schema(tmp_path) -> None:
    config = load_study(write_toy_study(tmp_path, notes="fine"), schema=TOY_SCHEMA)
    assert config.problem == {"notes": "fine"} and config.schema is TOY_SCHEMA


def test_storage_paths_start_from_the_study_file(tmp_path) -> None:
    folder = tmp_path / "studies"
    path = write_toy_study(folder, storage="sqlite:///db/s.db")
    assert load_study(path).storage == f"sqlite:///{folder / 'db' / 's.db'}"
    journal = load_study(write_toy_study(folder, storage="j/s.journal")).storage
    assert journal == str(folder / "j" / "s.journal")
    url = "postgresql+psycopg://u@host/db"
    assert load_study(write_toy_study(folder, storage=url)).storage == url
    absolute = f"sqlite:///{tmp_path}/x.db"  # sqlite:////tmp/... : already absolute
    assert load_study(write_toy_study(folder, storage=absolute)).storage == absolute


def test_an_applications_front_annotator_adds_columns_to_every_written_front(tmp_path) -> None:
    seen: list[int] = []

    def annotate(config, front: pd.DataFrame) -> pd.DataFrame:
        seen.append(len(front))
        return front.assign(note=[f"point {i}" for i in range(len(front))])

    app = Application(problem_factory=toy_problem, annotate_front=annotate)
    path = write_toy_study(tmp_path, population_size=10, seed=0)
    assert cmd_run(path, app=app, overrides=Overrides(trials=20)) == 0
    front = pd.read_csv(tmp_path / "results" / "toy" / "pareto.csv")
    assert len(front) == seen[-1] and list(front["note"]) == [f"point {i}" for i in range(len(front))]
    assert cmd_report(path, app=app) == 0 and len(seen) == 2  # a rewritten report annotates again
