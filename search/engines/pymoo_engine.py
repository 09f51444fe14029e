"""pymoo engine: NSGA-II, NSGA-III or SMS-EMOA (hypervolume-contribution survival) on mixed
variables, one generation per batch.

The algorithm is driven by ask/tell: each generation is decoded, evaluated (in one
``evaluate_many`` call when the problem has it), told back with objectives converted to
minimisation in ``F`` and constraint values in ``G`` (feasible when <= 0), and written to
the study in one append (a killed run loses at most the generation in flight, which the next
open records as lost: :func:`search.storage.generation_in_flight`). After each generation
the algorithm is pickled to ``<results>/checkpoints/<study>.pkl`` with a fingerprint of the study and
the algorithm's settings; a resume continues from it when both still match (same number of
completed trials, same first trial; same sampler, population size and seed), and otherwise
seeds the first population with the study's completed trials (a changed setting is said in a
warning).
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

from search.engines.base import Engine
from search.outcome import completed_trials, frozen_trial, make_outcome
from search.problem import Problem, evaluate_batch
from search.progress import TrialProgress
from search.storage import batched_writes, generation_in_flight

if TYPE_CHECKING:
    from pymoo.core.algorithm import Algorithm

    from search.config import StudyConfig


class PymooEngine(Engine):
    """NSGA-II, NSGA-III or SMS-EMOA, one generation per batch, resumable from a checkpoint."""

    name = "pymoo"
    samplers = ("nsga2", "nsga3", "smsemoa")

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
        """Run generations until the study holds ``n_total`` completed trials.

        Stops early if the algorithm cannot propose a new configuration (tiny spaces).
        """
        from search.engines.pymoo_algorithms import assign, new_algorithm  # pymoo: on use

        study = optuna.load_study(study_name=config.name, storage=storage)
        done = completed_trials(study)
        algorithm = _load_checkpoint(config, _fingerprint(config, done)) or new_algorithm(config, seed, done)
        n_done = len(done)
        while n_done < n_total and not progress.stop_requested:
            pop = algorithm.ask()
            if pop is None or len(pop) == 0:
                break
            pop = pop[: n_total - n_done]
            params = [config.space.decode(ind.X) for ind in pop]
            with generation_in_flight(study, len(pop)):
                evaluations = evaluate_batch(problem, [config.space.with_fixed(p) for p in params])
                outcomes = [make_outcome(config, e) for e in evaluations]
                assign(config, pop, outcomes)
                algorithm.tell(infills=pop)
                with batched_writes(storage):
                    study.add_trials(
                        [frozen_trial(config.space, p, o) for p, o in zip(params, outcomes, strict=True)]
                    )
            n_done += len(pop)
            _save_checkpoint(config, algorithm, _fingerprint(config, completed_trials(study)))
            progress.advance(len(pop))


def checkpoint_path(config: StudyConfig) -> Path:
    """Where the algorithm state of this study is pickled."""
    return config.results / "checkpoints" / (config.name.replace("/", "__") + ".pkl")


def _fingerprint(config: StudyConfig, done: list[FrozenTrial]) -> dict[str, Any]:
    """The study a checkpoint continues (``trials``) and the settings of its algorithm."""
    first = min(done, key=lambda t: t.number).datetime_start if done else None
    return {
        "trials": [len(done), str(first)],
        "settings": {"sampler": config.sampler, "population": config.population_size, "seed": config.seed},
    }


def _load_checkpoint(config: StudyConfig, fingerprint: dict[str, Any]) -> Algorithm | None:
    """The checkpointed algorithm if it continues this study with these settings; one of other
    settings (sampler, population size, seed) is left, with a warning, for a new algorithm."""
    path = checkpoint_path(config)
    try:
        with path.open("rb") as f:
            state = pickle.load(f)
        found = state["fingerprint"]
        if found["trials"] != fingerprint["trials"]:
            return None
    except Exception:  # none, or unreadable (another pymoo version, a damaged file): start from the trials
        return None
    if found["settings"] != fingerprint["settings"]:
        warnings.warn(
            f"{config.name}: checkpoint {path.name} is of {_settings(found['settings'])}; continuing "
            f"with {_settings(fingerprint['settings'])}, seeded from the study's trials",
            stacklevel=3,
        )
        return None
    return state["algorithm"]


def _settings(settings: dict[str, Any]) -> str:
    return f"{settings['sampler']}, population {settings['population']}, seed {settings['seed']}"


def _save_checkpoint(config: StudyConfig, algorithm: Algorithm, fingerprint: dict[str, Any]) -> None:
    """Pickle the algorithm; one that cannot be pickled (SMS-EMOA holds a local function)
    leaves no checkpoint, and a resume seeds its population from the study's trials."""
    path = checkpoint_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        state = pickle.dumps({"algorithm": algorithm, "fingerprint": fingerprint})
    except (pickle.PicklingError, AttributeError, TypeError):
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(state)
    os.replace(tmp, path)
