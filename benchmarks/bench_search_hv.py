"""Search quality: hypervolume ratio vs the exact front at small budgets, per sampler setting.

The exhaustive grid (``search.exhaustive``, Parquet; reused from ``--truth`` when it is
already there) gives the exact feasible front. Every sampler setting of ``--runs`` then runs
with a budget of ``--fraction`` (default 5 %) of the grid, once per seed; after each trial the
feasible front found so far is scored as HV(found) / HV(exact), both normalised by the exact
front's ideal and nadir with reference point 1.1 (``search.pareto``). The table shows the
median and the min-max over seeds at 0.5, 1, 2 and 5 % of the grid; the PNG the median curves.

A run is ``engine:sampler[:population]``, or ``warm:engine:sampler[:population]``: the study
first holds a coarse sub-grid (the first and last value of every knob, all values of a
categorical one; a uniform sample of it when that is more than a quarter of the budget),
then the engine continues from it (pymoo seeds its first population with those trials).

Default: the toy deployment (``search.toy``). For the real objective:
``--study benchmarks/studies/hv_llama70b.yaml --problem energylens.cli.study:study_problem``.
Run: ``python benchmarks/bench_search_hv.py [--seeds 5] [--runs optuna:nsga2:50,pymoo:nsga2:20]``.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from search.config import StudyConfig, load_study
from search.exhaustive import merge_fronts, run_exhaustive
from search.exhaustive_report import shard_states
from search.frame import trials_frame
from search.outcome import frozen_trial, make_outcome
from search.pareto import bounds, hypervolume, hypervolume_history
from search.problem import Problem, evaluate_batch
from search.runner import create_study, resume_study, run_study
from search.space import permuted_range
from search.toy import write_toy_study

DEFAULT_RUNS = (
    "optuna:tpe:10,optuna:nsga2:20,optuna:nsga2:10,pymoo:nsga2:20,pymoo:nsga2:10,pymoo:smsemoa:20,"
    "optuna:nsga2:50,pymoo:nsga3:20,warm:pymoo:nsga2:20,optuna:random"
)
"""The settings of docs/benchmarks.md (TPE asks ``population`` trials at a time)."""
BUDGET_FRACTIONS = (0.005, 0.01, 0.02, 0.05)


def load_factory(spec: str) -> Callable[[StudyConfig], Problem]:
    """``module:function`` -> the function."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def exact_front(config: StudyConfig, problem: Problem, folder: Path) -> tuple[np.ndarray, int]:
    """The exact feasible front's objective values (every grid point evaluated once, kept in
    ``folder``) and the number of feasible configurations."""
    grid = replace(config.with_engine("grid"), sampler="exhaustive", results=folder)
    run_exhaustive(config=grid, problem=problem)
    states = shard_states(grid)
    front = merge_fronts(grid, [s.front for s in states])
    return front[[o.metric for o in config.objectives]].to_numpy(dtype=float), sum(s.feasible for s in states)


def coarse_points(config: StudyConfig, limit: int, seed: int) -> list[dict[str, Any]]:
    """The coarse sub-grid: first and last value of every knob (all values of a categorical
    one), or a uniform sample of ``limit`` of its points when it is larger."""
    axes = []
    for knob in config.space.knobs:
        count = knob.grid_count() or 2
        categorical = type(knob).__name__ in ("CategoricalKnob", "BoolKnob")
        picks = range(count) if categorical else sorted({0, count - 1})
        axes.append([knob.grid_value(i) for i in picks])
    points = [dict(zip(config.space.names, values, strict=True)) for values in itertools.product(*axes)]
    if len(points) <= limit:
        return points
    return [points[i] for i in itertools.islice(permuted_range(len(points), seed=seed), limit)]


