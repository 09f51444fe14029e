"""A terminal console whose reader may go away (``... | head``)."""

from __future__ import annotations

import os
import sys

from rich.console import Console


class PipeConsole(Console):
    """rich's console exits with code 1 when its pipe closes; this one raises
    BrokenPipeError, the command line's to handle, with stdout sent to the null device so
    that nothing fails again on the way out."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError
