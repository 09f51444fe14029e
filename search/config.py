"""Study definitions loaded from YAML.

Format (paths are relative to the study file's folder)::

    name: llama70b-decode            # default: the file name without .yaml
    space: ../spaces/deploy.yaml     # or an inline mapping with knobs/fixed
    objectives:
      - minimize energy_per_output_token_j
      - {metric: output_tokens_per_s, direction: maximize}
    constraints: ["tpot_s <= 0.05", "ttft_s <= 2"]
    engine: optuna                   # a registered engine: optuna (default) | pymoo | grid
    sampler: nsga2                   # optuna: nsga2 | tpe | random; pymoo: nsga2 | nsga3 | smsemoa;
                                     # grid: grid | exhaustive (Parquet, search.exhaustive)
    population_size: 50              # NSGA-II/III, SMS-EMOA population; tpe/random: trials at once
    trials: 500                      # budget; exhaustive engines (grid): the whole grid
    seed: 0
    storage: sqlite:///study.db      # default: <results>/storage.journal (Optuna journal)
    results: results/llama70b-decode # default: results/<name>
    model: {...}                     # the problem's keys (ProblemSchema.keys), kept verbatim
                                     # in StudyConfig.problem

With a :class:`~search.problem.ProblemSchema` every key, knob name, knob value and metric
is checked against what the problem reads before anything runs; without one the problem
keys are not checked (any other top-level key is kept in ``StudyConfig.problem``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from search._schema import Checker, read_yaml
from search.engines import engine_names, get_engine
from search.engines.grid_engine import EXHAUSTIVE
from search.problem import ProblemSchema
from search.space import Space, SpaceError, load_space, parse_space

DEFAULT_ENGINE = engine_names()[0]
DEFAULT_TRIALS = 100
MAX_GRID_POINTS = 1_000_000
"""An exhaustive engine runs a whole grid only up to this size; above it a budget
(``trials:`` or ``--trials``) is required, and the engine samples that many points."""
RESERVED_COLUMNS = ("number", "feasible", "infeasible_reason")
Direction = Literal["minimize", "maximize"]

_GENERIC_KEYS = (
    "name",
    "space",
    "objectives",
    "constraints",
    "engine",
    "sampler",
    "population_size",
    "trials",
    "seed",
    "storage",
    "results",
)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_METRIC = r"[A-Za-z_][A-Za-z0-9_]*"
_CONSTRAINT = re.compile(rf"^\s*({_METRIC})\s*(<=|>=)\s*(\S+)\s*$")
_OBJECTIVE = re.compile(rf"^\s*(minimize|maximize)\s+({_METRIC})\s*$")


class StudyError(ValueError):
    """A study file that does not follow the schema (one-line message)."""


@dataclass(frozen=True)
class Objective:
    """A metric to minimise or maximise."""

    metric: str
    direction: Direction

    def __str__(self) -> str:
        return f"{self.direction} {self.metric}"


@dataclass(frozen=True)
class Constraint:
    """An SLO ``metric <= bound`` or ``metric >= bound``."""

    metric: str
    op: Literal["<=", ">="]
    bound: float

    def __str__(self) -> str:
        """``tpot_s <= 0.05``: also the constraint's key in trials and study definitions."""
        return f"{self.metric} {self.op} {exact_number(self.bound)}"

    def violation(self, value: float) -> float:
        """Relative violation: <= 0 when satisfied, e.g. 0.2 means 20 % past the bound.

        Relative (divided by ``|bound|``, raw when the bound is 0) so that constraints in
        different units add up sensibly in the engines' total-violation ranking.
        """
        return float(self.violations(np.asarray(value, dtype=float)))

    def violations(self, values: np.ndarray) -> np.ndarray:
        """:meth:`violation` of every value of an array."""
        excess = values - self.bound if self.op == "<=" else self.bound - values
        return excess / abs(self.bound) if self.bound else excess

    def satisfied(self, value: float) -> bool:
        """Whether ``value`` meets the constraint."""
        return self.violation(value) <= 0


