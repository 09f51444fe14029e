"""Collectives: latency plus size-dependent achieved bandwidth, per interconnect.

base = latency + latency_per_hop x log2(n)
wire = moved bytes / achieved bus bandwidth
time = (base^q + wire^q)^(1/q)                        (q = latency_sharpness; 1 = additive)
achieved = link bandwidth x min(1, f(n)) x s / (s + half_bandwidth_bytes),
f(n) = bus_bandwidth_fraction x (n / 2)^bandwidth_group_exponent
send/recv: time = p2p_latency + s / (link bandwidth x p2p_bandwidth_fraction)
large messages: time = min(time, bulk_latency + moved / (link bandwidth x bulk fraction)),
as NCCL's tuner picks the faster of its protocols/algorithms per message size
with NCCL's bus-bandwidth convention: all-reduce moves 2(n-1)/n of the message per GPU,
all-gather and all-to-all (n-1)/n, send/recv the whole message. A group that spans
nodes runs at the scale-out bandwidth. Communication kernels hold ``sms`` SMs;
bandwidth grows with them until ``saturation_sms``.

Why this form (Vidur NCCL profiles, H100/A100 DGX): all-reduce time is flat (~20-45 us)
up to a few MB and then linear, so latency and wire time join like a soft maximum rather
than a sum; the achieved bus bandwidth grows with the group on H100 NVSwitch (about 0.61
of the link at 2 GPUs, 0.87 at 8: NVLink SHARP), hence the group exponent; and send/recv
has a fixed cost 5x lower than all-reduce's, hence its own latency and fraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from energylens.cost.constants import LinkConstants
from energylens.cost.work import Size
from energylens.hardware import GPU

_BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


@dataclass(frozen=True, kw_only=True)
class CommCost:
    """Time and energy (per GPU) of one collective."""

    latency_s: Size
    energy_j: Size
    wire_s: Size  # bandwidth-bound part (what SM allocation speeds up)


def link_for_group(*, gpu: GPU, group_size: int) -> tuple[str, float]:
    """Interconnect kind and per-direction bandwidth used by a group of ``group_size``."""
    if group_size <= gpu.gpus_per_node:
        return gpu.intra_node.kind, gpu.intra_node.bandwidth_bytes_per_s
    return gpu.inter_node.kind, gpu.inter_node.bandwidth_bytes_per_s


def collective_cost(*, kind: str, message_bytes: Size, group_size: int, bandwidth: float,
                    constants: LinkConstants, sms: float | None = None) -> CommCost:
    """Cost of one collective of ``message_bytes`` (the full tensor, per GPU) over a group."""
    if group_size <= 1:
        return CommCost(latency_s=0.0, energy_j=0.0, wire_s=0.0)
    n = group_size
    moved = message_bytes * _BUS_FACTOR[kind](n)
    if kind == "send_recv":  # one copy engine-free transfer: latency + bytes / bandwidth
        achieved = bandwidth * min(constants.p2p_bandwidth_fraction, 1.0)
        if sms is not None:
            achieved = achieved * min(1.0, max(sms, 1.0) / constants.saturation_sms)
        wire = moved / achieved
        latency = constants.p2p_latency_s + wire
    else:
        base = constants.latency_s + constants.latency_per_hop_s * math.log2(n)
        fraction = constants.bus_bandwidth_fraction * (n / 2.0) ** constants.bandwidth_group_exponent
        achieved = (bandwidth * min(fraction, 1.0)
                    * message_bytes / (message_bytes + constants.half_bandwidth_bytes))
        if sms is not None:
            achieved = achieved * min(1.0, max(sms, 1.0) / constants.saturation_sms)
        wire = moved / achieved
        q = constants.latency_sharpness
        bound = np.maximum(wire, base)
        latency = bound * (1.0 + (np.minimum(wire, base) / np.maximum(bound, 1e-30)) ** q) ** (1.0 / q)
        if constants.bulk_bandwidth_fraction > 0:  # NCCL picks the faster protocol per size
            sm_share = 1.0 if sms is None else min(1.0, max(sms, 1.0) / constants.saturation_sms)
            bulk_wire = moved / (bandwidth * constants.bulk_bandwidth_fraction * sm_share)
            bulk = constants.bulk_latency_s + bulk_wire
            wire = np.where(bulk < latency, bulk_wire, wire)
            latency = np.minimum(latency, bulk)
    energy = moved * constants.energy_per_byte_j + constants.power_w * latency
    return CommCost(latency_s=latency, energy_j=energy, wire_s=wire)


def overlapped_time(*, compute_s: Size, comm_s: Size, sync_s: float) -> Size:
    """Wall time of compute and communication that run concurrently."""
    return np.maximum(compute_s, comm_s) + sync_s
