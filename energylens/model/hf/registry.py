"""The HF builder registry: one builder per ``model_type``, registered where it is defined,
and its inverse, a writer that turns a ModelConfig back into that family's ``config.json``.

A builder module in :mod:`energylens.model.hf.builders` decorates its functions with
``@hf_builder("llama", ...)`` and ``@hf_writer("llama", ...)``. The modules are found and
imported on first use, so adding a family is adding a module: no list to extend. The
supported types in error messages and docs are :func:`supported_model_types`.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from energylens.model.config import ModelConfig
from energylens.model.hf.reader import HFConfig


class HFBuilder(Protocol):
    """Turns one ``config.json`` (its reader) into a ModelConfig named ``name``."""

    def __call__(self, cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig: ...


class HFWriter(Protocol):
    """Writes ``model`` as the ``config.json`` fields of ``model_type`` (its builder's inverse)."""

    def __call__(self, model: ModelConfig, *, model_type: str) -> dict[str, Any]: ...


B = TypeVar("B", bound=HFBuilder)
W = TypeVar("W", bound=HFWriter)

_BUILDERS: dict[str, HFBuilder] = {}
_WRITERS: dict[str, HFWriter] = {}


def _register_in(table: dict[str, Any], what: str, model_types: tuple[str, ...]
                 ) -> Callable[[Any], Any]:
    """A decorator that files its function under each of ``model_types`` in ``table``."""
    if not model_types:
        raise TypeError(f"hf_{what} needs at least one model_type")

    def register(function: Any) -> Any:
        for model_type in model_types:
            other = table.get(model_type)
            if other is not None and other is not function:
                raise RuntimeError(f"HF model_type {model_type!r} has two {what}s: "
                                   f"{other.__module__} and {function.__module__}")
            table[model_type] = function
        return function

    return register


def hf_builder(*model_types: str) -> Callable[[B], B]:
    """Register the decorated builder for each of ``model_types`` (HF ``model_type``)."""
    return _register_in(_BUILDERS, "builder", model_types)


def hf_writer(*model_types: str) -> Callable[[W], W]:
    """Register the decorated writer for each of ``model_types``."""
    return _register_in(_WRITERS, "writer", model_types)


@functools.cache
def _import_builders() -> None:
    """Import every module of :mod:`energylens.model.hf.builders` (they register)."""
    from energylens.model.hf import builders

    for module in pkgutil.iter_modules(builders.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{builders.__name__}.{module.name}")


def registered_builders() -> dict[str, HFBuilder]:
    """Every registered builder by ``model_type``."""
    _import_builders()
    return dict(_BUILDERS)


def registered_writers() -> dict[str, HFWriter]:
    """Every registered writer by ``model_type``."""
    _import_builders()
    return dict(_WRITERS)


def supported_model_types() -> tuple[str, ...]:
    """The HF ``model_type`` values that :func:`load_hf_config` reads, sorted."""
    return tuple(sorted(registered_builders()))
