"""A static batch whose KV cache does not fit runs in waves of the largest batch that fits
(each a whole prefill and decode, latency and energy summed); it is infeasible only when
the weights plus one sequence do not fit, and then priced whole, as if it fit."""

from __future__ import annotations

import pytest

from energylens.deployment import Deployment, Workload
from energylens.predict import predict
from energylens.runtime import get_runtime

MODEL, GPU, TOKENS = "llama-2-7b", "A100-80GB-SXM", 2048


def _batch(batch: int, *, model: str = MODEL, gpu: str = GPU):
    return predict(model=model, gpu=gpu, deployment=Deployment(),
                   workload=Workload(kind="batch", batch=batch, input_tokens=TOKENS,
                                     output_tokens=TOKENS))


@pytest.fixture(scope="module")
def capacity() -> int:
    """The largest batch of 4,096-token sequences that fits (about 28 on one A100)."""
    cap = _batch(10_000).running_batch
    assert cap is not None and cap == int(cap) and 1 < cap < 10_000
    return int(cap)


def test_the_cap_is_the_largest_batch_that_fits(capacity: int) -> None:
    fits = _batch(capacity)
    assert fits.feasible and fits.running_batch == capacity  # not capped
    over = _batch(capacity + 1)
    assert over.feasible and over.running_batch == capacity  # one more does not fit


def test_twice_the_capacity_takes_twice_one_wave(capacity: int) -> None:
    one, two = _batch(capacity), _batch(2 * capacity)
    assert two.feasible
    assert two.prefill.latency_s + two.decode.latency_s == pytest.approx(
        2 * (one.prefill.latency_s + one.decode.latency_s), rel=1e-12)
    assert two.prefill.energy_j + two.decode.energy_j == pytest.approx(
        2 * (one.prefill.energy_j + one.decode.energy_j), rel=1e-12)
    # per-token energy, power, TTFT (the first wave's) and the mean step are one wave's
    assert two.energy_per_output_token_j == pytest.approx(one.energy_per_output_token_j)
    assert two.avg_power_w == pytest.approx(one.avg_power_w)
    assert two.ttft_s == pytest.approx(one.ttft_s) and two.tpot_s == pytest.approx(one.tpot_s)


def test_a_partial_last_wave_adds_a_smaller_batch(capacity: int) -> None:
    full, last, both = _batch(capacity), _batch(3), _batch(capacity + 3)
    assert both.prefill.latency_s == pytest.approx(full.prefill.latency_s
                                                   + last.prefill.latency_s, rel=1e-12)
    assert both.decode.energy_j == pytest.approx(full.decode.energy_j + last.decode.energy_j,
                                                 rel=1e-12)


def test_tpot_of_waves_is_the_mean_over_sequences(capacity: int) -> None:
    """A last wave of one sequence decodes fast, but for one sequence only: the batch's
    TPOT weights each wave's step by its sequences (a mean over waves gave capacity + 1
    sequences about the midpoint of one full wave's step and one sequence's alone)."""
    full, alone, both = _batch(capacity), _batch(1), _batch(capacity + 1)
    assert alone.tpot_s < full.tpot_s
    assert both.tpot_s == pytest.approx((capacity * full.tpot_s + alone.tpot_s)
                                        / (capacity + 1), rel=1e-9)
    assert both.tpot_s > full.tpot_s - (full.tpot_s - alone.tpot_s) / capacity


