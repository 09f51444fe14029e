"""The fits on per-kernel tables (AIConfigurator's GEMM, attention, MoE and all-reduce
tables; this project's NVML power, memory and small-kernel runs), each folded into the
calibration :func:`energylens.calibration.run.calibrate` is building: applied to its
constants with provenance, or reported beside them with the reason it is not applied."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from energylens.calibration import CalibrationDataError
from energylens.calibration.entries import entry, fit_report, rel_path
from energylens.calibration.fit_kernels import NO_ENERGY
from energylens.calibration.fitting import FitResult
from energylens.calibration.transfer import borrow_from_relatives
from energylens.cost.constants import (
    Calibration,
    KernelConstants,
    LinkConstants,
    RuntimeConstants,
    runtime_key,
)
from energylens.hardware import load_gpu

if TYPE_CHECKING:
    from energylens.calibration.fit_moe import MoeTable

#: Why the prefill-attention fit is reported but not applied (calibration of 2026-11-27):
#: applied, it took the B200 dense -> MoE energy fold from 15.4 to 17.1 % (past its gate).
CONTEXT_ATTENTION_NOT_APPLIED = (
    "applied on every GPU (2026-11-27) it moved the B200 regime fold 'fit dense, predict "
    "MoE' energy per token from 15.4 to 17.1 % MAPE, past its gate: the tables hold prompts "
    "of >= 1,024 tokens and the fitted ramp is extrapolated to ML.ENERGY's ~480-token chat "
    "prompts, where this project's SDPA measurement (512 tokens) says it prices them 21-32 % "
    "slow; see docs/kernels-h200.md")
MOE_NOT_APPLIED = (
    "applied (2026-11-27: Hopper and L40S on their own Triton rows, the others borrowing), "
    "the regime folds' energy per token improved on H100 (precision 16.3 -> 13.4 %, task "
    "15.4 -> 11.9 %, MoE -> dense 11.6 -> 6.0 %, gpu-count 9.5 -> 7.8 %), but H100 precision "
    "inter-token latency moved 9.0 -> 10.2 % (past its 10 % target: the gpt-oss rows; one "
    "FP4 ratio does not describe OpenAI's Triton MXFP4 kernel across expert splits: at "
    "gpt-oss-120b's one-GPU shape it runs 1.2x faster than the fitted ratio gives, the "
    "expert- and tensor-split shapes slower) and B200 gpu-count inter-token latency 15.4 -> "
    "16.3 % (past its gate); the built-in shares stay until the small-stream efficiency "
    "(memory_half_bytes, at its bound on H100) describes the split shapes")

#: Why an INT4 expert ratio is reported, not applied (``fit_moe.int4_ratio_helps``).
INT4_NOT_APPLIED = (
    "its rows, each kind of expert split predicted from a fit on the other, come out no "
    "closer than at the BF16 share alone (Hopper: Marlin's INT4 experts stream as the "
    "Triton BF16 ones do, shape for shape)")

#: Why a fused-MoE expert floor is reported, not applied (``fit_moe.floor_helps``).
FLOOR_NOT_APPLIED = (
    "its rows, each half of the hidden sizes predicted from a fit on the other, come out "
    "no closer than with no such floor: one number does not describe these kernels (on "
    "Blackwell FlashInfer's block-FP8 path pays ~11 us per op more than its BF16 and NVFP4 "
    "paths; on Hopper FP8 experts pay what BF16 ones do)")

#: Why an MLA prompt-attention fit that ends at a bound is reported, not applied.
MLA_PROMPT_AT_BOUND = (
    "the efficiency ends at its 0.95 bound (Blackwell: the measured kernel is faster than "
    "the model can price it while the softmax's vector time is added to the tensor time, "
    "where FlashAttention-style kernels overlap them): not identified, so the GPU keeps "
    "what its relative's fit gives it")

#: Why an MLA decode-attention fit is reported, not applied: no better than the
#: grouped-query kernel's price on the same rows.
MLA_DECODE_NO_BETTER = (
    "its rows, each half of the head counts predicted from a fit on the other, come out no "
    "closer than the grouped-query kernel's price of them: the GPU keeps that price")



def fit_precision_table(*, path: Path, kernels: dict[str, KernelConstants],
                        prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                        log: Callable[[str], None]) -> None:
    """Low-precision GEMM efficiency ratios of one GPU from its measured GEMM table."""
    from energylens.calibration.fit_custom_allreduce import table_gpu
    from energylens.calibration.fit_precision import RATIOS, fit_precision

    gpu = table_gpu(path)
    for name in RATIOS:
        result = fit_precision(path=path, field=name)
        if result is None:
            continue
        log(f"kernels {gpu}: {name} = {result.values[name]:.3f} on {result.n_points} shapes")
        fit_id = f"aiconfigurator-gemm/{gpu}/{name}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_k_half_out")
        kernels[gpu] = replace(kernels.get(gpu, KernelConstants()), **result.values)
        prov.setdefault(f"kernels/{gpu}", {})[name] = entry(
            value=result.values[name], kind="fitted", fit_id=fit_id, report=fits[fit_id])


def fit_gemm_transfers(*, tables: list[Path], kernels: dict[str, KernelConstants],
                       prov: dict[str, dict[str, dict[str, Any]]],
                       fits: dict[str, dict[str, Any]], log: Callable[[str], None]) -> None:
    """GEMM efficiencies of GPUs without a per-op profile: their relative's, scaled by the
    ratio of the two GPUs' GEMM tables (relatives first, so a chain carries through)."""
    from energylens.calibration.fit_custom_allreduce import table_gpu
    from energylens.calibration.fit_gemm_transfer import FIELDS, fit_gemm_transfer
    from energylens.hardware import default_database

    by_gpu = {table_gpu(path): path for path in tables}
    db = default_database()
    for gpu in db.borrow_order():
        relative = db.get(str(gpu.borrows_from))
        own = prov.get(f"kernels/{gpu.name}", {})
        theirs = prov.get(f"kernels/{relative.name}", {})
        if gpu.name not in by_gpu or relative.name not in by_gpu or \
                any(field in own for field in FIELDS) or \
                not all(field in theirs for field in FIELDS):
            continue
        result = fit_gemm_transfer(path=by_gpu[gpu.name], relative_path=by_gpu[relative.name],
                                   gpu=gpu, relative=relative,
                                   relative_values={f: theirs[f]["value"] for f in FIELDS})
        if result is None:
            continue
        fit_id = f"aiconfigurator-gemm/{gpu.name}/transfer-from-{relative.name}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_k_half_out")
        log(f"kernels {gpu.name}: " + "; ".join(result.notes))
        kernels[gpu.name] = replace(kernels.get(gpu.name, KernelConstants()), **result.values)
        prov.setdefault(f"kernels/{gpu.name}", {}).update(
            {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
             for k, v in result.values.items()})


