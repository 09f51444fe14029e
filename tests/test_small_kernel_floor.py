"""A small kernel's launch floor joins its stream time as a p-norm of its class's p."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from energylens.calibration.fit_kernels import NO_ENERGY
from energylens.cost.constants import KernelConstants
from energylens.hardware import load_gpu
from energylens.measurements.vidur_ops import Geometry, op_latency_s

GPU = load_gpu("H100-SXM")
LLAMA_7B = Geometry(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008,
                    use_gated_mlp=True, tp=1)
TOKENS = np.array([1.0, 64.0, 1024.0, 4096.0])


def _norm_latency(p: float) -> np.ndarray:
    constants = replace(KernelConstants(), **NO_ENERGY, norm_overhead_s=5e-6,
                        norm_bandwidth_efficiency=0.4, norm_floor_sharpness=p)
    return np.asarray(op_latency_s(op="input_layernorm", geometry=LLAMA_7B, num_tokens=TOKENS,
                                   gpu=GPU, constants=constants))


def test_p_one_adds_the_floor_and_a_larger_p_hides_the_stream_under_it():
    added = _norm_latency(1.0)
    run = added - 5e-6
    # hand-computed: the RMSNorm of 4,096 hidden reads and writes 2 x 4,096 x 2 B per token
    # at 40 % of 3.35 TB/s (its few FLOPs hide under the stream)
    assert run == pytest.approx(TOKENS * 2 * 4096 * 2 / (0.4 * GPU.hbm_bandwidth_bytes_per_s),
                                rel=0.02)
    assert _norm_latency(2.0) == pytest.approx(np.sqrt(run**2 + 5e-6**2), rel=1e-9)
    assert np.all(_norm_latency(3.0) <= _norm_latency(2.0))
    assert np.all(_norm_latency(3.0) >= np.maximum(run, 5e-6))  # never below either part


def test_gemms_keep_the_additive_floor_whatever_the_class_sharpness():
    base = replace(KernelConstants(), **NO_ENERGY)
    sharp = replace(base, norm_floor_sharpness=4.0, rope_floor_sharpness=4.0,
                    activation_floor_sharpness=4.0, elementwise_floor_sharpness=4.0)
    for constants in (base, sharp):
        latency = op_latency_s(op="mlp_up_proj", geometry=LLAMA_7B, num_tokens=TOKENS, gpu=GPU,
                               constants=constants)
        assert np.array_equal(latency, op_latency_s(op="mlp_up_proj", geometry=LLAMA_7B,
                                                    num_tokens=TOKENS, gpu=GPU, constants=base))
