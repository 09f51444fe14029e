"""``study report``'s breakdown of the Pareto points: per point, step and class of work."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from energylens.cli.main import main as energylens
from energylens.cost.breakdown import representative_breakdown
from energylens.deployment import Deployment
from energylens.model.zoo import get_model
from energylens.predict import checked_context
from energylens.study.breakdown_report import front_breakdown
from energylens.study.objective import DeploymentProblem
from energylens.workloads import Workload

WORKLOAD = Workload(kind="batch", batch=8, input_tokens=512, output_tokens=64)


def test_each_point_is_its_deployments_steps_split_by_class() -> None:
    """Two points, TP 1 and TP 2: the rows of each are the breakdown of its own deployment
    (the TP 2 one with its all-reduces); a point that cannot run is left out."""
    front = pd.DataFrame({"number": [3, 7, 9], "tp": [1, 2, 3]})
    table = front_breakdown(
        front=front, problem=DeploymentProblem(model=get_model("llama-3.1-8b"), workload=WORKLOAD),
        fixed={"gpu": "H100"}, knobs=("tp",))
    assert set(table["point"]) == {"trial-3", "trial-7"}  # TP 3 does not divide the heads
    two = table[(table["point"] == "trial-7") & (table["step"] == "decode")]
    _, ctx = checked_context(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=2))
    expected = representative_breakdown(ctx=ctx, sequences=8, input_tokens=512,
                                         output_tokens=64)["decode"]
    assert dict(zip(two["work"], two["seconds"], strict=True)) == pytest.approx(
        {w: expected.seconds.get(w, 0.0) for w in two["work"]})
    assert "communication" in set(two["work"])
    one = table[(table["point"] == "trial-3") & (table["step"] == "decode")]
    assert "communication" not in set(one["work"])


def test_a_disaggregated_points_steps_run_on_their_own_pools() -> None:
    """Prefill on 1 H100 (the prefill pool), decode on 2 H200 at TP 2 (the decode pool) at
    the point's running batch: each step is its pool's breakdown, not the colocated tp/gpu
    knobs' (TP 8 on B200), which the pools replace."""
    problem = DeploymentProblem(model=get_model("llama-3.1-8b"), workload=Workload(
        kind="load", request_rate=2.0, input_tokens=512, output_tokens=64, num_requests=50))
    fixed = {"mode": "disaggregated", "gpu": "B200", "prefill_gpu": "H100", "decode_gpu": "H200",
             "prefill_tp": 1, "decode_tp": 2}
    front = pd.DataFrame({"number": [0], "tp": [8], "batch_per_replica": [5.0]})
    table = front_breakdown(front=front, problem=problem, fixed=fixed, knobs=("tp",))
    for step, gpu, tp in (("prefill", "H100", 1), ("decode", "H200", 2)):
        _, ctx = checked_context(model="llama-3.1-8b", gpu=gpu, deployment=Deployment(tp=tp))
        want = representative_breakdown(ctx=ctx, sequences=5.0, input_tokens=512,
                                        output_tokens=64)[step]
        rows = table[table["step"] == step]
        assert dict(zip(rows["work"], rows["joules"], strict=True)) == pytest.approx(
            {w: want.joules.get(w, 0.0) for w in rows["work"]})
    assert "communication" not in set(table[table["step"] == "prefill"]["work"])


def test_study_report_writes_the_breakdown(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(
        "knobs:\n  gpu: {type: categorical, values: [H100], baseline: H100}\n"
        "  tp: {type: ordinal, values: [1, 2], baseline: 1}\n")
    study = tmp_path / "study.yaml"
    study.write_text("name: breakdown-test\nspace: space.yaml\nmodel: llama-3.1-8b\nworkload:\n"
                     "  kind: batch\n  batch: 8\n  input_tokens: 512\n  output_tokens: 64\n"
                     "objectives:\n  - minimize energy_per_request_j\n  - minimize num_gpus\n"
                     "engine: grid\nresults: out\n")
    assert energylens(["study", "run", str(study)]) == 0
    out = tmp_path / "out"
    table = pd.read_csv(out / "breakdown.csv")
    assert set(table["step"]) == {"decode", "prefill"} and (table["seconds"] >= 0).all()
    assert (out / "breakdown.png").stat().st_size > 10_000