def exact_number(value: float) -> str:
    """``value`` in ``g`` format with the fewest digits, at least 6, that read back as ``value``:
    ``:g`` wherever ``:g`` is exact (so constraint keys of stored studies keep their text), more
    digits where it rounds (1234567, not 1.23457e+06)."""
    for digits in range(6, 18):
        text = f"{value:.{digits}g}"
        if float(text) == value:
            return text
    return repr(value)


@dataclass(frozen=True, kw_only=True)
class StudyConfig:
    """A validated study: what to search, for what, with which engine, stored where.

    Attributes:
        storage: Optuna journal file path, or an SQLAlchemy URL.
        results: Folder for reports and pymoo checkpoints.
        problem: Every top-level key that is not generic (``model``, ``workload``...),
            verbatim, for the caller's problem factory.
    """

    name: str
    space: Space
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...] = ()
    engine: str = DEFAULT_ENGINE
    sampler: str = get_engine(DEFAULT_ENGINE).samplers[0]
    population_size: int = 50
    trials: int | None = None
    seed: int | None = None
    storage: str
    results: Path
    source: Path = Path("<study>")
    problem: dict[str, Any] = field(default_factory=dict)
    schema: ProblemSchema | None = field(default=None, compare=False)

    @property
    def directions(self) -> list[Direction]:
        """Optimisation direction of each objective."""
        return [o.direction for o in self.objectives]

    def budget(self) -> int:
        """Trials to run: ``trials``, else the whole grid (exhaustive engine) or DEFAULT_TRIALS;
        the grid sampler ``exhaustive`` (Parquet, :mod:`search.exhaustive`) always covers the
        whole grid, whatever its size.

        Raises:
            StudyError: an exhaustive engine, no ``trials`` and a grid over MAX_GRID_POINTS.
        """
        if self.writes_parquet:
            return self.space.grid_size
        if self.trials is not None:
            return self.trials
        if not get_engine(self.engine).exhaustive:
            return DEFAULT_TRIALS
        size = self.space.grid_size
        if size > MAX_GRID_POINTS:
            raise StudyError(
                f"{self.source}: trials: expected a budget for a grid of {size:,} points (more than "
                f"{MAX_GRID_POINTS:,}); set trials: N or pass --trials N to sample N points uniformly"
            )
        return size

    @property
    def writes_parquet(self) -> bool:
        """The study is an exhaustive grid written to Parquet (``sampler: exhaustive``), not
        an Optuna study."""
        return self.sampler == EXHAUSTIVE

    def overridden(
        self,
        *,
        engine: str | None = None,
        storage: str | None = None,
        seed: int | None = None,
        trials: int | None = None,
        name: str | None = None,
    ) -> StudyConfig:
        """This config with command-line overrides (None keeps the study file's value); a
        storage path is relative to the current folder; a new ``name`` also moves the results
        folder to a sibling of that name.

        Raises:
            StudyError: unknown engine, a budget below 1, a negative seed or a bad name.
        """
        config = self if engine is None else self.with_engine(engine)
        if trials is not None and trials < 1:
            raise StudyError(f"--trials: expected an integer >= 1, got {trials}")
        if seed is not None and seed < 0:
            raise StudyError(f"--seed: expected an integer >= 0, got {seed}")
        if name is not None and not _NAME.match(name):
            raise StudyError(f"--new-study: expected letters, digits, '_', '.' or '-' only, got {name!r}")
        changes: dict[str, Any] = {"trials": trials, "seed": seed, "name": name}
        if name is not None:  # a new study reports beside the file's, not over its reports
            changes["results"] = config.results.parent / name
        if storage is not None:
            changes["storage"] = resolve_storage(storage, base=Path.cwd())
        return replace(config, **{k: v for k, v in changes.items() if v is not None})

    def with_engine(self, engine: str) -> StudyConfig:
        """This config run by another engine with that engine's default sampler.

        Raises:
            StudyError: unknown engine, or one that needs a grid and the space is continuous.
        """
        if engine not in engine_names():
            raise StudyError(
                f"{self.source}: engine: expected one of {', '.join(engine_names())}, got {engine!r}"
            )
        if engine == self.engine:
            return self
        _check_enumerable(self.space, engine, Checker(source=str(self.source), error_type=StudyError))
        return replace(self, engine=engine, sampler=get_engine(engine).samplers[0])


