"""Command functions for a CLI: each prints with rich and returns an exit code.

Exit codes: 0 success, 2 bad study/space file or study state (one line on stderr).
Errors raised by the problem itself are bugs and propagate with their traceback.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from search.config import StudyConfig, StudyError, load_study
from search.frame import distinct_configurations
from search.outcome import completed_trials
from search.problem import Problem
from search.rank import rank_optimizations
from search.report import write_report
from search.runner import StudyStateError, open_study, resume_study, run_study, run_worker
from search.space import SpaceError

ProblemFactory = Callable[[StudyConfig], Problem]
MAX_ROWS = 20
WIDE_CONSOLE = 200
USER_ERRORS = (StudyError, SpaceError, StudyStateError)


def cmd_run(
    study_path: str | Path,
    *,
    trials: int | None = None,
    engine: str | None = None,
    storage: str | None = None,
    seed: int | None = None,
    problem_factory: ProblemFactory,
) -> int:
    """Run a new study, write its report and print the feasible Pareto front."""
    _quiet_optuna()
    try:
        config = load_study(study_path)
        if engine is not None:
            config = config.with_engine(engine)
        study = run_study(
            config=config,
            problem=problem_factory(config),
            n_trials=trials,
            storage=storage,
            seed=seed,
            progress=True,
        )
    except USER_ERRORS as exc:
        return _fail(exc)
    _finish(config, study)
    return 0


def cmd_resume(study_path: str | Path, *, trials: int, problem_factory: ProblemFactory) -> int:
    """Continue a study until it holds ``trials`` completed trials, then report."""
    _quiet_optuna()
    try:
        config = load_study(study_path)
        study = resume_study(config=config, problem=problem_factory(config), n_trials=trials, progress=True)
    except USER_ERRORS as exc:
        return _fail(exc)
    _finish(config, study)
    return 0


def cmd_report(study_path: str | Path) -> int:
    """Rewrite the report of an existing study and print its feasible Pareto front."""
    try:
        config = load_study(study_path)
        study = open_study(config=config)
    except USER_ERRORS as exc:
        return _fail(exc)
    _finish(config, study)
    return 0


def cmd_rank(study_path: str | Path, *, problem_factory: ProblemFactory, budget: int | None = None) -> int:
    """Rank knobs by constrained ablation and importance; print and write the ranking."""
    _quiet_optuna()
    try:
        config = load_study(study_path)
        study = open_study(config=config)
        ranking = rank_optimizations(
            config=config, problem=problem_factory(config), budget_per_ablation=budget, study=study
        )
    except USER_ERRORS as exc:
        return _fail(exc)
    console = _console()
    _print_table(console, ranking, title=f"{config.name}: ranking ({config.objectives[0]})")
    console.print(f"wrote {config.results / 'ranking.csv'} and {config.results / 'ranking.png'}")
    return 0


def cmd_worker(
    study_path: str | Path,
    *,
    storage: str | None = None,
    trials: int | None = None,
    problem_factory: ProblemFactory,
) -> int:
    """Join a shared study as one more worker until it holds ``trials`` completed trials in
    total (default: the study file's budget)."""
    _quiet_optuna()
    try:
        config = load_study(study_path)
        study = run_worker(
            config=config, problem=problem_factory(config), storage=storage, n_trials=trials, progress=True
        )
    except USER_ERRORS as exc:
        return _fail(exc)
    _console().print(f"{config.name}: {len(completed_trials(study))} completed trials in the study")
    return 0


def _quiet_optuna() -> None:
    """One log line per trial drowns the progress bar; keep warnings only."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _fail(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _finish(config: StudyConfig, study: optuna.Study) -> None:
    report = write_report(config=config, study=study)
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
    for path in (report.pareto_csv, report.trials_csv, report.pareto_png, report.hypervolume_png):
        console.print(f"wrote {path}")


def _console() -> Console:
    """The terminal's console; a wide one when stdout is a file or pipe (rich would
    otherwise truncate every table to 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=WIDE_CONSOLE)


def _print_table(console: Console, frame: pd.DataFrame, *, title: str) -> None:
    """Print ``title`` on its own line (a table title would wrap at the table's width),
    then the first rows of ``frame``, never truncated when stdout is not a terminal."""
    table = Table()
    for column in frame.columns:
        table.add_column(Text(str(column)), justify="right")
    for row in frame.head(MAX_ROWS).astype(object).itertuples(index=False):
        table.add_row(*(Text(_cell(v)) for v in row))
    if len(frame) > MAX_ROWS:
        table.caption = Text(f"{len(frame) - MAX_ROWS} more rows in the CSV")
    if not console.is_terminal:
        needed = max(len(title), Console(width=10_000).measure(table).maximum)
        if needed > console.width:
            console = Console(width=needed)
    console.print(Text(title, style="bold"))
    console.print(table)


def _cell(value: object) -> str:
    """Floats with 4 significant digits, '-' for NaN; everything else as is."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)
