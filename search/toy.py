"""A cheap analytic test problem: a synthetic "deployment" with trade-offs and invalid points.

Knobs read (others are ignored, which the ablation tests rely on): ``gpu`` (small, medium,
large), ``gpus`` and ``tp`` (powers of two), ``batch`` (int), ``freq`` (relative clock,
float in (0, 1]) and ``fuse`` (bool). ``tp > gpus`` and configurations whose weights and
KV cache do not fit in memory are invalid with a reason. Metrics: ``latency_s``,
``tokens_per_s``, ``energy_per_token_j``, ``power_w``, ``memory_bytes``. Bigger batches
and more replicas raise throughput at a cost in latency or energy; lower clocks save energy
on compute-bound steps, so the front spans every knob but the ignored ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from search.config import StudyConfig
from search.problem import Evaluation, ProblemSchema, ValueCheck

GPUS = {  # speed, bandwidth, memory (bytes), static power (W), dynamic power (W)
    "small": (1.0, 1.0, 40e9, 90.0, 210.0),
    "medium": (2.0, 1.6, 80e9, 110.0, 260.0),
    "large": (3.2, 2.4, 141e9, 180.0, 600.0),
}
WEIGHTS_BYTES = 100e9
KV_BYTES_PER_SEQUENCE = 1.5e9

READ = ["gpu", "gpus", "tp", "batch", "freq", "fuse"]
"""The parameters the toy reads (any other is ignored)."""

TOY_SPACE: dict[str, Any] = {
    "knobs": {
        "gpu": {"type": "categorical", "values": list(GPUS), "baseline": "small"},
        "gpus": {"type": "ordinal", "values": [1, 2, 4, 8]},
        "tp": {"type": "ordinal", "values": [1, 2, 4, 8], "baseline": 1},
        "batch": {"type": "int", "low": 1, "high": 32},
        "freq": {"type": "float", "low": 0.6, "high": 1.0, "step": 0.05, "baseline": 1.0},
        "fuse": {"type": "bool", "baseline": False},
    },
}
"""A 27,648-point space over every knob the toy problem reads."""


def _one_of(*values: Any) -> ValueCheck:
    return lambda value: None if value in values else f"one of {', '.join(map(str, values))}"


def _positive(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return None if ok else "a number > 0"


TOY_SCHEMA = ProblemSchema(
    keys={"notes": "free text"},
    params={
        "gpu": _one_of(*GPUS),
        "gpus": _positive,
        "tp": _positive,
        "batch": _positive,
        "freq": lambda v: None if isinstance(v, int | float) and 0 < v <= 1 else "a clock fraction in (0, 1]",
        "fuse": lambda v: None if isinstance(v, bool) else "true or false",
    },
    metrics={
        "latency_s": "step time [s]",
        "tokens_per_s": "throughput [tokens/s]",
        "energy_per_token_j": "energy per token [J]",
        "power_w": "power of all GPUs [W]",
        "memory_bytes": "memory per GPU [B]",
    },
    color_by=("gpu",),
)
"""What the toy problem reads, for strict study files (``load_study(path, schema=TOY_SCHEMA)``)."""

TOY_STUDY: dict[str, Any] = {
    "name": "toy",
    "space": TOY_SPACE,
    "objectives": ["minimize energy_per_token_j", "minimize latency_s"],
    "constraints": ["latency_s <= 0.1", "tokens_per_s >= 400"],
}
"""A study over :data:`TOY_SPACE` (write it to YAML and load it with ``load_study``)."""


def write_toy_study(folder: Path, **overrides: Any) -> Path:
    """Write :data:`TOY_STUDY` updated with ``overrides`` to ``folder/<name>.yaml``."""
    study = {**TOY_STUDY, **overrides}
    path = Path(folder) / f"{study['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


class ToyDeployment:
    """Vectorised synthetic deployment model (see the module docstring)."""

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        """Evaluate one configuration."""
        return self.evaluate_many([params])[0]

    def evaluate_many(self, params: Sequence[Mapping[str, Any]]) -> list[Evaluation]:
        """Evaluate a batch with numpy."""
        metrics, reasons = _model(
            [p["gpu"] for p in params], {k: np.array([float(p[k]) for p in params]) for k in READ[1:]}
        )
        results = []
        for i, reason in enumerate(reasons):
            kept = {k: float(v[i]) for k, v in metrics.items() if not np.isnan(v[i])}
            results.append(Evaluation(kept, reason))
        return results

    def evaluate_table(self, table: pd.DataFrame) -> pd.DataFrame:
        """Evaluate every row of ``table`` (columns: at least :data:`READ`) at once: one column
        per metric (NaN where the configuration cannot run) plus ``infeasible_reason``."""
        metrics, reasons = _model(table["gpu"], {k: table[k].to_numpy(dtype=float) for k in READ[1:]})
        frame = pd.DataFrame(metrics, index=table.index)
        frame["infeasible_reason"] = pd.Series(reasons, index=table.index, dtype=object)
        return frame


def _model(
    gpu: list[str] | pd.Series, knobs: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Metric arrays (NaN where a configuration cannot run) and the reasons (None: it runs)."""
    if isinstance(gpu, pd.Series):  # a column: one lookup per distinct GPU
        spec = np.stack([gpu.astype(object).map({k: v[j] for k, v in GPUS.items()}).to_numpy(dtype=float)
                         for j in range(5)], axis=1)
    else:
        spec = np.array([GPUS[name] for name in gpu], dtype=float).reshape(-1, 5)
    speed, bandwidth, memory, static_w, dynamic_w = spec.T
    gpus, tp, batch, freq, fuse = (knobs[k] for k in READ[1:])
    need = (WEIGHTS_BYTES + batch * KV_BYTES_PER_SEQUENCE) / tp
    memory_s = need / (bandwidth * 1e12) * np.where(fuse > 0, 0.9, 1.0)
    compute_s = batch * 1e-2 / (speed * tp * freq) * np.where(fuse > 0, 0.8, 1.0)
    comm_s = np.where(tp > 1, 0.004 * np.log2(tp) * (1 + batch / 32), 0.0)
    replicas = np.maximum(gpus // tp, 1)
    step_s = np.maximum(compute_s, memory_s) + comm_s + 0.002
    busy = compute_s / np.maximum(compute_s, memory_s)
    power_w = static_w * (1 + 0.1 * np.log2(replicas)) + dynamic_w * freq**2.5 * (0.4 + 0.6 * busy)
    too_wide, too_big = tp > gpus, need > memory
    invalid = too_wide | too_big
    metrics = {
        "latency_s": step_s,
        "tokens_per_s": batch * replicas / step_s,
        "energy_per_token_j": gpus * power_w * step_s / (batch * replicas),
        "power_w": gpus * power_w,
    }
    metrics = {k: np.where(invalid, np.nan, v) for k, v in metrics.items()}
    metrics["memory_bytes"] = np.where(too_wide, np.nan, need)
    reasons: list[Any] = [None] * len(gpus)
    for i in np.flatnonzero(too_big):
        reasons[i] = f"needs {need[i] / 1e9:.1f} GB per GPU > {memory[i] / 1e9:.0f} GB"
    for i in np.flatnonzero(too_wide):
        reasons[i] = f"tp={tp[i]:.0f} > gpus={gpus[i]:.0f}"
    return metrics, reasons


def toy_problem(config: StudyConfig) -> ToyDeployment:
    """Problem factory for commands and benchmarks (the toy ignores ``config.problem``)."""
    del config
    return ToyDeployment()
