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
    color_by="gpu",
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
        spec = np.array([GPUS[p["gpu"]] for p in params]).reshape(-1, 5)
        speed, bandwidth, memory, static_w, dynamic_w = spec.T
        gpus, tp, batch, freq, fuse = (
            np.array([float(p[k]) for p in params]) for k in ("gpus", "tp", "batch", "freq", "fuse")
        )
        need = (WEIGHTS_BYTES + batch * KV_BYTES_PER_SEQUENCE) / tp
        memory_s = need / (bandwidth * 1e12) * np.where(fuse > 0, 0.9, 1.0)
        compute_s = batch * 1e-2 / (speed * tp * freq) * np.where(fuse > 0, 0.8, 1.0)
        comm_s = np.where(tp > 1, 0.004 * np.log2(tp) * (1 + batch / 32), 0.0)
        replicas = np.maximum(gpus // tp, 1)
        step_s = np.maximum(compute_s, memory_s) + comm_s + 0.002
        busy = compute_s / np.maximum(compute_s, memory_s)
        power_w = static_w * (1 + 0.1 * np.log2(replicas)) + dynamic_w * freq**2.5 * (0.4 + 0.6 * busy)
        metrics = {
            "latency_s": step_s,
            "tokens_per_s": batch * replicas / step_s,
            "energy_per_token_j": gpus * power_w * step_s / (batch * replicas),
            "power_w": gpus * power_w,
            "memory_bytes": need,
        }
        results = []
        for i in range(len(params)):
            if tp[i] > gpus[i]:
                results.append(Evaluation({}, f"tp={tp[i]:.0f} > gpus={gpus[i]:.0f}"))
            elif need[i] > memory[i]:
                results.append(
                    Evaluation(
                        {"memory_bytes": float(need[i])},
                        f"needs {need[i] / 1e9:.1f} GB per GPU > {memory[i] / 1e9:.0f} GB",
                    )
                )
            else:
                results.append(Evaluation({k: float(v[i]) for k, v in metrics.items()}))
        return results


def toy_problem(config: StudyConfig) -> ToyDeployment:
    """Problem factory for commands and benchmarks (the toy ignores ``config.problem``)."""
    del config
    return ToyDeployment()
