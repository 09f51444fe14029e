"""Collectives: latency plus size-dependent achieved bandwidth, per interconnect.

base = latency + latency_per_hop x log2(n) x phases     (all-to-all: its own fixed time)
wire = moved bytes / achieved bus bandwidth
time = (base^q + wire^q)^(1/q)                        (q = latency_sharpness; 1 = additive)
achieved = link bandwidth x min(1, f(n)) x s / (s + half_bandwidth_bytes),
f(n) = bus_bandwidth_fraction x (n / 2)^bandwidth_group_exponent
send/recv: time = p2p_latency + s / (link bandwidth x p2p_bandwidth_fraction)
large messages: time = min(time, bulk_latency + moved / (link bandwidth x bulk fraction)),
as NCCL's tuner picks the faster of its protocols/algorithms per message size
with NCCL's bus-bandwidth convention: all-reduce moves 2(n-1)/n of the message per GPU,
all-gather and all-to-all (n-1)/n, send/recv the whole message. Communication kernels
hold ``sms`` SMs (a number, or an array over configurations); bandwidth grows with them
until ``saturation_sms``.

A group larger than the GPU's scale-up domain (``gpus_per_node``: k domains of g GPUs)
runs hierarchically, as NCCL's tree and NVLS-tree algorithms do (:func:`scale_out_cost`):
an all-reduce reduces within each domain over the scale-up link while every GPU
all-reduces its 1/g share with its peers in the other k-1 domains through its own NIC;
an all-to-all sends the (n-g)/n of its message bound for other domains through the NIC
and the rest over the scale-up link. The two parts are pipelined: the slower one sets the
time. A flat ring through the NICs would move the whole message per GPU and be g times
slower than what 2x8 H100 nccl-tests measure (tests/test_scale_out.py).

A ring all-reduce is a reduce-scatter and then an all-gather: each of those is one phase
and grows by half the all-reduce's per-hop latency (``_PHASES``); an all-to-all is one
round of exchanges whose fixed time does not grow with the group (AIConfigurator's NCCL
tables, 512 B over 2/4/8 H100: all-reduce 6.2/9.5/15.6 us, all-gather 5.3/7.1/10.1,
all-to-all 6.5/6.5/7.4), fitted apart where a table measures it (``all_to_all_latency_s``).

Why this form (Vidur NCCL profiles, H100/A100 DGX): all-reduce time is flat (~20-45 us)
up to a few MB and then linear, so latency and wire time join like a soft maximum rather
than a sum; the achieved bus bandwidth grows with the group on H100 NVSwitch (about 0.61
of the link at 2 GPUs, 0.87 at 8: NVLink SHARP), hence the group exponent; and send/recv
has a fixed cost 5x lower than all-reduce's, hence its own latency and fraction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from energylens.cost.constants import LinkConstants, RuntimeConstants
from energylens.cost.work import Size
from energylens.hardware import GPU

_BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


#: Share of the all-reduce's per-hop latency growth each collective pays (a ring all-reduce
#: is a reduce-scatter then an all-gather).
_PHASES = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 1.0}


@dataclass(frozen=True, kw_only=True)
class CommCost:
    """Time and energy (per GPU) of one collective."""

    latency_s: Size
    energy_j: Size
    wire_s: Size  # bandwidth-bound part (what SM allocation speeds up)


def group_per_node(*, dim: str, degrees: Mapping[str, int], gpus_per_node: int) -> int:
    """GPUs of one group of parallel dimension ``dim`` on one scale-up domain.

    Ranks are placed with the tensor-parallel splits innermost, contiguous on a node (the
    attention group ``tp``, an expert's shards ``etp``), and the expert-parallel ranks
    outermost, ``etp`` GPUs apart: an ``ep`` group spans ``ep x etp`` GPUs, and has
    ``gpus_per_node / etp`` of them on each node of that span (EP8 x etp 2 on two 8-GPU
    nodes: four a node; its etp pairs stay inside a node)."""
    size = degrees[dim]
    if dim == "ep":
        return max(1, min(size, gpus_per_node // degrees.get("etp", 1)))
    return min(size, gpus_per_node)


def link_for_group(*, gpu: GPU, group_size: int, per_node: int | None = None) -> tuple[str, float]:
    """Interconnect kind and per-direction bandwidth per GPU used by a group of
    ``group_size`` GPUs, ``per_node`` of them on one node (None: as many as fit,
    ``gpus_per_node``): the scale-out network once the group spans several scale-up
    domains; inside a node, as its topology wires it
    (:data:`energylens.hardware.database.TOPOLOGIES`): bridged pairs give a group of two
    the bridge and a larger one the pairs joined over the link beyond it
    (``Link.between_pairs_kind``, at that link's bandwidth)."""
    if group_size > (gpu.gpus_per_node if per_node is None else per_node):
        return gpu.inter_node.kind, gpu.inter_node.bandwidth_bytes_per_s
    link = gpu.intra_node
    if link.topology == "pairs" and group_size > 2:
        assert link.between_pairs_kind is not None
        assert link.beyond_pair_bandwidth_bytes_per_s is not None
        return link.between_pairs_kind, link.beyond_pair_bandwidth_bytes_per_s
    return link.kind, link.bandwidth_bytes_per_s


def scale_out_cost(*, kind: str, message_bytes: Size, group_size: int, gpus_per_node: int,
                   intra_bandwidth: float, intra: LinkConstants, inter_bandwidth: float,
                   inter: LinkConstants, sms: Size | None = None) -> CommCost:
    """A collective over ``group_size`` GPUs in domains of ``gpus_per_node``: the
    hierarchical split of the module docstring (send/recv crosses the NIC whole)."""
    g = min(gpus_per_node, group_size)
    k = math.ceil(group_size / g)
    if kind == "send_recv" or k <= 1:
        return collective_cost(kind=kind, message_bytes=message_bytes, group_size=group_size,
                               bandwidth=inter_bandwidth, constants=inter, sms=sms)
    if kind == "all_to_all":
        n = group_size
        # so that each part moves its share: (g-1)/n of the message inside, (n-g)/n across
        inside = collective_cost(kind=kind, message_bytes=message_bytes * g / n, group_size=g,
                                 bandwidth=intra_bandwidth, constants=intra, sms=sms)
        across = collective_cost(kind=kind, message_bytes=message_bytes * (n - g) / n * k / (k - 1),
                                 group_size=k, bandwidth=inter_bandwidth, constants=inter, sms=sms)
    else:
        inside = collective_cost(kind=kind, message_bytes=message_bytes, group_size=g,
                                 bandwidth=intra_bandwidth, constants=intra, sms=sms)
        across = collective_cost(kind=kind, message_bytes=message_bytes / g, group_size=k,
                                 bandwidth=inter_bandwidth, constants=inter, sms=sms)
    return CommCost(latency_s=np.maximum(inside.latency_s, across.latency_s),
                    energy_j=inside.energy_j + across.energy_j,
                    wire_s=np.maximum(inside.wire_s, across.wire_s))


def own_allreduce_link(*, constants: RuntimeConstants, link: LinkConstants) -> LinkConstants:
    """NCCL's ``link`` with a runtime's own all-reduce in place of its latency and, where
    the runtime's bus-bandwidth fraction is set, of its bandwidth curve: an additive
    alpha-beta form without NCCL's ramp or second protocol (built once per pair: both
    are immutable and compare by value)."""
    return _own_allreduce_link(constants, link)


@lru_cache(maxsize=1024)
def _own_allreduce_link(constants: RuntimeConstants, link: LinkConstants) -> LinkConstants:
    own = replace(link, latency_s=constants.allreduce_latency_s,
                  latency_per_hop_s=constants.allreduce_latency_per_hop_s)
    if constants.allreduce_bus_bandwidth_fraction <= 0:
        return own
    return replace(own, bus_bandwidth_fraction=constants.allreduce_bus_bandwidth_fraction,
                   bandwidth_group_exponent=0.0, half_bandwidth_bytes=0.0,
                   latency_sharpness=1.0, bulk_bandwidth_fraction=0.0)


def collective_cost(*, kind: str, message_bytes: Size, group_size: int, bandwidth: float,
                    constants: LinkConstants, sms: Size | None = None) -> CommCost:
    """Cost of one collective of ``message_bytes`` (the full tensor, per GPU) over a group."""
    if group_size <= 1:
        return CommCost(latency_s=0.0, energy_j=0.0, wire_s=0.0)
    n = group_size
    moved = message_bytes * _BUS_FACTOR[kind](n)
    if kind == "send_recv":  # one copy engine-free transfer: latency + bytes / bandwidth
        achieved: Size = bandwidth * min(constants.p2p_bandwidth_fraction, 1.0)
        if sms is not None:
            achieved = achieved * np.minimum(1.0, np.maximum(sms, 1.0) / constants.saturation_sms)
        wire = moved / achieved
        latency = constants.p2p_latency_s + wire
    else:
        if kind == "all_to_all" and constants.all_to_all_latency_s > 0:
            base = constants.all_to_all_latency_s
        else:
            base = constants.latency_s + constants.latency_per_hop_s * math.log2(n) * _PHASES[kind]
        fraction = constants.bus_bandwidth_fraction * (n / 2.0) ** constants.bandwidth_group_exponent
        achieved = (bandwidth * min(fraction, 1.0)
                    * message_bytes / (message_bytes + constants.half_bandwidth_bytes))
        if sms is not None:
            achieved = achieved * np.minimum(1.0, np.maximum(sms, 1.0) / constants.saturation_sms)
        wire = moved / achieved
        q = constants.latency_sharpness
        bound = np.maximum(wire, base)
        latency = bound * (1.0 + (np.minimum(wire, base) / np.maximum(bound, 1e-30)) ** q) ** (1.0 / q)
        if constants.bulk_bandwidth_fraction > 0:  # NCCL picks the faster protocol per size
            sm_share = (1.0 if sms is None
                        else np.minimum(1.0, np.maximum(sms, 1.0) / constants.saturation_sms))
            bulk_wire = moved / (bandwidth * constants.bulk_bandwidth_fraction * sm_share)
            bulk = constants.bulk_latency_s + bulk_wire
            wire = np.where(bulk < latency, bulk_wire, wire)
            latency = np.minimum(latency, bulk)
    energy = moved * constants.energy_per_byte_j + constants.power_w * latency
    return CommCost(latency_s=latency, energy_j=energy, wire_s=wire)


def point_to_point_energy_j(*, cost: CommCost, constants: LinkConstants) -> Size:
    """Energy of one ``send_recv`` (``cost``, from :func:`collective_cost`) over both of its
    GPUs: its bytes once (the sender's, as a collective's are per sending GPU) and the
    link's power at both ends while it runs."""
    return cost.energy_j + constants.power_w * cost.latency_s


def overlapped_time(*, compute_s: Size, comm_s: Size, sync_s: Size) -> Size:
    """Wall time of compute and communication that run concurrently."""
    return np.maximum(compute_s, comm_s) + sync_s
