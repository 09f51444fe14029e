"""The cost model's parallel layouts against LLM-Inference-Bench's layout comparison:
TensorRT-LLM static batches under tensor, pipeline and expert parallelism and their hybrids
on one to four A100 40 GB (``Fig_5_b/TP_EP_PP_results.csv``).

Usage: python benchmarks/validate_layouts.py [--file CSV] [--markdown]

No layout is fitted anywhere: ``energylens calibrate`` fits TensorRT-LLM's A100 engine
constants on the bench's ``All_results.csv``, which holds the tensor-parallel rows this file
repeats. So each table is given twice: with the shipped calibration and blind (those
constants replaced by their stand-ins, as ``validate measurements --forget-fits-on`` does).
Prints the end-to-end latency error per layout, and for every (model, GPUs, length, batch)
measured under two layouts or more whether the model orders the layouts as measured: the
fastest one, and every pair. Validation only: nothing is fitted.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

from energylens.calibration.file import calibration_document, default_calibration
from energylens.calibration.forget import forget_fits
from energylens.cost.constants import Calibration
from energylens.hardware import load_gpu
from energylens.measurements.formats import bench_gpu
from energylens.measurements.inference_bench import RUNTIMES
from energylens.validation.accuracy import bench_layout
from energylens.validation.predictors import RowResult, validate

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "data" / "measurements" / "llm-inference-bench" / "Fig_5_b" / "TP_EP_PP_results.csv"
FITTED_ON = "data/measurements/llm-inference-bench/All_results.csv"


def blind_calibration(rows: list[RowResult]) -> Calibration:
    """The shipped calibration without the engine constants fitted on ``All_results.csv``
    for the (runtime, GPU) pairs of ``rows``."""
    shipped = default_calibration()
    pairs = {(RUNTIMES[str(r.input["Framework"])], load_gpu(bench_gpu(str(r.input["Hardware"]))).name)
             for r in rows}
    return forget_fits(calibration=shipped, document=calibration_document(shipped),
                       data_file=FITTED_ON, pairs=pairs)


def _error(row: RowResult) -> float | None:
    if row.error is not None or "latency_s" not in row.predicted:
        return None
    return row.predicted["latency_s"] / row.measured["latency_s"] - 1


def per_layout(runs: dict[str, list[RowResult]]) -> list[str]:
    """Markdown: end-to-end latency MAPE and median signed error per layout and run."""
    names = list(runs)
    first = runs[names[0]]
    layouts = sorted({bench_layout(r) for r in first}, key=lambda s: (s != "1 GPU", s))
    head = "| layout | rows | " + " | ".join(f"MAPE {n} (median error)" for n in names) + " |"
    out = [head, "|---|---|" + "---|" * len(names)]
    for layout in layouts:
        cells = []
        for name in names:
            errors = [e for r in runs[name] if bench_layout(r) == layout
                      and (e := _error(r)) is not None]
            cells.append(f"{100 * statistics.fmean(abs(e) for e in errors):.1f} % "
                         f"({100 * statistics.median(errors):+.0f} %)")
        count = sum(bench_layout(r) == layout for r in first)
        out.append(f"| {layout} | {count} | " + " | ".join(cells) + " |")
    return out


def orderings(rows: list[RowResult]) -> list[str]:
    """Markdown: per (model, GPUs, length, batch) measured under >= 2 layouts, the fastest
    layout measured and predicted, and how many layout pairs the model orders as measured
    (a layout measured more than once takes its median)."""
    groups: dict[tuple, dict[str, list[tuple[float, float]]]] = {}
    for r in rows:
        if _error(r) is None:
            continue
        key = (str(r.input["Model"]).split("/")[-1], int(r.input["Num of Hardware"]),
               int(r.input["Input Output Length"]), int(r.input["Batch Size"]))
        groups.setdefault(key, {}).setdefault(bench_layout(r), []).append(
            (r.measured["latency_s"], r.predicted["latency_s"]))
    out = ["| model | GPUs | tokens in = out | batch | measured, fastest first (s) | "
           "predicted (s) | same fastest | pairs in order |", "|---|---|---|---|---|---|---|---|"]
    same = pairs = agree = 0
    for key in sorted(groups):
        layouts = {k: (statistics.median(m for m, _ in v), v[0][1])
                   for k, v in groups[key].items()}
        if len(layouts) < 2:
            continue
        by_measured = sorted(layouts, key=lambda k: layouts[k][0])
        fastest_predicted = min(layouts, key=lambda k: layouts[k][1])
        ordered = [(layouts[a][0] < layouts[b][0]) == (layouts[a][1] < layouts[b][1])
                   for a, b in itertools.combinations(layouts, 2)]
        same += fastest_predicted == by_measured[0]
        pairs += len(ordered)
        agree += sum(ordered)
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | "
                   + ", ".join(f"{k} {layouts[k][0]:.2f}" for k in by_measured) + " | "
                   + ", ".join(f"{layouts[k][1]:.2f}" for k in by_measured) + " | "
                   + ("yes" if fastest_predicted == by_measured[0] else
                      f"no ({fastest_predicted})") + f" | {sum(ordered)} of {len(ordered)} |")
    groups_n = len(out) - 2
    out.append(f"\nSame fastest layout in {same} of {groups_n} groups; {agree} of {pairs} "
               "layout pairs in the measured order.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=FILE)
    args = parser.parse_args()
    shipped = validate(format="llm-inference-bench", path=args.file, calibration=None).rows
    blind = validate(format="llm-inference-bench", path=args.file,
                     calibration=blind_calibration(shipped)).rows
    print("\n".join(per_layout({"shipped": shipped, "blind": blind})))
    print()
    print("Shipped calibration:")
    print("\n".join(orderings(shipped)))
    print()
    print("Blind:")
    print("\n".join(orderings(blind)))


if __name__ == "__main__":
    main()
