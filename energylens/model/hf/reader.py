"""Typed access to the fields of a Hugging Face ``config.json``.

Every accessor raises :class:`energylens.errors.ModelConfigError` naming the file and
the field (``text_config.hidden_size``) when a field is missing or has the wrong type, so
that a malformed file ends in one line, never in a traceback. JSON ``null`` counts as
absent, as in ``transformers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from energylens.errors import ModelConfigError
from energylens.model.config import MAX_LAYERS, MAX_SIZE, show_value

T = TypeVar("T")

_KIND_NAMES = {int: "integers", str: "strings", bool: "booleans"}


class HFConfig:
    """A parsed ``config.json`` object, or one nested section of it (``text_config``)."""

    def __init__(self, data: Mapping[str, Any], *, path: Path, prefix: str = "") -> None:
        self.data = data
        self.path = path
        self.prefix = prefix  # "text_config." for a nested section

    def error(self, message: str) -> ModelConfigError:
        """A ModelConfigError for this file: ``'<path>: <message>'``."""
        return ModelConfigError(f"{self.path}: {message}")

    def field(self, key: str) -> str:
        """The name of ``key`` as the user sees it (``text_config.hidden_size``)."""
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        """The value of ``key`` as parsed (None when absent or null)."""
        return self.data.get(key)

    def integer(self, *keys: str, default: int | None = None, minimum: int = 1,
                maximum: int = MAX_SIZE) -> int:
        """The first present of ``keys`` as an integer in [``minimum``, ``maximum``];
        required unless a ``default`` is given."""
        for key in keys:
            value = self.data.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise self.error(f"field {self.field(key)!r} must be an integer >= {minimum}, "
                                 f"got {show_value(value)}")
            if value > maximum:
                raise self.error(f"field {self.field(key)!r} = {show_value(value)} is larger "
                                 f"than any model has (limit {maximum})")
            return value
        if default is None:
            raise self.error(f"missing required field {self.field(keys[0])!r}")
        return default

    def num_layers(self, *keys: str) -> int:
        """The decoder layer count (the first present of ``keys``), at most MAX_LAYERS."""
        return self.integer(*keys, maximum=MAX_LAYERS)

    def flag(self, key: str, default: bool) -> bool:
        """``key`` as true/false (``default`` when absent)."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"field {self.field(key)!r} must be true or false, "
                             f"got {show_value(value)}")
        return value

    def text(self, key: str) -> str | None:
        """``key`` as a string (None when absent)."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(f"field {self.field(key)!r} must be a string, got {show_value(value)}")
        return value

    def list_of(self, key: str, kind: type[T]) -> list[T] | None:
        """``key`` as a list whose items are all ``kind`` (None when absent)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, kind) for item in value):
            raise self.error(f"field {self.field(key)!r} must be a list of "
                             f"{_KIND_NAMES.get(kind, kind.__name__)}, got {show_value(value)}")
        return value

    def section(self, key: str) -> HFConfig | None:
        """The nested object ``key`` as an HFConfig (None when absent)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(f"field {self.field(key)!r} must be an object, got {show_value(value)}")
        return HFConfig(value, path=self.path, prefix=f"{self.field(key)}.")