def report_gemm_curves(*, tables: list[Path], kernels: dict[str, KernelConstants],
                       prov: dict[str, dict[str, dict[str, Any]]],
                       fits: dict[str, dict[str, Any]], leave_out: bool,
                       log: Callable[[str], None]) -> None:
    """The GEMM curve each GPU's own GEMM table gives, beside the error of the curve it
    ships (its Vidur fit, or its relative's carried over): reported, not applied
    (``fit_gemm_curves.NOT_APPLIED``)."""
    from energylens.calibration.fit_custom_allreduce import table_gpu
    from energylens.calibration.fit_gemm_curves import CURRENT, NOT_APPLIED, fit_gemm_curve
    from energylens.hardware import default_database

    by_gpu = {table_gpu(path): path for path in tables}
    db = default_database()
    shipped: dict[str, KernelConstants] = {}  # each GPU's constants as borrowing will fill them
    for gpu in [*(g for g in db.gpus() if g.borrows_from is None), *db.borrow_order()]:
        own = kernels.get(gpu.name, KernelConstants())
        if gpu.borrows_from is not None:
            own = replace(shipped[gpu.borrows_from], **{
                field: getattr(own, field) for field in prov.get(f"kernels/{gpu.name}", {})})
        shipped[gpu.name] = own
        if gpu.name not in by_gpu:
            continue
        result = fit_gemm_curve(path=by_gpu[gpu.name], gpu=gpu, base=own, leave_out=leave_out)
        if result is None:
            continue
        fit_id = f"aiconfigurator-gemm/{gpu.name}/curve"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_n_half_out")
        _not_applied(report=fits[fit_id], result=result, why=NOT_APPLIED)
        held = result.leave_out.get("latency") or result.in_sample["latency"]
        log(f"kernels {gpu.name}: GEMM curve of its table on {result.n_points} shapes: shipped "
            f"curve {100 * result.in_sample[CURRENT].mape:.1f} %, the table's "
            f"{100 * held.mape:.1f} % held out (reported, not applied)")


