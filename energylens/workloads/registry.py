"""Workload kinds by name: each is a scheduler that forms batches and prices them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from energylens.cost.work import Size
from energylens.errors import ConfigError

if TYPE_CHECKING:
    from energylens.cost.memory import MemoryUse
    from energylens.cost.step import StepContext
    from energylens.model.config import ModelConfig
    from energylens.workloads.result import Prediction
    from energylens.workloads.workload import Workload


@dataclass(frozen=True, kw_only=True)
class Placement:
    """A deployment bound to its model, GPU, runtime and constants (``ctx``): what a
    scheduler prices its batches with. ``replicas`` are the replicas that get work
    (:meth:`WorkloadKind.busy_replicas`), ``gpus`` every GPU, idle ones too; ``sequences``
    is the workload's batch per busy replica; ``max_num_seqs`` the deployment's cap on the
    running requests of one scheduler (one attention rank's; None: the runtime server's
    default); ``prefill_chunk_tokens`` its prompt tokens per forward pass (None: the
    runtime's default)."""

    ctx: StepContext
    model: ModelConfig
    replicas: int
    gpus: int
    sequences: float
    max_num_seqs: int | None = None
    prefill_chunk_tokens: int | None = None  # the deployment's prompt tokens per pass


@dataclass(frozen=True, kw_only=True)
class MemoryDemand:
    """What the memory check must hold per replica: sequences and their longest context
    (the activations are the engine's start-up workspace, the same for any batch: its
    server's token budget, or its offline API's where ``offline``)."""

    sequences: Size
    context_tokens: float
    offline: bool = False


class WorkloadKind(Protocol):
    """The contract of a workload kind (one module in ``energylens/workloads/``)."""

    @property
    def name(self) -> str:
        """The kind's name (``Workload(kind=...)``)."""

    def memory_demand(self, *, workload: Workload, sequences: float) -> MemoryDemand:
        """Memory the kind needs per replica with ``sequences`` sequences."""

    def busy_replicas(self, *, workload: Workload, batch: Size, replicas: Size) -> Size:
        """Replicas that get work (the others idle at static power): all of them, or fewer
        where the workload has fewer sequences or clients than replicas."""

    def run(self, *, placement: Placement, workload: Workload, memory: MemoryUse) -> Prediction:
        """Price the batches this kind forms, as a :class:`Prediction`."""


def sequence_replicas(*, batch: Size, replicas: Size) -> Size:
    """Replicas a batch of ``batch`` sequences keeps busy: a replica runs whole sequences,
    so a batch smaller than the replicas leaves some idle (a fractional mean batch below
    one runs on one replica)."""
    return np.minimum(replicas, np.maximum(batch, 1.0))


_KINDS: dict[str, WorkloadKind] = {}


def register(kind: WorkloadKind) -> WorkloadKind:
    """Add a workload kind under its name (once)."""
    if kind.name in _KINDS:
        raise ValueError(f"workload kind {kind.name!r} registered twice")
    _KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> WorkloadKind:
    """The workload kind called ``name``."""
    if name not in _KINDS:
        raise ConfigError(f"workload must be one of {', '.join(_KINDS)}, got {name!r}")
    return _KINDS[name]


def kind_names() -> tuple[str, ...]:
    """Every registered workload kind, in registration order."""
    return tuple(_KINDS)
