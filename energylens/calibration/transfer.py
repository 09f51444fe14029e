"""Constants for GPUs without measurements of their own, borrowed from a measured relative.

A GPU with no per-op profile, no NCCL profile or no serving rows would otherwise run on
the built-in defaults, which no data backs; a study comparing it with a calibrated GPU
would then compare a fit with a guess. Instead every constant the GPU lacks is taken from
its relative in :data:`RELATIVE` (the nearest measured GPU), recorded as ``assumed`` with
a note naming the source:

- latency curves, memory efficiencies, serving-engine overheads (CPU-side software) and
  link curves of the same interconnect: as measured on the relative;
- power: the board's budget splits as on the relative: static and busy power scale with
  TDP, energy per tensor FLOP with TDP per peak FLOP/s (so a GEMM at the fitted efficiency
  draws the same share of its board's TDP, and the power cap still never slows the GEMMs
  the latency fit timed); energy per HBM byte and link power carry over unchanged.

Run twice by ``energylens calibrate``: before the serving fits (so a GPU with serving rows
but no per-op profile, B200, is fitted on borrowed latency curves) and after them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from energylens.cost.constants import KernelConstants, LinkConstants
from energylens.hardware import GPU, load_gpu

#: Nearest measured relative of each GPU: same die or generation first, else H100 SXM,
#: the GPU with the most data. Listed so that a relative is filled before its borrowers.
RELATIVE: dict[str, str] = {
    "B200": "H100-SXM",
    "H200-SXM": "H100-SXM",  # same GH100 die, same 700 W TDP, faster HBM3e
    "H100-PCIe": "H100-SXM",
    "A100-80GB-SXM": "H100-SXM",
    "A100-40GB-SXM": "A100-80GB-SXM",
    "L40S": "H100-SXM",
    "MI300X": "H100-SXM",
}


def _power_scale(name: str, *, gpu: GPU, relative: GPU) -> tuple[float, str]:
    """Factor applied to the relative's value of kernel constant ``name``, and why."""
    if name in ("static_power_w", "busy_power_w"):
        return gpu.tdp_w / relative.tdp_w, "x TDP ratio"
    if name == "energy_per_tensor_flop_j":
        return ((gpu.tdp_w / gpu.peak_flops_per_s("bf16"))
                / (relative.tdp_w / relative.peak_flops_per_s("bf16")),
                "x (TDP / peak bf16 FLOP/s) ratio")
    return 1.0, ""


def _note(*, relative: str, entry: dict[str, Any], how: str) -> str:
    origin = entry.get("fit") or entry.get("note", "")
    scaled = f" {how}" if how else ""
    return f"no data for this GPU: {relative}'s value{scaled} ({entry['kind']}: {origin})"


def borrow_from_relatives(*, kernels: dict[str, KernelConstants], links: dict[str, LinkConstants],
                          prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Fill, in place, every constant a GPU lacks (no provenance entry) from its relative."""
    for name, relative_name in RELATIVE.items():
        source = prov.get(f"kernels/{relative_name}", {})
        gpu, relative = load_gpu(name), load_gpu(relative_name)
        own = prov.setdefault(f"kernels/{name}", {})
        borrowed: dict[str, float] = {}
        for field, entry in source.items():
            if field in own:
                continue
            factor, how = _power_scale(field, gpu=gpu, relative=relative)
            borrowed[field] = entry["value"] * factor
            own[field] = {"value": float(f"{borrowed[field]:.6g}"), "kind": "assumed",
                          "note": _note(relative=relative_name, entry=entry, how=how)}
        if borrowed:
            kernels[name] = replace(kernels.get(name, KernelConstants()), **borrowed)
        if not own:
            del prov[f"kernels/{name}"]
        _borrow_links(gpu=gpu, relative=relative_name, links=links, prov=prov)


def _borrow_links(*, gpu: GPU, relative: str, links: dict[str, LinkConstants],
                  prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Link constants of the relative's measured interconnects that ``gpu`` also uses."""
    prefix = f"links/{relative}:"
    kinds = {gpu.intra_node.kind, gpu.inter_node.kind}
    name = gpu.name
    for key, source in list(prov.items()):
        kind = key[len(prefix):]
        if not key.startswith(prefix) or kind.split("/")[0] not in kinds:
            continue
        own = prov.setdefault(f"links/{name}:{kind}", {})
        borrowed = {}
        for field, entry in source.items():
            if field not in own:
                borrowed[field] = entry["value"]
                own[field] = {"value": entry["value"], "kind": "assumed",
                              "note": _note(relative=relative, entry=entry, how="")}
        if borrowed:
            target = f"{name}:{kind}"
            links[target] = replace(links.get(target, LinkConstants()), **borrowed)