def fit_power_folder(*, folder: Path, kernels: dict[str, KernelConstants],
                     prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                     log: Callable[[str], None]) -> None:
    """Board-power constants of one GPU measured by this project (NVML): those in
    ``fit_power.APPLIED`` become the GPU's; the others are reported beside what the serving
    fit finds (:func:`compare_measured_power`)."""
    from energylens.calibration.fit_power import APPLIED, fit_power, folder_gpu

    gpu = folder_gpu(folder)
    result = fit_power(folder=folder, gpu_name=gpu)
    fit_id = f"energylens-gpu/{gpu}"
    held = np.abs(np.array(list(result.held_out.values())))
    fits[fit_id] = {
        "data": [rel_path(f) for f in result.files], "fit": fit_id,
        "measured": {k: float(f"{v:.6g}") for k, v in result.values.items()},
        "spread_across_runs": {k: round(v, 4) for k, v in result.spread.items() if v == v},
        "identified_by": result.identified_by,
        "applied": list(APPLIED),
        "fp8_over_bf16_flop_energy": round(result.fp8_flop_energy_ratio, 4),
        "held_out_kernels": {"power_mape": round(float(held.mean()), 4), "n": int(held.size),
                             "errors": {k: round(v, 4) for k, v in sorted(result.held_out.items())}},
    }
    log(f"power {gpu}: " + ", ".join(f"{k} = {v:.4g}" for k, v in result.values.items())
        + f"; held-out kernels' power {100 * held.mean():.1f} % MAPE ({held.size})")
    values = {k: v for k, v in result.values.items() if k in APPLIED}
    kernels[gpu] = replace(kernels.get(gpu, KernelConstants()), **values)
    prov.setdefault(f"kernels/{gpu}", {}).update(
        {k: entry(value=v, kind="measured", note=f"NVML board energy, {fit_id} "
                   f"({len(result.identified_by[k])} rows: {', '.join(result.identified_by[k][:3])}...)")
         for k, v in values.items()})


def report_elementwise(*, paths: list[Path], kernels: dict[str, KernelConstants],
                       links: dict[str, LinkConstants], runtimes: dict[str, RuntimeConstants],
                       prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                       log: Callable[[str], None]) -> None:
    """The small-kernel classes of each GPU this project timed (``fit_elementwise``, all
    its runs together), reported beside the error its shipped constants make on the same
    timings, not applied (:data:`energylens.calibration.fit_elementwise.WHY_NOT_APPLIED`).
    The kernels are priced with the GPU's other constants as a borrow would complete them
    now (on copies: what is borrowed for good is borrowed after every fit)."""
    from energylens.calibration.fit_elementwise import WHY_NOT_APPLIED, case_errors, fit_elementwise
    from energylens.calibration.fit_power import folder_gpu

    completed = dict(kernels)
    borrow_from_relatives(kernels=completed, links=dict(links), runtimes=dict(runtimes),
                          prov=copy.deepcopy(prov))
    by_gpu: dict[str, list[Path]] = {}
    for path in paths:
        by_gpu.setdefault(folder_gpu(path.parents[1]), []).append(path)
    for gpu, runs in sorted(by_gpu.items()):
        base = replace(completed.get(gpu, KernelConstants()), **NO_ENERGY)
        result = fit_elementwise(paths=runs, gpu=load_gpu(gpu), base=base)
        fit_id = f"energylens-gpu-elementwise/{gpu}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_geometry_out")
        fits[fit_id]["fitted"] = {k: float(f"{v:.6g}") for k, v in result.values.items()}
        shipped = case_errors(paths=runs, gpu=load_gpu(gpu), constants=base)
        fits[fit_id]["shipped_constants"] = {k: v.as_dict() for k, v in sorted(shipped.items())}
        fits[fit_id]["applied"] = False
        fits[fit_id]["why_not_applied"] = WHY_NOT_APPLIED
        held = result.leave_out["all"]
        log(f"elementwise {gpu}: {len(result.values)} constants on {result.n_points} timings, "
            f"held out by geometry {100 * held.mape:.1f} % MAPE, the shipped constants "
            f"{100 * shipped['all'].mape:.1f} % (reported, not applied)")


