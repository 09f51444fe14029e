"""Command functions for a CLI: each prints with rich and returns an exit code.

Exit codes: 0 success, 2 bad study/space file, storage, results folder or study state (one
line on stderr, nothing created), 130 interrupted (completed trials are kept; resume).
Errors raised by the problem itself are bugs and propagate with their traceback.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from search.config import StudyConfig, StudyError, load_study
from search.console import PipeConsole
from search.engines.grid_engine import EXHAUSTIVE
from search.exhaustive import Shard, exhaustive_folder, parse_shard, run_exhaustive
from search.exhaustive_report import GridReport, has_grid_results, write_grid_report
from search.files import ResultsError, claim_results
from search.frame import distinct_configurations
from search.knobs import BoolKnob, CategoricalKnob, FloatKnob, IntKnob, Knob
from search.outcome import completed_trials
from search.problem import FrontAnnotator, Problem, ProblemSchema
from search.rank import ablation_storage, rank_optimizations
from search.report import write_report
from search.runner import (
    StudyStateError,
    completed_in_storage,
    open_study,
    refuse_existing,
    resume_study,
    run_study,
    run_worker,
)
from search.space import SpaceError
from search.storage import MissingDriverError, StorageError, display_storage

ProblemFactory = Callable[[StudyConfig], Problem]
MAX_ROWS = 20
WIDE_CONSOLE = 200
USER_ERRORS = (StudyError, SpaceError, StudyStateError, StorageError, ResultsError)
INTERRUPTED = 130


@dataclass(frozen=True, kw_only=True)
class Application:
    """What a command line built on these commands supplies.

    Attributes:
        problem_factory: Builds the objective of a study (and checks its problem keys).
        schema: What study files may contain (None: problem keys are not checked).
        install_driver: How to install a missing database driver module (the command line).
        resume_command: How to continue an interrupted study; ``{study}`` is replaced.
        rank_command: How to rerun an interrupted ranking; ``{study}`` is replaced.
        error_prefix: What error lines start with.
        annotate_front: Adds columns to each written front (None: none).
        write_more: Writes the application's own files beside each written report, before
            anything is printed (so that output cut short by a closed pipe loses none), and
            returns the lines to print about them (None: nothing more).
    """

    problem_factory: ProblemFactory
    schema: ProblemSchema | None = None
    install_driver: Callable[[str], str] = lambda module: f"pip install {module}"
    resume_command: str = "resume {study} --trials N"
    rank_command: str = "rank {study}"
    error_prefix: str = "error"
    annotate_front: FrontAnnotator | None = None
    write_more: Callable[[StudyConfig], list[str]] | None = None

    def more_files(self, config: StudyConfig) -> list[str]:
        """:attr:`write_more` of ``config`` (no lines without one)."""
        return [] if self.write_more is None else self.write_more(config)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """Command-line options that beat the study file (None: the file's value)."""

    trials: int | None = None
    engine: str | None = None
    storage: str | None = None
    seed: int | None = None
    new_study: str | None = None
    shard: str | None = None
    """``K/N``: run the K-th of N parts of the whole grid as an exhaustive grid (Parquet)."""

    def apply(self, config: StudyConfig) -> StudyConfig:
        """``config`` with these overrides (a shard selects the exhaustive grid sampler)."""
        config = config.overridden(
            engine=self.engine, storage=self.storage, seed=self.seed, trials=self.trials, name=self.new_study
        )
        if self.shard is None:
            return config
        parse_shard(self.shard)
        return replace(config.with_engine("grid"), sampler=EXHAUSTIVE)

    def shard_of(self) -> Shard:
        """The shard to run (the whole grid when none is given)."""
        return Shard() if self.shard is None else parse_shard(self.shard)


def cmd_check(study_path: str | Path, *, app: Application, overrides: Overrides = Overrides()) -> int:
    """Validate a study (file, space, problem, budget) and print it resolved; create nothing.
    A stored study of the same name whose trials another definition made is refused, as
    ``resume`` refuses it."""
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        app.problem_factory(config)
        budget = config.budget()
        done = completed_in_storage(config, check_definition=True)
    except USER_ERRORS as exc:
        return _fail(exc, app)
    _print_study(_console(), config, budget, done)
    return 0


def cmd_run(
    study_path: str | Path,
    *,
    app: Application,
    overrides: Overrides = Overrides(),
    dry_run: bool = False,
    force: bool = False,
) -> int:
    """Run a new study, write its report and print the feasible Pareto front (``dry_run``:
    only check and print the resolved study)."""
    if dry_run:
        return cmd_check(study_path, app=app, overrides=overrides)
    _quiet_optuna()
    config: StudyConfig | None = None
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        problem = app.problem_factory(config)
        if config.writes_parquet:
            return _run_grid(config, problem, overrides.shard_of(), force, app)
        config.budget()  # a grid too large to run whole is refused before anything is created
        refuse_existing(config)
        _claim(config, force)
        study = run_study(config=config, problem=problem, progress=True)
        _finish(config, study, app)
    except USER_ERRORS as exc:
        return _fail(exc, app)
    except KeyboardInterrupt:
        return _interrupted(config, app, overrides)
    return 0


def cmd_resume(study_path: str | Path, *, app: Application, overrides: Overrides, force: bool = False) -> int:
    """Continue a study until it holds ``overrides.trials`` completed trials, then report.

    With ``overrides.new_study`` naming a study that does not exist yet, it is created.
    """
    _quiet_optuna()
    config: StudyConfig | None = None
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        if config.writes_parquet:  # a rerun continues after the last complete chunk
            return _run_grid(config, app.problem_factory(config), overrides.shard_of(), force, app)
        if overrides.trials is None:
            raise StudyError("--trials: expected the total number of completed trials to reach")
        problem = app.problem_factory(config)
        if overrides.new_study is not None and not completed_in_storage(config):
            _claim(config, force)
            study = run_study(config=config, problem=problem, progress=True)
        else:
            open_study(config=config)  # missing study or other definition: refused before writing
            _claim(config, force)
            study = resume_study(config=config, problem=problem, n_trials=overrides.trials, progress=True)
        _finish(config, study, app)
    except USER_ERRORS as exc:
        return _fail(exc, app)
    except KeyboardInterrupt:
        return _interrupted(config, app, overrides)
    return 0


def cmd_report(
    study_path: str | Path, *, app: Application, overrides: Overrides = Overrides(), force: bool = False
) -> int:
    """Rewrite the report of an existing study and print its feasible Pareto front."""
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        if config.writes_parquet or (has_grid_results(config) and not completed_in_storage(config)):
            _claim(config, force)
            report = write_grid_report(config=config, annotate=app.annotate_front)
            _print_grid(config, report, app.more_files(config))
            return 0
        study = open_study(config=config)
        _claim(config, force)
        _finish(config, study, app)
    except USER_ERRORS as exc:
        return _fail(exc, app)
    return 0


def cmd_rank(
    study_path: str | Path,
    *,
    app: Application,
    overrides: Overrides = Overrides(),
    budget: int | None = None,
    force: bool = False,
) -> int:
    """Rank knobs by constrained ablation and importance; print and write the ranking."""
    _quiet_optuna()
    config: StudyConfig | None = None
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        if budget is not None and budget < 1:
            raise StudyError(f"--budget: expected an integer >= 1, got {budget}")
        problem = app.problem_factory(config)
        study = open_study(config=config)
        _claim(config, force)
        ranking = rank_optimizations(
            config=config, problem=problem, budget_per_ablation=budget, study=study, progress=True
        )
    except USER_ERRORS as exc:
        return _fail(exc, app)
    except KeyboardInterrupt:
        return _rank_interrupted(config, app, overrides, budget)
    console = _console()
    shown = ranking.drop(columns=[c for c in ranking.columns if c.startswith("best")])
    _print_table(console, shown, title=f"{config.name}: what each optimization is worth")
    console.print(f"wrote {config.results / 'ranking.csv'} and {config.results / 'ranking.png'}")
    return 0


def cmd_worker(study_path: str | Path, *, app: Application, overrides: Overrides = Overrides()) -> int:
    """Join a shared study as one more worker until it holds ``overrides.trials`` completed
    trials in total (default: the study file's budget)."""
    _quiet_optuna()
    config: StudyConfig | None = None
    try:
        config = overrides.apply(load_study(study_path, schema=app.schema))
        study = run_worker(config=config, problem=app.problem_factory(config), progress=True)
    except USER_ERRORS as exc:
        return _fail(exc, app)
    except KeyboardInterrupt:
        return _interrupted(config, app, overrides)
    _console().print(f"{config.name}: {len(completed_trials(study))} completed trials in the study")
    return 0


def _run_grid(config: StudyConfig, problem: Problem, shard: Shard, force: bool, app: Application) -> int:
    """Run (or continue) one shard of an exhaustive grid; report once every shard is done.
    Ctrl-C stops after the chunk in flight (exit 130; a rerun continues after it). A study
    of the same name run trial by trial in the storage owns the results folder's reports:
    refused unless ``force`` (``--new-study NAME`` gives the grid its own)."""
    trials = completed_in_storage(config)
    if trials and not force:
        raise StudyStateError(
            f"study {config.name!r} already has {trials} completed trials in "
            f"{display_storage(config.storage)}, whose report is in {config.results}: a grid "
            "shard would write its own over it; run the shards under --new-study NAME, or "
            "give --force to replace that report"
        )
    _claim(config, force)
    try:
        state = run_exhaustive(config=config, problem=problem, shard=shard, progress=True)
    except KeyboardInterrupt:
        print(
            f"interrupted: shard {shard} of {config.name!r} keeps its complete chunks in "
            f"{exhaustive_folder(config) / shard.folder_name}; run the same command again to continue",
            file=sys.stderr,
        )
        return INTERRUPTED
    report = write_grid_report(config=config, annotate=app.annotate_front)
    more = app.more_files(config)
    console = _console()
    console.print(
        f"{config.name}: shard {shard}: {state.evaluated:,} of {state.size:,} configurations "
        f"evaluated, {state.feasible:,} feasible, in {exhaustive_folder(config) / shard.folder_name}"
    )
    if report.missing:
        for line in more:
            console.print(Text(line))
        console.print(f"shards still to run: {', '.join(report.missing)}; then: study report")
        return 0
    _print_grid(config, report, more)
    return 0


def _print_grid(config: StudyConfig, report: GridReport, more: list[str]) -> None:
    columns = [*config.space.names, *(o.metric for o in config.objectives)]
    covered = "the whole grid" if not report.missing else f"shards missing: {', '.join(report.missing)}"
    title = (
        f"{config.name}: exact feasible Pareto front ({len(report.front)} configurations; "
        f"{report.evaluated:,} of {report.grid_size:,} evaluated, {covered}; {report.feasible:,} feasible)"
    )
    console = _console()
    _print_table(console, report.front[columns], title=title)
    for path in report.files:
        console.print(f"wrote {path}")
    for line in more:
        console.print(Text(line))


def _claim(config: StudyConfig, force: bool) -> None:
    claim_results(config.results, study=config.name, storage=display_storage(config.storage), force=force)


def _quiet_optuna() -> None:
    """One log line per trial drowns the progress bar, and a trial stopped by Ctrl-C would
    log its traceback: keep errors only (problems that raise propagate anyway)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def _fail(exc: Exception, app: Application) -> int:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, MissingDriverError):
        message += f"; install it with: {app.install_driver(exc.module)}"
    print(f"{app.error_prefix}: {message}", file=sys.stderr)
    return 2


def _interrupted(config: StudyConfig | None, app: Application, overrides: Overrides) -> int:
    prefix = app.error_prefix.removesuffix("error")
    if config is None:
        print(f"{prefix}interrupted", file=sys.stderr)
        return INTERRUPTED
    done = completed_in_storage(config)
    hint = app.resume_command.format(study=shlex.quote(str(config.source))) + _flags(overrides)
    print(
        f"{prefix}interrupted: study {config.name!r} keeps its {done} completed trials; "
        f"continue with: {hint}",
        file=sys.stderr,
    )
    return INTERRUPTED


def _rank_interrupted(config: StudyConfig | None, app: Application, overrides: Overrides,
                      budget: int | None) -> int:
    prefix = app.error_prefix.removesuffix("error")
    if config is None:
        print(f"{prefix}interrupted", file=sys.stderr)
        return INTERRUPTED
    hint = app.rank_command.format(study=shlex.quote(str(config.source))) + _flags(
        overrides, budget=budget)
    print(
        f"{prefix}interrupted: the ablations of study {config.name!r} keep their completed "
        f"trials in {ablation_storage(config)}; rerun the ranking to continue them: {hint}",
        file=sys.stderr,
    )
    return INTERRUPTED


def _flags(overrides: Overrides, *, budget: int | None = None) -> str:
    """The options in effect that pick the study and its engine, as command-line flags
    (a storage URL's password shown as ``***``)."""
    given = (("--storage", None if overrides.storage is None else display_storage(overrides.storage)),
             ("--new-study", overrides.new_study), ("--engine", overrides.engine),
             ("--budget", budget))
    return "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in given if value is not None)


def _finish(config: StudyConfig, study: optuna.Study, app: Application) -> None:
    """Write every report file, then print the front and what was written."""
    report = write_report(config=config, study=study, annotate=app.annotate_front)
    more = app.more_files(config)
    trials, front = report.trials, report.front  # exactly what pareto.csv holds
    columns = [*config.space.names, *(o.metric for o in config.objectives)]
    feasible = trials[trials["feasible"]]
    n_configs = len(distinct_configurations(config, feasible))
    title = (
        f"{config.name}: feasible Pareto front ({len(front)} of {n_configs} distinct feasible "
        f"configurations, {len(trials)} trials)"
    )
    console = _console()
    _print_table(console, front[columns], title=title)
    for path in report.files:
        console.print(f"wrote {path}")
    for line in more:
        console.print(Text(line))


def _print_study(console: Console, config: StudyConfig, budget: int, done: int) -> None:
    space = config.space
    size = f"{space.grid_size:,} grid points" if space.enumerable else "continuous (no grid)"
    lines = [
        f"study        {config.name}  ({config.source})",
        f"space        {space.source}: {len(space.knobs)} knobs, {size}",
    ]
    width = max(len(n) for n in [*space.names, *space.fixed])
    for knob in space.knobs:
        lines.append(f"  {knob.name:<{width}}  {_describe(knob)}  (baseline {knob.baseline!r})")
    for name, value in space.fixed.items():
        lines.append(f"  {name:<{width}}  fixed at {value!r}")
    schema_metrics = {} if config.schema is None else config.schema.metrics
    for i, objective in enumerate(config.objectives):
        note = schema_metrics.get(objective.metric)
        lines.append(f"{'objectives' if i == 0 else '':<12} {objective}" + (f"  ({note})" if note else ""))
    lines.append(f"constraints  {'; '.join(map(str, config.constraints)) or 'none'}")
    engine = f"{config.engine} (sampler {config.sampler}, population {config.population_size})"
    lines.append(f"engine       {engine}, seed {config.seed if config.seed is not None else 'none'}")
    covered = " (the whole grid)" if space.enumerable and budget >= space.grid_size else ""
    lines.append(f"budget       {budget:,} completed trials{covered}")
    state = f"holds {done} completed trials" if done else "new study"
    lines.append(f"storage      {display_storage(config.storage)} ({state})")
    lines.append(f"results      {config.results}")
    for key, value in config.problem.items():
        lines.append(f"{key:<12} {value}")
    for line in lines:
        console.print(Text(line))


def _describe(knob: Knob) -> str:
    if isinstance(knob, CategoricalKnob):  # and ordinal
        kind = "categorical" if type(knob) is CategoricalKnob else "ordinal"
        return f"{kind} {', '.join(map(str, knob.values))}"
    if isinstance(knob, BoolKnob):
        return "bool false, true"
    if isinstance(knob, IntKnob | FloatKnob):
        kind = "int" if isinstance(knob, IntKnob) else "float"
        step = f" step {knob.step:g}" if knob.step is not None else ""
        return f"{kind} {knob.low:g} .. {knob.high:g}{step}{' log' if knob.log else ''}"
    raise TypeError(f"unknown knob type {type(knob).__name__}")


def _console(width: int | None = None) -> Console:
    """The terminal's console; a wide one when stdout is a file or pipe (rich would
    otherwise truncate every table to 80 columns)."""
    if width is not None:
        return PipeConsole(width=width)
    return PipeConsole() if sys.stdout.isatty() else PipeConsole(width=WIDE_CONSOLE)


def _print_table(console: Console, frame: pd.DataFrame, *, title: str) -> None:
    """Print ``title`` on its own line, then the first rows of ``frame``: as a table when it
    fits (never truncated when stdout is not a terminal), else one ``column: value`` block per
    row, so that no number is ever cut."""
    table = Table()
    for column in frame.columns:
        table.add_column(Text(str(column)), justify="right")
    rows = [[_cell(v) for v in row] for row in frame.head(MAX_ROWS).astype(object).itertuples(index=False)]
    for row in rows:
        table.add_row(*map(Text, row))
    more = f"{len(frame) - MAX_ROWS} more rows in the CSV" if len(frame) > MAX_ROWS else ""
    needed = max(len(title), Console(width=10_000).measure(table).maximum)
    console.print(Text(title, style="bold"))
    if not console.is_terminal:
        if needed > console.width:
            console = _console(width=needed)
    elif needed > console.width:
        width = max(len(str(c)) for c in frame.columns)
        for i, row in enumerate(rows):
            console.print(Text(f"-- {i + 1}", style="dim"))
            for column, cell in zip(frame.columns, row, strict=True):
                console.print(Text(f"{str(column):>{width}}  {cell}"))
        if more:
            console.print(Text(more))
        return
    if more:
        table.caption = Text(more)
    console.print(table)


def _cell(value: object) -> str:
    """Floats with 4 significant digits, '-' for NaN; everything else as is."""
    if value is None or value is pd.NA:  # a knob its configuration does not read
        return "-"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)
