"""What every workload kind (scheduler) must satisfy, parametrised over ``kind_names()``.

Adding a kind is one module in ``energylens/workloads/``; this suite then holds it to the
contract of :class:`energylens.workloads.WorkloadKind` without being edited. The checks are
identities and invariants that hold whatever the constants (energy bookkeeping, data
parallelism, monotonicity, validation), not snapshots of today's numbers.
"""

from __future__ import annotations

import json
import math

import pytest

from energylens.cli.main import main
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.predict import predict
from energylens.workloads import (
    MemoryDemand,
    PhaseResult,
    Prediction,
    Workload,
    get_kind,
    kind_names,
)
from energylens.workloads.registry import register

KINDS = kind_names()
GPU = "h100"
#: (model, ep of one replica): a dense model on one GPU and an MoE model under EP.
MODELS = {
    "dense": ("llama-3.1-8b", 1),
    "moe": ("qwen3-30b-a3b", 2),
}
HEADLINE = ("ttft_s", "tpot_s", "energy_per_output_token_j", "energy_per_request_j",
            "avg_power_w", "output_tokens_per_s", "memory_per_gpu_gb")
PHASE_PARTS = ("compute_j", "memory_j", "communication_j", "static_j")

every_kind = pytest.mark.parametrize("kind", KINDS)
every_model = pytest.mark.parametrize("model", list(MODELS))


def _predict(model: str, kind: str, *, replicas: int = 1, dp_explicit: bool = True,
             **workload: float) -> Prediction:
    """``replicas`` data-parallel copies of the model's replica, with ``dp`` given or
    inferred from ``num_gpus``."""
    name, ep = MODELS[model]
    deployment = Deployment(num_gpus=ep * replicas, ep=ep,
                            dp=replicas if dp_explicit and replicas > 1 else None)
    return predict(model=name, gpu=GPU, deployment=deployment,
                   workload=Workload(kind=kind, **workload))


# --- registry ----------------------------------------------------------------------------

def test_registry_is_not_empty_and_batch_is_the_default() -> None:
    assert KINDS and len(set(KINDS)) == len(KINDS)
    assert Workload().kind in KINDS


@every_kind
def test_kind_is_registered_once_under_its_name(kind: str) -> None:
    scheduler = get_kind(kind)
    assert scheduler.name == kind
    assert callable(scheduler.memory_demand) and callable(scheduler.run)
    with pytest.raises(ValueError, match="twice"):
        register(scheduler)
    assert kind_names() == KINDS


