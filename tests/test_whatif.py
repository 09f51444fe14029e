"""``predict --what-if``: the deployment and single changes of it, predicted."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.predict import predict
from energylens.whatif import changes, what_if
from energylens.workloads import Workload

SERVING = Workload(kind="serving", batch=8, input_tokens=512, output_tokens=256)


def _differences(a: object, b: object) -> list[str]:
    return [f.name for f in fields(a) if getattr(a, f.name) != getattr(b, f.name)]  # type: ignore[arg-type]


def test_each_change_is_one_change_and_the_first_row_is_the_plain_prediction() -> None:
    deployment = Deployment(tp=2)
    variants = what_if(model="llama-3.1-8b", gpu="H100", deployment=deployment,
                       workload=SERVING)
    assert variants[0].change == "as given"
    plain = predict(model="llama-3.1-8b", gpu="H100", deployment=deployment, workload=SERVING)
    assert variants[0].prediction == plain
    for variant in variants[1:]:
        moved = _differences(variant.deployment, deployment) \
            + _differences(variant.workload, SERVING)
        assert len(moved) in (1, 2), variant.change  # 2x TP also doubles num_gpus if given
        assert variant.prediction is not None and variant.prediction.feasible


def test_the_changes_move_the_figures_the_way_physics_says() -> None:
    """Llama-3.1-8B decoding 8 sequences on one H100: unfused kernels are slower, twice the
    batch gives more tokens/s, a lower clock costs time but saves energy (memory-bound
    decode), FP8 weights read half the bytes."""
    found = {v.change: v.prediction for v in what_if(
        model="llama-3.1-8b", gpu="H100", deployment=Deployment(), workload=SERVING)}
    base = found["as given"]
    assert base is not None
    assert found["no fused kernels"].tpot_s > base.tpot_s  # type: ignore[union-attr]
    assert found["2x batch"].output_tokens_per_s > base.output_tokens_per_s  # type: ignore[union-attr]
    slow = found["clock x0.8"]
    assert slow is not None and slow.tpot_s > base.tpot_s
    assert slow.energy_per_output_token_j < base.energy_per_output_token_j
    assert found["FP8 weights"].tpot_s < 0.8 * base.tpot_s  # type: ignore[union-attr]


def test_a_change_that_cannot_run_says_why() -> None:
    """At TP 32 (Llama-3.1-8B's 32 heads), twice the tensor parallelism does not divide."""
    variants = {v.change: v for v in what_if(model="llama-3.1-8b", gpu="H100",
                                             deployment=Deployment(tp=32, num_gpus=32),
                                             workload=SERVING)}
    doubled = variants["2x tensor parallel"]
    assert doubled.prediction is None and "does not divide" in (doubled.reason or "")
    assert doubled.as_dict()["feasible"] is False


def test_no_fp8_weights_change_where_the_gpu_has_no_fp8() -> None:
    names = [c for c, _, _ in changes(model="llama-3.1-8b", gpu="A100",
                                     deployment=Deployment(), workload=SERVING)]
    assert "FP8 weights" not in names and "FP8 KV cache" in names


def test_predict_what_if_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--what-if",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["what_if"]
    assert rows[0]["change"] == "as given" and all(r["feasible"] for r in rows)
    assert {"energy_per_output_token_j", "tpot_s", "ttft_s"} <= set(rows[1])


def test_the_what_if_table_prints_every_row_and_why_one_cannot_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "32",
                 "--num-gpus", "32", "--what-if"]) == 0
    out = capsys.readouterr().out
    for change in ("as given", "no fused kernels", "FP8 KV cache", "clock x0.8", "2x batch"):
        assert change in out
    assert "does not divide" in out  # the 2x TP row says why it cannot run


def test_the_fitting_split_is_the_first_doubling_whose_weights_fit() -> None:
    """Llama-3.1-70B in bf16 holds 141 GB of weights: one 80 GiB H100 cannot, two can
    (70.5 GB each beside the 5 GB reserve); four GPUs given as replicas of one GPU each
    become two replicas of two; held to one GPU in all, no split fits."""
    from energylens.whatif import smallest_fitting_split

    batch = Workload(kind="batch", batch=1, input_tokens=512, output_tokens=128)
    alone = smallest_fitting_split(model="llama-3.1-70b", gpu="H100", deployment=Deployment(),
                                   workload=batch)
    assert alone is not None and alone.tp == 2 and alone.num_gpus is None
    four = smallest_fitting_split(model="llama-3.1-70b", gpu="H100",
                                  deployment=Deployment(num_gpus=4), workload=batch)
    assert four is not None and (four.tp, four.replicas, four.num_gpus) == (2, 2, 4)
    assert smallest_fitting_split(model="llama-3.1-70b", gpu="H100",
                                  deployment=Deployment(num_gpus=1), workload=batch) is None


def test_predict_says_which_split_fits_when_the_replicas_do_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert "hint: it fits with --tp 2, 2 replicas of 2 GPUs" in out
    assert "4 data-parallel replicas of 1 GPU each" in out
