"""``--json`` output: strict JSON, a figure that does not exist (NaN, infinite) as null."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def strict(payload: Any) -> Any:
    """``payload`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(payload, float):
        return payload if math.isfinite(payload) else None
    if isinstance(payload, Mapping):
        return {key: strict(value) for key, value in payload.items()}
    if isinstance(payload, list | tuple):
        return [strict(value) for value in payload]
    return payload


def print_json(payload: Any) -> None:
    """Print ``payload`` as one line of strict JSON."""
    print(json.dumps(strict(payload), allow_nan=False))
