"""Workload kinds: what runs when. Each module is a scheduler that forms batches and asks
:func:`energylens.cost.step.step_cost` for their price; importing this package registers
every module other than the shared ones, so adding a kind is adding its module.
"""

from importlib import import_module
from pkgutil import iter_modules

from energylens.workloads.registry import (
    MemoryDemand,
    Placement,
    WorkloadKind,
    get_kind,
    kind_names,
)
from energylens.workloads.result import PhaseResult, Prediction
from energylens.workloads.workload import Workload

_SHARED = ("registry", "result", "workload")

for _module in iter_modules(__path__):
    if _module.name not in _SHARED:
        import_module(f"{__name__}.{_module.name}")

__all__ = ["MemoryDemand", "PhaseResult", "Placement", "Prediction", "Workload", "WorkloadKind",
           "get_kind", "kind_names"]
