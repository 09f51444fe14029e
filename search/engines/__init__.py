"""Search engines, registered once here (to add one, see ``search/engines/README.md``).

Every engine writes evaluations into the same Optuna storage with the conventions of
:mod:`search.outcome`, so reports and rankings work the same whatever ran.
"""

from __future__ import annotations

from search.engines.base import Engine
from search.engines.grid_engine import GridEngine
from search.engines.optuna_engine import OptunaEngine
from search.engines.pymoo_engine import PymooEngine

ENGINES: tuple[Engine, ...] = (
    OptunaEngine(),  # the first is the default engine of study files
    PymooEngine(),
    GridEngine(),
)
"""The registry: one entry per engine, names unique."""


def engine_names() -> tuple[str, ...]:
    """Names of the registered engines, the default first (the choices for ``engine:``)."""
    return tuple(engine.name for engine in ENGINES)


def get_engine(name: str) -> Engine:
    """The registered engine called ``name``.

    Raises:
        KeyError: no such engine.
    """
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise KeyError(f"no engine {name!r}; registered: {', '.join(engine_names())}")


__all__ = ["ENGINES", "Engine", "engine_names", "get_engine"]
