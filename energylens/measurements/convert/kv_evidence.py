"""The KV-cache precision a closed-loop run must have had, from its own measured numbers.

A closed loop of ``C`` clients keeps ``C`` requests in flight; a request decodes for
``(e2e - ttft) / e2e`` of its life, holding its prompt and, on average, half its output in
the cache. Where a run's measured TTFT and TPOT put more tokens resident than the engine's
16-bit cache holds on its GPUs and layout (this project's memory accounting: weights,
activations, reserve, the engine's memory share) by more than :data:`IN_FLIGHT_MARGIN`,
the run cannot have had a 16-bit cache: its queue would have shown in its TTFT. Its
campaign (the runs of one engine release, GPU, model and precision on one day, launched
with the same flags) ran a narrower one: FP8, the only narrower KV cache these engines
offered at the releases measured. Nothing here reads a predicted latency.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from energylens.calibration.file import default_calibration
from energylens.errors import EnergyLensError
from energylens.hardware import load_gpu
from energylens.measurements.user_csv import UnsupportedRow, load_user_csv, row_case
from energylens.predict import step_context
from energylens.workloads.load.kind import kv_pool_tokens

#: Resident tokens beyond the 16-bit pool that a run must show before its campaign is
#: read as FP8: the memory accounting's own uncertainty (reserve, activations, share: a
#: few GB of pools of 40-90 GB per GPU) is ~10-20 % (assumed, set before any validation).
IN_FLIGHT_MARGIN = 1.2
#: Checkpoint precisions whose engines run an FP8 KV cache on request.
NARROW = ("fp8", "fp4", "int4")


def resident_share(row: Any) -> float | None:
    """Tokens a measured closed-loop ``row`` (a :class:`UserRow`) held resident over its
    16-bit KV pool per replica, or None where the row cannot say (no closed loop, data-
    parallel replicas or attention ranks, a model or layout the predictor refuses)."""
    v, m = row.values, row.measured
    if not v.get("concurrency") or "ttft_s" not in m or "tpot_s" not in m:
        return None
    try:
        case = row_case(row)
    except (EnergyLensError, UnsupportedRow):
        return None
    if (case.deployment.attention_dp or 1) > 1 or (case.deployment.dp or 1) > 1:
        return None
    try:
        ctx = step_context(model=case.model, gpu=load_gpu(case.gpu),
                           deployment=case.deployment, calibration=default_calibration())
        pool = kv_pool_tokens(ctx, budget=ctx.runtime.server_limits_on(gpu=ctx.gpu)[0])
    except EnergyLensError:
        return None
    prompt, output = float(v["input_tokens"]), float(v["output_tokens"])
    e2e = m["ttft_s"] + (output - 1.0) * m["tpot_s"]
    resident = float(v["concurrency"]) * (e2e - m["ttft_s"]) / e2e * (prompt + output / 2.0)
    return resident / pool if pool > 0 else None


def fp8_campaigns(rows: list[dict[str, Any]], *,
                  campaign: Callable[[dict[str, Any]], Hashable]) -> set[Hashable]:
    """The campaigns (``campaign(row)``) of converted ``rows`` with an unrecorded KV
    precision and a narrow checkpoint, one of whose runs held more tokens than a 16-bit
    cache, times :data:`IN_FLIGHT_MARGIN` (module docstring)."""
    from energylens.measurements.convert import Converted, to_csv

    candidates = [r for r in rows if not r.get("kv_dtype") and r.get("dtype") in NARROW]
    if not candidates:
        return set()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.csv"
        path.write_text(to_csv(Converted(rows=candidates)), encoding="utf-8")
        parsed = load_user_csv(path).rows
    found: set[Hashable] = set()
    for source, row in zip(candidates, parsed, strict=True):
        key = campaign(source)
        if key in found:
            continue
        share = resident_share(row)
        if share is not None and share > IN_FLIGHT_MARGIN:
            found.add(key)
    return found
