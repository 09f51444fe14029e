"""Exhaustive grid throughput: wall time, configurations/s and peak memory of
``search.exhaustive.run_exhaustive`` (Parquet chunks, running front) on one core.

Default: the toy deployment (``search.toy``) on a 2.5-million-point space; for the real
objective: ``--study studies/llama70b_tpot.yaml --problem energylens.cli.study:study_problem``
(the quickstart space, 19.5 million points; one ``predict`` per configuration until the study
objective has a columnar hook), or ``--problem benchmarks.bench_search_grid:predict_many_problem``:
:class:`PredictManyProblem`, a stand-in ``evaluate_table`` over
``energylens.batch_predict.predict_many`` for spaces of gpu, num_gpus, tp, pp, ep, batch,
dtype, overlap_sms, clock_fraction and fuse_* knobs (``--check N`` compares it with the study
objective on N random grid points first). ``--limit N`` runs the first N points only
(a shard of size N/grid), to time a slow objective on a part of the grid.
Each repeat runs in a fresh folder, in a fresh process (peak RSS is per process).
Usage: ``python benchmarks/bench_search_grid.py [--repeats 3] [--study S --problem M:F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from search.config import StudyConfig, load_study
from search.exhaustive import Shard, run_exhaustive
from search.exhaustive_report import write_grid_report
from search.toy import TOY_SPACE, write_toy_study

BIG_TOY_SPACE = {
    "knobs": {
        **TOY_SPACE["knobs"],
        "batch": {"type": "int", "low": 1, "high": 512},
        "freq": {"type": "float", "low": 0.5, "high": 1.0, "step": 0.01},
    }
}
"""3 x 4 x 4 x 512 x 51 x 2 = 2,506,752 points."""


def load_factory(spec: str):  # noqa: ANN201  (module:function -> the function)
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


class PredictManyProblem:
    """The study objective's metrics for a whole table at once, through ``predict_many``: the
    knobs are mapped to Deployment columns as ``energylens.study.objective`` maps them (clock
    fraction x boost clock, fuse_* flags over the runtime's default fusions, dtype as the
    weight dtype); other knobs are refused."""

    KNOBS = {"gpu", "num_gpus", "tp", "pp", "ep", "batch", "dtype", "overlap_sms", "clock_fraction"}

    def __init__(self, config: StudyConfig) -> None:
        from energylens.cli.study import study_problem

        self.objective = study_problem(config)
        extra = {n for n in (*config.space.names, *config.space.fixed) if n not in self.KNOBS
                 and not n.startswith("fuse_")}
        if extra:
            raise ValueError(f"PredictManyProblem cannot map {sorted(extra)}")

    def evaluate(self, params: dict) -> object:
        return self.objective.evaluate(params)

    def evaluate_table(self, table: pd.DataFrame) -> pd.DataFrame:
        from energylens.batch_predict import predict_many
        from energylens.deployment import FUSIONS
        from energylens.hardware import load_gpu
        from energylens.runtime import DEFAULT_RUNTIME, get_runtime

        columns = {c: table[c] for c in ("gpu", "num_gpus", "tp", "pp", "ep", "batch", "overlap_sms")
                   if c in table}
        columns["gpu"] = table["gpu"].astype(str)
        if "dtype" in table:
            columns["weight_dtype"] = table["dtype"].astype(str)
        if "clock_fraction" in table:
            boost = {g: load_gpu(g).boost_clock_mhz for g in columns["gpu"].unique()}
            columns["freq_mhz"] = table["clock_fraction"].to_numpy(float) * columns["gpu"].map(boost)
        flags = [n for n in FUSIONS if f"fuse_{n}" in table]
        if flags:
            base = get_runtime(DEFAULT_RUNTIME).default_fusions
            on = {n: table[f"fuse_{n}"].to_numpy(bool) for n in flags}
            codes = sum(on[n].astype(int) << i for i, n in enumerate(flags))
            sets = {code: frozenset(n for n in base if n not in flags)
                    | {n for i, n in enumerate(flags) if code >> i & 1} for code in range(2 ** len(flags))}
            columns["fusion"] = pd.Series(codes, index=table.index).map(sets)
        out = predict_many(model=self.objective.model, workload=self.objective.workload,
                           table=pd.DataFrame(columns, index=table.index),
                           calibration=self.objective.calibration)
        return out.drop(columns=[c for c in ("feasible",) if c in out])


def predict_many_problem(config: StudyConfig) -> PredictManyProblem:
    """Problem factory of :class:`PredictManyProblem`."""
    return PredictManyProblem(config)


def check(config: StudyConfig, n: int) -> str:
    """Largest relative difference between :class:`PredictManyProblem` and the study objective
    on ``n`` random grid points (metrics both report, runnable rows), and disagreements on
    which rows can run."""
    import random

    problem = PredictManyProblem(config)
    rows = sorted(random.Random(0).sample(range(config.space.grid_size), n))
    table = pd.concat([config.space.grid_block(i, i + 1) for i in rows])
    table = table.assign(**{k: [v] * len(table) for k, v in config.space.fixed.items()})
    many = problem.evaluate_table(table)
    worst, disagree = 0.0, 0
    for (_, row), params in zip(many.iterrows(), table.to_dict("records"), strict=True):
        one = problem.objective.evaluate({str(k): v for k, v in params.items()})
        if (one.infeasible_reason is None) != (row["infeasible_reason"] is None):
            disagree += 1
            continue
        for name, value in one.metrics.items():
            if one.infeasible_reason is None and name in row and value:
                worst = max(worst, abs(float(row[name]) / value - 1))
    return f"{n} random points: {disagree} feasibility disagreements, max relative difference {worst:.1e}"


def one_run(study: str | None, problem: str, limit: int | None) -> dict[str, float]:
    """Run the grid (or its first ``limit`` points) once in a fresh folder; time and memory."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(study) if study else write_toy_study(Path(folder), space=BIG_TOY_SPACE, name="big-toy")
        config = load_study(path)
        config = replace(config.with_engine("grid"), sampler="exhaustive", results=Path(folder) / "out")
        grid = config.space.grid_size
        shard = Shard(1, max(1, grid // limit)) if limit else Shard()
        factory = load_factory(problem)
        problem = factory(config)
        start, cpu = time.perf_counter(), time.process_time()
        state = run_exhaustive(config=config, problem=problem, shard=shard)
        run_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        report = write_grid_report(config=config)
        total_s = time.perf_counter() - start
        size = sum(f.stat().st_size for f in (Path(folder) / "out").rglob("*.parquet"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    return {"points": state.evaluated, "grid": grid, "run_s": run_s, "cpu_s": cpu_s, "total_s": total_s,
            "per_s": state.evaluated / run_s, "peak_mib": peak, "front": len(report.front),
            "parquet_mib": size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", help="study YAML (default: a 2.5M-point toy space)")
    parser.add_argument("--problem", default="search.toy:toy_problem", help="problem factory module:function")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, help="evaluate about this many points only")
    parser.add_argument("--check", type=int, metavar="N", help="compare PredictManyProblem on N points")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check:
        print(check(load_study(args.study), args.check))
    if args.child:
        print(json.dumps(one_run(args.study, args.problem, args.limit)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    command = [sys.executable, __file__, "--child", "--problem", args.problem]
    command += ["--study", args.study] if args.study else []
    command += ["--limit", str(args.limit)] if args.limit else []
    runs = []
    for _ in range(args.repeats):
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        r = runs[-1]
        print(f"  {r['points']:,} of {r['grid']:,} points in {r['run_s']:.1f} s ({r['per_s']:,.0f}/s; "
              f"CPU {r['cpu_s']:.1f} s, {r['points'] / r['cpu_s']:,.0f}/s), "
              f"report {r['total_s'] - r['run_s']:.1f} s, peak RSS {r['peak_mib']:.0f} MiB, "
              f"front {r['front']}, Parquet {r['parquet_mib']:.0f} MiB")
    median = {k: statistics.median(r[k] for r in runs) for k in ("run_s", "per_s", "peak_mib", "total_s")}
    print(f"median over {args.repeats}: {median['per_s']:,.0f} configurations/s, "
          f"run {median['run_s']:.1f} s, with report {median['total_s']:.1f} s, "
          f"peak RSS {median['peak_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
