"""What runs: the workload a deployment serves (its kind names a registered scheduler)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from energylens.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Workload:
    """``batch``: one static batch, prefill then decode. ``serving``: continuous batching
    at steady state with ``batch`` running sequences of mean input/output lengths."""

    kind: str = "batch"
    batch: float = 1  # may be fractional in ``serving`` (a measured mean)
    input_tokens: float = 512
    output_tokens: float = 128

    def __post_init__(self) -> None:
        from energylens.workloads.registry import kind_names

        if self.kind not in kind_names():
            raise ConfigError(f"workload must be one of {', '.join(kind_names())}, got {self.kind!r}")
        for name in ("batch", "input_tokens", "output_tokens"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a finite number > 0, got {value}")
