"""Search spaces loaded from YAML.

Format::

    knobs:
      tp: {type: ordinal, values: [1, 2, 4, 8], baseline: 1}
      batch: {type: int, low: 1, high: 256, log: true}
      freq_mhz: {type: float, low: 800, high: 1980, step: 20, baseline: 1980}
      fuse_attention: {type: bool}
    fixed: {dtype: bf16}

``baseline`` is the value with the optimization off (used by ablation); by default the
first value, ``low`` or ``false``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import BaseDistribution
from pymoo.core.variable import Variable

from search._schema import Checker, read_yaml
from search.knobs import Knob, parse_knob


class SpaceError(ValueError):
    """A space file or mapping that does not follow the schema (one-line message)."""


@dataclass(frozen=True)
class Space:
    """Knobs to search over plus values pinned for every evaluation."""

    knobs: tuple[Knob, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<space>"

    @classmethod
    def from_mapping(cls, data: Any, *, source: str) -> Space:
        """Validate a mapping with ``knobs`` and optional ``fixed`` sections.

        Raises:
            SpaceError: naming ``source`` and the offending key path.
        """
        return parse_space(data, Checker(source=source, error_type=SpaceError))

    @property
    def names(self) -> tuple[str, ...]:
        """Knob names in file order."""
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        """The knob called ``name``."""
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(f"no knob {name!r} in {self.source} (knobs: {', '.join(self.names)})")

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distribution of every knob (also how every engine stores params)."""
        return {k.name: k.distribution() for k in self.knobs}

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask an Optuna trial for one value per knob."""
        return {k.name: k.suggest(trial) for k in self.knobs}

    def pymoo_variables(self) -> dict[str, Variable]:
        """pymoo mixed variables, one per knob."""
        return {k.name: k.pymoo_variable() for k in self.knobs}

    def encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Knob values -> pymoo mixed-variable values."""
        return {k.name: k.encode(params[k.name]) for k in self.knobs}

    def decode(self, x: Mapping[str, Any]) -> dict[str, Any]:
        """pymoo mixed-variable values -> knob values (plain Python types)."""
        return {k.name: k.decode(x[k.name]) for k in self.knobs}

    def with_fixed(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Knob values plus the fixed values: what the problem evaluates."""
        return {**self.fixed, **params}

    @property
    def enumerable(self) -> bool:
        """Whether every knob has finitely many values (floats need a step)."""
        return all(k.grid_count() is not None for k in self.knobs)

    @property
    def grid_size(self) -> int:
        """Number of grid points (computed, never enumerated).

        Raises:
            SpaceError: if a knob is continuous.
        """
        return math.prod(self._grid_counts())

    def grid_point(self, index: int) -> dict[str, Any]:
        """The ``index``-th grid point (0 <= index < grid_size), the last knob varying fastest."""
        counts = self._grid_counts()
        values = []
        for knob, count in zip(reversed(self.knobs), reversed(counts), strict=True):
            index, digit = divmod(index, count)
            values.append(knob.grid_value(digit))
        return dict(zip(self.names, reversed(values), strict=True))

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every combination of knob values in grid order, streamed (memory does not grow
        with the grid).

        Raises:
            SpaceError: if a knob is continuous.
        """
        for index in range(self.grid_size):
            yield self.grid_point(index)

    def grid_block(self, start: int, stop: int) -> pd.DataFrame:
        """Grid points ``start`` .. ``stop - 1`` as a table (one column per knob, index the
        grid index), computed with numpy: the same points as :meth:`grid_point`, in columns.
        String-valued knobs are categorical columns.

        Raises:
            SpaceError: if a knob is continuous.
        """
        counts = self._grid_counts()
        index = np.arange(start, stop, dtype=np.int64)
        digits = {}
        rest = index
        for knob, count in zip(reversed(self.knobs), reversed(counts), strict=True):
            rest, digits[knob.name] = np.divmod(rest, count)
        columns: dict[str, Any] = {}
        for knob, count in zip(self.knobs, counts, strict=True):
            values = [knob.grid_value(i) for i in range(count)]
            if all(isinstance(v, str) for v in values):
                columns[knob.name] = pd.Categorical.from_codes(digits[knob.name], categories=pd.Index(values))
            else:
                columns[knob.name] = np.asarray(values)[digits[knob.name]]
        return pd.DataFrame(columns, index=pd.Index(index, name="grid_index"))

    def shuffled_grid(self, *, seed: int) -> Iterator[dict[str, Any]]:
        """Every grid point once, in a pseudo-random order fixed by ``seed``, streamed: any
        prefix is a uniform sample of the whole grid without repeats.

        Raises:
            SpaceError: if a knob is continuous.
        """
        for index in permuted_range(self.grid_size, seed=seed):
            yield self.grid_point(index)

    def pin(self, name: str, value: Any) -> Space:
        """This space with knob ``name`` moved into ``fixed`` at ``value``.

        Raises:
            KeyError: unknown knob.
            ValueError: ``value`` is not a legal value of the knob.
        """
        knob = self.knob(name)
        if not knob.contains(value):
            raise ValueError(f"{value!r} is not a legal value of knob {name!r}")
        return Space(
            knobs=tuple(k for k in self.knobs if k.name != name),
            fixed={**self.fixed, name: value},
            source=self.source,
        )

    def _grid_counts(self) -> list[int]:
        counts = []
        for knob in self.knobs:
            count = knob.grid_count()
            if count is None:
                raise SpaceError(
                    f"{self.source}: knobs.{knob.name}: expected a step for a grid "
                    "(continuous float knobs cannot be enumerated)"
                )
            counts.append(count)
        return counts


def permuted_range(n: int, *, seed: int) -> Iterator[int]:
    """0 .. n-1, each once, in a pseudo-random order fixed by ``seed``, in O(1) memory.

    A four-round Feistel network is a bijection of [0, 4**h) (h: half the bits of n);
    indices outside [0, n) are walked through it again until they land inside (fewer than
    four steps on average), so the result is a bijection of [0, n).
    """
    half = max(1, math.ceil(math.log2(max(n, 2)) / 2))
    mask = (1 << half) - 1
    key = seed.to_bytes(16, "little", signed=True)

    def feistel(x: int) -> int:
        left, right = x >> half, x & mask
        for round_ in range(4):
            digest = hashlib.blake2b(right.to_bytes(16, "little"), digest_size=16, key=key,
                                     salt=round_.to_bytes(16, "little")).digest()
            left, right = right, left ^ (int.from_bytes(digest, "little") & mask)
        return (left << half) | right

    for i in range(n):
        x = feistel(i)
        while x >= n:
            x = feistel(x)
        yield x


def load_space(path: str | Path) -> Space:
    """Load and validate a space YAML file.

    Raises:
        SpaceError: unreadable file, bad YAML or schema violation (one line).
    """
    path = Path(path)
    return Space.from_mapping(read_yaml(path, error_type=SpaceError), source=str(path))


def parse_space(data: Any, check: Checker) -> Space:
    """Validate ``data`` with ``check`` (which carries source, error type and key prefix)."""
    check.mapping(data, "", required=("knobs",), allowed=("knobs", "fixed"))
    knobs_data = check.mapping(data["knobs"], "knobs")
    if not knobs_data:
        check.fail("knobs", "at least one knob")
    knobs = tuple(parse_knob(n, v, check, f"knobs.{n}") for n, v in knobs_data.items())
    fixed = dict(check.mapping(data.get("fixed") or {}, "fixed"))
    for name in fixed:
        if name in knobs_data:
            check.fail(f"fixed.{name}", "a name that is not also a knob")
    return Space(knobs=knobs, fixed=fixed, source=check.source)
