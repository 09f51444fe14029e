"""Pareto plots colour points by the first of the problem's preferred parameters that is a
knob of the study (a disaggregated study by mode: its pools' points read no ``gpu``)."""

from __future__ import annotations

from pathlib import Path

from energylens.study.objective import SCHEMA
from search.config import load_study
from search.plots import color_column

STUDY = """model: llama-3.1-8b
workload: {kind: batch, batch: 8, input_tokens: 512, output_tokens: 64}
objectives: [minimize energy_per_request_j, minimize num_gpus]
space:
  knobs:
%s
engine: grid
"""


def _colour(tmp_path: Path, knobs: str) -> str | None:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY % knobs)
    return color_column(load_study(path, schema=SCHEMA))


def test_a_study_with_a_mode_knob_is_coloured_by_mode(tmp_path: Path) -> None:
    knobs = ("    gpu: {type: categorical, values: [H100, H200]}\n"
             "    mode: {type: categorical, values: [colocated, disaggregated]}")
    assert _colour(tmp_path, knobs) == "mode"


def test_otherwise_by_gpu_or_nothing(tmp_path: Path) -> None:
    assert _colour(tmp_path, "    gpu: {type: categorical, values: [H100, H200]}") == "gpu"
    assert _colour(tmp_path, "    tp: {type: ordinal, values: [1, 2]}") is None
