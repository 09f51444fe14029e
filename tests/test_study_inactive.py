"""A load study's ``batch`` is read only as the clients of a default closed loop: under a
request rate or a concurrency it is an inactive knob, blank in the reports."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from energylens.study.objective import SCHEMA, inactive_params, problem_from_study
from search.config import load_study
from search.frame import blank_inactive, distinct_configurations

LOAD = {"kind": "load", "input_tokens": 512, "output_tokens": 64, "num_requests": 60}


@pytest.mark.parametrize(("workload", "params", "unread"), [
    ({**LOAD, "request_rate": 2.0}, {}, True),
    ({**LOAD, "concurrency": 4}, {}, True),
    (LOAD, {"request_rate": 2.0}, True),  # a knob picks the loop
    (LOAD, {"concurrency": 4}, True),
    (LOAD, {}, False),  # the default closed loop: batch clients
    ({"kind": "serving", "input_tokens": 512, "output_tokens": 64}, {}, False),
])
def test_batch_is_inactive_where_a_load_loop_does_not_read_it(workload, params, unread) -> None:
    names = inactive_params({"gpu": "H100", "tp": 1, "batch": 8, **params}, problem={"workload": workload})
    assert ("batch" in names) == unread
    source = Path(__file__)
    problem = problem_from_study(problem={"model": "llama-3.1-8b", "workload": workload}, source=source,
                                 params=["gpu", "tp", "batch", *params])
    one, other = (problem.evaluate({"gpu": "H100", "tp": 1, "batch": b, **params}) for b in (1, 32))
    assert one.infeasible_reason is None
    assert (one.metrics == other.metrics) == unread  # inactive: changing it changes nothing


def test_configurations_differing_only_in_an_unread_batch_are_one(tmp_path: Path) -> None:
    study = {"space": {"knobs": {"tp": {"type": "ordinal", "values": [1, 2]},
                                 "batch": {"type": "int", "low": 1, "high": 64}},
                       "fixed": {"gpu": "H100"}},
             "model": "llama-3.1-8b", "workload": {**LOAD, "request_rate": 2.0},
             "objectives": ["minimize energy_per_request_j"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    config = load_study(tmp_path / "s.yaml", schema=SCHEMA)
    rows = pd.DataFrame({"number": [0, 1, 2], "tp": [1, 1, 2], "batch": [8, 32, 8]})
    blank = blank_inactive(config, rows)
    assert blank["batch"].isna().all() and blank["tp"].tolist() == [1, 1, 2]
    assert distinct_configurations(config, blank)["number"].tolist() == [0, 2]
