"""Each accuracy target scores one row set in both columns, and is judged held out where
the calibration holds a held-out figure. Validates only the ML.ENERGY files and the Vidur
and AIConfigurator NCCL ones."""

from __future__ import annotations

from typing import Any

import pytest

from energylens.validation.accuracy import DEFAULT_DATA, TARGETS, AccuracyReport, collect
from energylens.validation.docs import render


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> AccuracyReport:
    data = tmp_path_factory.mktemp("data")
    (data / "mlenergy").symlink_to(DEFAULT_DATA / "mlenergy")
    (data / "vidur").mkdir()
    (data / "vidur" / "network").symlink_to(DEFAULT_DATA / "vidur" / "network")
    for table in (DEFAULT_DATA / "aiconfigurator" / "kernels").glob("*/comm/nccl"):
        link = data / table.relative_to(DEFAULT_DATA)
        link.parent.mkdir(parents=True)
        link.symlink_to(table)
    return collect(data=data)


def _held_out_rows(report: AccuracyReport, path: tuple[str, ...]) -> int:
    node: Any = report.fits
    for key in path[:-1]:
        node = node[key]
    return int(node["n"])


def _mine(report: AccuracyReport) -> list:
    return [t for t in TARGETS if t.dataset in report.datasets and t.metric is not None]


def test_all_reduce_targets_are_judged_held_out(report):
    targets = [t for t in TARGETS if t.name.startswith("All-reduce")]
    assert len(targets) == 7  # Vidur's two DGX files, five AIConfigurator NCCL tables
    for target in targets:
        held = report.leave_out(target)
        assert held is not None, target.name
        assert report.gating(target) == held


def test_both_columns_of_a_target_score_the_same_rows(report):
    checked = 0
    for target in _mine(report):
        if target.leave_out is None:
            continue
        now = report.datasets[target.dataset].summary[target.metric]
        assert now.n == _held_out_rows(report, target.leave_out), target.name
        checked += 1
    assert checked >= 21  # 7 all-reduce + 14 ML.ENERGY


def test_fitted_rows_leave_out_hybrid_and_host_bound_rows(report):
    summary = report.datasets["mlenergy-H100"].summary
    every = summary["energy_per_token_joules"].n
    fitted = summary["energy_per_token_joules[fitted]"].n
    assert fitted == every - summary["energy_per_token_joules[hybrid]"].n \
        - summary["energy_per_token_joules[host-bound]"].n


def test_docs_say_which_rows_the_targets_score(report):
    text = render(report, [])
    n = report.datasets["mlenergy-H100"].summary["energy_per_token_joules[fitted]"].n
    assert f"({n} of the {report.datasets['mlenergy-H100'].n_rows} H100 rows)" in text
    assert "ML.ENERGY H100 energy per output token, fitted rows |" in text
    assert "all rows" not in text.split("## Targets")[1].split("##")[0]
