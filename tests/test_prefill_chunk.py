"""A deployment's prompt tokens per forward pass (``prefill_chunk_tokens``: vLLM
--max-num-batched-tokens, llama.cpp -b): a static batch's prompts run in passes of it, a
load run's scheduler takes it as its token budget; unset, the engine's own."""

from __future__ import annotations

import json

import pytest

from energylens.calibration.coverage import require_constants
from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.cost.step import SequenceGroup, engine_cost, step_cost, with_engine
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context
from energylens.workloads import Workload
from energylens.workloads.static_batch import _prefill_cost


def _batch(*, chunk: int | None, batch: int = 1, tokens: int = 2048, output: int = 64,
           runtime: str = "llama.cpp"):
    return predict(model="llama-2-7b", gpu="A100-40GB",
                   deployment=Deployment(runtime=runtime, prefill_chunk_tokens=chunk),
                   workload=Workload(kind="batch", batch=batch, input_tokens=tokens,
                                     output_tokens=output))


def test_a_prompt_in_passes_costs_that_many_passes_of_the_chunk() -> None:
    """llama.cpp at -b 16: a 2,048-token prompt is 128 passes of 16 tokens, each dearer
    than a 16-token prompt alone (it attends to the parts before it); the decode does not
    change."""
    chunked = _batch(chunk=16)
    one = _batch(chunk=16, tokens=16, output=1)
    assert chunked.prefill.latency_s > 128 * one.prefill.latency_s
    assert chunked.prefill.energy_j > 128 * one.prefill.energy_j
    whole = _batch(chunk=4096)
    assert chunked.decode.latency_s == pytest.approx(whole.decode.latency_s, rel=1e-12)
    assert chunked.ttft_s > 5 * whole.ttft_s  # 128 small passes re-read the weights


