"""Reports of exhaustive grids: the shards of :mod:`search.exhaustive` merged into one front.

``pareto.csv`` holds the feasible non-dominated configurations of every shard together
(``grid_index``, knobs, objective and SLO metrics, then the other metrics), best first
objective first; ``pareto.png`` (and ``pareto.html`` with plotly) draw it over a uniform
sample of at most :data:`PLOT_SAMPLE` evaluated points read back from the chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from search.config import StudyConfig
from search.exhaustive import (
    FEASIBLE_COLUMN,
    INDEX_COLUMN,
    Shard,
    ShardState,
    chunk_files,
    exhaustive_folder,
    merge_fronts,
    read_state,
)
from search.files import ResultsError, write_atomic
from search.frame import blank_inactive, distinct_configurations, metric_columns
from search.plots import plot_pareto, plotted_columns, write_pareto_html
from search.problem import REASON_COLUMN, FrontAnnotator

PLOT_SAMPLE = 20_000
"""Evaluated points drawn behind the front."""
_SHARD_FOLDER = re.compile(r"^shard-(\d+)-of-(\d+)$")


@dataclass(frozen=True, eq=False)
class GridReport:
    """What :func:`write_grid_report` wrote and found."""

    front: pd.DataFrame
    grid_size: int
    evaluated: int
    feasible: int
    shards: list[ShardState]
    files: list[Path]

    @property
    def missing(self) -> list[str]:
        """Shards not (completely) run yet, as ``K/N``."""
        count = self.shards[0].shard.count if self.shards else 1
        done = {s.shard.index for s in self.shards if s.complete}
        return [f"{k}/{count}" for k in range(1, count + 1) if k not in done]


def has_grid_results(config: StudyConfig) -> bool:
    """Whether any shard of an exhaustive grid of ``config`` was written."""
    folder = exhaustive_folder(config)
    return folder.is_dir() and any(_SHARD_FOLDER.match(p.name) for p in folder.iterdir())


def shard_states(config: StudyConfig) -> list[ShardState]:
    """The recorded state of every shard, in shard order.

    Raises:
        ResultsError: no shard yet, or shards of different splits (e.g. 1/2 beside 1/4).
    """
    folder = exhaustive_folder(config)
    found = sorted(
        (Shard(int(m.group(1)), int(m.group(2))), p)
        for p in (folder.iterdir() if folder.is_dir() else [])
        if (m := _SHARD_FOLDER.match(p.name))
    )
    if not found:
        raise ResultsError(f"{folder}: no exhaustive grid results; run the study first")
    splits = sorted({shard.count for shard, _ in found})
    if len(splits) > 1:
        raise ResultsError(
            f"{folder}: shards of different splits ({', '.join(f'of {n}' for n in splits)}); "
            "keep the folders of one split"
        )
    states = [read_state(path) for _, path in found]
    return [s for s in states if s is not None]


def write_grid_report(*, config: StudyConfig, annotate: FrontAnnotator | None = None) -> GridReport:
    """Merge the shards' fronts and write ``pareto.csv`` (with the columns ``annotate``
    adds), ``pareto.png`` and, with plotly, ``pareto.html`` into ``config.results``.

    Raises:
        ResultsError: see :func:`shard_states`.
    """
    states = shard_states(config)
    front = merge_fronts(config, [s.front for s in states])
    if not front.empty:  # one deployment once, whatever the knobs it does not read
        front = distinct_configurations(config, blank_inactive(config, front))
    front = _ordered(config, front)
    if annotate is not None:
        front = annotate(config, front)
    folder = config.results
    write_atomic(folder / "pareto.csv", lambda f: front.to_csv(f, index=False))
    sample = _sample(config, [exhaustive_folder(config) / s.shard.folder_name for s in states])
    plotted = front.assign(number=front[INDEX_COLUMN])  # one objective is drawn against it
    plot_pareto(config=config, trials=sample, front=plotted, path=folder / "pareto.png")
    files = [folder / "pareto.csv", folder / "pareto.png"]
    if write_pareto_html(config=config, trials=sample, front=plotted, path=folder / "pareto.html"):
        files.append(folder / "pareto.html")
    return GridReport(
        front=front,
        grid_size=config.space.grid_size,
        evaluated=sum(s.evaluated for s in states),
        feasible=sum(s.feasible for s in states),
        shards=states,
        files=files,
    )


def _ordered(config: StudyConfig, front: pd.DataFrame) -> pd.DataFrame:
    if front.empty:
        return pd.DataFrame(columns=[INDEX_COLUMN, *config.space.names, *metric_columns(config)])
    first = metric_columns(config)
    columns = [INDEX_COLUMN, *config.space.names, *first]
    columns += [c for c in front.columns if c not in columns]
    objective = config.objectives[0]
    ascending = objective.direction == "minimize"
    front = front[columns].sort_values(objective.metric, ascending=ascending, kind="stable")
    return front.reset_index(drop=True)


def _sample(config: StudyConfig, folders: list[Path]) -> pd.DataFrame:
    """Every k-th evaluated row of every chunk, at most about :data:`PLOT_SAMPLE` rows, with
    the columns the plots read."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # only where a grid is reported

    xcol, ycol = plotted_columns(config)
    wanted = [INDEX_COLUMN, *config.space.names, *{xcol, ycol} - {"number"}, FEASIBLE_COLUMN, REASON_COLUMN]
    files = [f for folder in folders for f in chunk_files(folder)]
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    step = max(1, -(-rows // PLOT_SAMPLE))
    parts = []
    for path in files:
        table = pq.read_table(path, columns=[c for c in wanted if c in pq.read_schema(path).names])
        parts.append(table.take(np.arange(0, table.num_rows, step)).to_pandas())
    sample = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=wanted)
    for column in (xcol, ycol):
        if column not in sample:
            sample[column] = np.nan
    sample[REASON_COLUMN] = sample[REASON_COLUMN].fillna("")
    sample = sample.assign(number=sample[INDEX_COLUMN]).astype({FEASIBLE_COLUMN: bool})
    return blank_inactive(config, sample)


__all__ = ["GridReport", "has_grid_results", "shard_states", "write_grid_report"]
