"""Constants for GPUs without measurements of their own, borrowed from a measured relative.

A GPU with no per-op profile, no NCCL profile or no serving rows would otherwise run on
the built-in defaults, which no data backs; a study comparing it with a calibrated GPU
would then compare a fit with a guess. Instead every constant the GPU lacks is taken from
the relative its GPU file declares (``borrows: {from: ..., reason: ...}``, the nearest
measured GPU), recorded as ``assumed`` with a note naming the source:

- latency curves, memory efficiencies, link curves of the same interconnect and each
  runtime's overheads (CPU-side software): as measured on the relative; a runtime's own
  all-reduce latency only where the scale-up link is of the same kind (else NCCL's);
- low-precision efficiency ratios (``fp8_*``, ``fp4_*``) only from a relative of the same
  tensor-core generation, told by the same set of native low-precision rates in the GPU
  files: H100 runs block-scaled FP8 with software scaling and dequantises FP4, B200 scales
  FP8 blocks and runs FP4 in its tensor cores, so their kernels and ratios differ;
- a GPU whose file names ``engines_from`` (a GPU of the same die, e.g. the other memory
  size) takes each runtime's fitted and measured constants from it first, before its
  relative's: engine overheads are the host's and the die's, not the memory's;
- power: the board's budget splits as on the relative: static and busy power scale with
  TDP (static power never below the GPU's own idle power), energy per tensor FLOP with
  TDP per peak FLOP/s (so a GEMM at the fitted efficiency draws the same share of its
  board's TDP, and the power cap still never slows the GEMMs the latency fit timed);
  energy per HBM byte and link power carry over unchanged.

Run twice by ``energylens calibrate``: before the serving fits (so a GPU with serving rows
but no per-op profile, B200, is fitted on borrowed latency curves) and after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from energylens.cost.constants import Calibration, KernelConstants, LinkConstants, RuntimeConstants
from energylens.hardware import GPU, GPUDatabase, default_database


def _power_scale(name: str, *, gpu: GPU, relative: GPU) -> tuple[float, str]:
    """Factor applied to the relative's value of kernel constant ``name``, and why."""
    if name in ("static_power_w", "busy_power_w"):
        return gpu.tdp_w / relative.tdp_w, "x TDP ratio"
    if name == "energy_per_tensor_flop_j":
        return ((gpu.tdp_w / gpu.peak_flops_per_s("bf16"))
                / (relative.tdp_w / relative.peak_flops_per_s("bf16")),
                "x (TDP / peak bf16 FLOP/s) ratio")
    return 1.0, ""


#: Constants that describe one tensor-core generation's low-precision kernels.
PRECISION_PREFIXES = ("fp8_", "fp4_")
#: Native rates whose presence tells a tensor-core generation apart.
LOW_PRECISION_RATES = ("fp8", "fp4", "int8")


def _same_precision_support(field: str, *, gpu: GPU, relative: GPU) -> bool:
    """Whether ``relative``'s ``field`` describes kernels ``gpu`` would also run."""
    if not field.startswith(PRECISION_PREFIXES):
        return True
    return ({r for r in LOW_PRECISION_RATES if r in gpu.dense_flops_per_s}
            == {r for r in LOW_PRECISION_RATES if r in relative.dense_flops_per_s})


def _note(*, relative: str, entry: dict[str, Any], how: str) -> str:
    origin = entry.get("fit") or entry.get("note", "")
    scaled = f" {how}" if how else ""
    return f"no data for this GPU: {relative}'s value{scaled} ({entry['kind']}: {origin})"


def lending_relatives(gpu: str, database: GPUDatabase | None = None) -> list[str]:
    """The GPUs that may lend ``gpu`` a runtime constant, nearest first: its ``engines_from``
    and ``borrows_from``, then theirs, breadth first (``gpu`` itself excluded)."""
    db = default_database() if database is None else database
    seen, order, queue = {db.get(gpu).name}, [], [db.get(gpu).name]
    while queue:
        spec = db.get(queue.pop(0))
        for relative in (spec.engines_from, spec.borrows_from):
            if relative is None or relative in seen:
                continue
            seen.add(relative)
            order.append(relative)
            queue.append(relative)
    return order


def borrow_from_relatives(*, kernels: dict[str, KernelConstants], links: dict[str, LinkConstants],
                          runtimes: dict[str, RuntimeConstants],
                          prov: dict[str, dict[str, dict[str, Any]]],
                          database: GPUDatabase | None = None) -> None:
    """Fill, in place, every constant a GPU lacks (no provenance entry) from its relative.

    The relatives are the ``borrows:`` of the GPU files in ``database`` (default: the
    shipped one), visited so that a relative is filled before its own borrowers.
    """
    db = default_database() if database is None else database
    for gpu in db.borrow_order():
        if gpu.engines_from is not None:
            _borrow_runtimes(gpu=gpu, relative=db.get(gpu.engines_from), runtimes=runtimes,
                             prov=prov, own_only=True)
        _borrow(gpu=gpu, relative=db.get(str(gpu.borrows_from)), kernels=kernels, links=links,
                runtimes=runtimes, prov=prov)