def report_memory_streams(*, folders: list[Path], fits: dict[str, dict[str, Any]],
                          log: Callable[[str], None]) -> None:
    """The HBM streaming curve of each GPU this project measured (``fit_memory``), reported
    in ``fits`` beside the calibration's own values (:func:`compare_measured_memory`), not
    applied: held in H100's Vidur fit it moved the serving regime folds the wrong way
    (docs/kernels-h200.md)."""
    from energylens.calibration.fit_memory import fit_memory
    from energylens.calibration.fit_power import folder_gpu

    for folder in folders:
        gpu = folder_gpu(folder)
        try:
            result = fit_memory(folder=folder, gpu_name=gpu)
        except CalibrationDataError as exc:
            log(f"memory {gpu}: {exc}")
            continue
        fit_id = f"energylens-gpu-memory/{gpu}"
        fits[fit_id] = {"data": [rel_path(f) for f in result.files], "fit": fit_id,
                        "measured": {k: float(f"{v:.6g}") for k, v in result.values.items()},
                        "rms_log_residual": round(result.rms_log_residual, 4),
                        "n_points": len(result.rows), "identified_by": result.rows,
                        "applied": False}
        if result.at_bound:
            fits[fit_id]["at_bound"] = result.at_bound
        log(f"memory {gpu}: " + ", ".join(f"{k} = {v:.4g}" for k, v in result.values.items())
            + f" on {len(result.rows)} weight-streaming GEMMs (rms log {result.rms_log_residual:.3f};"
            " reported, not applied)")


def compare_measured_memory(*, fits: dict[str, dict[str, Any]], calibration: Calibration) -> None:
    """Per GPU with a measured streaming curve: the calibration's value over the measured
    one (in ``fits``)."""
    for fit_id, report in fits.items():
        if not fit_id.startswith("energylens-gpu-memory/"):
            continue
        constants = calibration.kernel(fit_id.split("/", 1)[1])
        report["calibrated_over_measured"] = {
            name: float(f"{getattr(constants, name) / value:.4g}")
            for name, value in report["measured"].items()}


def compare_measured_power(*, fits: dict[str, dict[str, Any]], calibration: Calibration,
                           log: Callable[[str], None]) -> None:
    """Per GPU with power measurements: each measured constant the calibration did not take
    from them, its fitted (or borrowed) value over the measured one (in ``fits``), logged
    where it is off by more than 2x: a constant its serving rows do not identify."""
    for fit_id, report in fits.items():
        if not fit_id.startswith("energylens-gpu/"):
            continue
        gpu = fit_id.split("/", 1)[1]
        ratios = {}
        for name, value in report["measured"].items():
            if name in report["applied"]:
                continue
            ratios[name] = float(f"{getattr(calibration.kernel(gpu), name) / value:.4g}")
            if not 0.5 <= ratios[name] <= 2.0:
                log(f"  {gpu} {name}: fitted {getattr(calibration.kernel(gpu), name):.4g}, "
                    f"measured {value:.4g} ({ratios[name]:.3g}x): not identified by its fit")
        report["fitted_over_measured"] = ratios


def fit_kv_attention_table(*, path: Path, kernels: dict[str, KernelConstants],
                           prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                           leave_out: bool, log: Callable[[str], None]) -> None:
    """The decode-attention KV bandwidth efficiency and tile time of one GPU from its
    kernel table."""
    from energylens.calibration.fit_kv_attention import fit_kv_attention, read_table

    table = read_table(path=path)
    if table.gpu not in kernels:
        return  # no kernel constants to price the kernel with (no data, no relative)
    result = fit_kv_attention(table=table, constants=kernels[table.gpu], leave_out=leave_out)
    log(f"kernels {table.gpu}: kv_bandwidth_efficiency = "
        f"{result.values['kv_bandwidth_efficiency']:.3f}, attention_tile_s = "
        f"{result.values['attention_tile_s'] * 1e9:.1f} ns on {result.n_points} "
        "decode-attention rows")
    fit_id = f"aiconfigurator-attention/{table.gpu}/decode"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_kv_heads_half_out")
    kernels[table.gpu] = replace(kernels[table.gpu], **result.values)
    prov.setdefault(f"kernels/{table.gpu}", {}).update(
        {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
         for k, v in result.values.items()})


