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
