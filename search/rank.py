"""Which knobs matter: constrained ablation beside global importance, on every objective.

Method (also written at the top of ``ranking.csv``). Ablation pins one knob at a time to
its baseline (the value with the optimization off) and re-optimises the rest with the same
engine, seed, constraints and a reduced budget, in a study ``<name>/ablate/<knob>`` of the
ablation storage ``<results>/ablation.journal`` (kept apart from the main study, so that
optuna-dashboard shows the study alone). A reduced budget finds worse configurations than
the main study's full budget whatever is pinned, so the yardstick is a *control*: the same
re-optimisation with nothing pinned, ``<name>/ablate/_control``.

For every objective, ``loss_pct[<metric>]`` is how much worse the pinned study's best
feasible value is than the control's (positive = worse). All objectives together:
``hv_loss_pct`` is the feasible-front hypervolume the pinned study loses against the
control, in % of the control's (objectives scaled by the main study's feasible points, see
:mod:`search.pareto`). Knobs are ranked by lost feasibility (the pinned study found no
feasible configuration at all) first, then by ``hv_loss_pct``.

Noise. The control is re-optimised with ``noise_seeds`` more seeds (``_control_2``,
``_control_3``... with seeds ``seed + 1``...). ``noise_pct`` is the standard deviation of
the difference between two such runs, ``sqrt(2) * std(control hypervolumes) / mean`` in %:
the spread of ``hv_loss_pct`` for a knob that does not matter, whose pinned study is in
effect one more seed of the control. ``ci95_pct`` is 1.96 times that; a knob whose loss is
within it of the next knob's shares its rank (``tie``), and ``within_noise`` marks losses
that cannot be told from zero. On ``studies/llama70b_tpot.yaml`` with 500 trials, two seeds
agreed within 0.2 % while eight spread over about 6 %, hence two extra seeds by default. An
exhaustive engine (``Engine.exhaustive``, e.g. grid) whose budget covers the grid is
deterministic: the control is the whole grid (the main study itself when it holds the whole
grid) and the noise is 0. With a budget below the grid size, every study samples the grid
uniformly, so the control is re-run with extra seeds as for any other engine.

Every study counts only its first ``budget`` completed trials, so studies left by an
earlier ranking with a larger budget do not tilt the comparison.

Importance (``importance[<metric>]``) is PED-ANOVA over the main study's feasible trials:
global (how much a knob's value matters anywhere in the space) where the ablation is local
(what is lost from the best configurations when the knob is switched off), so the two can
disagree: a knob can matter a lot on average and cost nothing at the optimum.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import optuna
import pandas as pd
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from search.config import Objective, StudyConfig, StudyError
from search.engines import get_engine
from search.files import write_atomic
from search.frame import trials_frame
from search.outcome import completed_trials, is_feasible
from search.pareto import bounds, hypervolume
from search.plots import plot_ranking
from search.problem import Problem
from search.progress import trial_progress
from search.runner import ensure_study
from search.space import Space

CONTROL = "_control"
"""Ablation name of the unpinned control re-optimisation (``<name>/ablate/_control``); the
noise seeds are ``_control_2``, ``_control_3``..."""
NOISE_SEEDS = 2
Z95 = 1.96
ABLATION_STORAGE = "ablation.journal"


@dataclass(frozen=True)
class _Result:
    """Feasible objective values of one study (rows: configurations)."""

    points: np.ndarray

    def best(self, objective: Objective, column: int) -> float:
        values = self.points[:, column]
        if not len(values):
            return np.nan
        return float(values.min() if objective.direction == "minimize" else values.max())


def ablation_storage(config: StudyConfig) -> str:
    """Journal file holding the ablation studies of ``config``."""
    return str(config.results / ABLATION_STORAGE)


def rank_optimizations(
    *,
    config: StudyConfig,
    problem: Problem,
    budget_per_ablation: int | None,
    study: optuna.Study,
    noise_seeds: int = NOISE_SEEDS,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate every knob against a control, rank them, write ``ranking.csv`` and ``ranking.png``.

    Args:
        config: The main study's config.
        problem: The objective.
        budget_per_ablation: Completed trials per ablation (and control) study; None means
            the whole pinned grid for an exhaustive engine and half the main budget otherwise.
        study: The main (unpinned) study, already run.
        noise_seeds: Extra control seeds for the noise estimate (0: none, NaN).
        progress: Show a progress bar over the re-optimisations (on a terminal).

    Returns:
        One row per knob, most important first: ``rank`` (shared by ties), ``tie``, ``knob``,
        ``baseline``, ``feasibility_lost``, ``hv_loss_pct``, ``noise_pct``, ``ci95_pct``,
        ``within_noise``, then per objective ``loss_pct[m]``, ``importance[m]``, ``best[m]``
        (main study), ``best_control[m]`` and ``best_pinned[m]``.

    Raises:
        StudyError: a knob is named like a control study.
    """
    clash = sorted(n for n in config.space.names if n.startswith(CONTROL))
    if clash:
        raise StudyError(
            f"{config.source}: knobs.{clash[0]}: expected a knob name not starting with {CONTROL!r} "
            "(reserved for ablation controls)"
        )
    sub_config = replace(config, storage=ablation_storage(config))
    main = _feasible(config, trials_frame(config=config, study=study))
    box = bounds(main.points, directions=config.directions) if len(main.points) else None
    control_budget = _budget(config, config.space, budget_per_ablation)
    whole_grid = get_engine(config.engine).exhaustive and control_budget >= config.space.grid_size
    main_is_control = whole_grid and len(completed_trials(study)) >= config.space.grid_size
    n_controls = 0 if main_is_control else 1 if whole_grid else 1 + noise_seeds
    with trial_progress(
        enabled=progress, description=f"{config.name}: ablations", done=0,
        total=n_controls + len(config.space.knobs),
    ) as bar:
        controls = []
        for i in range(n_controls):
            controls.append(
                _reoptimised(sub_config, problem, CONTROL if i == 0 else f"{CONTROL}_{i + 1}", config.space,
                             control_budget, None if config.seed is None else config.seed + i)
            )
            bar.advance()
        if main_is_control:
            controls = [main]
        pinned = {}
        for knob in config.space.knobs:
            space = config.space.pin(knob.name, knob.baseline)
            budget = _budget(config, space, budget_per_ablation)
            pinned[knob.name] = _reoptimised(sub_config, problem, knob.name, space, budget, config.seed)
            bar.advance()
    hv = {name: _hv(config, result, box) for name, result in pinned.items()}
    control_hvs = [_hv(config, c, box) for c in controls]
    noise = 0.0 if whole_grid else _noise_pct(control_hvs)
    importance = {o.metric: _importance(study, o) for o in config.objectives}
    rows = []
    for knob in config.space.knobs:
        result = pinned[knob.name]
        row: dict[str, object] = {
            "knob": knob.name,
            "baseline": knob.baseline,
            "feasibility_lost": not len(result.points),
            "hv_loss_pct": _loss_pct(control_hvs[0], hv[knob.name], "maximize"),
            "noise_pct": noise,
            "ci95_pct": Z95 * noise,
        }
        for column, objective in enumerate(config.objectives):
            m = objective.metric
            control_best = controls[0].best(objective, column)
            pinned_best = result.best(objective, column)
            row[f"loss_pct[{m}]"] = _loss_pct(control_best, pinned_best, objective.direction)
            row[f"importance[{m}]"] = importance[m].get(knob.name, np.nan)
            row[f"best[{m}]"] = main.best(objective, column)
            row[f"best_control[{m}]"] = control_best
            row[f"best_pinned[{m}]"] = pinned_best
        rows.append(row)
    first = f"importance[{config.objectives[0].metric}]"
    ranking = (
        pd.DataFrame(rows)
        .sort_values(
            ["feasibility_lost", "hv_loss_pct", first], ascending=False, na_position="last", kind="stable"
        )
        .reset_index(drop=True)
    )
    quiet = ~ranking["feasibility_lost"] & (ranking["hv_loss_pct"].abs() <= Z95 * noise)
    ranking.insert(4, "within_noise", quiet)
    ranks = _tied_ranks(ranking["feasibility_lost"].tolist(), ranking["hv_loss_pct"].tolist(), Z95 * noise)
    ranking.insert(0, "rank", ranks)
    ranking.insert(1, "tie", pd.Series(ranks).duplicated(keep=False).to_numpy())
    header = method_header(config, budget=control_budget, whole_grid=whole_grid,
                           noise_seeds=0 if whole_grid else noise_seeds)
    write_atomic(config.results / "ranking.csv", lambda f: (f.write(header), ranking.to_csv(f, index=False)))
    plot_ranking(
        ranking=ranking,
        path=config.results / "ranking.png",
        title=f"{config.name}: what each optimization is worth (all objectives: hypervolume)",
        importance_column=first,
    )
    return ranking


