"""The contract every search engine implements (see ``search/engines/README.md``).

Engine modules import :class:`~search.config.StudyConfig` for type checking only:
``search.config`` reads the registry while it loads, so an engine (or anything it imports
at run time) that imported it back would be a circular import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from search.config import StudyConfig
    from search.problem import Problem
    from search.progress import TrialProgress


class Engine(ABC):
    """A way to fill a study with evaluated configurations.

    Attributes:
        name: The ``engine:`` value of study files that selects it.
        samplers: The ``sampler:`` values it accepts; the first is the default.
        exhaustive: It enumerates the space in a fixed order, so a rerun gives the same
            trials: the default budget is the whole grid, and an ablation's unpinned
            control is the main study itself (no noise estimate needed).
        needs_enumerable_space: Study files choosing it must have no continuous knob.
        shared_study: Several processes may run it on one study at once (``run_worker``).
    """

    name: ClassVar[str]
    samplers: ClassVar[tuple[str, ...]]
    exhaustive: ClassVar[bool] = False
    needs_enumerable_space: ClassVar[bool] = False
    shared_study: ClassVar[bool] = False

    @abstractmethod
    def run(
        self,
        *,
        config: StudyConfig,
        problem: Problem,
        storage: BaseStorage,
        n_total: int,
        seed: int | None,
        progress: TrialProgress,
    ) -> None:
        """Evaluate configurations until the study ``config.name`` in ``storage`` holds
        ``n_total`` COMPLETE trials, or the engine has no new configuration to offer.

        The study already exists with ``config.directions``. Every evaluation is written as
        :mod:`search.outcome` says (``make_outcome``, then ``record`` or ``frozen_trial``),
        infeasible ones included; trials already in the study are kept and counted. Call
        ``progress.advance`` once per completed trial, and return after the trial or batch
        being evaluated once ``progress.stop_requested`` is set (Ctrl-C). ``seed`` (None: unseeded) overrides
        ``config.seed``; ``config.sampler`` is one of :attr:`samplers`.
        """

    def run_shared(
        self,
        *,
        config: StudyConfig,
        problem: Problem,
        storage: BaseStorage,
        n_total: int,
        seed: int | None,
        progress: TrialProgress,
    ) -> None:
        """:meth:`run` as one of several workers on the study (``energylens study worker``):
        an engine with ``shared_study`` overrides it when its own run is not safe to share."""
        self.run(
            config=config, problem=problem, storage=storage, n_total=n_total, seed=seed, progress=progress
        )