def load_study(path: str | Path, *, schema: ProblemSchema | None = None) -> StudyConfig:
    """Load and validate a study YAML file (and the space file it names).

    Args:
        path: The study file.
        schema: What the problem reads; when given, unknown keys, knobs, knob values and
            metrics are refused, naming the nearest valid name.

    Raises:
        StudyError: unreadable file, bad YAML or schema violation (one line).
        SpaceError: the same for the space file.
    """
    path = Path(path)
    data = read_yaml(path, error_type=StudyError)
    check = Checker(source=str(path), error_type=StudyError)
    if isinstance(data, dict) and "knobs" in data and "space" not in data:
        raise StudyError(f"{path}: this is a space file (it has 'knobs'); a study file names "
                         f"it under 'space:' (`energylens study init` writes one)")
    allowed = None if schema is None else (*_GENERIC_KEYS, *schema.keys)
    check.mapping(data, "", allowed=allowed)
    for key in ("space", "objectives"):
        if key not in data:
            check.fail(key, "this key to be present")
    folder = path.parent.resolve()

    name = check.string(data.get("name", path.stem), "name")
    if not _NAME.match(name):
        check.fail("name", "letters, digits, '_', '.' or '-' only", got=name)
    space = _space(data["space"], check, folder)
    objectives = _objectives(data["objectives"], check)
    constraints = _constraints(data.get("constraints") or [], check)
    _check_names(space, objectives, constraints, check)
    if schema is not None:
        _check_params(space, schema, _space_checker(data["space"], space, check))
        _check_metrics(objectives, constraints, schema, check)

    engine = get_engine(check.choice(data.get("engine", DEFAULT_ENGINE), "engine", engine_names()))
    sampler = check.choice(data.get("sampler", engine.samplers[0]), "sampler", engine.samplers)
    population_size = check.integer(data.get("population_size", 50), "population_size", minimum=2)
    trials = data.get("trials")
    if trials is not None:
        check.integer(trials, "trials", minimum=1)
    seed = data.get("seed")
    if seed is not None:
        check.integer(seed, "seed", minimum=0)
    results = (folder / check.string(data.get("results", f"results/{name}"), "results")).resolve()
    storage = data.get("storage")
    storage = (
        str(results / "storage.journal")
        if storage is None
        else resolve_storage(check.string(storage, "storage"), base=folder)
    )
    _check_enumerable(space, engine.name, check)
    return StudyConfig(
        name=name,
        space=space,
        objectives=objectives,
        constraints=constraints,
        engine=engine.name,
        sampler=sampler,
        population_size=population_size,
        trials=trials,
        seed=seed,
        storage=storage,
        results=results,
        source=path,
        problem={k: v for k, v in data.items() if k not in _GENERIC_KEYS},
        schema=schema,
    )


def _check_enumerable(space: Space, engine: str, check: Checker) -> None:
    """Refuse a continuous space for an engine that enumerates its grid."""
    if get_engine(engine).needs_enumerable_space:
        try:
            space.grid_size  # noqa: B018  (validates that the space is enumerable)
        except ValueError as exc:
            check.fail("engine", f"a space without continuous knobs for {engine} ({exc})")


def resolve_storage(spec: str, *, base: Path) -> str:
    """A plain path (journal file) or the file of a ``sqlite:///`` URL made absolute against
    ``base``; any other URL as is."""
    if spec.startswith("sqlite:///") and not spec.startswith("sqlite:////"):
        path, _, query = spec.removeprefix("sqlite:///").partition("?")
        if path and path != ":memory:":
            return f"sqlite:///{(base / path).resolve()}" + (f"?{query}" if query else "")
    return spec if "://" in spec else str((base / spec).resolve())


def _space(value: Any, check: Checker, folder: Path) -> Space:
    if isinstance(value, str):
        return load_space((folder / value).resolve())
    inline = Checker(source=check.source, error_type=check.error_type, prefix="space.")
    return parse_space(value, inline)


