"""Speculative decoding with a one-layer draft head (MTP, EAGLE): ``k`` drafts per step,
checked in one pass; a sequence gains ``1 + a + ... + a^k`` tokens per step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.memory import memory_use
from energylens.cost.speculative import Speculation
from energylens.cost.step import (
    SequenceGroup,
    StepContext,
    decode_step_cost,
    step_cost,
)
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.measurements.convert import Options, converters
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context
from energylens.runtime.launch import launch_command
from energylens.workloads import Workload

LLAMA = "llama-3.1-8b"


def _ctx(*, model: str = LLAMA, gpu: str = "H100", tp: int = 1, drafts: int = 0,
         acceptance: float | None = None, dtype: str | None = None) -> StepContext:
    return step_context(model=get_model(model), gpu=load_gpu(gpu),
                        deployment=Deployment(num_gpus=tp, tp=tp, weight_dtype=dtype,
                                              speculative_tokens=drafts,
                                              draft_acceptance=acceptance),
                        calibration=default_calibration())


def test_tokens_per_step_is_the_expected_accepted_prefix_plus_one() -> None:
    """Hand values: k = 3 at a = 0.5 gives 1 + 0.5 + 0.25 + 0.125; a = 1 keeps every
    draft; a = 0 none; no drafts, one token."""
    assert Speculation(draft_tokens=3, acceptance=0.5).tokens_per_step == pytest.approx(1.875)
    assert Speculation(draft_tokens=2, acceptance=1.0).tokens_per_step == pytest.approx(3.0)
    assert Speculation(draft_tokens=4, acceptance=0.0).tokens_per_step == pytest.approx(1.0)
    assert Speculation(draft_tokens=0).tokens_per_step == pytest.approx(1.0)


def test_without_speculation_a_decode_step_is_the_plain_step() -> None:
    ctx = _ctx()
    seqs = [SequenceGroup(sequences=8.0, new_tokens=1.0, context=1024.0)]
    plain, decode = step_cost(ctx=ctx, seqs=seqs), decode_step_cost(ctx=ctx, seqs=seqs)
    assert decode.latency_s == plain.latency_s
    assert decode.compute_energy_j == plain.compute_energy_j


def test_rejected_drafts_only_add_work_and_accepted_ones_share_it() -> None:
    """Acceptance 0: every step pays the drafts and the wider check for one token, so a
    token costs more than without speculation. Acceptance 1 with one draft at batch 1 (a
    weight-bound step, which checking a second token barely slows): a token costs a little
    over half a plain step (half the step, plus half a draft pass of one layer and the
    head)."""
    seqs = [SequenceGroup(sequences=1.0, new_tokens=1.0, context=1024.0)]
    plain = float(step_cost(ctx=_ctx(), seqs=seqs).latency_s)
    wasted = float(decode_step_cost(ctx=_ctx(drafts=2, acceptance=0.0), seqs=seqs).latency_s)
    assert wasted > plain
    kept = float(decode_step_cost(ctx=_ctx(drafts=1, acceptance=1.0), seqs=seqs).latency_s)
    assert 0.5 * plain < kept < 0.65 * plain


def test_the_check_keeps_mla_in_its_decode_form() -> None:
    """DeepSeek's drafts are checked against the latent cache (the absorbed decode form), not
    by decompressing every cached key and value as a prompt does: the same four tokens per
    sequence cost far less as a check than as a prompt chunk."""
    ctx = _ctx(model="deepseek-v3", gpu="H200", tp=8, dtype="fp8")
    chunk = SequenceGroup(sequences=16.0, new_tokens=4.0, context=8192.0)
    as_prompt = float(step_cost(ctx=ctx, seqs=[chunk]).latency_s)
    as_check = float(step_cost(ctx=ctx, seqs=[replace(chunk, verifying=True)]).latency_s)
    assert as_check < 0.8 * as_prompt


def test_every_kind_prices_decode_per_token_gained() -> None:
    """Static batch, steady state and the simulator at vanishing load agree on a batch-1
    speculative TPOT; it is shorter than without drafts at DeepSeek's published acceptance."""
    deployment = Deployment(speculative_tokens=3)
    common = {"input_tokens": 512, "output_tokens": 128}
    batch = predict(model=LLAMA, gpu="H100", deployment=deployment,
                    workload=Workload(kind="batch", batch=1, **common))
    plain = predict(model=LLAMA, gpu="H100", workload=Workload(kind="batch", batch=1, **common))
    load = predict(model=LLAMA, gpu="H100", deployment=deployment,
                   workload=Workload(kind="load", request_rate=0.01, num_requests=20, **common))
    serving = predict(model=LLAMA, gpu="H100", deployment=deployment,
                      workload=Workload(kind="serving", batch=1, **common))
    assert batch.tpot_s < 0.7 * plain.tpot_s
    assert load.load["tpot_p50_s"] == pytest.approx(batch.tpot_s, rel=1e-2)
    # the draft head reads the prompt once (one layer of 32, and the LM head for one row)
    assert plain.ttft_s < batch.ttft_s < plain.ttft_s * (1 + 2 / 32)
    # steady state at one running sequence: its median step is a decode step (mid-output
    # context, where the static batch averages over the output)
    assert serving.tpot_s == pytest.approx(batch.tpot_s, rel=0.05)


