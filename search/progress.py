"""A rich progress bar over finished trials, shown only when stdout is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrialProgress:
    """Counts finished trials; draws a bar when given a rich ``Progress``."""

    def __init__(self, progress: Progress | None = None, task: TaskID | None = None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: int = 1) -> None:
        """Report ``n`` more finished trials."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, n)


@contextmanager
def trial_progress(*, enabled: bool, description: str, done: int, total: int) -> Iterator[TrialProgress]:
    """A progress bar from ``done`` to ``total`` trials if ``enabled`` and stdout is a TTY."""
    if not (enabled and sys.stdout.isatty()):
        yield TrialProgress()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total, completed=done)
        yield TrialProgress(progress, task)
