"""The K-shot curves of ``docs/k-shot.md``: ``python -m energylens.validation.kshot_report``.

Each dataset is converted to the measurement CSV, validated with ``k_shot`` for every K
and seed, and summarised per group: the mean absolute percentage error of one metric on
the rows not fitted on, averaged over the seeds (K = 0 fits nothing: one run); measured
steps (`validate steps --k-shot`) are read as they are, one group per file. Runs on
``--jobs`` processes; the LLM-Inference-Bench curves take ~10 min on 2 cores, the
AIConfigurator rows (simulated under load) longer.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration.file import calibration_document, default_calibration
from energylens.measurements.convert import Options, converters, to_csv
from energylens.measurements.user_csv import UserMeasurements, load_user_csv
from energylens.validation.kshot import BlindBase, MeasuredReport, group_key, k_shot

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


@dataclass(frozen=True)
class Dataset:
    """A source file, how it is converted, grouped and scored, and its target."""

    name: str
    format: str  # a converter's, or "measurements" for a file in the format already
    path: Path
    group_by: tuple[str, ...]
    metric: str
    ks: tuple[int, ...]
    limit: float  # MAPE target at the largest K listed in ``target_k``
    target_k: int
    options: Options = Options()
    # The data file as the calibration records it: each group starts from the calibration
    # without the engine constants fitted on it for the group's runtimes and GPUs (blind).
    blind: str | None = None


LIB_FILE = "data/measurements/llm-inference-bench/All_results.csv"


DATASETS = (
    Dataset("LLM-Inference-Bench static batches, per (framework, GPU): end-to-end latency, "
            "blind (each group from a calibration without the engine constants fitted on "
            "this file for its framework and GPU)",
            "llm-inference-bench", REPO / LIB_FILE, ("framework", "gpu"), "e2e_s", (0, 1, 3, 5),
            0.10, 3, blind=LIB_FILE),
    Dataset("LLM-Inference-Bench static batches, per (framework, model, GPU): end-to-end "
            "latency, blind (as above)",
            "llm-inference-bench", REPO / LIB_FILE, ("framework", "model", "gpu"), "e2e_s",
            (0, 1, 3, 5), 0.08, 3, blind=LIB_FILE),
    Dataset("LLM-Inference-Bench static batches, per (framework, GPU): end-to-end latency, "
            "the shipped calibration as it is (every framework's overheads fitted on these "
            "rows: K = 0 is in-sample)",
            "llm-inference-bench", REPO / LIB_FILE, ("framework", "gpu"), "e2e_s", (0, 1, 3, 5),
            0.10, 3),
    Dataset("ML.ENERGY lm-arena-chat steady-state serving, per (model, GPU): median ITL (the "
            "shipped calibration was fitted on these rows: K = 0 is in-sample)", "mlenergy",
            REPO / "data/measurements/mlenergy/tasks/lm-arena-chat.json", ("model", "gpu"),
            "itl_p50_s", (0, 1, 3, 5), 0.08, 3),
    Dataset("This project's engine-free Llama-3.1-8B steps (H100 and H200, bf16 and fp8; "
            "`validate steps --k-shot`), per (GPU, weight dtype): prefill and decode-step time",
            "steps", REPO / "data/measurements/energylens-gpu", ("gpu", "dtype"), "time",
            (0, 1, 3, 5), 0.08, 3),
    Dataset("AIConfigurator serving rows as steady-state serving (batch = concurrency), per "
            "engine: TPOT", "aiconfigurator", SHARED / "aiconfigurator/silicon_sample.csv",
            ("runtime",), "tpot_s", (0,), 0.12, 0, Options(load_as_serving=True)),
    Dataset("AIConfigurator serving rows under load (closed loop), per engine: TPOT",
            "measurements", REPO / "data/measurements/aiconfigurator/silicon_sample_agg.csv",
            ("runtime",), "tpot_s", (0,), 0.12, 0),
)


def _measurements(dataset: Dataset, folder: Path) -> UserMeasurements:
    if dataset.format == "measurements":  # converted already
        return load_user_csv(dataset.path)
    path = folder / f"{dataset.format}{'-as-serving' if dataset.options.load_as_serving else ''}.csv"
    if not path.exists():
        path.write_text(to_csv(converters()[dataset.format](dataset.path, dataset.options)))
    return load_user_csv(path)


#: Per group: rows, rows predicted, rows screened, the APEs scored, and the APEs of the
#: same rows without the overlay (K = 0 on the rows K scores).
GroupErrors = dict[str, tuple[int, int, int, list[float], list[float]]]


def group_errors(report: MeasuredReport, *, group_by: Sequence[str], metric: str) -> GroupErrors:
    """Per group: rows, rows predicted, rows screened (impossible or host-bound: never
    fitted on nor scored, as in ``validate``), the APEs of ``metric`` on the rows not
    fitted on, and the APEs of the group's base (K = 0) on exactly those rows."""
    out: GroupErrors = {}
    for outcome in report.rows:
        key = group_key(outcome.row, group_by)
        rows, predicted, screened, ape, base = out.get(key, (0, 0, 0, [], []))
        measured = outcome.row.measured.get(metric)
        if outcome.error is None:
            predicted += 1
            screened += outcome.screened is not None
            if (not outcome.fitted_on and outcome.screened is None and measured is not None
                    and metric in outcome.predicted and metric in outcome.base_predicted):
                ape.append(abs(outcome.predicted[metric] / measured - 1.0))
                base.append(abs(outcome.base_predicted[metric] / measured - 1.0))
        out[key] = (rows + 1, predicted, screened, ape, base)
    return out


