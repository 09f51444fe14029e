"""``study report`` pictures of load studies (issue 12 item 7): the throughput front from
the trials and TTFT/TPOT against the rate of the Pareto points."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from energylens.cli.main import main as energylens
from energylens.model.zoo import get_model
from energylens.study.load_report import RATE_SHARES, rate_sweep
from energylens.study.objective import DeploymentProblem
from energylens.workloads import Workload
from energylens.workloads.load.plots import front_points

SPACE = """knobs:
  gpu: {type: categorical, values: [H100], baseline: H100}
  tp: {type: ordinal, values: [1, 2], baseline: 1}
"""
LOAD = """  kind: load
  request_rate: 3
  input_tokens: 512
  output_tokens: 64
  num_requests: 120
"""
BATCH = """  kind: batch
  batch: 8
  input_tokens: 512
  output_tokens: 64
"""


def _study(folder: Path, workload: str) -> Path:
    (folder / "space.yaml").write_text(SPACE)
    study = folder / "study.yaml"
    study.write_text(f"name: report-test\nspace: space.yaml\nmodel: llama-3.1-8b\nworkload:\n"
                     f"{workload}objectives:\n  - minimize energy_per_request_j\n"
                     "  - minimize num_gpus\nengine: grid\nresults: out\n")
    return study


def test_front_points_are_tokens_per_user_and_per_gpu_of_feasible_trials() -> None:
    trials = pd.DataFrame({
        "feasible": [True, False, True], "gpu": ["H100", "H100", "H200"],
        "mode": ["colocated", "colocated", "disaggregated"],
        "prefill_gpu": [None, None, "H100"], "decode_gpu": [None, None, "H200"],
        "tpot_s": [0.025, 0.01, 0.04], "output_tokens_per_s_per_gpu": [1200.0, 9.0, 800.0]})
    points = front_points(trials)
    assert list(points["group"]) == ["H100 colocated", "H100/H200 disaggregated"]
    assert list(points["per_user"]) == pytest.approx([40.0, 25.0])  # 1 / 25 ms, 1 / 40 ms
    assert list(points["per_gpu"]) == [1200.0, 800.0]


def test_report_of_a_load_study_draws_front_and_rate_sweep(tmp_path: Path) -> None:
    study = _study(tmp_path, LOAD)
    assert energylens(["study", "run", str(study)]) == 0
    out = tmp_path / "out"
    assert (out / "load_front.png").stat().st_size > 0
    assert (out / "load_latency_vs_rate.png").stat().st_size > 0


def test_rate_sweep_runs_around_the_served_rate_and_queues_more_when_faster() -> None:
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload(
        kind="load", request_rate=3.0, input_tokens=512.0, output_tokens=64.0,
        num_requests=120))
    sweep = rate_sweep(problem=problem, params={"gpu": "H100", "tp": 1}, served_per_s=8.0)
    assert sweep["request_rate"] == pytest.approx([8.0 * s for s in RATE_SHARES])
    assert sweep["ttft_p99_s"][-1] >= sweep["ttft_p99_s"][0]
    assert sweep["tpot_p50_s"][-1] > sweep["tpot_p50_s"][0]  # bigger decode batches


def test_no_load_pictures_for_a_batch_study(tmp_path: Path) -> None:
    study = _study(tmp_path, BATCH)
    assert energylens(["study", "run", str(study)]) == 0
    out = tmp_path / "out"
    assert (out / "pareto.csv").exists()
    assert not list(out.glob("load_*.png"))

DISAGGREGATED = """name: disagg-test
model: llama-3.1-8b
workload: {kind: load, input_tokens: 512, output_tokens: 64, request_rate: 3, num_requests: 100}
space:
  knobs:
    tp: {type: ordinal, values: [4, 8]}
    prefill_tp: {type: ordinal, values: [1]}
  fixed: {mode: disaggregated, gpu: H200, prefill_gpu: H100, decode_gpu: H200, decode_tp: 2}
objectives: [minimize energy_per_request_j, minimize cost_per_million_tokens]
engine: grid
results: out
"""


@pytest.mark.parametrize("shard", [[], ["--shard", "1/1"]])
def test_knobs_a_disaggregated_point_does_not_read_are_empty_in_the_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: list[str]) -> None:
    """tp is the colocated layout, which pools of their own replace: its cells are empty in
    trials.csv and pareto.csv, and the two grid points (one deployment) are one Pareto
    point, of an Optuna-stored grid and of an exhaustive one alike, launched as its two
    pools."""
    study = tmp_path / "study.yaml"
    study.write_text(DISAGGREGATED)
    assert energylens(["study", "run", str(study), *shard]) == 0
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    assert len(front) == 1 and front["tp"].isna().all() and list(front["prefill_tp"]) == [1]
    # one script per pool, each its pool's layout; nothing of the colocated tp 4 / tp 8
    scripts = {p.name.rsplit("-", 1)[1]: p.read_text()
               for p in (tmp_path / "out" / "launch").iterdir()}
    assert set(scripts) == {"prefill.sh", "decode.sh"}
    assert "--tensor-parallel-size 1 " in scripts["prefill.sh"]
    assert "1 x H100-SXM" in scripts["prefill.sh"]
    assert "--tensor-parallel-size 2 " in scripts["decode.sh"]
    assert "2 x H200-SXM" in scripts["decode.sh"]
    cell = front.loc[0, "launch_command"]
    assert cell.startswith("prefill: vllm serve ") and "; decode: vllm serve " in cell
    if not shard:
        assert "1 of 1 distinct feasible configurations, 2 trials" in capsys.readouterr().out
        trials = pd.read_csv(tmp_path / "out" / "trials.csv")
        assert trials["tp"].isna().all() and list(trials["prefill_tp"]) == [1, 1]
