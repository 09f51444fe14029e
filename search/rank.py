"""Which knobs matter: constrained ablation beside global importance.

Ablation pins one knob at a time to its baseline (the value with the optimization off),
re-optimises the rest with the same engine, seed, constraints and a reduced budget in a
study ``<name>/ablate/<knob>`` of the same storage, and reports how much the best feasible
value of the first objective gets worse than in the main study (``loss_pct``, positive =
worse), or that no feasible configuration was found at all (``feasibility_lost``).
Importance is PED-ANOVA over the main study's feasible trials for the first objective.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import optuna
import pandas as pd
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from search.config import Objective, StudyConfig
from search.frame import trials_frame
from search.outcome import completed_trials, is_feasible
from search.plots import plot_ranking
from search.problem import Problem
from search.runner import ensure_study


def rank_optimizations(
    *, config: StudyConfig, problem: Problem, budget_per_ablation: int | None, study: optuna.Study
) -> pd.DataFrame:
    """Ablate every knob, rank them, and write ``ranking.csv`` and ``ranking.png``.

    Args:
        config: The main study's config.
        problem: The objective.
        budget_per_ablation: Completed trials per ablation study; None means the whole
            pinned grid for the grid engine and half the main budget otherwise.
        study: The main (unpinned) study, already run.

    Returns:
        One row per knob, most important first: ``rank``, ``knob``, ``baseline``, ``best``
        (main study), ``best_pinned``, ``loss_pct``, ``feasibility_lost``, ``importance``.
    """
    first = config.objectives[0]
    best = _best_feasible(trials_frame(config=config, study=study), first)
    importance = _importance(study, first)
    rows = []
    for knob in config.space.knobs:
        pinned = replace(
            config, name=f"{config.name}/ablate/{knob.name}", space=config.space.pin(knob.name, knob.baseline)
        )
        budget = budget_per_ablation or (
            pinned.budget() if pinned.engine == "grid" else max(1, config.budget() // 2)
        )
        pinned_study = ensure_study(config=pinned, problem=problem, n_trials=budget)
        best_pinned = _best_feasible(trials_frame(config=pinned, study=pinned_study), first)
        rows.append(
            {
                "knob": knob.name,
                "baseline": knob.baseline,
                "best": best,
                "best_pinned": best_pinned,
                "loss_pct": _loss_pct(best, best_pinned, first),
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


def _best_feasible(trials: pd.DataFrame, objective: Objective) -> float:
    values = trials.loc[trials["feasible"], objective.metric]
    if values.empty:
        return np.nan
    return float(values.min() if objective.direction == "minimize" else values.max())


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
