"""A prediction depends on its inputs only, not on what was predicted before it: the cost
model's caches (kernel plans, step tables, routing loads) must key on everything they
read. Varied configurations are predicted in one order, then in the reverse one."""

from __future__ import annotations

from energylens.deployment import Deployment, Workload
from energylens.predict import predict

#: (model, GPU, runtime, TP, weight dtype, workload kind, batch or clients): configurations
#: that share models, GPUs or shapes pairwise, so that a cache keyed on too little would
#: hand one of them another's entry.
CONFIGURATIONS = (
    ("llama-3.1-8b", "H100", "vllm", 1, "bf16", "batch", 8),
    ("llama-3.1-8b", "H100", "vllm", 1, "fp8", "batch", 8),
    ("llama-3.1-8b", "H100", "sglang", 2, "bf16", "serving", 64),
    ("llama-3.1-8b", "L4", "vllm", 1, "bf16", "batch", 8),
    ("llama-3.1-8b", "B200", "trtllm", 1, "fp8", "load", 8),
    ("qwen3-30b-a3b", "H100", "vllm", 2, "bf16", "batch", 64),
    ("qwen3-30b-a3b", "H100", "trtllm", 2, "fp8", "serving", 8),
    ("qwen3-30b-a3b", "MI300X", "vllm", 1, "bf16", "load", 8),
    ("llama-3.1-70b", "H100", "vllm", 8, "fp8", "batch", 1),
    ("llama-3.1-70b", "A100-80GB-SXM", "vllm", 8, "bf16", "serving", 64),
    ("mixtral-8x7b", "H100", "sglang", 2, "bf16", "batch", 64),
    ("mixtral-8x7b", "H100", "llama.cpp", 2, "bf16", "batch", 8),
)


def _headline(configuration: tuple) -> tuple[float, ...]:
    model, gpu, runtime, tp, dtype, kind, level = configuration
    workload = (Workload(kind="load", concurrency=level, input_tokens=1024, output_tokens=128,
                         num_requests=100) if kind == "load" else
                Workload(kind=kind, batch=level, input_tokens=1024, output_tokens=128))
    result = predict(model=model, gpu=gpu, workload=workload,
                     deployment=Deployment(tp=tp, runtime=runtime, weight_dtype=dtype))
    assert result.feasible, configuration
    return (result.ttft_s, result.tpot_s, result.energy_per_output_token_j,
            result.avg_power_w, result.memory_per_gpu_gb)


def test_a_prediction_does_not_depend_on_the_ones_before_it() -> None:
    forward = [_headline(c) for c in CONFIGURATIONS]
    backward = [_headline(c) for c in reversed(CONFIGURATIONS)][::-1]
    assert forward == backward
    # and the configurations differ: a cache that returned one entry for all would agree
    assert len(set(forward)) == len(CONFIGURATIONS)