def report_context_attention(*, path: Path, kernels: dict[str, KernelConstants],
                             fits: dict[str, dict[str, Any]], leave_out: bool,
                             log: Callable[[str], None]) -> None:
    """The prefill (context) attention efficiency and its half-point of one GPU from its
    kernel table: fitted and reported, not applied (``CONTEXT_ATTENTION_APPLIED``)."""
    from energylens.calibration.fit_context_attention import fit_context_attention, read_table

    table = read_table(path=path)
    if table.gpu not in kernels:
        return  # no kernel constants to price the kernel with (no data, no relative)
    result = fit_context_attention(table=table, constants=kernels[table.gpu],
                                   leave_out=leave_out)
    log(f"kernels {table.gpu}: attention_efficiency_max = "
        f"{result.values['attention_efficiency_max']:.3f}, attention_m_half = "
        f"{result.values['attention_m_half']:.0f} rows on {result.n_points} "
        "context-attention rows (reported, not applied)")
    fit_id = f"aiconfigurator-context-attention/{table.gpu}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_heads_half_out")
    _not_applied(report=fits[fit_id], result=result, why=CONTEXT_ATTENTION_NOT_APPLIED)


def fit_moe_table(*, path: Path, kernels: dict[str, KernelConstants],
                  prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                  leave_out: bool, log: Callable[[str], None]) -> None:
    """The fixed times of one GPU's fused-MoE expert GEMMs from its kernel table (applied
    where they help), the weight-only INT4 experts' share (applied where it helps), then the
    fused-MoE HBM share per expert precision: fitted and reported, not applied
    (``MOE_NOT_APPLIED``)."""
    from energylens.calibration.fit_moe import (
        FLOOR_FIELDS,
        FLOOR_TOKENS,
        INT4_FAMILY,
        fit_moe,
        read_table,
    )

    floor_table = read_table(path=path, max_tokens=FLOOR_TOKENS, family=None, l2_multiple=0.0)
    if floor_table.gpu not in kernels:
        return  # no kernel constants to price the kernel with
    for name in FLOOR_FIELDS:
        _fit_expert_floor(table=floor_table, name=name, kernels=kernels, prov=prov,
                          fits=fits, leave_out=leave_out, log=log)
    _fit_int4_ratio(table=read_table(path=path, family=INT4_FAMILY), kernels=kernels,
                    prov=prov, fits=fits, leave_out=leave_out, log=log)
    table = read_table(path=path)
    if not table.cases:
        return  # no rows of the kernels the bandwidth shares describe
    for name, result in fit_moe(table=table, constants=kernels[table.gpu],
                                leave_out=leave_out).items():
        value = result.values[name]
        log(f"kernels {table.gpu}: {name} = {value:.3f} on {result.n_points} MoE rows"
            + (" (at a bound of its range)" if result.at_bound else "") + " (reported, not applied)")
        fit_id = f"aiconfigurator-moe/{table.gpu}/{name}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_hidden_half_out")
        _not_applied(report=fits[fit_id], result=result, why=MOE_NOT_APPLIED)


def _fit_int4_ratio(*, table: MoeTable, kernels: dict[str, KernelConstants],
                    prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                    leave_out: bool, log: Callable[[str], None]) -> None:
    """The weight-only INT4 experts' share of one GPU, relative to the BF16 share in use:
    applied where it predicts its held-out rows better than ratio 1, else recorded as 1."""
    from energylens.calibration.fit_moe import INT4_FIELD, fit_int4_ratio, int4_ratio_helps

    result = fit_int4_ratio(table=table, constants=kernels[table.gpu], leave_out=leave_out)
    if result is None:
        return
    value = result.values[INT4_FIELD]
    _record_moe_fit(gpu=table.gpu, name=INT4_FIELD, result=result,
                    applied=int4_ratio_helps(result), neutral=1.0, shown=f"{value:.3f}",
                    leave_out_kind="leave_one_hidden_half_or_split_out", why=INT4_NOT_APPLIED,
                    note=f"1: the {value:.3f} fitted predicts its held-out rows worse than the "
                         "BF16 share alone (why_not_applied)",
                    kernels=kernels, prov=prov, fits=fits, log=log)