def method_header(config: StudyConfig, *, budget: int, whole_grid: bool, noise_seeds: int) -> str:
    """The ``# `` lines at the top of ``ranking.csv`` (read it with ``comment='#'``)."""
    objectives = ", ".join(map(str, config.objectives))
    lines = [
        f"method: constrained ablation of study {config.name} ({objectives}; SLOs: "
        f"{'; '.join(map(str, config.constraints)) or 'none'})",
        f"each knob pinned to its baseline, the rest re-optimised: engine {config.engine}, "
        + ("each pinned grid whole, compared with the whole grid" if whole_grid
           else f"{budget} trials, seed {config.seed}; compared with an unpinned control of the same budget"),
        "hv_loss_pct: feasible-front hypervolume lost vs the control, % (all objectives); "
        "loss_pct[m]: best feasible value of m lost vs the control, %",
        f"noise_pct: spread of the difference of two control runs ({noise_seeds} extra seeds; "
        "0 for whole grids); ci95_pct = 1.96 x noise_pct; ranks within it are ties",
        "importance[m]: PED-ANOVA over the main study's feasible trials (global, where the "
        "ablation is local: the two can disagree)",
    ]
    return "".join(f"# {line}\n" for line in lines)


def ablation_name(config: StudyConfig, what: str) -> str:
    """Study name of the ablation of knob ``what`` (or of a control)."""
    return f"{config.name}/ablate/{what}"


