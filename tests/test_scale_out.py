"""Collectives over more GPUs than one scale-up domain: hierarchical, as NCCL runs them.

Validation: nccl-tests ``all_reduce_perf`` on 2 nodes x 8 H100 80GB (GCP A3 Mega, typed
from the log in lessizzmore/create-a3mega-ztan-fork @02dd8f455c43ced1cf442ef29334bda97149264b;
the file itself is not redistributed, see data/measurements/SOURCES.md). Out-of-place
times below. The nodes' scale-out network: 8 GPU NICs of 200 Gb/s (GPUDirect-TCPXO) per
a3-megagpu-8g VM, i.e. 25 GB/s per GPU and direction (Google Cloud A3 Mega documentation;
recalled, not re-read here).
"""

from __future__ import annotations

import dataclasses

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.comm import collective_cost, scale_out_cost
from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.predict import predict

#: message bytes -> measured time (s), 16 ranks = 2 nodes x 8 H100
A3_MEGA_ALLREDUCE_S = {536870912: 3817.5e-6, 1073741824: 6759.0e-6, 2147483648: 12646e-6,
                       4294967296: 24361e-6, 8589934592: 47535e-6}
A3_MEGA_NIC_BYTES_PER_S = 25e9


def _links():
    cal, gpu = default_calibration(), load_gpu("H100-SXM")
    return (gpu, cal.link(gpu=gpu.name, kind=gpu.intra_node.kind),
            cal.link(gpu=gpu.name, kind=gpu.inter_node.kind))


@pytest.mark.parametrize(("size", "measured"), sorted(A3_MEGA_ALLREDUCE_S.items()))
def test_two_node_all_reduce_matches_nccl_tests(size: int, measured: float) -> None:
    """Bandwidth-bound sizes within 15 %; a flat ring through the NICs is >10x slower."""
    gpu, intra, inter = _links()
    hierarchical = scale_out_cost(kind="all_reduce", message_bytes=float(size), group_size=16,
                                  gpus_per_node=8,
                                  intra_bandwidth=gpu.intra_node.bandwidth_bytes_per_s,
                                  intra=intra, inter_bandwidth=A3_MEGA_NIC_BYTES_PER_S,
                                  inter=inter)
    assert float(hierarchical.latency_s) == pytest.approx(measured, rel=0.15)
    flat = collective_cost(kind="all_reduce", message_bytes=float(size), group_size=16,
                           bandwidth=A3_MEGA_NIC_BYTES_PER_S, constants=inter)
    assert float(flat.latency_s) > 10 * measured


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "all_to_all"])
@pytest.mark.parametrize(("n", "g"), [(16, 8), (32, 8), (144, 72)])
def test_bytes_per_gpu_are_conserved_and_only_the_crossing_share_uses_the_nic(kind, n, g):
    """Energy per byte only (no power): the two parts move what one flat collective moves
    per GPU, and the NIC carries 2(k-1)/(k g) (all-reduce) or (n-g)/n (all-to-all) of it."""
    _, intra, _ = _links()
    link = dataclasses.replace(intra, power_w=0.0, energy_per_byte_j=1.0)
    nic = dataclasses.replace(link, energy_per_byte_j=1e-9)  # marks bytes sent over the NIC
    size, k = 1e8, n // g
    both = scale_out_cost(kind=kind, message_bytes=size, group_size=n, gpus_per_node=g,
                          intra_bandwidth=450e9, intra=link, inter_bandwidth=50e9, inter=link)
    flat = collective_cost(kind=kind, message_bytes=size, group_size=n, bandwidth=50e9,
                           constants=link)
    assert float(both.energy_j) == pytest.approx(float(flat.energy_j))
    nic_only = scale_out_cost(kind=kind, message_bytes=size, group_size=n, gpus_per_node=g,
                              intra_bandwidth=450e9, intra=dataclasses.replace(link,
                                                                               energy_per_byte_j=0.0),
                              inter_bandwidth=50e9, inter=nic)
    crossing = 2 * (k - 1) / (k * g) if kind == "all_reduce" else \
        ((k - 1) / (k * g) if kind == "all_gather" else (n - g) / n)
    assert float(nic_only.energy_j) == pytest.approx(size * crossing * 1e-9)


def test_tensor_parallel_across_two_nodes_pays_the_nic() -> None:
    """TP 16 on H100 (two 8-GPU domains) spends longer in exposed communication per
    output token than TP 8 in one domain, and all its numbers are finite."""
    workload = Workload(batch=8, input_tokens=512, output_tokens=64)
    one = predict(model="llama-3.1-70b", gpu="h100", deployment=Deployment(tp=8),
                  workload=workload)
    two = predict(model="llama-3.1-70b", gpu="h100", deployment=Deployment(tp=16),
                  workload=workload)
    assert one.feasible and two.feasible
    assert two.decode.communication_j > one.decode.communication_j
    assert two.tpot_s > one.tpot_s
