"""Which knobs matter: constrained ablation beside global importance.

Ablation pins one knob at a time to its baseline (the value with the optimization off) and
re-optimises the rest with the same engine, seed, constraints and a reduced budget in a
study ``<name>/ablate/<knob>`` of the same storage. A reduced budget finds a worse best than
the main study's full budget whatever is pinned, so the yardstick is a *control*: the same
re-optimisation with nothing pinned, ``<name>/ablate/_control`` (same engine, budget and
seed). ``loss_pct`` is how much worse the pinned best feasible value of the first objective
is than the control's (positive = worse), or ``feasibility_lost`` when the pinned study
found no feasible configuration at all. The main study's best stays in the ``best`` column.

``noise_pct`` estimates how large a loss chance alone produces. The control is re-optimised
with ``noise_seeds`` more seeds (``<name>/ablate/_control_2``, ``_control_3``...; seeds
``seed + 1``...), and ``noise_pct`` is the standard deviation of the difference between two
such bests, ``sqrt(2) * std(control bests) / |mean|`` in %: the spread of ``loss_pct`` for
a knob that does not matter, whose pinned study is in effect one more seed of the control.
Losses within about twice that are consistent with chance. One extra seed would do
(``|a - b|``) but is unreliable: on ``studies/llama70b_tpot.yaml`` with 500 trials, seeds 0
and 1 agreed within 0.2 % while 8 seeds spread over 0.536-0.619 J (about 6 %), so two extra
seeds are the default; each costs one re-optimisation (the ablation runs one per knob). An
exhaustive engine (``Engine.exhaustive``, e.g. grid) is deterministic: its control is the main
study and ``noise_pct`` is 0 (with a ``budget`` or study ``trials`` below the grid size, the
grids are truncated in grid order and the comparison is only as good as that coverage).

Every best counts only the first ``budget`` completed trials of its study, so studies left
by an earlier ranking with a larger budget do not tilt the comparison.
Importance is PED-ANOVA over the main study's feasible trials for the first objective.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import optuna
import pandas as pd
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from search.config import Objective, StudyConfig, StudyError
from search.engines import get_engine
from search.frame import trials_frame
from search.outcome import completed_trials, is_feasible
from search.plots import plot_ranking
from search.problem import Problem
from search.runner import ensure_study
from search.space import Space

CONTROL = "_control"
"""Ablation name of the unpinned control re-optimisation (``<name>/ablate/_control``); the
noise seeds are ``_control_2``, ``_control_3``..."""
NOISE_SEEDS = 2


def rank_optimizations(
    *,
    config: StudyConfig,
    problem: Problem,
    budget_per_ablation: int | None,
    study: optuna.Study,
    noise_seeds: int = NOISE_SEEDS,
) -> pd.DataFrame:
    """Ablate every knob against a control, rank them, write ``ranking.csv`` and ``ranking.png``.

    Args:
        config: The main study's config.
        problem: The objective.
        budget_per_ablation: Completed trials per ablation (and control) study; None means
            the whole pinned grid for the grid engine and half the main budget otherwise.
        study: The main (unpinned) study, already run.
        noise_seeds: Extra control seeds for ``noise_pct`` (0: no estimate, NaN).

    Returns:
        One row per knob, most important first: ``rank``, ``knob``, ``baseline``, ``best``
        (main study), ``best_control``, ``best_pinned``, ``loss_pct`` (pinned vs control),
        ``noise_pct`` (same in every row), ``feasibility_lost``, ``importance``.

    Raises:
        StudyError: a knob is named like a control study.
    """
    clash = sorted(n for n in config.space.names if n.startswith(CONTROL))
    if clash:
        raise StudyError(
            f"{config.source}: knobs.{clash[0]}: expected a knob name not starting with {CONTROL!r} "
            "(reserved for ablation controls)"
        )
    first = config.objectives[0]
    best = _best_feasible(trials_frame(config=config, study=study), first)
    importance = _importance(study, first)
    exhaustive = get_engine(config.engine).exhaustive
    if exhaustive:
        best_control, noise_pct = best, 0.0
    else:
        budget = budget_per_ablation or max(1, config.budget() // 2)
        controls = [
            _reoptimised_best(
                config,
                problem,
                CONTROL if i == 0 else f"{CONTROL}_{i + 1}",
                config.space,
                budget,
                None if config.seed is None else config.seed + i,
            )
            for i in range(1 + noise_seeds)
        ]
        best_control, noise_pct = controls[0], _noise_pct(controls)
    rows = []
    for knob in config.space.knobs:
        space = config.space.pin(knob.name, knob.baseline)
        budget = budget_per_ablation or (
            replace(config, space=space).budget() if exhaustive else max(1, config.budget() // 2)
        )
        best_pinned = _reoptimised_best(config, problem, knob.name, space, budget, config.seed)
        rows.append(
            {
                "knob": knob.name,
                "baseline": knob.baseline,
                "best": best,
                "best_control": best_control,
                "best_pinned": best_pinned,
                "loss_pct": _loss_pct(best_control, best_pinned, first),
                "noise_pct": noise_pct,
                "feasibility_lost": bool(np.isnan(best_pinned)),
                "importance": importance.get(knob.name, np.nan),
            }
        )
    ranking = (
        pd.DataFrame(rows)
        .sort_values(
            ["feasibility_lost", "loss_pct", "importance"], ascending=False, na_position="last", kind="stable"
        )
        .reset_index(drop=True)
    )
    ranking.insert(0, "rank", np.arange(1, len(ranking) + 1))
    config.results.mkdir(parents=True, exist_ok=True)
    ranking.to_csv(config.results / "ranking.csv", index=False)
    plot_ranking(
        ranking=ranking,
        path=config.results / "ranking.png",
        title=f"{config.name}: what each optimization is worth ({first})",
    )
    return ranking


def ablation_name(config: StudyConfig, what: str) -> str:
    """Study name of the ablation of knob ``what`` (or of a control)."""
    return f"{config.name}/ablate/{what}"


def _reoptimised_best(
    config: StudyConfig, problem: Problem, what: str, space: Space, budget: int, seed: int | None
) -> float:
    """Best feasible first objective over the first ``budget`` trials of ``space`` re-optimised."""
    sub = replace(config, name=ablation_name(config, what), space=space, seed=seed)
    sub_study = ensure_study(config=sub, problem=problem, n_trials=budget)
    return _best_feasible(trials_frame(config=sub, study=sub_study).head(budget), config.objectives[0])


def _best_feasible(trials: pd.DataFrame, objective: Objective) -> float:
    values = trials.loc[trials["feasible"], objective.metric]
    if values.empty:
        return np.nan
    return float(values.min() if objective.direction == "minimize" else values.max())


def _noise_pct(bests: list[float]) -> float:
    """Standard deviation of the difference of two bests, in % of their mean (NaN when
    fewer than two are feasible)."""
    values = np.array([b for b in bests if not np.isnan(b)])
    if len(values) < 2 or not values.mean():
        return np.nan
    return float(np.sqrt(2.0) * values.std(ddof=1) / abs(values.mean()) * 100.0)


def _loss_pct(best: float, best_pinned: float, objective: Objective) -> float:
    """How much worse ``best_pinned`` is than ``best``, in % of ``|best|`` (NaN if undefined)."""
    if not best or np.isnan(best) or np.isnan(best_pinned):
        return np.nan
    sign = 1.0 if objective.direction == "minimize" else -1.0
    return sign * (best_pinned - best) / abs(best) * 100.0


def _importance(study: optuna.Study, objective: Objective) -> dict[str, float]:
    """PED-ANOVA importance of each knob for reaching a good feasible first objective,
    normalised to sum to 1 (all zero when nothing stands out)."""
    feasible = [t for t in completed_trials(study) if is_feasible(t)]
    if len(feasible) < 2:
        return {}
    view = optuna.create_study(direction=objective.direction)
    view.add_trials(
        [
            optuna.trial.create_trial(
                params=t.params,
                distributions=t.distributions,
                value=t.user_attrs["metrics"][objective.metric],
            )
            for t in feasible
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-sample notes; the numbers are still usable
        raw = get_param_importances(view, evaluator=PedAnovaImportanceEvaluator(), normalize=False)
    total = sum(raw.values())
    return {k: v / total if total > 0 else 0.0 for k, v in raw.items()}
