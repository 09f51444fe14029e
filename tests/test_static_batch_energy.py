"""The static batch's decode energy is the sum of its steps' energies."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.step import SequenceGroup, step_cost
from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model
from energylens.predict import predict, step_context


def test_decode_communication_energy_is_steps_times_one_steps() -> None:
    """Llama-3.1-70B TP8, batch 8, 128 output tokens: the all-reduces of a decode step do not
    depend on the context, so 127 decode steps (the first token comes from prefill) move
    127 times one step's communication energy (it was counted a quarter of that)."""
    model, gpu, deployment = get_model("llama-3.1-70b"), load_gpu("H100"), Deployment(tp=8)
    result = predict(model=model, gpu=gpu, deployment=deployment,
                     workload=Workload(batch=8, input_tokens=512, output_tokens=128))
    ctx = step_context(model=model, gpu=gpu, deployment=deployment,
                       calibration=default_calibration())
    one = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=8, new_tokens=1.0, context=576.0)])
    assert result.decode.communication_j == pytest.approx(127 * float(one.communication_energy_j),
                                                          rel=1e-9)


@pytest.mark.parametrize("output_tokens", [1.0, 1.5, 2.0, 2.5, 3.0, 7.25])
def test_a_mean_output_length_decodes_its_fraction_of_a_step(output_tokens: float) -> None:
    """A mean of o tokens (a trace's mean length) decodes o - 1 steps after the prompt: the
    decode phase is (o - 1) TPOTs, its communication (o - 1) steps' worth, as the per-token
    figures divide by o (2.5 tokens were priced as 2 and 3.5 as 4, by banker's rounding)."""
    model, gpu, deployment = get_model("llama-3.1-70b"), load_gpu("H100"), Deployment(tp=8)
    result = predict(model=model, gpu=gpu, deployment=deployment,
                     workload=Workload(batch=1, input_tokens=512, output_tokens=output_tokens))
    ctx = step_context(model=model, gpu=gpu, deployment=deployment,
                       calibration=default_calibration())
    one = step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=1, new_tokens=1.0, context=513.0)])
    steps = output_tokens - 1
    assert result.decode.latency_s == pytest.approx(steps * result.tpot_s, rel=1e-12)
    assert result.decode.communication_j == pytest.approx(
        steps * float(one.communication_energy_j), rel=1e-9)
    assert result.energy_per_output_token_j == pytest.approx(
        (result.prefill.energy_j + result.decode.energy_j) / output_tokens, rel=1e-12)


def test_latency_grows_linearly_between_whole_output_lengths() -> None:
    """Up to the mean decode step's context (2.5 tokens: a context half a token shorter
    than 3 tokens', 2e-7 of the latency)."""
    def e2e(output_tokens: float) -> float:
        run = predict(model="llama-3.1-8b", gpu="H100-SXM",
                      workload=Workload(input_tokens=512, output_tokens=output_tokens))
        return run.prefill.latency_s + run.decode.latency_s

    low, high = e2e(2.0), e2e(3.0)
    assert low < e2e(2.5) < high
    assert e2e(2.5) == pytest.approx((low + high) / 2, rel=1e-6)


@pytest.mark.parametrize("field", ["input_tokens", "output_tokens"])
def test_a_mean_length_below_one_token_is_refused(field: str) -> None:
    from energylens.errors import ConfigError

    with pytest.raises(ConfigError, match=f"{field} must be a finite number >= 1, got 0.5"):
        Workload(**{field: 0.5})
