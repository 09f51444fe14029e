"""``energylens validate``: every format predicts every row, keeps unpredictable rows with
a reason, reports MAPE per metric, and rejects bad files with one clear line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from energylens.cli import main
from energylens.cost.work import op_flops
from energylens.measurements.mlenergy import serving_case
from energylens.measurements.vidur_ops import GEMM_OPS, VIDUR_OPS, Geometry, kernel_for, op_latency_s
from energylens.validation.predictors import validate

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
PHI2 = DATA / "vidur/compute/h100/microsoft/phi-2/mlp.csv"
LLAMA3_8B_A100 = DATA / "vidur/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
H100_ALL_REDUCE = DATA / "vidur/network/h100_dgx/all_reduce.csv"
A100_SEND_RECV = DATA / "vidur/network/a100_dgx/send_recv.csv"
LM_ARENA = DATA / "mlenergy/tasks/lm-arena-chat.json"
GPQA = DATA / "mlenergy/tasks/gpqa.json"
MATMUL = DATA / "llmcompass/matmul_A100.csv"

#: Row 3 names a made-up model the zoo does not know (it was falcon-40b, now a zoo entry).
SPLITWISE = """model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,tensor_parallel
llama2-70b,a100-80gb,1024,1,128,310.0,30.5,4
llama2-70b,h100-80gb,2048,8,256,420.0,24.0,4
bloom-176b,a100-80gb,512,4,64,900.0,80.0,8
acme-lm-40b,a100-80gb,512,1,64,100.0,20.0,2
llama2-70b,a100-80gb,8192,64,512,9000.0,90.0,1
"""


def _rows_in(path: Path) -> int:
    with path.open(newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def test_vidur_mlp_predicts_every_row_and_every_modelled_op():
    report = validate(format="vidur-mlp", path=PHI2)
    assert len(report.rows) == _rows_in(PHI2)
    assert all(r.error is None for r in report.rows)
    for row in report.rows:
        assert set(row.predicted) == set(row.measured)  # every op, the embedding gather too
        assert all(v > 0 for v in row.predicted.values())
    assert not report.notes  # a measured metric no row predicts would be named here
    for op in GEMM_OPS:
        assert report.metrics[op].n == len(report.rows)


def test_vidur_ops_map_to_one_kernel_of_the_family_spec():
    g = Geometry(n_head=32, n_kv_head=8, n_embd=4096, n_expanded_embd=14336, use_gated_mlp=True,
                 tp=2)
    names = {op: kernel_for(op=op, geometry=g).name for op in VIDUR_OPS}
    assert names["attn_pre_proj"] == "q+k+v" and names["mlp_up_proj"] == "gate+up"
    assert names["attn_post_proj"] == "o" and names["mlp_down_proj"] == "down"
    # The fused QKV GEMM at TP2: 2 * tokens * d * (heads + 2 kv heads) * head_dim / 2.
    kernel = kernel_for(op="attn_pre_proj", geometry=g)
    tokens = 512
    flops = sum(op_flops(op=op, sizes={**local, "b": tokens, "m": 1}, window=None)
                for op, local in zip(kernel.ops, kernel.op_sizes, strict=True))
    assert flops == 2 * tokens * 4096 * (32 + 2 * 8) * 128 / 2
    plain = Geometry(n_head=32, n_kv_head=32, n_embd=2560, n_expanded_embd=10240,
                     use_gated_mlp=False, tp=1)
    assert kernel_for(op="mlp_up_proj", geometry=plain).name == "up"


def test_vidur_latency_grows_with_tokens():
    from energylens.cost.constants import KernelConstants
    from energylens.hardware import load_gpu

    g = Geometry(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008, use_gated_mlp=True,
                 tp=1)
    tokens = np.array([1.0, 64.0, 512.0, 4096.0])
    t = op_latency_s(op="mlp_up_proj", geometry=g, num_tokens=tokens, gpu=load_gpu("H100"),
                     constants=KernelConstants())
    assert np.all(np.diff(t) > 0)


def test_vidur_mlp_accepts_files_with_only_median_columns(tmp_path):
    with PHI2.open(newline="") as f:
        reader = csv.DictReader(f)
        keep = [c for c in reader.fieldnames if not c.startswith("time_stats.")
                or c.endswith(".median")]
        rows = [{k: r[k] for k in keep} for r in reader]
    path = tmp_path / "compute" / "h100" / "microsoft" / "phi-2" / "mlp.csv"
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keep)
        writer.writeheader()
        writer.writerows(rows)
    full = validate(format="vidur-mlp", path=PHI2)
    medians_only = validate(format="vidur-mlp", path=path)
    assert {k: v.mape for k, v in medians_only.metrics.items()} == pytest.approx(
        {k: v.mape for k, v in full.metrics.items()})


def test_vidur_network_gpu_and_topology_from_folder_and_overrides():
    report = validate(format="vidur-network", path=H100_ALL_REDUCE)
    assert len(report.rows) == _rows_in(H100_ALL_REDUCE)
    assert all(r.error is None and "all_reduce" in r.predicted for r in report.rows)
    p2p = validate(format="vidur-network", path=A100_SEND_RECV)
    assert all("send_recv" in r.predicted for r in p2p.rows)
    # --gpu overrides the folder: the same file read as A100 predicts slower collectives.
    as_a100 = validate(format="vidur-network", path=H100_ALL_REDUCE, gpu="A100")
    big = [i for i, r in enumerate(report.rows) if r.input["size"] > 32 * 2**20]
    assert all(as_a100.rows[i].predicted["all_reduce"] > report.rows[i].predicted["all_reduce"]
               for i in big)


def test_mlenergy_rows_are_never_dropped_and_unsupported_ones_say_why():
    doc = json.loads(GPQA.read_text())
    report = validate(format="mlenergy", path=GPQA)
    assert len(report.rows) == len(doc["configurations"])
    reasons = {r.input["model_id"]: r.error for r in report.rows if r.error}
    assert "nvidia/NVIDIA-Nemotron-Nano-9B-v2" not in reasons  # hybrid Mamba: in the zoo
    # MLA models (DeepSeek) are priced with the weight-absorbed latent-attention family.
    assert any(r.error is None for r in report.rows if "DeepSeek" in r.input["model_id"])
    predicted = [r for r in report.rows if r.error is None]
    assert len(predicted) > 60
    for row in predicted:
        assert set(row.predicted) == set(row.measured)
        # the reported identity of the data holds for the predictions too
        p = row.predicted
        assert p["energy_per_token_joules"] == pytest.approx(
            p["avg_power_watts"] / p["output_throughput_tokens_per_sec"], rel=1e-6)


def test_mlenergy_dp_attention_with_ep_rows_predict():
    report = validate(format="mlenergy", path=DATA / "mlenergy/tasks/sourcegraph-fim.json")
    dp = [r for r in report.rows if r.input["data_parallel"] > 1]
    assert dp and all(r.error is None for r in dp)
    # vLLM --data-parallel-size n --enable-expert-parallel: n attention ranks, experts n ways
    case = serving_case(dp[0].input)
    d = case.deployment
    assert (d.tp, d.attention_dp, d.ep, d.expert_tp, d.total_gpus) == (
        1, dp[0].input["data_parallel"], dp[0].input["expert_parallel"], 1,
        dp[0].input["num_gpus"])
    assert case.workload.batch == dp[0].input["avg_batch_size"]  # every rank's sequences


def test_splitwise_ttft_and_tpot_from_the_batch_workload(tmp_path):
    path = tmp_path / "splitwise.csv"
    path.write_text(SPLITWISE)
    report = validate(format="splitwise", path=path)
    assert len(report.rows) == 5
    ok = report.rows[0]
    assert ok.error is None and set(ok.predicted) == {"prompt_time", "token_time"}
    assert ok.predicted["prompt_time"] > ok.predicted["token_time"] > 0
    assert "unknown model 'acme-lm-40b'" in report.rows[3].error
    assert report.rows[4].error.startswith("infeasible")  # 70B on one A100 with 64 x 8.7k
    assert report.metrics["prompt_time"].n == 3


def test_llmcompass_matmul_uses_the_gemm_model():
    report = validate(format="llmcompass-matmul", path=MATMUL)
    assert len(report.rows) == 20
    assert all(r.error is None and r.predicted["time_s"] > 0 for r in report.rows)


def test_json_output_has_the_documented_shape(capsys):
    assert main(["validate", "mlenergy", str(LM_ARENA), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"format", "file", "metrics", "rows"}
    assert out["format"] == "mlenergy" and out["file"] == str(LM_ARENA)
    for metric in ("energy_per_token_joules", "median_itl_ms", "avg_power_watts",
                   "output_throughput_tokens_per_sec"):
        assert set(out["metrics"][metric]) == {"mape", "median_ape", "n"}
    row = out["rows"][0]
    assert set(row) == {"input", "measured", "predicted", "error"}
    assert "model_id" in row["input"] and "avg_batch_size" in row["input"]
    assert all(r["error"] is None or isinstance(r["error"], str) for r in out["rows"])
    assert any(r["error"] is None for r in out["rows"])


def test_table_output(capsys):
    assert main(["validate", "vidur-network", str(H100_ALL_REDUCE), "--max-rows", "5"]) == 0
    out = capsys.readouterr().out
    assert "MAPE" in out and "all_reduce" in out


@pytest.mark.parametrize(("fmt", "text", "fragment"), [
    ("splitwise", "model,hardware,prompt_size\nllama2-70b,a100-80gb,512\n", "missing column"),
    ("splitwise", "", "empty file"),
    ("vidur-network", "collective,num_workers,devices_per_node,size,time_stats.all_reduce.median\n"
                      "all_reduce,2,2,2048,20000\n", "expected milliseconds"),
])
def test_bad_files_exit_2_with_one_line_naming_file_and_problem(tmp_path, capsys, fmt, text,
                                                                fragment):
    path = tmp_path / "network" / "h100_dgx" / "bad.csv"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert main(["validate", fmt, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("energylens: error:") and str(path) in err and fragment in err
    assert "\n" not in err


def test_validate_without_file_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["validate", "mlenergy"])
    assert info.value.code == 2
