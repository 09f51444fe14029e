"""A rich progress bar over finished trials, shown only when stdout is a terminal, and a
clean stop on Ctrl-C: the first SIGINT asks the engine to stop after the trial (or batch) it
is running, so that nothing is left half-written; a second one interrupts at once."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

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
        self.stop_requested = False
        """Set by Ctrl-C (:func:`stop_on_interrupt`): the engine should return after the
        trial or batch it is evaluating."""

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


@contextmanager
def stop_on_interrupt(progress: TrialProgress) -> Iterator[None]:
    """While the block runs, the first Ctrl-C sets ``progress.stop_requested`` and a second one
    raises ``KeyboardInterrupt``; if a stop was requested, ``KeyboardInterrupt`` is raised when
    the block ends. Outside the main thread (no signal handlers there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if progress.stop_requested:
            raise KeyboardInterrupt
        progress.stop_requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if progress.stop_requested:
        raise KeyboardInterrupt