def one_run(
    config: StudyConfig, problem: Problem, spec: str, *, seed: int, budget: int, folder: Path
) -> np.ndarray:
    """The feasible-front objective values after each trial of one run (trials x objectives,
    NaN rows for infeasible trials) as a (points, feasible) pair flattened into a table."""
    warm = spec.startswith("warm:")
    engine, sampler, *pop = spec.removeprefix("warm:").split(":")
    run = replace(
        config.with_engine(engine),
        sampler=sampler,
        population_size=int(pop[0]) if pop else config.population_size,
        seed=seed,
        results=folder,
        storage=str(folder / "study.journal"),
    )
    if warm:
        study = create_study(config=run)
        points = coarse_points(run, budget // 4, seed)
        evaluations = evaluate_batch(problem, [run.space.with_fixed(p) for p in points])
        pairs = zip(points, evaluations, strict=True)
        study.add_trials([frozen_trial(run.space, p, make_outcome(run, e)) for p, e in pairs])
        study = resume_study(config=run, problem=problem, n_trials=budget)
    else:
        study = run_study(config=run, problem=problem, n_trials=budget)
    trials = trials_frame(config=run, study=study)
    values = trials[[o.metric for o in config.objectives]].to_numpy(dtype=float)
    values[~trials["feasible"].to_numpy()] = np.nan
    return values


def curves(config: StudyConfig, problem: Problem, *, runs: list[str], seeds: int, budget: int,
           truth: Path, cache: Path) -> tuple[dict[str, np.ndarray], str]:
    """Per run spec, the HV-ratio curve of every seed (array seeds x budget); each is saved
    in ``cache`` and read back from there by a later call with the same seeds and budget."""
    start = time.perf_counter()
    exact, n_feasible = exact_front(config, problem, truth)
    ideal, nadir = bounds(exact, directions=config.directions)
    exact_hv = hypervolume(exact, directions=config.directions, ideal=ideal, nadir=nadir)
    note = (f"exact front: {len(exact)} points of {n_feasible:,} feasible in a grid of "
            f"{config.space.grid_size:,} ({time.perf_counter() - start:.0f} s)")
    print(note, flush=True)
    result = {}
    for spec in runs:
        saved = cache / f"{spec.replace(':', '_')}-{seeds}x{budget}.npy"
        if saved.exists():
            result[spec] = np.load(saved)
            continue
        rows = []
        for seed in range(seeds):
            with tempfile.TemporaryDirectory() as folder:
                values = one_run(config, problem, spec, seed=seed, budget=budget, folder=Path(folder))
            feasible = ~np.isnan(values).any(axis=1)
            history = hypervolume_history(np.nan_to_num(values), feasible, directions=config.directions,
                                          ideal=ideal, nadir=nadir)
            rows.append(np.pad(history, (0, budget - len(history)), mode="edge")[:budget] / exact_hv)
        result[spec] = np.array(rows)
        saved.parent.mkdir(parents=True, exist_ok=True)
        np.save(saved, result[spec])
        at = max(1, round(0.01 * config.space.grid_size)) - 1
        print(f"  {spec:24s} median HV ratio at 1 %: {np.median(result[spec][:, at]):.4f}", flush=True)
    return result, note


def plot(result: dict[str, np.ndarray], *, grid_size: int, title: str, path: Path) -> None:
    """Median HV-ratio curve per run spec."""
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for label, runs in result.items():
        x = np.arange(1, runs.shape[1] + 1) / grid_size * 100
        ax.plot(x, np.median(runs, axis=0), label=label)
    ax.set_xlabel("evaluations [% of grid]")
    ax.set_ylabel("hypervolume ratio vs exact front (median over seeds)")
    ax.set_ylim(0.8, 1.005)
    ax.axhline(0.99, color="gray", linestyle="--", linewidth=0.8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    """Run the benchmark, print the table and write the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, help="study YAML (default: the toy study)")
    parser.add_argument("--problem", default="search.toy:toy_problem", help="problem factory module:function")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="[warm:]engine:sampler[:population], ...")
    parser.add_argument("--fraction", type=float, default=0.05, help="budget as a fraction of the grid size")
    parser.add_argument("--truth", type=Path, help="folder of the exhaustive grid (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the PNG")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_study(args.study or write_toy_study(Path(tmp)))
        grid_size = config.space.grid_size
        budget = max(1, round(args.fraction * grid_size))
        truth = args.truth or Path(tmp) / "truth"
        result, note = curves(config, load_factory(args.problem)(config), runs=args.runs.split(","),
                              seeds=args.seeds, budget=budget, truth=truth,
                              cache=args.out / f"hv_{config.name}")
    fractions = [f for f in BUDGET_FRACTIONS if f <= args.fraction]
    print(f"\n{config.name}: {note}; median [min-max] HV ratio over {args.seeds} seeds\n")
    print("| run | " + " | ".join(f"{round(f * grid_size):,} ({f * 100:g} %)" for f in fractions) + " |")
    print("|---|" + "---|" * len(fractions))
    for spec, runs in result.items():
        cells = []
        for f in fractions:
            column = runs[:, max(1, round(f * grid_size)) - 1]
            cells.append(f"{np.median(column):.4f} [{column.min():.3f}-{column.max():.3f}]")
        print(f"| {spec} | " + " | ".join(cells) + " |")
    path = args.out / f"hv_{config.name}.png"
    title = f"{config.name}: median HV ratio over {args.seeds} seeds"
    plot(result, grid_size=grid_size, path=path, title=title)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