@pytest.mark.parametrize("chunk", [16, 512])
def test_the_passes_are_priced_at_their_mean_context(chunk: int) -> None:
    """Pass k of a 2,048-token prompt adds ``chunk`` tokens to a context of k x ``chunk``;
    pricing every pass at the mean context matches the sum of the passes priced one by
    one (attention is linear in the context) to within the rooflines' kinks (0.5 %)."""
    gpu, model = load_gpu("A100-40GB"), get_model("llama-2-7b")
    cal = require_constants(calibration=default_calibration(), gpu=gpu)
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(runtime="llama.cpp"),
                       calibration=cal)
    engine = engine_cost(ctx=ctx, sequences=1.0)
    priced = _prefill_cost(ctx=ctx, sequences=1.0, input_tokens=2048.0, chunk=chunk,
                           engine=engine)
    passes = [with_engine(ctx=ctx, engine=engine, cost=step_cost(ctx=ctx, seqs=[SequenceGroup(
        sequences=1.0, new_tokens=float(chunk), context=float(chunk * k))]))
        for k in range(1, 2048 // chunk + 1)]
    for field in ("latency_s", "compute_energy_j", "memory_energy_j"):
        assert getattr(priced, field) == pytest.approx(
            sum(getattr(p, field) for p in passes), rel=5e-3)


def test_whole_prompts_share_a_pass_where_they_fit() -> None:
    """16 prompts of 2,048 tokens (they fit at once) at 8,192 tokens per pass: 4 passes of
    4 prompts, each as 4 prompts alone; more than one pass of all 16 (the weights read 4
    times), less than 16 passes of one."""
    chunked = _batch(chunk=8192, batch=16, runtime="vllm")
    assert chunked.running_batch == 16
    four = _batch(chunk=None, batch=4, output=1, runtime="vllm")
    assert chunked.prefill.latency_s == pytest.approx(4 * four.prefill.latency_s, rel=1e-12)
    assert _batch(chunk=32768, batch=16, runtime="vllm").prefill.latency_s \
        < chunked.prefill.latency_s


def test_unset_it_is_the_engines_own_per_pass_limit() -> None:
    """Unset, a static batch's prompts run in passes of the engine's token budget as its
    server's do (llama.cpp's 512-token ubatch; vLLM's offline 8,192 on an A100), except
    where the engine runs the whole batch in one pass (optimum-habana's generate())."""
    assert _batch(chunk=None).ttft_s == _batch(chunk=512).ttft_s
    assert _batch(chunk=None).ttft_s > _batch(chunk=2048).ttft_s
    assert _batch(chunk=None, batch=16, runtime="vllm").ttft_s \
        == _batch(chunk=8192, batch=16, runtime="vllm").ttft_s
    habana = {"model": "llama-2-7b", "gpu": "Gaudi2",
              "workload": Workload(kind="batch", batch=4, input_tokens=1024, output_tokens=8)}
    whole = predict(**habana, deployment=Deployment(runtime="deepspeed-habana"))
    split = predict(**habana, deployment=Deployment(runtime="deepspeed-habana",
                                                    prefill_chunk_tokens=1024))
    assert whole.ttft_s < split.ttft_s


def test_unset_or_larger_than_the_batch_changes_nothing() -> None:
    """A budget past the batch's 8,192 prompt tokens prices the same passes (its larger
    start-up workspace only takes KV space this batch does not need)."""
    base = _batch(chunk=None, batch=4, runtime="vllm")
    big = _batch(chunk=20_000, batch=4, runtime="vllm")
    assert big.memory_per_gpu_gb > base.memory_per_gpu_gb
    assert big.prefill.latency_s == pytest.approx(base.prefill.latency_s, rel=1e-12)
    assert big.tpot_s == base.tpot_s


def test_a_load_runs_scheduler_takes_it_as_its_token_budget() -> None:
    """A budget of 32 tokens splits every 2,048-token prompt over 64 steps, each reading
    the weights: TTFT grows several fold."""
    load = Workload(kind="load", concurrency=2, input_tokens=2048, output_tokens=32,
                    num_requests=20)
    default = predict(model="llama-3.1-8b", gpu="H100", workload=load)
    small = predict(model="llama-3.1-8b", gpu="H100", workload=load,
                    deployment=Deployment(prefill_chunk_tokens=32))
    assert small.ttft_s > 2 * default.ttft_s


def test_bad_values_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="prefill_chunk_tokens must be >= 1"):
        Deployment(prefill_chunk_tokens=0)
    common = ["predict", "--model", "llama-2-7b", "--gpu", "A100-40GB", "--runtime",
              "llama.cpp", "--batch", "1", "--input-tokens", "512", "--output-tokens", "8",
              "--json"]
    with pytest.raises(SystemExit) as info:  # argparse's one-line refusal
        main([*common, "--prefill-chunk-tokens", "0"])
    assert info.value.code == 2
    assert "\n" not in capsys.readouterr().err.strip()
    assert main([*common, "--prefill-chunk-tokens", "32"]) == 0
    chunked = json.loads(capsys.readouterr().out)["ttft_s"]
    assert main(common) == 0
    assert chunked > json.loads(capsys.readouterr().out)["ttft_s"]


def test_llama_cpp_pipelines_its_prompt_passes_over_layer_split_gpus() -> None:
    """llama.cpp over 4 GPUs holding a quarter of the layers each: a pass enters the first
    GPU as the one before leaves it, so 128 passes (128 prompts of 16 tokens, one per pass)
    take 128 + 3 stage times, a stage being a quarter of one pass (engine overheads zeroed
    so that a pass is the model's time alone); the work, hence the dynamic energy, is that
    of 128 passes. vLLM runs each pass through all four stages before the next."""
    from energylens.calibration.file import default_calibration

    calibration = default_calibration()
    for runtime in ("llama.cpp", "vllm"):
        calibration = calibration.with_runtime(runtime=runtime, gpu="A100-40GB-SXM",
                                               step_overhead_s=0.0,
                                               per_sequence_overhead_s=0.0)

    def run(runtime: str, *, batch: int):  # type: ignore[no-untyped-def]
        return predict(model="llama-2-7b", gpu="A100-40GB", calibration=calibration,
                       deployment=Deployment(runtime=runtime, pp=4, prefill_chunk_tokens=16),
                       workload=Workload(kind="batch", batch=batch, input_tokens=16,
                                         output_tokens=8))

    for runtime, stages in (("llama.cpp", (128 + 3) / 4), ("vllm", 128)):
        chunked = run(runtime, batch=128)
        assert chunked.running_batch == 128
        one = run(runtime, batch=1)
        assert chunked.prefill.latency_s == pytest.approx(stages * one.prefill.latency_s,
                                                          rel=1e-9)
        for part in ("compute_j", "memory_j", "communication_j"):
            assert getattr(chunked.prefill, part) == pytest.approx(
                128 * getattr(one.prefill, part), rel=1e-9)
