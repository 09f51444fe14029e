"""Files a command writes: checked before its work starts, so a bad path costs nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from energylens.errors import OutputPathError


def check_output(output: Path, *, force: bool, flag: str = "--output") -> None:
    """Refuse an output file that exists (without ``force``), is a folder, or cannot be
    written: its nearest existing folder must take a new file (missing folders below it
    are created when the file is written)."""
    if output.is_dir():
        raise OutputPathError(f"{output}: {flag} is a folder; expected a file path")
    if output.exists() and not force:
        raise OutputPathError(f"{output}: exists; use --force to overwrite it")
    folder = output.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:  # the one sure test, for root too: create a file there (and remove it)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".energylens-probe-")
    except OSError as exc:
        raise OutputPathError(f"{output}: cannot write into {folder} "
                              f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
