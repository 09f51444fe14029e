"""``energylens study``: check, run, resume, report and rank deployment studies; join one as
a worker; write a starter study."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the objective, the engines (Optuna, pymoo), plots and reports: on use
    from energylens.study.objective import DeploymentProblem
    from search.commands import Application, Overrides
    from search.config import StudyConfig

POSTGRES_DRIVERS = ("psycopg", "psycopg2")
#: The pip package of a driver module named otherwise (SQLAlchemy's MySQL dialects).
DRIVER_PACKAGES = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL",
                   "mysql": "mysql-connector-python", "mysql.connector": "mysql-connector-python"}


def install_driver(module: str) -> str:
    """How to install a missing database driver: PostgreSQL's through the package's extra,
    another by its pip package's name."""
    if module in POSTGRES_DRIVERS:
        return "pip install 'energylens[postgres]'"
    return f"pip install {DRIVER_PACKAGES.get(module, module)}"


class _EngineNames:
    """The registered engine names, looked up when argparse first needs them (checking an
    ``--engine`` value or printing help), so that building the parser loads no engine."""

    def __iter__(self) -> Iterator[str]:
        from search.engines import engine_names

        return iter(engine_names())

    def __contains__(self, name: object) -> bool:
        return name in tuple(self)

    def __str__(self) -> str:  # the default engine, in help texts
        return next(iter(self))


def study_problem(config: StudyConfig) -> DeploymentProblem:
    """The objective of a study file (its model, workload, routing and cost table)."""
    from energylens.study.objective import study_problem as of_study

    return of_study(config)


def _app() -> Application:
    from energylens.study.front_accuracy import annotate_front
    from energylens.study.objective import SCHEMA
    from search.commands import Application

    return Application(problem_factory=study_problem, schema=SCHEMA, install_driver=install_driver,
                       resume_command="energylens study resume {study} --trials N",
                       rank_command="energylens study rank {study}",
                       error_prefix="energylens: error", annotate_front=annotate_front,
                       write_more=_write_more)


def _overrides(args: argparse.Namespace) -> Overrides:
    from search.commands import Overrides

    return Overrides(trials=getattr(args, "trials", None), engine=getattr(args, "engine", None),
                     storage=getattr(args, "storage", None), seed=getattr(args, "seed", None),
                     new_study=getattr(args, "new_study", None), shard=getattr(args, "shard", None))