def step_group_errors(*, path: Path, k: int, seed: int) -> GroupErrors:
    """:func:`group_errors` for measured steps: per (GPU, dtype), the APEs of step time on
    the rows no overlay was fitted on (this project's own steps: none screened)."""
    from energylens.validation.steps_kshot import k_shot_steps

    result = k_shot_steps(path=path, k=k, seed=seed, calibration=default_calibration())
    out: GroupErrors = {}
    for row, base in [*zip(result.report.rows, result.base, strict=True),
                      *((r, None) for r in result.fitted_on)]:
        key = f"gpu={row.gpu},dtype={row.dtype}"
        rows, predicted, screened, ape, same = out.get(key, (0, 0, 0, [], []))
        if base is not None:
            ape, same = ape + [abs(row.errors["time"])], same + [abs(base.errors["time"])]
        out[key] = (rows + 1, predicted + 1, screened, ape, same)
    return out


def _job(args: tuple[Dataset, int, int, str]) -> tuple[Dataset, int, int, dict]:
    dataset, k, seed, folder = args
    if dataset.format == "steps":
        return dataset, k, seed, step_group_errors(path=dataset.path, k=k, seed=seed)
    calibration = default_calibration()
    blind = (None if dataset.blind is None else
             BlindBase(document=calibration_document(calibration), data_file=dataset.blind))
    report = k_shot(_measurements(dataset, Path(folder)), k=k, group_by=dataset.group_by,
                    seed=seed, calibration=calibration, blind=blind)
    return dataset, k, seed, group_errors(report, group_by=dataset.group_by, metric=dataset.metric)


def _pct(values: list[float]) -> str:
    return f"{100 * float(np.mean(values)):.1f}" if values else "-"


def _columns(ks: Sequence[int]) -> list[tuple[int, bool]]:
    """Table columns (K, K = 0 on K's rows?): each K > 0 after K = 0 on its rows."""
    return [(k, False) if k == 0 else (k, at_zero) for k in ks
            for at_zero in ((False,) if k == 0 else (True, False))]


def _cells(columns: list[tuple[int, bool]], found: dict[int, list[float]],
           at_zero: dict[int, list[float]]) -> str:
    return " | ".join(_pct((at_zero if zero else found).get(k, [])) for k, zero in columns)


