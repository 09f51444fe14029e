"""Exhaustive grids: every point of an enumerable space, evaluated in columnar chunks and
written to Parquet with a running feasible Pareto front (no Optuna trial per point).

Selected by ``engine: grid`` with ``sampler: exhaustive`` (or ``--shard K/N`` on the command
line). A shard ``K/N`` covers the K-th of N contiguous, near-equal ranges of grid indices; its
files live in ``<results>/exhaustive/shard-K-of-N/``:

* ``manifest.json``: the study definition (:func:`search.runner.definition`), grid size,
  index range and chunk size; a rerun with anything else is refused.
* ``chunk-000000.parquet`` ...: one row per configuration: ``grid_index``, the knobs, every
  metric the problem computed, ``feasible`` and ``infeasible_reason`` (why it cannot run;
  null when it can; SLO misses are not spelled out, ``feasible`` is false).
* ``front-000007.parquet``: the feasible non-dominated rows of chunks 0..7.
* ``state.json``: chunks folded into the front, counts, and the front file's name.

Every file is written to a temporary file and renamed, ``state.json`` last. A killed run
keeps every complete chunk; a rerun removes temporary leftovers, folds complete chunks newer
than ``state.json`` into the front and continues after the last complete chunk. A lock file
(``.lock``, its owner's host and pid) keeps two processes off one shard; one left by a dead
process of this host is taken over.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]

from search.config import StudyError
from search.files import ResultsError, atomic_path, write_atomic
from search.pareto import non_dominated_mask
from search.problem import REASON_COLUMN, Problem, evaluate_frame
from search.progress import stop_on_interrupt, trial_progress
from search.runner import StudyStateError, definition, differences

if TYPE_CHECKING:
    from search.config import StudyConfig

CHUNK_ROWS = 2**16
"""Configurations evaluated, and written to one Parquet file, at a time: the whole 19.5-million
point quickstart grid peaked at 502 MiB with 2**17 (predict_many's intermediate arrays), so 2**16."""
INDEX_COLUMN = "grid_index"
FEASIBLE_COLUMN = "feasible"
FOLDER = "exhaustive"
COMPRESSION = "snappy"
"""Parquet compression of chunks: snappy writes 2-2.5x faster than zstd, files about 20 % larger."""
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_CHUNK = re.compile(r"^chunk-(\d{6})\.parquet$")


@dataclass(frozen=True, order=True)
class Shard:
    """The ``index``-th (1-based) of ``count`` contiguous parts of a grid."""

    index: int = 1
    count: int = 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def folder_name(self) -> str:
        """``shard-K-of-N``."""
        return f"shard-{self.index}-of-{self.count}"

    def bounds(self, grid_size: int) -> tuple[int, int]:
        """Grid indices ``[start, stop)`` of this shard."""
        return (self.index - 1) * grid_size // self.count, self.index * grid_size // self.count


def parse_shard(text: str) -> Shard:
    """``"K/N"`` (1 <= K <= N) -> :class:`Shard`.

    Raises:
        StudyError: anything else.
    """
    match = _SHARD.match(text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise StudyError(f"--shard: expected K/N with 1 <= K <= N (e.g. 2/4), got {text!r}")
    return Shard(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class ShardState:
    """What a shard's folder holds after its last complete chunk."""

    shard: Shard
    chunks: int
    evaluated: int
    feasible: int
    size: int
    front: pd.DataFrame

    @property
    def complete(self) -> bool:
        """Every point of the shard was evaluated."""
        return self.evaluated >= self.size


def exhaustive_folder(config: StudyConfig) -> Path:
    """Where the shards of ``config`` are written."""
    return config.results / FOLDER


def run_exhaustive(
    *,
    config: StudyConfig,
    problem: Problem,
    shard: Shard = Shard(),
    chunk_rows: int | None = None,
    progress: bool = False,
) -> ShardState:
    """Evaluate every grid point of ``shard`` not yet written, ``chunk_rows`` at a time.

    Each chunk is generated with :meth:`Space.grid_block`, evaluated with
    :func:`search.problem.evaluate_frame` (the problem's ``evaluate_table`` when it has one),
    written as Parquet and folded into the running front. The first Ctrl-C stops after the
    chunk in flight (``KeyboardInterrupt`` is raised then). ``chunk_rows`` (default: the
    shard folder's own, else :data:`CHUNK_ROWS`) is the chunk size.

    Raises:
        StudyStateError: the shard's folder was written for another definition or chunk size.
        ResultsError: another live process runs this shard, or a file cannot be written.
    """
    folder = exhaustive_folder(config) / shard.folder_name
    start, stop = shard.bounds(config.space.grid_size)
    with _locked(folder):
        chunk_rows = chunk_rows or _written_chunk_rows(folder) or CHUNK_ROWS
        _check_manifest(config, folder, shard, start, stop, chunk_rows)
        state = _recover(config, folder, shard, stop - start)
        n_chunks = -(-(stop - start) // chunk_rows)
        with trial_progress(
            enabled=progress, description=f"{config.name} {shard}", done=state.evaluated, total=stop - start
        ) as bar, stop_on_interrupt(bar):
            for chunk in range(state.chunks, n_chunks):
                if bar.stop_requested:
                    break
                lo = start + chunk * chunk_rows
                hi = min(lo + chunk_rows, stop)
                rows = _evaluate_chunk(config, problem, lo, hi)
                _write_parquet(folder / _chunk_name(chunk), rows)
                state = _fold(config, state, rows, chunk + 1)
                _save_state(folder, state)
                bar.advance(hi - lo)
    return state


def _evaluate_chunk(config: StudyConfig, problem: Problem, start: int, stop: int) -> pd.DataFrame:
    """The chunk's rows: grid index, knobs, metrics, feasibility and reason."""
    knobs = config.space.grid_block(start, stop)
    table = knobs.assign(**{k: [v] * len(knobs) for k, v in config.space.fixed.items()})
    metrics = evaluate_frame(problem, table)
    reasons = metrics.pop(REASON_COLUMN)
    feasible = feasibility(config, metrics, reasons)
    rows = pd.concat([knobs, metrics.drop(columns=[c for c in knobs.columns if c in metrics])], axis=1)
    rows[FEASIBLE_COLUMN] = feasible
    rows[REASON_COLUMN] = reasons.astype(object).where(reasons.notna(), None)
    return rows.reset_index()


def feasibility(config: StudyConfig, metrics: pd.DataFrame, reasons: pd.Series) -> np.ndarray:
    """Feasible rows: runnable (no reason) and within every SLO (a metric column the problem
    did not return, e.g. in a chunk where nothing can run, is NaN: infeasible).

    Raises:
        ValueError: a runnable row lacks an objective or SLO metric, or has a non-finite one
            (a bug in the problem, as :func:`search.outcome.make_outcome` says).
    """
    runnable = reasons.isna().to_numpy()
    feasible = runnable.copy()
    needed = [o.metric for o in config.objectives] + [c.metric for c in config.constraints]
    values = {
        name: metrics[name].to_numpy(dtype=float) if name in metrics else np.full(len(metrics), np.nan)
        for name in dict.fromkeys(needed)
    }
    for name, column in values.items():
        bad = runnable & ~np.isfinite(column)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"metric {name!r} is {column[i] if name in metrics else 'missing'} in a valid evaluation"
                f" (row {metrics.index[i]})"
            )
    for constraint in config.constraints:
        with np.errstate(invalid="ignore"):
            feasible &= constraint.violations(values[constraint.metric]) <= 0
    return feasible


def _fold(config: StudyConfig, state: ShardState, rows: pd.DataFrame, chunks: int) -> ShardState:
    feasible = rows[rows[FEASIBLE_COLUMN].to_numpy()]
    front = merge_fronts(config, [state.front, front_of(config, feasible)])
    return ShardState(
        state.shard, chunks, state.evaluated + len(rows), state.feasible + len(feasible), state.size, front
    )


def front_of(config: StudyConfig, rows: pd.DataFrame) -> pd.DataFrame:
    """The non-dominated rows of ``rows`` (all feasible), without the feasibility columns."""
    rows = rows.drop(columns=[c for c in (FEASIBLE_COLUMN, REASON_COLUMN) if c in rows.columns])
    if rows.empty:
        return rows
    names = [o.metric for o in config.objectives]
    return rows[non_dominated_mask(rows[names].to_numpy(dtype=float), directions=config.directions)]


def merge_fronts(config: StudyConfig, fronts: list[pd.DataFrame]) -> pd.DataFrame:
    """The non-dominated rows of several fronts together, in grid order."""
    parts = [f for f in fronts if not f.empty]
    if not parts:
        return fronts[-1] if fronts else pd.DataFrame()
    merged = front_of(config, pd.concat(parts, ignore_index=True))
    return merged.sort_values(INDEX_COLUMN, kind="stable").reset_index(drop=True)


def read_state(folder: Path) -> ShardState | None:
    """The state a shard's folder records (None: no state yet)."""
    path = folder / "state.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        front = pd.read_parquet(folder / data["front"]) if data["front"] else pd.DataFrame()
        shard = Shard(*data["shard"])
        return ShardState(shard, data["chunks"], data["evaluated"], data["feasible"], data["size"], front)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        message = f"{path}: cannot read the shard state ({exc}); remove the shard's folder"
        raise ResultsError(message) from None


def _recover(config: StudyConfig, folder: Path, shard: Shard, size: int) -> ShardState:
    """The shard's state with every complete chunk on disk folded in; temporary files removed."""
    for leftover in folder.glob(".*.tmp*"):
        leftover.unlink(missing_ok=True)
    state = read_state(folder) or ShardState(shard, 0, 0, 0, size, pd.DataFrame())
    chunks = chunk_files(folder)
    for number in range(state.chunks, len(chunks)):
        state = _fold(config, state, pd.read_parquet(chunks[number]), number + 1)
    if len(chunks) != state.chunks:
        raise ResultsError(f"{folder}: chunk files are not numbered 0..{len(chunks) - 1}; remove the folder")
    return state


def chunk_files(folder: Path) -> list[Path]:
    """Complete chunk files of a shard, in order (stops at the first missing number)."""
    numbers = sorted(int(m.group(1)) for p in folder.glob("chunk-*.parquet") if (m := _CHUNK.match(p.name)))
    files = []
    for expected, number in enumerate(numbers):
        if number != expected:
            break
        files.append(folder / _chunk_name(number))
    return files


def _chunk_name(number: int) -> str:
    return f"chunk-{number:06d}.parquet"


def _save_state(folder: Path, state: ShardState) -> None:
    name = f"front-{state.chunks - 1:06d}.parquet" if not state.front.empty else ""
    if name:
        _write_parquet(folder / name, state.front)
    data = {
        "shard": [state.shard.index, state.shard.count],
        "chunks": state.chunks,
        "evaluated": state.evaluated,
        "feasible": state.feasible,
        "size": state.size,
        "front": name,
    }
    write_atomic(folder / "state.json", lambda f: json.dump(data, f, indent=1))
    for old in folder.glob("front-*.parquet"):
        if old.name != name:
            old.unlink(missing_ok=True)


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # only where Parquet is written

    table = pa.Table.from_pandas(frame, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression=COMPRESSION)


def _manifest(config: StudyConfig, shard: Shard, start: int, stop: int, chunk_rows: int) -> dict[str, Any]:
    return {
        "study": config.name,
        "definition": definition(config),
        "grid_size": config.space.grid_size,
        "shard": str(shard),
        "start": start,
        "stop": stop,
        "chunk_rows": chunk_rows,
    }


def _written_chunk_rows(folder: Path) -> int | None:
    """The chunk size a shard folder was written with (None: no readable manifest yet)."""
    try:
        return int(json.loads((folder / "manifest.json").read_text())["chunk_rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_manifest(
    config: StudyConfig, folder: Path, shard: Shard, start: int, stop: int, chunk_rows: int
) -> None:
    expected = _manifest(config, shard, start, stop, chunk_rows)
    path = folder / "manifest.json"
    if not path.exists():
        write_atomic(path, lambda f: json.dump(expected, f, indent=1))
        return
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc}); remove the shard's folder") from None
    changes = differences(found, expected)
    if changes:
        raise StudyStateError(
            f"{folder} was written for another study ({'; '.join(changes[:3])}); run the edited file "
            "under --new-study NAME, or remove the folder"
        )


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` (host:pid) while the block runs."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    owner = f"{socket.gethostname()}:{os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = lock.read_text().strip() if lock.exists() else ""
            if not _dead(holder):
                who = holder or "unknown"
                raise ResultsError(f"{folder}: another process ({who}) runs this shard") from None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(owner)
        break
    else:
        raise ResultsError(f"{folder}: cannot take the shard's lock")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _dead(holder: str) -> bool:
    host, _, pid = holder.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
