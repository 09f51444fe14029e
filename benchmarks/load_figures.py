"""Figures of the serving-under-load studies for docs/load.md.

Usage: python benchmarks/load_figures.py RESULTS_DIR... --output FILE.png
Reads ``trials.csv`` of each study results folder (``study run`` writes them) and draws
output tokens/s per GPU against tokens/s per user, one colour per GPU type and mode.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from energylens.workloads.load.plots import write_front_plot


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    write_front_plot(trials={folder.name: pd.read_csv(folder / "trials.csv")
                             for folder in args.results},
                     path=args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
