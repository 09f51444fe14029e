"""The engine-time bound of benchmarks/validate_load_aic.py recovers the times a synthetic
result was made with."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_benchmark

from energylens.calibration.file import default_calibration
from energylens.hardware import load_gpu
from energylens.model.zoo import get_model


def _result(*, layer_s: float) -> dict:
    """Rows whose measured TPOT is the prediction less the shipped step and sequence times
    plus ``layer_s`` per decoder layer under tensor parallelism."""
    calibration = default_calibration()
    rows = []
    for gpu in ("h100_sxm", "b200_sxm"):
        shipped = calibration.runtime(runtime="vllm", gpu=load_gpu(gpu).name)
        for model in ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
            layers = get_model(model).num_layers
            for tp, concurrency in ((1, 4), (2, 16), (4, 64), (8, 256)):
                predicted = 0.01 + 0.0001 * concurrency
                measured = (predicted - shipped.step_overhead_s
                            - shipped.per_sequence_overhead_s * concurrency
                            + layer_s * layers * (tp > 1))
                rows.append({"input": {"runtime": "vllm", "gpu": gpu, "model": model, "tp": tp,
                                       "pp": 1, "attention_dp": 1, "num_gpus": tp,
                                       "concurrency": concurrency, "max_batch_size": "",
                                       "tpot_s": measured},
                             "predicted": {"tpot_s": predicted}})
    return {"rows": rows}


def test_the_bound_recovers_a_per_tp_layer_time_in_sample_and_held_out() -> None:
    script = load_benchmark("validate_load_aic")
    result = _result(layer_s=15e-6)
    rows = script._engine_rows(result, "vllm")
    mape, (step, sequence, layer) = script._best_shift([r[2] for r in rows])
    assert mape == pytest.approx(0.0, abs=1e-9)
    assert (step, sequence, layer) == pytest.approx((0.0, 0.0, 15e-6))
    assert script._held_out(rows, 0) == pytest.approx(0.0, abs=1e-9)
    assert script._held_out(rows, 1) == pytest.approx(0.0, abs=1e-9)


def test_an_engine_time_the_grid_cannot_reach_leaves_an_error() -> None:
    """37 us per layer lies between the grid's 35 and 40 us: the bound is above zero."""
    script = load_benchmark("validate_load_aic")
    rows = script._engine_rows(_result(layer_s=37e-6), "vllm")
    assert script._best_shift([r[2] for r in rows])[0] > 0.0
