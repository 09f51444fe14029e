"""Search quality: hypervolume ratio vs the true front at small budgets.

The grid engine evaluates every point of the study's space, which gives the true feasible
front. Optuna NSGA-II and pymoo NSGA-II then run with a budget of up to ``--fraction``
(default 5 %) of the grid, once per seed; after each trial the feasible front found so far
is scored as HV(found) / HV(true), both normalised by the true front's ideal and nadir with
reference point 1.1 (``search.pareto``). The table shows the median over seeds at a few
budgets; the PNG shows the median curve with the min-max band.

Default: the toy deployment (``search.toy``, 27,648 grid points). For another objective:
``--study studies/x.yaml --problem package.module:factory`` (factory(config) -> Problem).
Run: ``python benchmarks/bench_search_hv.py [--out benchmarks/results/]``.

Toy result (2026-11, true front 49 points), median HV ratio over 5 seeds:

    evaluations (% grid)   Optuna NSGA-II   pymoo NSGA-II
       138 (0.5 %)              0.897           0.914
       276 (1.0 %)              0.940           0.955
       553 (2.0 %)              0.985           0.983
      1382 (5.0 %)              0.996           0.996
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from search.config import StudyConfig, load_study
from search.frame import front_frame, trials_frame
from search.pareto import bounds, hypervolume, hypervolume_history
from search.problem import Problem
from search.runner import run_study
from search.toy import write_toy_study

ENGINES = (("optuna", "nsga2", "Optuna NSGA-II"), ("pymoo", "nsga2", "pymoo NSGA-II"))
BUDGET_FRACTIONS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05)


def load_factory(spec: str) -> Callable[[StudyConfig], Problem]:
    """``module:function`` -> the function."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def curves(
    config: StudyConfig, factory: Callable[[StudyConfig], Problem], *, folder: Path, seeds: int, budget: int
) -> tuple[float, dict[str, np.ndarray]]:
    """True-front hypervolume and, per engine, the HV-ratio curve of every seed
    (array seeds x budget)."""
    truth = run_study(
        config=replace(
            config.with_engine("grid"),
            trials=None,
            results=folder / "grid",
            storage=str(folder / "grid.journal"),
        ),
        problem=factory(config),
    )
    names = [o.metric for o in config.objectives]
    front = front_frame(config=config, trials=trials_frame(config=config, study=truth))
    points = front[names].to_numpy(dtype=float)
    ideal, nadir = bounds(points, directions=config.directions)
    true_hv = hypervolume(points, directions=config.directions, ideal=ideal, nadir=nadir)
    print(f"true front: {len(front)} points, grid of {config.space.grid_size}")
    result = {}
    for engine, sampler, label in ENGINES:
        runs = []
        for seed in range(seeds):
            run_config = replace(
                config.with_engine(engine),
                sampler=sampler,
                seed=seed,
                results=folder / f"{engine}-{seed}",
                storage=str(folder / f"{engine}-{seed}.journal"),
            )
            study = run_study(config=run_config, problem=factory(config), n_trials=budget)
            trials = trials_frame(config=run_config, study=study)
            history = hypervolume_history(
                trials[names].to_numpy(dtype=float),
                trials["feasible"].to_numpy(),
                directions=config.directions,
                ideal=ideal,
                nadir=nadir,
            )
            runs.append(np.pad(history, (0, budget - len(history)), mode="edge") / true_hv)
        result[label] = np.array(runs)
    return true_hv, result


def plot(result: dict[str, np.ndarray], *, grid_size: int, title: str, path: Path) -> None:
    """Median HV-ratio curve per engine with the min-max band over seeds."""
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for label, runs in result.items():
        x = np.arange(1, runs.shape[1] + 1) / grid_size * 100
        ax.plot(x, np.median(runs, axis=0), label=label)
        ax.fill_between(x, runs.min(axis=0), runs.max(axis=0), alpha=0.2)
    ax.set_xlabel("evaluations [% of grid]")
    ax.set_ylabel("hypervolume ratio vs true front")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    """Run the benchmark, print the table and write the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, help="study YAML (default: the toy study)")
    parser.add_argument(
        "--problem", default="search.toy:toy_problem", help="problem factory as module:function"
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--fraction", type=float, default=0.05, help="largest budget as a fraction of the grid size"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results"), help="folder (or .png path) for the curve"
    )
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = load_study(args.study or write_toy_study(folder))
        grid_size = config.space.grid_size
        budget = max(1, round(args.fraction * grid_size))
        _, result = curves(config, load_factory(args.problem), folder=folder, seeds=args.seeds, budget=budget)
    fractions = [f for f in BUDGET_FRACTIONS if f <= args.fraction] or [args.fraction]
    header = "budget (evals, % grid)".ljust(24) + "".join(f"{k:>17}" for k in result)
    print(f"median HV ratio over {args.seeds} seeds\n{header}")
    for fraction in fractions:
        n = max(1, round(fraction * grid_size))
        row = f"{n:>6} ({fraction * 100:4.1f} %)".ljust(24)
        print(row + "".join(f"{np.median(runs[:, n - 1]):17.3f}" for runs in result.values()))
    path = args.out if args.out.suffix == ".png" else args.out / f"hv_{config.name}.png"
    plot(
        result,
        grid_size=grid_size,
        path=path,
        title=f"{config.name}: median HV ratio over {args.seeds} seeds",
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
