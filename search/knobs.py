"""Knob types of a search space and their mapping to Optuna and pymoo.

Every knob knows its Optuna distribution (which is also how trials are stored, whatever
engine ran) and its pymoo variable with an exact encode/decode pair:

============  ==========================  ===========================================
type          Optuna distribution         pymoo variable (encoded value)
============  ==========================  ===========================================
categorical   CategoricalDistribution     ``Choice`` over value indices
ordinal       CategoricalDistribution     ``Integer`` index, so crossover keeps order
int           IntDistribution             ``Integer`` step index; ``Real`` ln(x) if log
float         FloatDistribution           ``Real``; ``Integer`` step index if step;
                                          ``Real`` ln(x) if log
bool          CategoricalDistribution     ``Binary``
============  ==========================  ===========================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pymoo.core.variable import Binary, Choice, Integer, Real, Variable

from search._schema import Checker


@dataclass(frozen=True)
class CategoricalKnob:
    """Unordered choice among ``values``."""

    name: str
    values: tuple[Any, ...]
    baseline: Any

    def distribution(self) -> BaseDistribution:
        """Optuna distribution."""
        return CategoricalDistribution(self.values)

    def suggest(self, trial: optuna.Trial) -> Any:
        """Ask an Optuna trial for a value."""
        return trial.suggest_categorical(self.name, self.values)

    def pymoo_variable(self) -> Variable:
        """pymoo variable of the encoded value."""
        return Choice(options=list(range(len(self.values))))

    def encode(self, value: Any) -> Any:
        """Knob value -> pymoo value."""
        return self.values.index(value)

    def decode(self, encoded: Any) -> Any:
        """pymoo value -> knob value."""
        return self.values[int(encoded)]

    def grid_count(self) -> int | None:
        """Number of values, or None if the knob is continuous."""
        return len(self.values)

    def grid_value(self, index: int) -> Any:
        """The ``index``-th value in grid order (0 <= index < grid_count())."""
        return self.values[index]

    def checked_values(self) -> list[tuple[str, Any]]:
        """(key, value) pairs a problem's value check must accept: every value."""
        return [(f"values[{i}]", v) for i, v in enumerate(self.values)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal value."""
        return any(type(value) is type(v) and value == v for v in self.values)


@dataclass(frozen=True)
class OrdinalKnob(CategoricalKnob):
    """Choice among ``values`` in the listed order (e.g. 1, 2, 4, 8)."""

    def pymoo_variable(self) -> Variable:
        """pymoo variable of the encoded value."""
        return Integer(bounds=(0, len(self.values) - 1))


@dataclass(frozen=True)
class IntKnob:
    """Integer in [low, high] on a ``step`` grid, optionally log-uniform (then step is 1)."""

    name: str
    low: int
    high: int
    step: int
    log: bool
    baseline: int

    def distribution(self) -> BaseDistribution:
        """Optuna distribution."""
        return IntDistribution(self.low, self.high, step=self.step, log=self.log)

    def suggest(self, trial: optuna.Trial) -> int:
        """Ask an Optuna trial for a value."""
        return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)

    def pymoo_variable(self) -> Variable:
        """pymoo variable of the encoded value."""
        if self.log:
            return Real(bounds=(math.log(self.low), math.log(self.high)))
        return Integer(bounds=(0, (self.high - self.low) // self.step))

    def encode(self, value: int) -> Any:
        """Knob value -> pymoo value."""
        return math.log(value) if self.log else (value - self.low) // self.step

    def decode(self, encoded: Any) -> int:
        """pymoo value -> knob value."""
        value = round(math.exp(encoded)) if self.log else self.low + int(encoded) * self.step
        return min(max(int(value), self.low), self.high)

    def grid_count(self) -> int | None:
        """Number of values, or None if the knob is continuous."""
        return (self.high - self.low) // self.step + 1

    def grid_value(self, index: int) -> int:
        """The ``index``-th value in grid order (0 <= index < grid_count())."""
        return self.low + index * self.step

    def checked_values(self) -> list[tuple[str, Any]]:
        """(key, value) pairs a problem's value check must accept: both ends."""
        return [("low", self.low), ("high", self.high)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal value."""
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )


@dataclass(frozen=True)
class FloatKnob:
    """Real in [low, high], optionally on a ``step`` grid or log-uniform (not both)."""

    name: str
    low: float
    high: float
    step: float | None
    log: bool
    baseline: float

    def distribution(self) -> BaseDistribution:
        """Optuna distribution."""
        return FloatDistribution(self.low, self.high, step=self.step, log=self.log)

    def suggest(self, trial: optuna.Trial) -> float:
        """Ask an Optuna trial for a value."""
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    def pymoo_variable(self) -> Variable:
        """pymoo variable of the encoded value."""
        if self.step is not None:
            return Integer(bounds=(0, self._n_steps()))
        if self.log:
            return Real(bounds=(math.log(self.low), math.log(self.high)))
        return Real(bounds=(self.low, self.high))

    def encode(self, value: float) -> Any:
        """Knob value -> pymoo value."""
        if self.step is not None:
            return round((value - self.low) / self.step)
        return math.log(value) if self.log else value

    def decode(self, encoded: Any) -> float:
        """pymoo value -> knob value."""
        if self.step is not None:
            return self._on_step(int(encoded))
        value = math.exp(encoded) if self.log else float(encoded)
        return min(max(value, self.low), self.high)

    def grid_count(self) -> int | None:
        """Number of values, or None if the knob is continuous (no step)."""
        return None if self.step is None else self._n_steps() + 1

    def grid_value(self, index: int) -> float:
        """The ``index``-th value in grid order (0 <= index < grid_count())."""
        return self._on_step(index)

    def checked_values(self) -> list[tuple[str, Any]]:
        """(key, value) pairs a problem's value check must accept: both ends."""
        return [("low", self.low), ("high", self.high)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal value."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is None:
            return True
        k = (value - self.low) / self.step
        return abs(k - round(k)) < 1e-8

    def _n_steps(self) -> int:
        assert self.step is not None
        return round((self.high - self.low) / self.step)

    def _on_step(self, k: int) -> float:
        # Same arithmetic as Optuna's samplers, so grid, pymoo and Optuna values coincide.
        assert self.step is not None
        return float(min(self.low + k * self.step, self.high))


@dataclass(frozen=True)
class BoolKnob:
    """On/off switch."""

    name: str
    baseline: bool

    def distribution(self) -> BaseDistribution:
        """Optuna distribution."""
        return CategoricalDistribution((False, True))

    def suggest(self, trial: optuna.Trial) -> bool:
        """Ask an Optuna trial for a value."""
        return bool(trial.suggest_categorical(self.name, (False, True)))

    def pymoo_variable(self) -> Variable:
        """pymoo variable of the encoded value."""
        return Binary()

    def encode(self, value: bool) -> Any:
        """Knob value -> pymoo value."""
        return bool(value)

    def decode(self, encoded: Any) -> bool:
        """pymoo value -> knob value."""
        return bool(encoded)

    def grid_count(self) -> int | None:
        """Number of values: 2."""
        return 2

    def grid_value(self, index: int) -> bool:
        """False, then True."""
        return bool(index)

    def checked_values(self) -> list[tuple[str, Any]]:
        """(key, value) pairs a problem's value check must accept: false and true."""
        return [("type", False), ("type", True)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal value."""
        return isinstance(value, bool)


Knob = CategoricalKnob | OrdinalKnob | IntKnob | FloatKnob | BoolKnob

KNOB_TYPES = ("categorical", "ordinal", "int", "float", "bool")


def parse_knob(name: str, data: Any, check: Checker, path: str) -> Knob:
    """Build a knob from its YAML mapping, validating every field."""
    check.mapping(data, path, required=("type",))
    kind = check.choice(data["type"], f"{path}.type", KNOB_TYPES)
    if kind in ("categorical", "ordinal"):
        return _parse_values_knob(name, kind, data, check, path)
    if kind == "int":
        return _parse_int(name, data, check, path)
    if kind == "float":
        return _parse_float(name, data, check, path)
    check.mapping(data, path, allowed=("type", "baseline"))
    return BoolKnob(name, check.boolean(data.get("baseline", False), f"{path}.baseline"))


def _parse_values_knob(
    name: str, kind: str, data: Mapping[str, Any], check: Checker, path: str
) -> CategoricalKnob:
    check.mapping(data, path, required=("values",), allowed=("type", "values", "baseline"))
    values = check.sequence(data["values"], f"{path}.values")
    for i, value in enumerate(values):
        check.scalar(value, f"{path}.values[{i}]")
        if kind == "ordinal" and (isinstance(value, bool) or not isinstance(value, int | float)):
            check.fail(f"{path}.values[{i}]", "a number (ordinal values are ordered numbers)", got=value)
        if any(type(value) is type(v) and value == v for v in values[:i]):
            check.fail(f"{path}.values[{i}]", "a value not listed before", got=value)
    cls = OrdinalKnob if kind == "ordinal" else CategoricalKnob
    knob = cls(name, tuple(values), values[0])
    return _with_baseline(knob, data, check, path, f"one of {list(values)}")


def _parse_int(name: str, data: Mapping[str, Any], check: Checker, path: str) -> IntKnob:
    check.mapping(
        data, path, required=("low", "high"), allowed=("type", "low", "high", "step", "log", "baseline")
    )
    low = check.integer(data["low"], f"{path}.low")
    high = check.integer(data["high"], f"{path}.high")
    if high < low:
        check.fail(f"{path}.high", f"an integer >= low ({low})", got=high)
    step = check.integer(data.get("step", 1), f"{path}.step", minimum=1)
    log = check.boolean(data.get("log", False), f"{path}.log")
    if (high - low) % step:
        check.fail(f"{path}.high", f"low + a multiple of step ({low} + k*{step})", got=high)
    if log and step != 1:
        check.fail(f"{path}.step", "1 when log is true (Optuna cannot combine them)", got=step)
    if log and low < 1:
        check.fail(f"{path}.low", "an integer >= 1 when log is true", got=low)
    knob = IntKnob(name, low, high, step, log, low)
    return _with_baseline(knob, data, check, path, f"an integer in [{low}, {high}] on the step")


def _parse_float(name: str, data: Mapping[str, Any], check: Checker, path: str) -> FloatKnob:
    check.mapping(
        data, path, required=("low", "high"), allowed=("type", "low", "high", "step", "log", "baseline")
    )
    low = check.number(data["low"], f"{path}.low")
    high = check.number(data["high"], f"{path}.high")
    if high <= low:
        check.fail(f"{path}.high", f"a number > low ({low:g})", got=data["high"])
    step = None if data.get("step") is None else check.number(data["step"], f"{path}.step")
    log = check.boolean(data.get("log", False), f"{path}.log")
    if step is not None:
        n = (high - low) / step if step > 0 else math.nan  # a step of 0: no division
        if not math.isfinite(n) or abs(n - round(n)) > 1e-8:
            check.fail(f"{path}.step", "a positive number dividing high - low", got=data["step"])
        if log:
            check.fail(f"{path}.log", "false when step is set (Optuna cannot combine them)", got=log)
    if log and low <= 0:
        check.fail(f"{path}.low", "a number > 0 when log is true", got=data["low"])
    knob = FloatKnob(name, low, high, step, log, low)
    if isinstance(data.get("baseline"), int | str) and not isinstance(data["baseline"], bool):
        data = {**data, "baseline": check.number(data["baseline"], f"{path}.baseline")}
    return _with_baseline(knob, data, check, path, f"a number in [{low:g}, {high:g}] on the step")


def _with_baseline(knob: Any, data: Mapping[str, Any], check: Checker, path: str, expected: str) -> Any:
    if "baseline" not in data:
        return knob
    value = data["baseline"]
    if not knob.contains(value):
        check.fail(f"{path}.baseline", expected, got=value)
    return type(knob)(**{**knob.__dict__, "baseline": value})
