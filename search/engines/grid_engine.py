"""Grid engine: every point of an enumerable space, or a uniform sample of it, streamed in
batches for ``evaluate_many``."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages import BaseStorage

from search.engines.base import Engine
from search.outcome import completed_trials, frozen_trial, make_outcome
from search.problem import Problem, evaluate_batch
from search.progress import TrialProgress
from search.space import Space
from search.storage import batched_writes

if TYPE_CHECKING:
    from search.config import StudyConfig

BATCH_SIZE = 1024
"""Grid points evaluated, and written to the study, at a time."""
EXHAUSTIVE = "exhaustive"
"""The sampler that writes the whole grid to Parquet (:mod:`search.exhaustive`) instead of
storing one trial per point; the runner refuses it (it has no Optuna study)."""


class GridEngine(Engine):
    """Every point of an enumerable space in grid order; with a budget below the grid size,
    a uniform random sample of the whole grid. Sampler ``exhaustive`` is run by
    :func:`search.exhaustive.run_exhaustive`, never through a study."""

    name = "grid"
    samplers = ("grid", EXHAUSTIVE)
    exhaustive = True
    needs_enumerable_space = True

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
        """Evaluate grid points not yet in the study until it holds ``n_total`` trials.

        When ``n_total`` covers the grid, points come in grid order; otherwise in the
        pseudo-random order of ``seed`` (:meth:`Space.shuffled_grid`), so any budget is a
        uniform sample of the whole grid, never one corner of it. Points are generated,
        evaluated and written ``BATCH_SIZE`` at a time: memory does not grow with the grid.
        """
        space = config.space
        study = optuna.load_study(study_name=config.name, storage=storage)
        done = completed_trials(study)
        seen = {_key(space, t.params) for t in done if set(t.params) == set(space.names)}
        if n_total >= space.grid_size:
            points = space.grid()
        else:
            start = random.SystemRandom().randrange(2**62) if seed is None else seed
            points = space.shuffled_grid(seed=start)
        pending = (p for p in points if _key(space, p) not in seen)
        for batch in chunks(islice(pending, max(0, n_total - len(done))), BATCH_SIZE):
            if progress.stop_requested:
                return
            evaluations = evaluate_batch(problem, [space.with_fixed(p) for p in batch])
            with batched_writes(storage):
                study.add_trials(
                    [
                        frozen_trial(space, p, make_outcome(config, e))
                        for p, e in zip(batch, evaluations, strict=True)
                    ]
                )
            progress.advance(len(batch))


def _key(space: Space, params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(params[name] for name in space.names)


def chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive lists of at most ``size`` items."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
