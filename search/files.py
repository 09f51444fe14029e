"""Writing results safely: atomic files, and results folders that belong to one study.

Every report file is written to a temporary file in the same folder and renamed over the
target, so a killed run leaves the previous file or the new one, never a truncated one.
A results folder records which study and storage it belongs to (``.study.json``); writing
another study's results into it, or into a non-empty folder no study wrote, needs ``force``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

OWNER_FILE = ".study.json"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()
"""Mode of written files: what ``open`` would give (temporary files start private)."""


class ResultsError(RuntimeError):
    """A results folder or file that cannot be written, or belongs to something else."""


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) that replaces it when the block ends
    without an exception, and is removed otherwise."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write ({exc.strerror or exc})") from None
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, FILE_MODE)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, write: Callable[[IO[str]], object]) -> None:
    """Write text through ``write(file)`` into ``path`` atomically."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as f:
        write(f)


def claim_results(folder: Path, *, study: str, storage: str, force: bool) -> None:
    """Make ``folder`` the results folder of ``study`` in ``storage`` (creating it).

    A folder without an owner file that holds ``storage`` itself (the default journal file
    sits in the results folder; studies run before owner files existed) is the study's.

    Raises:
        ResultsError: the folder holds another study's results, or files no study wrote
            (unless ``force``), or cannot be written.
    """
    owner = {"study": study, "storage": storage}
    marker = folder / OWNER_FILE
    if not force:
        if marker.is_file():
            try:
                found = json.loads(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                found = None
            if found == owner:
                return
            if isinstance(found, dict):
                raise ResultsError(
                    f"{folder}: holds the results of study {found.get('study')!r} in "
                    f"{found.get('storage')}; use --force to overwrite them, or choose another results folder"
                )
        if folder.is_file():
            raise ResultsError(f"{folder}: results: is a file, expected a folder")
        holds_storage = Path(storage).parent == folder and Path(storage).is_file()
        if folder.is_dir() and not holds_storage and any(p.name != OWNER_FILE for p in folder.iterdir()):
            raise ResultsError(
                f"{folder}: exists and was not written by a study; use --force to write into it"
            )
    write_atomic(marker, lambda f: json.dump(owner, f))