@every_kind
def test_the_cli_runs_every_kind(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", MODELS["dense"][0], "--gpu", GPU, "--workload", kind,
                 "--batch", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"] == kind and out["feasible"] is True


# --- validation --------------------------------------------------------------------------

def test_an_unregistered_kind_is_a_one_line_config_error() -> None:
    for call in (lambda: Workload(kind="nope"), lambda: get_kind("nope")):
        with pytest.raises(ConfigError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message.strip() and "nope" in message
        assert all(kind in message for kind in KINDS)  # says what is known


@every_kind
@pytest.mark.parametrize("field", ["batch", "input_tokens", "output_tokens"])
@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf")])
def test_non_positive_or_non_finite_sizes_are_refused(kind: str, field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field) as info:
        Workload(kind=kind, **{field: value})
    assert "\n" not in str(info.value).strip()


# --- predictions -------------------------------------------------------------------------

def _check_finite_positive(p: Prediction) -> None:
    for key in HEADLINE:
        value = getattr(p, key)
        assert math.isfinite(value) and value > 0, key
    for phase in (p.prefill, p.decode):
        for key in ("latency_s", "energy_j", *PHASE_PARTS):
            assert math.isfinite(getattr(phase, key)), key


@every_kind
@every_model
def test_predicts_finite_positive_metrics(kind: str, model: str) -> None:
    p = _predict(model, kind, batch=8, input_tokens=512, output_tokens=128)
    assert p.feasible and p.infeasible_reason is None
    assert p.workload == kind and p.model == MODELS[model][0]
    assert p.num_gpus == MODELS[model][1]
    _check_finite_positive(p)


@every_kind
def test_a_config_that_does_not_fit_is_reported_not_raised(kind: str) -> None:
    """Refused with a one-line reason, or (a kind whose runtime caps its running batch
    at what the KV cache holds, as vLLM's scheduler does) run at a smaller batch it reports."""
    p = _predict("dense", kind, batch=4096, input_tokens=8192, output_tokens=8192)
    if p.feasible:
        assert p.running_batch is not None and p.running_batch < 4096
    else:
        assert p.infeasible_reason and "\n" not in p.infeasible_reason
        assert "GB" in p.infeasible_reason
    _check_finite_positive(p)


WORKLOADS = [(1, 512, 128), (8, 2048, 64), (64, 128, 1024), (3, 64, 1)]


def _phase_sum(phase: PhaseResult) -> float:
    return sum(getattr(phase, part) for part in PHASE_PARTS)


@every_kind
@every_model
@pytest.mark.parametrize(("batch", "inputs", "outputs"), WORKLOADS)
def test_energy_bookkeeping_identities(kind: str, model: str, batch: float, inputs: float,
                                       outputs: float) -> None:
    p = _predict(model, kind, batch=batch, input_tokens=inputs, output_tokens=outputs)
    # a request is its output tokens: J/request = J/token x tokens
    assert p.energy_per_request_j == pytest.approx(p.energy_per_output_token_j * outputs, rel=1e-12)
    # J/token = (J/s) / (token/s)
    assert p.energy_per_output_token_j == pytest.approx(p.avg_power_w / p.output_tokens_per_s,
                                                        rel=1e-12)
    # each phase is exactly its components (nothing created or lost in the breakdown)
    for phase in (p.prefill, p.decode):
        assert phase.energy_j == pytest.approx(_phase_sum(phase), rel=1e-12, abs=1e-12)
        assert phase.energy_j >= 0 and phase.static_j >= 0 and phase.latency_s >= 0
    assert p.prefill.energy_j + p.decode.energy_j > 0


@every_kind
@every_model
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("dp_explicit", [True, False], ids=["dp", "dp-from-num-gpus"])
def test_two_replicas_serving_2b_are_one_replica_serving_b_twice(
        kind: str, model: str, batch: int, dp_explicit: bool) -> None:
    """Replicas are independent: per-token and per-request energy, latencies and memory per
    GPU are those of one replica at its share of the batch; throughput, power and energy of
    a phase (all GPUs together) double."""
    one = _predict(model, kind, batch=batch)
    two = _predict(model, kind, batch=2 * batch, replicas=2, dp_explicit=dp_explicit)
    assert two.num_gpus == 2 * one.num_gpus
    for key in ("ttft_s", "tpot_s", "energy_per_output_token_j", "energy_per_request_j",
                "memory_per_gpu_gb"):
        assert getattr(two, key) == pytest.approx(getattr(one, key), rel=1e-9), key
    for key in ("output_tokens_per_s", "avg_power_w"):
        assert getattr(two, key) == pytest.approx(2 * getattr(one, key), rel=1e-9), key
    for a, b in ((one.prefill, two.prefill), (one.decode, two.decode)):
        assert b.latency_s == pytest.approx(a.latency_s, rel=1e-9)
        for key in ("energy_j", *PHASE_PARTS):
            assert getattr(b, key) == pytest.approx(2 * getattr(a, key), rel=1e-9, abs=1e-12), key


OUTPUTS = [1, 2, 8, 32, 128, 512, 2048]


@every_kind
@every_model
@pytest.mark.parametrize(("batch", "inputs"), [(1, 128), (8, 2048), (64, 512)])
def test_more_output_tokens_never_cost_a_request_less(kind: str, model: str, batch: float,
                                                       inputs: float) -> None:
    energy = [_predict(model, kind, batch=batch, input_tokens=inputs,
                       output_tokens=o).energy_per_request_j for o in OUTPUTS]
    assert all(b >= a for a, b in zip(energy, energy[1:], strict=False)), energy


@every_kind
@every_model
def test_longer_prompts_never_cost_a_request_less(kind: str, model: str) -> None:
    energy = [_predict(model, kind, batch=8, input_tokens=i, output_tokens=128).energy_per_request_j
              for i in (64, 256, 1024, 4096)]
    assert all(b >= a for a, b in zip(energy, energy[1:], strict=False)), energy


# --- memory demand -----------------------------------------------------------------------

def _demand(kind: str, sequences: float, inputs: float = 512, outputs: float = 128) -> MemoryDemand:
    return get_kind(kind).memory_demand(
        workload=Workload(kind=kind, batch=max(sequences, 1), input_tokens=inputs,
                          output_tokens=outputs), sequences=sequences)


def _non_decreasing(values: list[float]) -> bool:
    return all(b >= a for a, b in zip(values, values[1:], strict=False))


@every_kind
def test_memory_demand_grows_with_sequences_and_context(kind: str) -> None:
    sequences = [0.5, 1.0, 1.5, 4.0, 64.0, 1000.0]
    demands = [_demand(kind, s) for s in sequences]
    for field in ("sequences", "context_tokens"):
        assert _non_decreasing([getattr(d, field) for d in demands]), field
    for s, d in zip(sequences, demands, strict=True):
        assert d.sequences >= s  # a fractional sequence still holds its cache
        assert d.context_tokens >= 512  # the prompt is cached while it decodes
    lengths = [1, 16, 512, 8192]
    by_input = [_demand(kind, 8, inputs=i) for i in lengths]
    assert _non_decreasing([d.context_tokens for d in by_input])
    assert _non_decreasing([_demand(kind, 8, outputs=o).context_tokens for o in lengths])


@every_kind
@every_model
def test_predicted_memory_grows_with_batch_and_prompt(kind: str, model: str) -> None:
    by_batch = [_predict(model, kind, batch=b).memory_per_gpu_gb for b in (1, 2, 8, 32)]
    by_input = [_predict(model, kind, batch=8, input_tokens=i).memory_per_gpu_gb
                for i in (64, 512, 4096)]
    assert _non_decreasing(by_batch) and by_batch[-1] > by_batch[0]
    assert _non_decreasing(by_input) and by_input[-1] > by_input[0]
