"""Converters from published measurement files to the measurement CSV
(:mod:`energylens.measurements.user_csv`): ``energylens measurements convert FORMAT FILE``.

Each module converts one source format with ``convert(path, options) -> Converted``;
:func:`to_csv` writes the rows with the format's columns first, in its order, and any
columns the source adds (an ``id``, a task, provenance) after them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from energylens.measurements.user_csv import KNOWN


@dataclass(frozen=True, kw_only=True)
class Options:
    """What a source file may not record: the GPU, the GPU count, the tensor-parallel
    size, the serving engine; whether closed-loop rows are written as steady-state
    serving; whether AIConfigurator's disaggregated rows are written instead of its
    aggregated ones; and (ML.ENERGY) the files whose runs the host-bound screen compares the file's
    runs with (``None``: the other ``*.json`` files of its folder)."""

    gpu: str | None = None
    num_gpus: int | None = None
    tp: int | None = None
    runtime: str | None = None
    load_as_serving: bool = False
    disaggregated: bool = False
    screen_with: tuple[Path, ...] | None = None


@dataclass
class Converted:
    """Rows in the measurement format, and notes on what was left out or assumed."""

    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_csv(converted: Converted) -> str:
    """The CSV text of ``converted``."""
    present = dict.fromkeys(k for row in converted.rows for k in row)  # first seen first
    # other columns by their earliest place in a row, ties in the order first seen (a set's
    # order would change with the interpreter's string hashing)
    extra = sorted((k for k in present if k not in KNOWN), key=lambda k: min(
        list(row).index(k) for row in converted.rows if k in row))
    header = [k for k in KNOWN if k in present] + extra
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in converted.rows:
        writer.writerow([_cell(row.get(k)) for k in header])
    return out.getvalue()


def converters() -> dict[str, Callable[[Path, Options], Converted]]:
    """Source format -> converter."""
    from energylens.measurements.convert import (
        aiconfigurator,
        llm_inference_bench,
        mlenergy,
        splitwise,
        vllm_benchmark,
    )

    return {"mlenergy": mlenergy.convert, "splitwise": splitwise.convert,
            "llm-inference-bench": llm_inference_bench.convert,
            "vllm-benchmark": vllm_benchmark.convert, "aiconfigurator": aiconfigurator.convert}


FORMATS = ("mlenergy", "splitwise", "llm-inference-bench", "vllm-benchmark", "aiconfigurator")
