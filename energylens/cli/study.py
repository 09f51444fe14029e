"""``energylens study run|resume|report|rank|worker``: deployment studies on the search engine."""

from __future__ import annotations

import argparse

from energylens.study.objective import DeploymentProblem, problem_from_study
from search.config import StudyConfig
from search.engines import engine_names


def study_problem(config: StudyConfig) -> DeploymentProblem:
    """The objective of a study file (its model, workload and cost table)."""
    return problem_from_study(problem=config.problem, source=config.source)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``study`` command and its subcommands."""
    study = sub.add_parser("study", help="run, resume, report and rank deployment studies")
    actions = study.add_subparsers(dest="action", required=True, parser_class=type(study))
    run = actions.add_parser("run", help="run a study (a fresh one, or continue the same name)")
    run.add_argument("study")
    run.add_argument("--trials", type=int)
    run.add_argument("--engine", choices=engine_names(),
                     help="search engine (default: the study file's)")
    run.add_argument("--storage", help="SQLAlchemy URL or journal file (default: embedded)")
    run.add_argument("--seed", type=int)
    run.set_defaults(handler=_run)
    resume = actions.add_parser("resume", help="continue a study up to --trials in total")
    resume.add_argument("study")
    resume.add_argument("--trials", type=int, required=True)
    resume.set_defaults(handler=_resume)
    report = actions.add_parser("report", help="write pareto.csv, trials.csv and plots")
    report.add_argument("study")
    report.set_defaults(handler=_report)
    rank = actions.add_parser("rank", help="rank which optimisations matter most")
    rank.add_argument("study")
    rank.add_argument("--budget", type=int, help="trials per ablation (default: a quarter)")
    rank.set_defaults(handler=_rank)
    worker = actions.add_parser("worker", help="join a shared study as one more worker")
    worker.add_argument("study")
    worker.add_argument("--storage", required=True)
    worker.add_argument("--trials", type=int,
                        help="stop once the study holds this many trials (default: its budget)")
    worker.set_defaults(handler=_worker)


def _run(args: argparse.Namespace) -> int:
    from search.commands import cmd_run

    return cmd_run(args.study, trials=args.trials, engine=args.engine, storage=args.storage,
                   seed=args.seed, problem_factory=study_problem)


def _resume(args: argparse.Namespace) -> int:
    from search.commands import cmd_resume

    return cmd_resume(args.study, trials=args.trials, problem_factory=study_problem)


def _report(args: argparse.Namespace) -> int:
    from search.commands import cmd_report

    return cmd_report(args.study)


def _rank(args: argparse.Namespace) -> int:
    from search.commands import cmd_rank

    return cmd_rank(args.study, problem_factory=study_problem, budget=args.budget)


def _worker(args: argparse.Namespace) -> int:
    from search.commands import cmd_worker

    return cmd_worker(args.study, storage=args.storage, trials=args.trials,
                      problem_factory=study_problem)