@pytest.mark.parametrize(("fields", "message"), [
    ({"speculative_tokens": -1}, "speculative tokens must be >= 0"),
    ({"speculative_tokens": 2, "draft_acceptance": 1.5}, "within [0, 1]"),
    ({"draft_acceptance": 0.5}, "needs speculative_tokens"),
])
def test_bad_speculation_is_one_config_error(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Deployment(**fields)  # type: ignore[arg-type]


AIC_HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,"
              "isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,"
              "attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n")


def test_aiconfigurator_mtp_campaigns_are_written_with_three_drafts(tmp_path: Path) -> None:
    """A row of a campaign whose TPOT shows multi-token prediction (DeepSeek-R1 on B200,
    TensorRT-LLM 1.2.0rc6.post3, measured 2026-02-05) gets speculative_tokens 3; the same
    layout a week earlier on 1.2.0rc6.post2, and DeepSeek-V3 on the campaign's release and
    date, stay without."""
    rows = [("deepseek-ai/DeepSeek-R1", "1.2.0rc6.post3", "2026-02-05"),
            ("deepseek-ai/DeepSeek-R1", "1.2.0rc6.post2", "2026-01-29"),
            ("deepseek-ai/DeepSeek-V3", "1.2.0rc6.post3", "2026-02-05")]
    source = tmp_path / "silicon_sample.csv"
    source.write_text(AIC_HEADER + "".join(
        f"r{i},src; silicon_concurrency=4; measured={day}T00:00:00Z,trtllm,{release},{model},"
        f"b200_sxm,fp8,agg,1024,1024,fp8,fp8,4,8,1,1,8,1,{190 + i},5.4\n"  # runs apart
        for i, (model, release, day) in enumerate(rows)), encoding="utf-8")
    converted = converters()["aiconfigurator"](source, Options())
    assert [r.get("speculative_tokens") for r in converted.rows] == [3, None, None]
    assert any("speculative_tokens 3" in note for note in converted.notes)


def test_a_paired_campaigns_faster_run_of_a_configuration_is_written_with_one_draft(
        tmp_path: Path) -> None:
    """SGLang's DeepSeek-R1 campaign on B200 (0.5.9, 2026-03-25) ran each configuration
    twice: the run 0.77x as fast as DeepSeek-V3's at the same configuration gets SGLang's
    one draft; its twin, which repeats V3's TPOT, a run only 2 % faster, and a run with no
    V3 row to compare with (other lengths) stay without."""
    rows = [("deepseek-ai/DeepSeek-R1", 1024, 6.70), ("deepseek-ai/DeepSeek-R1", 1024, 8.76),
            ("deepseek-ai/DeepSeek-R1", 1024, 8.60), ("deepseek-ai/DeepSeek-R1", 2048, 6.0),
            ("deepseek-ai/DeepSeek-V3", 1024, 8.76)]
    source = tmp_path / "silicon_sample.csv"
    source.write_text(AIC_HEADER + "".join(
        f"r{i},src; silicon_concurrency=4; measured=2026-03-25T16:34:14Z,sglang,0.5.9,{model},"
        f"b200_sxm,fp8,agg,{isl},1024,fp8,fp8,4,8,1,1,8,1,{190 + i},{tpot_ms}\n"  # runs apart
        for i, (model, isl, tpot_ms) in enumerate(rows)), encoding="utf-8")
    converted = converters()["aiconfigurator"](source, Options())
    assert [r.get("speculative_tokens") for r in converted.rows] == [1, None, None, None, None]
    assert converted.rows[0]["draft_acceptance"] == pytest.approx(0.67)


