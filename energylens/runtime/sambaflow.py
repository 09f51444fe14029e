"""SambaFlow on SambaNova SN40L: a whole decoder compiled into one spatial dataflow
pipeline, weights streamed from HBM. No kernel is launched and no collective is called, so
the fixed time a GPU pays per kernel (launch, prologue, tail, the small-kernel floors) and
per collective (NCCL's latency) is absent: what is left is each op's compute and memory
time, the reductions' bytes over the sockets' links, and the engine's per-step and
per-sequence time fitted on LLM-Inference-Bench's rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from energylens.cost.constants import Calibration
from energylens.errors import ConfigError
from energylens.hardware import load_gpu
from energylens.runtime.launch import LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: Kernel constants that are a per-kernel fixed time (zero on a dataflow pipeline).
KERNEL_FLOORS = ("kernel_overhead_s", "expert_extra_overhead_s", "fp8_expert_extra_overhead_s",
                 "norm_overhead_s", "rope_overhead_s", "activation_overhead_s",
                 "elementwise_overhead_s", "attention_tile_s")
#: Link constants that are a per-collective fixed time (a latency, or the message size below
#: which a collective cannot fill the link: a latency in bytes).
LINK_FLOORS = ("latency_s", "latency_per_hop_s", "p2p_latency_s", "all_to_all_latency_s",
               "overlap_sync_s", "half_bandwidth_bytes")


@dataclass(frozen=True, kw_only=True, eq=False)
class SambaFlow(RuntimeProfile):
    """SambaFlow: no launch command (SambaStudio's flags are not documented in reach)."""

    def calibration_for(self, *, calibration: Calibration, gpu: str,
                        version: str | None = None,
                        mha: bool = False, paged_decode: bool = True) -> Calibration:
        """The base scales and overheads, with every per-kernel and per-collective fixed
        time of ``gpu`` at zero."""
        return _without_floors(super().calibration_for(calibration=calibration, gpu=gpu,
                                                       version=version, mha=mha,
                                                       paged_decode=paged_decode), gpu)

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """Refused: SambaFlow models are compiled and deployed as SambaStudio endpoints."""
        raise ConfigError(f"{self.display_name}: models are compiled and deployed as "
                          "SambaStudio endpoints, whose flags are not documented in reach; "
                          "no launch command is written")


@lru_cache(maxsize=16)  # Calibration hashes by identity: one copy per (calibration, GPU)
def _without_floors(calibration: Calibration, gpu: str) -> Calibration:
    out = calibration.with_kernel(gpu, **dict.fromkeys(KERNEL_FLOORS, 0.0))
    spec = load_gpu(gpu)
    for link in (spec.intra_node, spec.inter_node):
        base = out.link(gpu=gpu, kind=link.kind)
        out = out.with_link(f"{gpu}:{link.kind}",
                            **{**asdict(base), **dict.fromkeys(LINK_FLOORS, 0.0)})
    return out


register(SambaFlow(**load_facts("sambaflow")))
