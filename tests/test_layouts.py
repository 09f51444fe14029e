"""``predict --layouts``: every parallel layout of a deployment's GPUs, predicted and
ranked; and the memory share of a runtime that sizes its KV cache from the free memory
never exceeds the board."""

from __future__ import annotations

import json

import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.layouts import compare_layouts, layout_name, layouts
from energylens.predict import predict
from energylens.workloads import Workload

SERVING = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=256)


def test_a_dense_model_on_four_gpus_has_six_layouts_each_on_all_four() -> None:
    found = layouts(model="llama-3.1-8b", deployment=Deployment(num_gpus=4, tp=4))
    assert [layout_name(d) for d in found][0] == "TP4"  # the layout as given first
    assert {layout_name(d) for d in found} == {
        "1 GPU x 4 replicas", "TP2 x 2 replicas", "PP2 x 2 replicas", "TP4", "TP2 PP2", "PP4"}
    assert all(d.total_gpus == 4 for d in found)


def test_a_moe_model_adds_expert_parallel_and_attention_dp_layouts() -> None:
    """Mixtral's 8 experts on four GPUs: experts spread 2 or 4 ways under TP4 attention,
    and data-parallel attention with the experts over all four; every layout a valid
    deployment of four GPUs whose expert split times the expert groups is the MoE width."""
    found = layouts(model="mixtral-8x7b", deployment=Deployment(num_gpus=4, tp=1, ep=4))
    names = [layout_name(d) for d in found]
    assert names[0] == "TP4 EP4"  # vLLM's --enable-expert-parallel over 4, as given
    assert {"TP4", "TP4 EP2", "TP4 EP4", "DP-attention 4 EP4", "TP2 EP2 x 2 replicas",
            "PP4"} <= set(names)
    assert len(names) == len(set(names))
    for d in found:
        assert d.total_gpus == 4
        assert d.ep * d.expert_tp == d.attention_tp * d.attention_dp


def test_the_layouts_are_ranked_by_tpot_and_the_one_given_is_the_plain_prediction() -> None:
    """Llama-3.1-70B (141 GB of BF16 weights) on four H100s: one GPU per replica does not
    fit and says so; the others come fastest first, TP4 among them with exactly the TPOT a
    plain prediction of TP4 gives."""
    given = Deployment(num_gpus=4, tp=4)
    options = compare_layouts(model="llama-3.1-70b", gpu="H100", deployment=given,
                              workload=SERVING)
    runs = [o for o in options if o.feasible]
    tpots = [o.prediction.tpot_s for o in runs]  # type: ignore[union-attr]
    assert tpots == sorted(tpots) and len(runs) >= 4
    assert options[len(runs):] and all(not o.feasible and o.reason for o in options[len(runs):])
    one = next(o for o in options if o.name == "1 GPU x 4 replicas")
    assert not one.feasible and "needs" in (one.reason or "")
    tp4 = next(o for o in options if o.as_given)
    plain = predict(model="llama-3.1-70b", gpu="H100", deployment=given, workload=SERVING)
    assert tp4.name == "TP4" and tp4.prediction is not None
    assert tp4.prediction.tpot_s == plain.tpot_s


def test_predict_layouts_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "llama-3.1-70b", "--gpu", "H100", "--num-gpus", "4",
            "--tp", "4", "--batch", "16", "--workload", "serving", "--layouts"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["layouts"]
    assert sum(r["as_given"] for r in rows) == 1
    assert {"layout", "feasible", "reason", "tp", "pp", "ep", "tpot_s"} <= set(rows[0])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "TP4 *" in out and "does not run: 1 GPU x 4 replicas" in out


def test_layouts_of_a_disaggregated_pair_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--workload", "load",
                 "--request-rate", "2", "--prefill-pool", "h100:1", "--decode-pool", "h100:1",
                 "--layouts"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--layouts" in err[0]


def test_a_free_memory_share_never_exceeds_the_board() -> None:
    """TensorRT-LLM sizes its KV cache as a share of the memory its weights leave: with
    weights beyond the board (Mixtral-8x7B's 93 GB on one A100 40 GB) nothing is usable
    beyond the board itself."""
    found = predict(model="mixtral-8x7b", gpu="A100-40GB", deployment=Deployment(runtime="trtllm"),
                    workload=SERVING)
    assert not found.feasible
    assert "has 43 GB, of which 43 GB usable" in (found.infeasible_reason or "")


def test_vllm_refuses_a_partial_expert_split_that_sglang_runs() -> None:
    """vLLM's --enable-expert-parallel spreads whole experts over every TP x DP rank: ep = 2
    on four GPUs (each expert split two ways) has no vLLM flag, so it is refused with the
    reason (its launch command would start EP4), while SGLang (--ep-size 2) predicts it;
    among vLLM's layouts it is listed as one that does not run."""
    from energylens.errors import ConfigError

    partial = Deployment(num_gpus=4, tp=4, ep=2, moe_tp=2)
    with pytest.raises(ConfigError, match="ep = 2 with each expert split 2 ways"):
        predict(model="mixtral-8x7b", gpu="H100", deployment=partial, workload=SERVING)
    assert predict(model="mixtral-8x7b", gpu="H100", workload=SERVING,
                   deployment=Deployment(num_gpus=4, tp=4, ep=2, moe_tp=2,
                                         runtime="sglang")).feasible
    assert predict(model="mixtral-8x7b", gpu="H100", workload=SERVING,
                   deployment=Deployment(num_gpus=4, tp=1, ep=4)).feasible
    options = compare_layouts(model="mixtral-8x7b", gpu="H100", workload=SERVING,
                              deployment=Deployment(num_gpus=4, tp=4))
    tp4_ep2 = next(o for o in options if o.name == "TP4 EP2")
    assert not tp4_ep2.feasible and "cannot run" in (tp4_ep2.reason or "")


def test_each_layouts_flags_predict_that_layout_and_a_layout_outside_the_list_is_kept(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The flags printed for a layout, given back to predict, predict the same TPOT; data-
    parallel attention with TP 2 inside each rank (not one of the listed layouts) is still
    the first option, marked as given."""
    given = Deployment(num_gpus=4, tp=2, attention_dp=2, ep=4, moe_tp=1, runtime="sglang")
    options = compare_layouts(model="qwen3-30b-a3b", gpu="H100", deployment=given,
                              workload=SERVING)
    assert sum(o.as_given for o in options) == 1
    assert next(o for o in options if o.as_given).name == "DP-attention 2 x TP2 EP4"
    for option in [o for o in options if o.feasible][:4]:
        flags = str(option.as_dict()["flags"]).split()
        assert main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--runtime",
                     "sglang", "--workload", "serving", "--batch", "16", "--input-tokens",
                     "512", "--output-tokens", "256", *flags, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["tpot_s"] == pytest.approx(option.prediction.tpot_s)  # type: ignore[union-attr]