def _common(parser: argparse.ArgumentParser, *, trials: str | None, seed: bool = False,
            new_study: bool = True, force: bool = True) -> None:
    parser.add_argument("study", help="study file (YAML; docs/study-files.md)")
    if trials is not None:
        parser.add_argument("--trials", type=int, metavar="N", help=trials)
    engine = parser.add_argument("--engine",
                                 help="search engine (default: the study file's engine:, else "
                                      "%(default_engine)s)")
    # set after add_argument, which formats the choices once (that would load the engines)
    engine.choices = _EngineNames()
    engine.default_engine = engine.choices  # type: ignore[attr-defined]  # str(): the first
    parser.add_argument("--storage", metavar="URL",
                        help="journal file path or SQLAlchemy URL (default: the study file's "
                             "storage:, else <results>/storage.journal)")
    if seed:
        parser.add_argument("--seed", type=int, help="sampler seed (default: the study file's seed:)")
    if new_study:
        parser.add_argument("--new-study", metavar="NAME",
                            help="store under this study name instead of the file's name: (to run an "
                                 "edited study file beside the original)")
    if force:
        parser.add_argument("--force", action="store_true",
                            help="write into a results folder that another study (or no study) wrote")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``study`` command and its subcommands."""
    study = sub.add_parser("study", help="check, run, resume, report and rank deployment studies")
    actions = study.add_subparsers(dest="action", required=True, parser_class=type(study))

    check = actions.add_parser("check", help="validate a study and print it resolved (creates nothing)")
    _common(check, trials="budget to check (default: the study file's trials:)", seed=True, force=False)
    check.set_defaults(handler=_check)

    run = actions.add_parser("run", help="run a new study, write its report, print the Pareto front")
    _common(run, trials="completed trials to run (default: the study file's trials:, else 100; "
                        "grid: the whole grid, or a uniform sample of N points)", seed=True)
    run.add_argument("--dry-run", action="store_true", help="only check and print the resolved study")
    run.add_argument("--shard", metavar="K/N", help="run part K of N of the whole grid, to Parquet")
    run.set_defaults(handler=_run)

    resume = actions.add_parser("resume", help="continue a study up to --trials completed trials in total")
    _common(resume, trials="total completed trials to reach (required)")
    resume.set_defaults(handler=_resume)

    report = actions.add_parser("report", help="rewrite pareto.csv, trials.csv and the plots")
    _common(report, trials=None, new_study=True)
    report.set_defaults(handler=_report)

    rank = actions.add_parser("rank", help="rank which optimisations matter most (ablation + importance)")
    _common(rank, trials=None)
    rank.add_argument("--budget", type=int, metavar="N",
                      help="completed trials per ablation (default: half the study's budget; grid: "
                           "each pinned grid)")
    rank.set_defaults(handler=_rank)

    worker = actions.add_parser("worker", help="join a shared study as one more worker")
    _common(worker, trials="stop once the study holds N completed trials (default: its budget)",
            force=False)
    worker.set_defaults(handler=_worker)

    init = actions.add_parser("init", help="write a commented starter study")
    init.add_argument("path", nargs="?", default="study.yaml", help="file to write (default: %(default)s)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)


def _check(args: argparse.Namespace) -> int:
    from search.commands import cmd_check

    return cmd_check(args.study, app=_app(), overrides=_overrides(args))


def _run(args: argparse.Namespace) -> int:
    from search.commands import cmd_run

    return cmd_run(args.study, app=_app(), overrides=_overrides(args), dry_run=args.dry_run,
                   force=args.force)


def _resume(args: argparse.Namespace) -> int:
    from search.commands import cmd_resume

    return cmd_resume(args.study, app=_app(), overrides=_overrides(args), force=args.force)


def _report(args: argparse.Namespace) -> int:
    from search.commands import cmd_report

    return cmd_report(args.study, app=_app(), overrides=_overrides(args), force=args.force)


def _write_more(config: StudyConfig) -> list[str]:
    """After each written report, before anything is printed: each Pareto point's launch
    command, as a ``launch_command`` column of ``pareto.csv`` and as ``launch/<point>.sh``
    (energylens.study.launch_report); the points' breakdown; a load study's pictures
    (energylens.study.load_report). The lines to print about them."""
    import warnings

    from energylens.model.hf import ModelApproximationWarning
    from energylens.study.breakdown_report import write_front_breakdown
    from energylens.study.launch_report import write_point_launch
    from energylens.study.load_report import write_load_report

    with warnings.catch_warnings():  # a config.json's approximations were reported once already
        warnings.simplefilter("ignore", ModelApproximationWarning)
        problem = study_problem(config)
    knobs, fixed = tuple(config.space.names), dict(config.space.fixed)
    lines = []
    written = write_point_launch(results=config.results, problem=problem, knobs=knobs,
                                 fixed=fixed)
    if written:
        lines.append(f"launch commands: {config.results / 'launch'} ({written} scripts, and the "
                     "launch_command column of pareto.csv)")
    paths = [*write_front_breakdown(results=config.results, problem=problem, knobs=knobs,
                                    fixed=fixed),
             *write_load_report(results=config.results, problem=problem, name=config.name,
                                knobs=knobs, fixed=fixed)]
    return lines + [f"wrote {path}" for path in paths]


def _rank(args: argparse.Namespace) -> int:
    from search.commands import cmd_rank

    return cmd_rank(args.study, app=_app(), overrides=_overrides(args), budget=args.budget,
                    force=args.force)


def _worker(args: argparse.Namespace) -> int:
    from search.commands import cmd_worker

    return cmd_worker(args.study, app=_app(), overrides=_overrides(args))


def _init(args: argparse.Namespace) -> int:
    from energylens.study.starter import write_starter

    path = write_starter(path=Path(args.path), force=args.force)
    print(f"wrote {path}; check it with: energylens study check {path}")
    return 0