def _fit_expert_floor(*, table: MoeTable, name: str, kernels: dict[str, KernelConstants],
                      prov: dict[str, dict[str, dict[str, Any]]],
                      fits: dict[str, dict[str, Any]], leave_out: bool,
                      log: Callable[[str], None]) -> None:
    """One fused-MoE expert floor of ``table``'s GPU: applied where it predicts the rows it
    was not fitted on better than none, else recorded as 0."""
    from energylens.calibration.fit_moe import fit_expert_floor, floor_helps

    result = fit_expert_floor(table=table, constants=kernels[table.gpu], field=name,
                              leave_out=leave_out)
    if result is None:
        return
    value = result.values[name]
    _record_moe_fit(gpu=table.gpu, name=name, result=result, applied=floor_helps(result),
                    neutral=0.0, shown=f"{value * 1e6:.2f} us",
                    leave_out_kind="leave_one_hidden_half_out", why=FLOOR_NOT_APPLIED,
                    note=f"none: the {value * 1e6:.2f} us fitted predicts its held-out rows "
                         "worse than no floor (why_not_applied)",
                    kernels=kernels, prov=prov, fits=fits, log=log)


def _record_moe_fit(*, gpu: str, name: str, result: FitResult, applied: bool, neutral: float,
                    shown: str, leave_out_kind: str, why: str, note: str,
                    kernels: dict[str, KernelConstants],
                    prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                    log: Callable[[str], None]) -> None:
    """Log and report one fused-MoE constant fitted on ``gpu``'s own table, and apply it,
    or, not applied, record the ``neutral`` value in its place: chosen on this GPU's table,
    so that a relative's value is never borrowed instead."""
    value = result.values[name]
    log(f"kernels {gpu}: {name} = {shown} on {result.n_points} MoE rows"
        + (" (at a bound of its range)" if result.at_bound else "")
        + ("" if applied else " (not applied)"))
    fit_id = f"aiconfigurator-moe/{gpu}/{name}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind=leave_out_kind)
    fits[fit_id]["values"] = {name: float(f"{value:.6g}")}
    fits[fit_id]["applied"] = applied
    own = prov.setdefault(f"kernels/{gpu}", {})
    if applied:
        kernels[gpu] = replace(kernels[gpu], **result.values)
        own[name] = entry(value=value, kind="fitted", fit_id=fit_id, report=fits[fit_id])
        return
    fits[fit_id]["why_not_applied"] = why
    kernels[gpu] = replace(kernels[gpu], **{name: neutral})
    own[name] = entry(value=neutral, kind="fitted", fit_id=fit_id, report=fits[fit_id], note=note)


def fit_mla_prompt_table(*, path: Path, kernels: dict[str, KernelConstants],
                         prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                         leave_out: bool, log: Callable[[str], None]) -> None:
    """MLA's prompt-form attention efficiency and ramp of one GPU from TensorRT-LLM's MLA
    context table: applied where both are identified (neither at a bound of its range)."""
    from energylens.calibration.fit_mla_prompt import fit_mla_prompt, read_table

    table = read_table(path=path)
    if table.gpu not in kernels:
        return  # no kernel constants to price the kernel with (no data, no relative)
    result = fit_mla_prompt(table=table, constants=kernels[table.gpu], leave_out=leave_out)
    fit_id = f"aiconfigurator-mla-prompt/{table.gpu}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_heads_half_out")
    fits[fit_id]["values"] = {k: float(f"{v:.6g}") for k, v in result.values.items()}
    applied = not result.at_bound
    log(f"kernels {table.gpu}: prompt_attention_efficiency_max = "
        f"{result.values['prompt_attention_efficiency_max']:.3f}, prompt_attention_m_half = "
        f"{result.values['prompt_attention_m_half']:.0f} on {result.n_points} MLA context rows"
        + ("" if applied else " (at a bound of its range: reported, not applied)"))
    fits[fit_id]["applied"] = applied
    if not applied:
        fits[fit_id]["why_not_applied"] = MLA_PROMPT_AT_BOUND
        return
    kernels[table.gpu] = replace(kernels[table.gpu], **result.values)
    prov.setdefault(f"kernels/{table.gpu}", {}).update(
        {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
         for k, v in result.values.items()})