def test_infeasible_only_when_one_sequence_does_not_fit() -> None:
    run = _batch(8, model="llama-2-70b", gpu="A100-40GB-SXM")  # 138 GB of weights
    assert not run.feasible
    # its figures price the batch asked, as if it fit (the CLI says so), not waves of one:
    # eight 2,048-token prompts of a 70B model are compute-bound, at least 4x one prompt
    one = _batch(1, model="llama-2-70b", gpu="A100-40GB-SXM")
    assert run.running_batch == 8 and run.ttft_s > 4 * one.ttft_s
    assert run.energy_per_output_token_j < one.energy_per_output_token_j  # weights shared
    assert run.infeasible_reason is not None and "weights 138.0" in run.infeasible_reason
    # the reason is the memory of one sequence (8 would need 8x the KV): weights, the
    # runtime's reserve, the activations of the start-up pass of vLLM's offline budget on
    # an A100 (8,192 tokens x (4 x 8,192 + 3 x 28,672) x 2 B per token: 1.95 GB) and one
    # sequence's 4,096 tokens of KV (80 layers x 2 x 8 heads x 128 x 2 B per token: 1.34
    # GB; eight would be 10.7 GB)
    reserve_gb = get_runtime("vllm").reserve_bytes / 1e9
    activations_gb = (4 * 8192 + 3 * 28672) * 2 * 8192 / 1e9
    one_kv_gb = 4096 * 80 * 2 * 8 * 128 * 2 / 1e9
    assert run.memory_per_gpu_gb > 137.9 + reserve_gb + activations_gb + one_kv_gb
    assert run.memory_per_gpu_gb < 138.0 + reserve_gb + activations_gb + 2 * one_kv_gb


def test_many_configurations_run_their_waves_as_one_does(capacity: int) -> None:
    import pandas as pd

    from energylens.batch_predict import predict_many

    batches = [1, capacity, capacity + 3, 2 * capacity, 5 * capacity + 1]
    workload = Workload(kind="batch", input_tokens=TOKENS, output_tokens=TOKENS)
    table = predict_many(model=MODEL, workload=workload,
                         table=pd.DataFrame({"gpu": GPU, "batch": batches}))
    for i, batch in enumerate(batches):
        one = _batch(batch)
        assert table["running_batch"][i] == one.running_batch
        assert table["decode_latency_s"][i] == pytest.approx(one.decode.latency_s, rel=1e-9)
        assert table["prefill_energy_j"][i] == pytest.approx(one.prefill.energy_j, rel=1e-9)
        assert table["tpot_s"][i] == pytest.approx(one.tpot_s, rel=1e-9)


def test_asking_for_more_never_runs_fewer() -> None:
    """The KV space is what the engine's start-up workspace leaves, whatever the batch:
    asking for more sequences never runs fewer (Llama-2-70B on two H100s once ran 32
    sequences in waves of 4 where 16 fit at once)."""
    def static(batch: int):
        return predict(model="llama-2-70b", gpu="H100-SXM", deployment=Deployment(tp=2),
                       workload=Workload(kind="batch", batch=batch))
    cap = static(10_000).running_batch
    assert cap is not None and cap > 1
    for asked in (int(cap) + 1, 2 * int(cap), 1_000):
        assert static(asked).running_batch == cap


def test_a_serving_batch_past_the_cap_runs_the_cap() -> None:
    """Steady state: the running batch and throughput are flat once the KV cache is the
    limit, however many sequences are asked, and the cap fits while a bit more does not."""
    def serving(batch: int):
        return predict(model="llama-3.1-70b", gpu="H200-SXM", deployment=Deployment(tp=2),
                       workload=Workload(kind="serving", batch=batch, input_tokens=TOKENS,
                                         output_tokens=TOKENS))
    runs = [serving(batch) for batch in (256, 1024, 4096)]
    capped = runs[0].running_batch
    assert capped is not None and 1 < capped < 256
    for run in runs[1:]:
        assert run.running_batch == pytest.approx(capped, abs=0.02)
        assert run.output_tokens_per_s == pytest.approx(runs[0].output_tokens_per_s, rel=1e-3)
    whole = int(capped)
    assert serving(whole).running_batch == whole  # fits as asked


def test_one_more_sequence_than_fits_runs_as_many_as_fit() -> None:
    """Qwen-72B over eight L4s under TensorRT-LLM holds 8 sequences of 1,152 tokens; asked
    for 9, the cap search started at the fractional count the KV space allows (between 8
    and 9, a hair short of fitting) and stepped to 7, skipping 8, which fits."""
    def serving(batch: int):
        return predict(model="qwen-72b", gpu="L4",
                       deployment=Deployment(tp=8, runtime="trtllm"),
                       workload=Workload(kind="serving", batch=batch, input_tokens=1024,
                                         output_tokens=128))
    fits = serving(8)
    assert fits.feasible and fits.running_batch == 8
    for asked in (9, 64):
        over = serving(asked)
        assert over.running_batch == 8
        assert over.tpot_s == pytest.approx(fits.tpot_s, rel=1e-9)
