"""vLLM ``benchmark_serving`` / ``vllm bench serve`` result JSON -> ``load`` rows.

A result records the load (``request_rate``; ``max_concurrency`` for a closed loop), the
totals and the latency statistics in ms (``mean_/median_/p<N>_`` of ``ttft``, ``tpot``,
``itl``, ``e2el``), not the hardware: the GPU, GPU count and tensor-parallel size come from
``--metadata`` keys saved in the result (``gpu``, ``num_gpus``, ``tp`` or
``tensor_parallel_size``) or from the converter's options. The ``backend`` is the engine
(``vllm``, ``sglang``, ...) unless it names only the client API (``openai``,
``openai-chat``): then the runtime is the converter's option, else left empty (the format's
default). A file holds one result, a JSON list of them, or one per line.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from energylens.errors import MeasurementError
from energylens.measurements.convert import Converted, Options
from energylens.measurements.formats import read_text
from energylens.runtime import get_runtime, runtime_name

#: Result key -> metric column (ms -> s for the latencies).
_LATENCIES = {f"{stat}_{name}_ms": f"{column}{suffix}"
              for name, column in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"),
                                   ("e2el", "e2e"))
              for stat, suffix in (("mean", "_s"), ("median", "_p50_s"), ("p90", "_p90_s"),
                                   ("p99", "_p99_s"))}
_RATES = {"request_throughput": "request_throughput_per_s",
          "output_throughput": "output_tokens_per_s",
          "total_token_throughput": "total_tokens_per_s"}


def _results(path: Path) -> list[dict[str, Any]]:
    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise MeasurementError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from None
    results = doc if isinstance(doc, list) else [doc]
    if not results or not all(isinstance(r, dict) for r in results):
        raise MeasurementError(f"{path}: expected a benchmark_serving result object (or a list)")
    return results


def _size(path: Path, value: Any, key: str, i: int) -> int | None:
    """A GPU count saved with ``--metadata`` (a string there: ``"2"``, ``"2.0"``)."""
    if value is None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not number.is_integer() or number < 1:
        raise MeasurementError(f"{path}: result {i}: key '{key}' must be a whole number >= 1, "
                               f"got {value!r}")
    return int(number)


def _hardware(path: Path, result: dict[str, Any], options: Options, i: int) -> dict[str, Any]:
    gpu = options.gpu or result.get("gpu")
    key = "tp" if result.get("tp") is not None else "tensor_parallel_size"
    tp = options.tp or _size(path, result.get(key), key, i)
    n = options.num_gpus or _size(path, result.get("num_gpus"), "num_gpus", i) or tp
    if gpu is None or n is None:
        raise MeasurementError(f"{path}: result {i} does not record the GPU or the GPU count; "
                               "pass --gpu and --num-gpus (or save them with --metadata)")
    return {"gpu": gpu, "num_gpus": n, "tp": tp}


def _runtime(result: dict[str, Any], options: Options, api: set[str]) -> str | None:
    """The engine: ``options.runtime``, else the result's backend unless it is a client
    API (added to ``api``: left empty)."""
    if options.runtime is not None:
        return options.runtime
    backend = str(result.get("backend", "vllm"))
    if backend.strip().lower().startswith("openai"):
        api.add(backend)
        return None
    return backend


def _positive(value: Any) -> float | None:
    """``value`` as a float where it is a finite positive number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        return None
    return float(value)


def _number(path: Path, result: dict[str, Any], key: str, i: int) -> float:
    value = _positive(result.get(key))
    if value is None:
        raise MeasurementError(f"{path}: result {i}: key '{key}' must be a positive number, "
                               f"got {result.get(key)!r}")
    return value


def convert(path: Path, options: Options) -> Converted:
    """One ``load`` row per result."""
    if options.runtime is not None:
        options = replace(options, runtime=get_runtime(runtime_name(options.runtime)).name)
    out = Converted(rows=[])
    capped = []
    dropped: dict[str, int] = {}
    api: set[str] = set()
    for i, result in enumerate(_results(path)):
        if "model_id" not in result:
            raise MeasurementError(f"{path}: result {i}: missing key 'model_id'")
        completed = _number(path, result, "completed", i)
        concurrency = result.get("max_concurrency")
        row: dict[str, Any] = {
            "model": result["model_id"], **_hardware(path, result, options, i),
            "runtime": _runtime(result, options, api), "workload": "load",
            "request_rate": _positive(result.get("request_rate")),  # inf: no open loop
            "concurrency": concurrency, "num_requests": int(completed),
            "input_tokens": _number(path, result, "total_input_tokens", i) / completed,
            "output_tokens": _number(path, result, "total_output_tokens", i) / completed}
        for key, column in (_LATENCIES | _RATES).items():
            if key not in result:
                continue
            value = _positive(result[key])
            if value is None:  # vLLM's 0.0 TPOT of one-token outputs, a NaN percentile
                dropped[key] = dropped.get(key, 0) + 1
            else:
                row[column] = value / 1e3 if key in _LATENCIES else value
        row["date"] = result.get("date")
        if row["request_rate"] is not None and concurrency is not None:
            capped.append(i)
        out.rows.append(row)
    if api:
        out.notes.append(f"backend {', '.join(sorted(api))} is the client API, not the engine: "
                         "runtime left empty (vllm); pass --runtime to name it")
    if dropped:
        out.notes.append("not written, not a positive number: " + ", ".join(
            f"{key} ({n} result{'s' if n > 1 else ''})" for key, n in dropped.items()))
    if capped:
        out.notes.append(f"result{'s' if len(capped) > 1 else ''} "
                         f"{', '.join(map(str, capped))}: a request rate capped at "
                         "max_concurrency, an open loop the load kind does not model: written "
                         "with both, validate refuses such rows")
    return out