def borrowed_calibration(*, calibration: Calibration, chain: Sequence[GPU]) -> Calibration:
    """``calibration`` plus constants for ``chain[0]``, borrowed down ``chain``.

    ``chain`` is a GPU, its relative, the relative's relative, ...; the last one must have
    constants in ``calibration``, the others none. Each borrower is filled from its
    relative as ``energylens calibrate`` would (every constant of the relative counts as
    measured, since a calibration object keeps no kinds). Nothing is written anywhere.
    """
    donor = chain[-1].name
    kernels, links = dict(calibration.kernels), dict(calibration.links)
    runtimes = dict(calibration.runtimes)
    prov: dict[str, dict[str, dict[str, Any]]] = {
        f"kernels/{donor}": _as_entries(asdict(calibration.kernel(donor)), calibration.source)}
    for key, constants in calibration.links.items():
        if key.startswith(f"{donor}:"):
            prov[f"links/{key}"] = _as_entries(asdict(constants), calibration.source)
    for key, runtime in calibration.runtimes.items():
        if key.endswith(f"/{donor}"):
            prov[f"runtimes/{key}"] = _as_entries(asdict(runtime), calibration.source)
    for gpu, relative in reversed(list(zip(chain[:-1], chain[1:], strict=True))):
        _borrow(gpu=gpu, relative=relative, kernels=kernels, links=links, runtimes=runtimes,
                prov=prov)
    for key, entries in prov.items():  # rounded as a calibration file would hold them
        values = {name: float(entry["value"]) for name, entry in entries.items()}
        section, name = key.split("/", 1)
        if section == "kernels":
            kernels[name] = replace(KernelConstants(), **values)
        elif section == "links":
            links[name] = replace(LinkConstants(), **values)
        else:
            runtimes[name] = replace(RuntimeConstants(), **values)
    return replace(calibration, kernels=kernels, links=links, runtimes=runtimes)


def _as_entries(values: dict[str, float], source: str) -> dict[str, dict[str, Any]]:
    return {name: {"value": value, "kind": "calibrated", "note": source}
            for name, value in values.items()}


def _borrow(*, gpu: GPU, relative: GPU, kernels: dict[str, KernelConstants],
            links: dict[str, LinkConstants], runtimes: dict[str, RuntimeConstants],
            prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Fill, in place, the constants ``gpu`` lacks from ``relative``."""
    name, relative_name = gpu.name, relative.name
    source = prov.get(f"kernels/{relative_name}", {})
    own = prov.setdefault(f"kernels/{name}", {})
    borrowed: dict[str, float] = {}
    for field, entry in source.items():
        if field in own or not _same_precision_support(field, gpu=gpu, relative=relative):
            continue
        factor, how = _power_scale(field, gpu=gpu, relative=relative)
        borrowed[field] = entry["value"] * factor
        if field == "static_power_w" and borrowed[field] < gpu.idle_power_w:
            # a board running a CUDA context draws at least its context-free idle power
            borrowed[field] = gpu.idle_power_w
            how += f", raised to {gpu.name}'s idle power {gpu.idle_power_w:g} W (its GPU file)"
        own[field] = {"value": float(f"{borrowed[field]:.6g}"), "kind": "assumed",
                      "note": _note(relative=relative_name, entry=entry, how=how)}
    if borrowed:
        kernels[name] = replace(kernels.get(name, KernelConstants()), **borrowed)
    if not own:
        del prov[f"kernels/{name}"]
    _borrow_links(gpu=gpu, relative=relative_name, links=links, prov=prov)
    _borrow_runtimes(gpu=gpu, relative=relative, runtimes=runtimes, prov=prov)


def _borrow_runtimes(*, gpu: GPU, relative: GPU, runtimes: dict[str, RuntimeConstants],
                     prov: dict[str, dict[str, dict[str, Any]]], own_only: bool = False) -> None:
    """Each runtime's constants on the relative that ``gpu`` lacks; the runtime's own
    all-reduce only over a scale-up link of the same kind. ``own_only``: only those the
    relative has from data of its own (not borrowed or assumed itself)."""
    same_link = gpu.intra_node.kind == relative.intra_node.kind
    for key, source in list(prov.items()):
        section, _, rest = key.partition("/")
        runtime, _, owner = rest.partition("/")
        if section != "runtimes" or owner != relative.name:
            continue
        target = f"{runtime}/{gpu.name}"
        own = prov.setdefault(f"runtimes/{target}", {})
        borrowed: dict[str, float] = {}
        for field, entry in source.items():
            if field in own or (field.startswith("allreduce_") and not same_link) or (
                    own_only and entry.get("kind") in ("assumed", "default")):
                continue
            borrowed[field] = entry["value"]
            own[field] = {"value": entry["value"], "kind": "assumed",
                          "note": _note(relative=relative.name, entry=entry, how="")}
        if borrowed:
            runtimes[target] = replace(runtimes.get(target, RuntimeConstants()), **borrowed)
        if not own:
            del prov[f"runtimes/{target}"]


def _borrow_links(*, gpu: GPU, relative: str, links: dict[str, LinkConstants],
                  prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Link constants of the relative's measured interconnects that ``gpu`` also uses."""
    prefix = f"links/{relative}:"
    kinds = set(gpu.link_kinds)
    name = gpu.name
    for key, source in list(prov.items()):
        kind = key[len(prefix):]
        if not key.startswith(prefix) or kind.split("/")[0] not in kinds:
            continue
        own = prov.setdefault(f"links/{name}:{kind}", {})
        borrowed: dict[str, float] = {}
        for field, entry in source.items():
            if field not in own:
                borrowed[field] = entry["value"]
                own[field] = {"value": entry["value"], "kind": "assumed",
                              "note": _note(relative=relative, entry=entry, how="")}
        if borrowed:
            target = f"{name}:{kind}"
            links[target] = replace(links.get(target, LinkConstants()), **borrowed)
