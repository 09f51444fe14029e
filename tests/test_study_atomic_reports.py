"""The study's extra reports are written atomically: a write that fails half-way leaves the
previous file whole and no temporary file behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure

from energylens.model.zoo import get_model
from energylens.study.breakdown_report import write_front_breakdown
from energylens.study.load_report import _plot_sweeps
from energylens.study.objective import DeploymentProblem
from energylens.workloads import Workload


@pytest.fixture
def failing_savefig(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Figure.savefig`` writes part of the image to its target, then fails."""

    def savefig(self: Figure, target: Any, **kwargs: Any) -> None:
        Path(target).write_bytes(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", savefig)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_failed_breakdown_plot_leaves_the_previous_one(tmp_path: Path, failing_savefig: None) -> None:
    pd.DataFrame({"number": [3], "tp": [1]}).to_csv(tmp_path / "pareto.csv", index=False)
    (tmp_path / "breakdown.png").write_bytes(b"previous")
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"),
                                workload=Workload(kind="batch", batch=8, input_tokens=512, output_tokens=64))
    with pytest.raises(OSError, match="disk full"):
        write_front_breakdown(results=tmp_path, problem=problem, knobs=("tp",), fixed={"gpu": "H100"})
    assert (tmp_path / "breakdown.png").read_bytes() == b"previous"
    assert set(pd.read_csv(tmp_path / "breakdown.csv")["point"]) == {"trial-3"}  # written whole
    assert leftovers(tmp_path) == []


def test_a_failed_rate_sweep_plot_leaves_the_previous_one(tmp_path: Path, failing_savefig: None) -> None:
    path = tmp_path / "load_latency_vs_rate.png"
    path.write_bytes(b"previous")
    sweep = {"request_rate": [1.0, 2.0], **{f"{m}_{p}_s": [0.1, 0.2] for m in ("ttft", "tpot")
                                            for p in ("p50", "p99")}}
    with pytest.raises(OSError, match="disk full"):
        _plot_sweeps({"tp=1": sweep}, path=path)
    assert path.read_bytes() == b"previous"
    assert leftovers(tmp_path) == []
