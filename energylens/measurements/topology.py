"""Which interconnect a measured collective ran on (GPU, link kind, nominal bandwidth)."""

from __future__ import annotations

from energylens.errors import UnknownGPUError
from energylens.hardware import GPU

#: Vidur's ``*_pairwise_nvlink`` SKUs (GPUs bridged in NVLink pairs, pairs joined over
#: PCIe, another cluster's network between nodes) are not in the hardware database: they
#: get their own topologies (within a pair, across pairs, across nodes). Within a pair the
#: nominal bandwidth is the pair's NVLink bridge (:data:`PAIRWISE_BRIDGE`), across pairs the
#: host's PCIe link (:data:`PAIRWISE_HOST_PCIE`) and across nodes the NIC of the GPU the SKU
#: is read as, the fitted fraction absorbing the difference. Within a pair and across pairs
#: are also the kinds the database's bridged cards (A40, RTX A6000, H100 NVL) deploy for a
#: group of two and a larger one (``Link.between_pairs_kind``, priced at the card's own
#: PCIe figure); across nodes only ``energylens validate`` prices.
PAIRWISE_KIND = "nvlink-pairwise"
#: The PCIe link that joins the pairs of Vidur's pairwise hosts, per direction per GPU, by
#: the GPU the SKU is read as: A100 hosts PCIe Gen4 x16 (16 GT/s x 16 lanes x 128/130 / 8 =
#: 31.5 GB/s; PCI-SIG base specification 4.0, the A100's host interface in NVIDIA's A100
#: datasheet), H100 hosts Gen5 x16 (63.0 GB/s; specification 5.0, H100's host interface).
#: Fitted against it, the between-pairs constants price a bridged card's groups beyond a pair
#: at that card's own PCIe figure (``beyond_pair_bandwidth_bytes_per_s``).
PAIRWISE_HOST_PCIE = {"A100-80GB-SXM": 31.5e9, "H100-SXM": 63.0e9}
#: The NVLink bridge within a pair of those hosts, per direction: they are built of PCIe
#: cards, whose three-link bridge carries 600 GB/s both ways on A100 PCIe and on H100 PCIe /
#: NVL alike (NVIDIA's A100 and H100 datasheets) = 300 GB/s, not H100 SXM's 450. Fitted
#: against it, a bridged card's pair (H100 NVL, 300 GB/s) is priced at what the pair measured.
PAIRWISE_BRIDGE = {"A100-80GB-SXM": 300.0e9, "H100-SXM": 300.0e9}


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
            if gpu.name not in PAIRWISE_HOST_PCIE:
                raise UnknownGPUError(f"Vidur pairwise host of {gpu.name}: no PCIe figure for "
                                      "its pairs (measurements/topology.py PAIRWISE_HOST_PCIE)")
            return f"{PAIRWISE_KIND}/pcie-between-pairs", PAIRWISE_HOST_PCIE[gpu.name]
        return PAIRWISE_KIND, PAIRWISE_BRIDGE.get(gpu.name, gpu.intra_node.bandwidth_bytes_per_s)
    if num_workers > devices_per_node:
        kind = gpu.inter_node.kind
        if collective != "send_recv" and devices_per_node < gpu.gpus_per_node:
            kind = f"{kind}/{devices_per_node}-per-node"
        return kind, gpu.inter_node.bandwidth_bytes_per_s
    return gpu.intra_node.kind, gpu.intra_node.bandwidth_bytes_per_s
