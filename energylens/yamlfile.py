"""Reading YAML: libyaml's C parser where PyYAML was built with it, else the pure-Python one.

Both feed PyYAML's safe constructor and resolver, so the documents come out the same; the
C parser reads the shipped data files (calibration, GPUs, models) about ten times faster,
which is most of a fresh process's first prediction.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """``yaml.safe_load`` through the fastest safe loader available."""
    return yaml.load(stream, Loader=_LOADER)  # noqa: S506 - a safe loader
