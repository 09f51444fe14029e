"""A serving runtime (engine) profile: the facts of one engine that change a prediction.

Facts are data (``energylens/data/runtimes/<name>.yaml``: value, kind, source); what an
engine does differently in code (how it lays out collectives, how its step overhead is
shaped) are the methods of its module's :class:`RuntimeProfile` subclass.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from energylens.cost.comm import own_allreduce_link
from energylens.cost.constants import LinkConstants, RuntimeConstants
from energylens.cost.kernels import Collective
from energylens.errors import EnergyLensError
from energylens.model.spec import LayerSpec

_FACTS = ("default_fusions", "memory_utilization", "reserve_bytes", "prefill_chunk_tokens",
          "expert_parallel_layout", "fused_into_combine", "custom_allreduce_max_bytes")


@dataclass(frozen=True, kw_only=True)
class Fact:
    """Where a runtime fact comes from."""

    source: str
    kind: str


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (one per runtime)
class RuntimeProfile:
    """The facts of one serving runtime; subclasses override the behaviour hooks."""

    name: str
    display_name: str
    default_fusions: frozenset[str]
    memory_utilization: float  # share of HBM the engine may use
    reserve_bytes: float  # CUDA context, workspaces, allocator slack
    prefill_chunk_tokens: int  # prefill tokens per forward pass (activation sizing)
    expert_parallel_layout: str  # "tensor-parallel-attention" or "all-to-all"
    fused_into_combine: tuple[str, ...]  # reductions folded into the MoE combine
    custom_allreduce_max_bytes: float  # own all-reduce up to this size (0 = always NCCL)
    provenance: dict[str, Fact]

    def collective_layout(self, collectives: tuple[Collective, ...], *, layer: LayerSpec,
                          degrees: dict[str, int]) -> list[Collective]:
        """The collectives this runtime issues for a layer (default: as the spec derives)."""
        del layer, degrees
        return list(collectives)

    def allreduce_link(self, *, link: LinkConstants, constants: RuntimeConstants, scale_up: bool,
                       message_bytes: Any) -> LinkConstants:
        """Link constants of an all-reduce of ``message_bytes``: the runtime's own all-reduce
        over the scale-up link (``scale_up``) where it is calibrated (a latency > 0) and
        the message is within its size limit, else NCCL's ``link``."""
        if (scale_up and constants.allreduce_latency_s > 0
                and np.all(np.asarray(message_bytes) <= self.custom_allreduce_max_bytes)):
            return own_allreduce_link(constants=constants, link=link)
        return link

    def step_overhead_s(self, *, constants: RuntimeConstants,
                        sequences: float) -> tuple[float, float]:
        """(idle, busy) seconds of engine work per step: CPU work the GPUs idle through
        (static power only), and per-sequence work during which they draw busy power."""
        return constants.step_overhead_s, constants.per_sequence_overhead_s * sequences


@cache
def load_facts(name: str) -> dict[str, Any]:
    """Constructor arguments of runtime ``name`` from its data file."""
    path = resources.files("energylens.data").joinpath(f"runtimes/{name}.yaml")
    data = yaml.safe_load(path.read_text("utf-8"))
    unknown = set(data) - {"name", "display_name", *_FACTS}
    missing = set(_FACTS) - set(data)
    if unknown or missing:
        raise EnergyLensError(f"runtimes/{name}.yaml: unknown {sorted(unknown)} / missing "
                              f"{sorted(missing)} facts")
    values: dict[str, Any] = {"name": data["name"], "display_name": data["display_name"]}
    provenance: dict[str, Fact] = {}
    for key in _FACTS:
        entry = data[key]
        values[key] = entry["value"]
        provenance[key] = Fact(source=entry["source"], kind=entry["kind"])
    values["default_fusions"] = frozenset(values["default_fusions"])
    values["fused_into_combine"] = tuple(values["fused_into_combine"])
    values["memory_utilization"] = float(values["memory_utilization"])
    values["reserve_bytes"] = float(values["reserve_bytes"])
    values["prefill_chunk_tokens"] = int(values["prefill_chunk_tokens"])
    values["custom_allreduce_max_bytes"] = float(values["custom_allreduce_max_bytes"])
    values["provenance"] = provenance
    return values