@pytest.mark.parametrize(("runtime", "expected"), [
    ("vllm", '"num_speculative_tokens": 2'),
    ("sglang", "--speculative-num-draft-tokens 3"),
    ("trtllm", "num_nextn_predict_layers: 2"),
])
def test_launch_commands_carry_the_drafts(runtime: str, expected: str) -> None:
    """Each engine's command asks for the drafts in its own documented terms (SGLang: k
    steps, k + 1 tokens checked); the profile's flag list admits every flag used (a typo
    fails in ``flag``)."""
    command = launch_command(model=get_model("deepseek-r1"),
                             deployment=Deployment(tp=8, runtime=runtime, speculative_tokens=2),
                             workload=Workload(kind="batch", batch=8, input_tokens=1024,
                                               output_tokens=1024))
    assert expected in command.script()
    plain = launch_command(model=get_model("deepseek-r1"),
                           deployment=Deployment(tp=8, runtime=runtime),
                           workload=Workload(kind="batch", batch=8, input_tokens=1024,
                                             output_tokens=1024))
    assert "speculative" not in plain.script() and "nextn" not in plain.script()


def test_a_runtime_without_draft_heads_refuses_speculation() -> None:
    with pytest.raises(ConfigError, match="no speculative decoding"):
        predict(model=LLAMA, gpu="H100",
                deployment=Deployment(runtime="lmdeploy", speculative_tokens=2),
                workload=Workload(kind="batch", batch=1))


def test_the_draft_head_holds_one_layer_of_weights_and_cache() -> None:
    """Llama-3.1-8B's last layer, hand-counted: q/k/v 4096 x (4096 + 2 x 1024), o 4096 x
    4096, gate/up/down 3 x 4096 x 14336 = 218.1 M bf16 weights (436.2 MB); its cache adds a
    33rd layer's K and V to every token (32 -> 33 layers of 2 x 1024 x 2 bytes)."""
    ctx = _ctx()
    args = {"graph": ctx.graph, "gpu": ctx.gpu, "runtime": ctx.runtime,
            "degrees": dict(ctx.degrees), "pp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
            "sequences": 1.0, "context_tokens": 1000.0}
    plain, drafted = memory_use(**args), memory_use(**args, draft_layers=1)
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert drafted.weights_bytes - plain.weights_bytes == pytest.approx(2 * layer, rel=1e-9)
    assert drafted.kv_cache_bytes == pytest.approx(plain.kv_cache_bytes * 33 / 32, rel=1e-9)
    assert _ctx(drafts=2).draft_layers == 1 and _ctx().draft_layers == 0


def test_predict_says_how_many_tokens_a_step_yields(capsys: pytest.CaptureFixture[str]) -> None:
    """The table view names the speculation it priced (k = 2, a = 0.5: 1.75 tokens); a bad
    acceptance is one line and exit code 2."""
    from energylens.cli import main

    assert main(["predict", "--model", LLAMA, "--gpu", "h100", "--speculative-tokens", "2",
                 "--draft-acceptance", "0.5"]) == 0
    assert "2 drafts per step, each kept with probability 0.5: 1.75 tokens per step" in \
        capsys.readouterr().out
    assert main(["predict", "--model", LLAMA, "--gpu", "h100", "--speculative-tokens", "2",
                 "--draft-acceptance", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "within [0, 1]" in err and len(err.splitlines()) == 1
