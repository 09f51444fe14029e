"""``--json`` is strict JSON: a figure that does not exist is null, never NaN (which
json.loads of other languages refuses), and the table says there are no figures."""

from __future__ import annotations

import json
import math

import pytest

from energylens.cli.jsonout import strict
from energylens.cli.main import main

TOO_LONG = ["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
            "--request-rate", "2", "--input-tokens", "200000", "--num-requests", "20"]


def _refuse(constant: str) -> float:
    raise ValueError(f"not strict JSON: {constant}")


def test_non_finite_floats_become_null_at_any_depth() -> None:
    payload = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (2, "x")}
    assert strict(payload) == {"a": None, "b": [1.0, None, {"c": None}], "d": [2, "x"]}


def test_a_load_past_the_context_prints_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TOO_LONG, "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=_refuse)
    assert out["feasible"] is False and out["ttft_s"] is None


def test_a_load_past_the_context_prints_no_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(TOO_LONG) == 0
    out = capsys.readouterr().out
    assert "no figures: it cannot run as given" in out and "nan" not in out.lower()
