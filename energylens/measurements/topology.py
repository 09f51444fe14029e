"""Which interconnect a measured collective ran on (GPU, link kind, nominal bandwidth)."""

from __future__ import annotations

from energylens.hardware import GPU

#: Vidur's ``*_pairwise_nvlink`` SKUs (GPUs bridged in NVLink pairs, pairs joined over
#: PCIe, another cluster's network between nodes) are not in the hardware database: they
#: get their own topologies (within a pair, across pairs, across nodes) whose nominal
#: bandwidth is taken as the GPU's NVLink (or NIC) figure, the fitted fraction absorbing
#: the difference. Within a pair is also the kind the database's bridged cards deploy for a
#: group of two (A40, RTX A6000, H100 NVL); across pairs and across nodes only ``energylens
#: validate`` prices.
PAIRWISE_KIND = "nvlink-pairwise"


def link_of(*, gpu: GPU, num_workers: int, devices_per_node: int, topology: str | None,
            collective: str = "all_reduce") -> tuple[str, float]:
    """Link kind and nominal per-direction bandwidth a layout runs on.

    A group over two nodes filled with ``gpus_per_node`` GPUs each (the only multi-node
    layout EnergyLens deploys) runs on the scale-out kind (``infiniband``); Vidur also
    measures partly filled nodes, whose achieved bandwidth follows no simple law of the
    GPUs per node (A100: 5.9, 5.9, 21.6, 17.7 GB/s bus bandwidth at 1, 2, 4, 8 per node),
    so each such layout is its own topology ``<kind>/<k>-per-node``. Point-to-point
    transfers between nodes use one NIC whatever the layout.
    """
    if topology == PAIRWISE_KIND:  # a different cluster: its own topologies throughout
        if num_workers > devices_per_node:
            return f"{PAIRWISE_KIND}/inter-node", gpu.inter_node.bandwidth_bytes_per_s
        if num_workers > 2:
            return f"{PAIRWISE_KIND}/pcie-between-pairs", gpu.intra_node.bandwidth_bytes_per_s
        return PAIRWISE_KIND, gpu.intra_node.bandwidth_bytes_per_s
    if num_workers > devices_per_node:
        kind = gpu.inter_node.kind
        if collective != "send_recv" and devices_per_node < gpu.gpus_per_node:
            kind = f"{kind}/{devices_per_node}-per-node"
        return kind, gpu.inter_node.bandwidth_bytes_per_s
    return gpu.intra_node.kind, gpu.intra_node.bandwidth_bytes_per_s