def render(results: list[tuple[Dataset, int, int, dict]], datasets: Sequence[Dataset],
           seeds: int) -> str:
    """Markdown tables, one per dataset: per group, MAPE per K (mean over seeds)."""
    lines: list[str] = []
    for dataset in datasets:
        mine = [r for r in results if r[0] == dataset]
        if not mine:
            continue
        # per group and K: the MAPE of each seed; ``same``: K = 0 on that seed's rows
        per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        same: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        sizes: dict[str, tuple[int, int, int]] = {}
        pooled: dict[int, list[float]] = defaultdict(list)
        pooled_same: dict[int, list[float]] = defaultdict(list)
        for _, k, _, groups in mine:
            for key, (rows, predicted, screened, ape, base) in groups.items():
                sizes[key] = (rows, predicted, screened)
                if ape:
                    per[key][k].append(float(np.mean(ape)))
                    same[key][k].append(float(np.mean(base)))
                pooled[k].extend(ape)
                pooled_same[k].extend(base)
        ks = dataset.ks
        columns = _columns(ks)

        lines += [f"### {dataset.name}", "",
                  f"Target: MAPE <= {100 * dataset.limit:.0f} % at K = {dataset.target_k}. "
                  f"K > 0: mean over {seeds} seeds of the group's MAPE on the rows not "
                  "fitted on; beside it, K = 0 (no overlay) on exactly those rows, seed by "
                  "seed, so that each gain is measured on one row set (K = 0 alone scores "
                  "every row, the K rows fitted on included). Screened rows (impossible: "
                  "faster than reading the weights once per pass at peak bandwidth; "
                  "host-bound: runs the host paced) are predicted, never fitted on nor "
                  "scored.", "",
                  "| group | rows | predicted | screened | "
                  + " | ".join(f"K=0 on K={k}'s rows %" if at_zero else f"K={k} MAPE %"
                               for k, at_zero in columns)
                  + " | target met |",
                  "|---|---|---|---|" + "---|" * len(columns) + "---|"]
        for key in sorted(sizes):
            rows, predicted, screened = sizes[key]
            if not predicted:
                continue
            gate = per[key].get(dataset.target_k)
            met = "-" if not gate else ("yes" if np.mean(gate) <= dataset.limit else "no")
            lines.append(f"| {key} | {rows} | {predicted} | {screened} | "
                         + _cells(columns, per[key], same[key]) + f" | {met} |")
        lines.append("| all predicted rows (pooled) | | | | " + _cells(columns, pooled, pooled_same)
                     + " | |")
        unpredicted = sorted(key for key, (_, predicted, _) in sizes.items() if not predicted)
        if unpredicted:
            lines += ["", f"Not predicted at all ({len(unpredicted)} groups): "
                      + "; ".join(unpredicted) + "."]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Compute the curves and print the tables (or write them to --output)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default=None, help="datasets whose name contains this text")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    datasets = [d for d in DATASETS if d.path.exists()
                and (args.only is None or args.only in d.name)]
    with tempfile.TemporaryDirectory() as folder:
        for dataset in datasets:
            if dataset.format != "steps":  # steps files are read as they are
                _measurements(dataset, Path(folder))
        jobs = [(d, k, s, folder) for d in datasets for k in d.ks
                for s in (range(args.seeds) if k else (0,))]
        jobs.sort(key=lambda job: job[0].format != "measurements")  # the longest run first
        results: list[tuple[Dataset, int, int, dict]] = []
        with multiprocessing.get_context("fork").Pool(max(args.jobs, 1)) as pool:
            for result in pool.imap_unordered(_job, jobs):
                results.append(result)
                if args.output:  # what is done so far, so that a long run can be read early
                    Path(args.output).write_text(render(results, datasets, args.seeds))
    text = render(results, datasets, args.seeds)
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
