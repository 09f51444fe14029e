"""A generic multi-objective search engine (knows nothing about LLMs).

Modules: ``space`` (YAML search spaces), ``config`` (study files), ``problem`` (the
objective protocol and the schema of what a problem reads), ``runner`` (run/resume/join
studies, definitions recorded in the storage), ``engines`` (the engine registry: optuna,
pymoo, grid), ``storage`` (journal files and SQL storages, heartbeats, crash recovery),
``pareto`` (fronts, hypervolume), ``report`` (CSV and plots), ``exhaustive`` and
``exhaustive_report`` (whole grids to Parquet in shards, their merged front), ``files`` (atomic writes,
results folders), ``rank`` (ablation and importance), ``progress`` (progress bars, Ctrl-C),
``commands`` (CLI entry points), ``toy`` (a cheap test problem).
"""

from search.config import StudyConfig, StudyError, load_study
from search.problem import Evaluation, Problem, ProblemSchema
from search.runner import (
    StudyStateError,
    create_study,
    open_study,
    resume_study,
    run_study,
    run_worker,
)
from search.space import Space, SpaceError, load_space

__all__ = [
    "Evaluation",
    "Problem",
    "ProblemSchema",
    "Space",
    "SpaceError",
    "StudyConfig",
    "StudyError",
    "StudyStateError",
    "create_study",
    "load_space",
    "load_study",
    "open_study",
    "resume_study",
    "run_study",
    "run_worker",
]
