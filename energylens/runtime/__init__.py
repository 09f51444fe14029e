"""Serving runtimes (engines): one module each, registered by name when imported.

Every module of this package other than ``profile``, ``registry`` and ``launch`` is a
runtime and is imported here, so adding a runtime is adding its module (and its facts file).
"""

from importlib import import_module
from pkgutil import iter_modules

from energylens.runtime.profile import RuntimeProfile
from energylens.runtime.registry import get_runtime, runtime_name, runtime_names

DEFAULT_RUNTIME = "vllm"

for _module in iter_modules(__path__):
    if _module.name not in ("profile", "registry", "launch"):
        import_module(f"{__name__}.{_module.name}")

__all__ = ["DEFAULT_RUNTIME", "RuntimeProfile", "get_runtime", "runtime_name", "runtime_names"]