def _budget(config: StudyConfig, space: Space, budget_per_ablation: int | None) -> int:
    if budget_per_ablation is not None:
        return budget_per_ablation
    if get_engine(config.engine).exhaustive:
        return replace(config, space=space).budget()
    return max(1, config.budget() // 2)


def _reoptimised(
    config: StudyConfig, problem: Problem, what: str, space: Space, budget: int, seed: int | None
) -> _Result:
    """Feasible objective values among the first ``budget`` trials of ``space`` re-optimised."""
    sub = replace(config, name=ablation_name(config, what), space=space, seed=seed)
    sub_study = ensure_study(config=sub, problem=problem, n_trials=budget)
    return _feasible(config, trials_frame(config=sub, study=sub_study).head(budget))


def _feasible(config: StudyConfig, trials: pd.DataFrame) -> _Result:
    names = [o.metric for o in config.objectives]
    return _Result(trials.loc[trials["feasible"], names].to_numpy(dtype=float).reshape(-1, len(names)))


def _hv(config: StudyConfig, result: _Result, box: tuple[np.ndarray, np.ndarray] | None) -> float:
    if box is None or not len(result.points):
        return 0.0
    return hypervolume(result.points, directions=config.directions, ideal=box[0], nadir=box[1])


def _tied_ranks(lost: Sequence[bool], losses: Sequence[float], ci: float) -> list[int]:
    """Ranks in the given (sorted) order; a row within ``ci`` of its group's first row, with
    the same lost feasibility, shares its rank (equal values always do)."""
    ranks: list[int] = []
    leader = 0
    for i, (flag, loss) in enumerate(zip(lost, losses, strict=True)):
        same = i > 0 and flag == lost[leader] and (
            (np.isnan(loss) and np.isnan(losses[leader])) or abs(losses[leader] - loss) <= ci
        )
        if not same:
            leader = i
        ranks.append(ranks[leader] if same else (ranks[-1] + 1 if ranks else 1))
    return ranks


def _noise_pct(values: list[float]) -> float:
    """Standard deviation of the difference of two runs, in % of their mean (NaN when fewer
    than two runs found anything)."""
    array = np.array([v for v in values if not np.isnan(v) and v > 0])
    if len(array) < 2 or not array.mean():
        return np.nan
    return float(np.sqrt(2.0) * array.std(ddof=1) / abs(array.mean()) * 100.0)


def _loss_pct(reference: float, value: float, direction: str) -> float:
    """How much worse ``value`` is than ``reference``, in % of ``|reference|`` (NaN if undefined)."""
    if not reference or np.isnan(reference) or np.isnan(value):
        return np.nan
    sign = 1.0 if direction == "minimize" else -1.0
    return sign * (value - reference) / abs(reference) * 100.0


def _importance(study: optuna.Study, objective: Objective) -> dict[str, float]:
    """PED-ANOVA importance of each knob for reaching a good feasible value of ``objective``,
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