def fit_mla_decode_table(*, path: Path, kernels: dict[str, KernelConstants],
                         prov: dict[str, dict[str, dict[str, Any]]], fits: dict[str, dict[str, Any]],
                         log: Callable[[str], None]) -> None:
    """MLA's decode-form attention constants of one GPU from TensorRT-LLM's MLA generation
    table: applied where the held-out halves (fitted on alternate head counts) come out
    closer than the grouped-query kernel's price of the same rows. Always held out: the
    rule needs it."""
    from energylens.calibration.fit_mla_decode import fit_mla_decode, predicted_s, read_table

    table = read_table(path=path)
    if table.gpu not in kernels:
        return  # no kernel constants to price the kernel with (no data, no relative)
    constants = kernels[table.gpu]
    result = fit_mla_decode(table=table, constants=constants, leave_out=True)
    everything = np.ones(table.latency_s.size, dtype=bool)
    grouped = predicted_s(table=table, rows=everything, gpu=load_gpu(table.gpu),
                          constants=replace(constants, mla_decode_efficiency_max=0.0))
    grouped_mape = float(np.mean(np.abs(grouped / table.latency_s - 1.0)))
    fit_id = f"aiconfigurator-mla-decode/{table.gpu}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_heads_half_out")
    fits[fit_id]["values"] = {k: float(f"{v:.6g}") for k, v in result.values.items()}
    fits[fit_id]["grouped_query_price_mape"] = round(grouped_mape, 4)
    held = result.leave_out["latency"].mape
    applied = held < grouped_mape
    log(f"kernels {table.gpu}: MLA decode efficiency = "
        f"{result.values['mla_decode_efficiency_max']:.3f}, cache bandwidth = "
        f"{result.values['mla_decode_kv_bandwidth_efficiency']:.3f} on {result.n_points} "
        f"MLA generation rows (held out {held:.1%}, the grouped-query price {grouped_mape:.1%})"
        + ("" if applied else ": reported, not applied"))
    fits[fit_id]["applied"] = applied
    if not applied:
        fits[fit_id]["why_not_applied"] = MLA_DECODE_NO_BETTER
        return
    kernels[table.gpu] = replace(constants, **result.values)
    prov.setdefault(f"kernels/{table.gpu}", {}).update(
        {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
         for k, v in result.values.items()})


def fit_custom_allreduce_table(*, path: Path, runtimes: dict[str, RuntimeConstants],
                               prov: dict[str, dict[str, dict[str, Any]]],
                               fits: dict[str, dict[str, Any]], leave_out: bool,
                               log: Callable[[str], None]) -> None:
    """A runtime's own all-reduce on one GPU from its measured kernel table."""
    from energylens.calibration.fit_custom_allreduce import fit_custom_allreduce, read_table
    from energylens.runtime import get_runtime, runtime_names

    runtime = path.parts[-3]
    if runtime not in runtime_names():
        return
    table = read_table(path=path, max_bytes=get_runtime(runtime).custom_allreduce_max_bytes)
    log(f"{runtime} all-reduce {table.gpu}: fitting 3 constants on {table.latency_s.size} rows")
    result = fit_custom_allreduce(table=table, leave_out=leave_out)
    fit_id = f"custom-allreduce/{runtime}/{table.gpu}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_group_size_out")
    key = runtime_key(runtime=runtime, gpu=table.gpu)
    runtimes[key] = replace(runtimes.get(key, RuntimeConstants()), **result.values)
    prov.setdefault(f"runtimes/{key}", {}).update(
        {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
         for k, v in result.values.items()})


def _not_applied(*, report: dict[str, Any], result: FitResult, why: str) -> None:
    """Record in a fit's ``report`` the values it found and why they are not applied."""
    report["values"] = {k: float(f"{v:.6g}") for k, v in result.values.items()}
    report["applied"] = False
    report["why_not_applied"] = why