def _space_checker(value: Any, space: Space, check: Checker) -> Checker:
    """Errors about the space name its file, or the study's ``space.`` keys when inline."""
    if isinstance(value, str):
        return Checker(source=space.source, error_type=SpaceError)
    return Checker(source=check.source, error_type=check.error_type, prefix="space.")


def _check_params(space: Space, schema: ProblemSchema, check: Checker) -> None:
    """Every knob and fixed name is one the problem reads; every value one it accepts."""
    for knob in space.knobs:
        path = f"knobs.{knob.name}"
        if knob.name not in schema.params:
            check.unknown(path, "knob", knob.name, schema.params)
        value_check = schema.params[knob.name]
        for where, value in knob.checked_values():
            expected = value_check(value)
            if expected is not None:
                check.fail(f"{path}.{where}", expected, got=value)
    for name, value in space.fixed.items():
        if name not in schema.params:
            check.unknown(f"fixed.{name}", "parameter", name, schema.params)
        expected = schema.params[name](value)
        if expected is not None:
            check.fail(f"fixed.{name}", expected, got=value)


def _check_metrics(
    objectives: tuple[Objective, ...],
    constraints: tuple[Constraint, ...],
    schema: ProblemSchema,
    check: Checker,
) -> None:
    for i, objective in enumerate(objectives):
        if objective.metric not in schema.metrics:
            check.unknown(f"objectives[{i}]", "metric", objective.metric, schema.metrics)
    for i, constraint in enumerate(constraints):
        if constraint.metric not in schema.metrics:
            check.unknown(f"constraints[{i}]", "metric", constraint.metric, schema.metrics)


def _objectives(value: Any, check: Checker) -> tuple[Objective, ...]:
    items = check.sequence(value, "objectives")
    objectives = []
    for i, item in enumerate(items):
        path = f"objectives[{i}]"
        if isinstance(item, str):
            match = _OBJECTIVE.match(item)
            if not match:
                check.fail(path, "'minimize <metric>' or 'maximize <metric>'", got=item)
            objectives.append(Objective(match.group(2), match.group(1)))  # type: ignore[arg-type]
            continue
        check.mapping(item, path, required=("metric",), allowed=("metric", "direction"))
        metric = check.string(item["metric"], f"{path}.metric")
        if not re.fullmatch(_METRIC, metric):
            check.fail(f"{path}.metric", "a metric name (letters, digits, '_')", got=metric)
        direction = check.choice(
            item.get("direction", "minimize"), f"{path}.direction", ("minimize", "maximize")
        )
        objectives.append(Objective(metric, direction))  # type: ignore[arg-type]
    seen = [o.metric for o in objectives]
    for i, metric in enumerate(seen):
        if metric in seen[:i]:
            check.fail(f"objectives[{i}]", "a metric not listed before", got=metric)
    return tuple(objectives)


def _constraints(value: Any, check: Checker) -> tuple[Constraint, ...]:
    items = check.sequence(value, "constraints", non_empty=False)
    constraints = []
    for i, item in enumerate(items):
        path = f"constraints[{i}]"
        match = _CONSTRAINT.match(item) if isinstance(item, str) else None
        if not match:
            check.fail(path, "'<metric> <= <number>' or '<metric> >= <number>'", got=item)
        bound = check.number(match.group(3), path)
        constraints.append(Constraint(match.group(1), match.group(2), bound))  # type: ignore[arg-type]
    return tuple(constraints)


def _check_names(
    space: Space, objectives: tuple[Objective, ...], constraints: tuple[Constraint, ...], check: Checker
) -> None:
    params = set(space.names) | set(space.fixed)
    for name in sorted(params & set(RESERVED_COLUMNS)):
        check.fail("space", f"no knob named {name!r} (reserved report column)")
    for i, objective in enumerate(objectives):
        if objective.metric in params:
            check.fail(f"objectives[{i}]", "a metric name that is not a knob name", got=objective.metric)
    for i, constraint in enumerate(constraints):
        if constraint.metric in params:
            check.fail(f"constraints[{i}]", "a metric name that is not a knob name", got=constraint.metric)
