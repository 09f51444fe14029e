"""``energylens calibrate``: fit every constant the data identifies and write the file.

Order: (1) kernel latency curves per GPU from Vidur per-op profiles; (2) collective
curves per ``<GPU>:<topology>`` from Vidur NCCL profiles, and each runtime's own small
all-reduce per GPU and the low-precision GEMM efficiency ratios per GPU from
AIConfigurator's measured kernel tables; (3) serving-engine overheads and
power constants per GPU from ML.ENERGY steady-state rows, on top of (1) and (2). GPUs
without data of their own borrow what they lack from the measured relative their GPU file
declares (``borrows:``; :mod:`energylens.calibration.transfer`), recorded as ``assumed``:
before the serving fits (B200 has serving rows but no per-op profile) and after them. A GPU
with neither measurements nor ``borrows:`` is refused before anything is fitted. Everything
else keeps its built-in default, recorded as ``default``.

The written YAML (format version 1, read by :mod:`energylens.calibration.file`) records
for every constant its value, its kind (fitted / assumed / default), the files it was
fitted on and the fit's residual, and a ``fits`` section with in-sample and
leave-one-group-out errors of every fit.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from energylens import __version__
from energylens.calibration import CalibrationDataError
from energylens.calibration.coverage import measured_gpus, require_data_or_borrows
from energylens.calibration.entries import REPO_ROOT, entry, fit_report, rel_path
from energylens.calibration.file import FORMAT_VERSION
from energylens.calibration.fit_kernels import (
    KERNEL_PARAMS,
    VECTOR_PARAMS,
    fit_gpu_kernels,
)
from energylens.calibration.fit_links import (
    fit_nccl_table,
    fit_vidur_links,
    table_form,
    vidur_form,
    vidur_link_cases,
)
from energylens.calibration.fit_runtime import (
    aic_tables,
    apply_fits,
    fill_priors,
    fit_runtimes,
)
from energylens.calibration.fit_scale_out import SCALE_OUT_PARAMS, fit_scale_out, read_nccl_tests
from energylens.calibration.fit_serving import (
    LINK_PREFIX,
    RUNTIME_PREFIX,
    fit_serving,
    serving_params,
)
from energylens.calibration.regimes import (
    EP_OVERHEAD,
    FOLDS,
    constant_spread,
    generation_fold,
    regime_folds,
)
from energylens.calibration.tables import (
    compare_measured_memory,
    compare_measured_power,
    fit_custom_allreduce_table,
    fit_gemm_transfers,
    fit_kv_attention_table,
    fit_mla_decode_table,
    fit_mla_prompt_table,
    fit_moe_table,
    fit_power_folder,
    fit_precision_table,
    report_context_attention,
    report_elementwise,
    report_gemm_curves,
    report_memory_streams,
)
from energylens.calibration.transfer import borrow_from_relatives
from energylens.cost.constants import (
    Calibration,
    KernelConstants,
    LinkConstants,
    RuntimeConstants,
    runtime_key,
)
from energylens.errors import UnknownGPUError
from energylens.hardware import load_gpu
from energylens.measurements.mlenergy import RUNTIME, TASK_INPUT_TOKENS

#: Typed measurement logs the project may read but not redistribute (data/measurements/
#: SOURCES.md, "Left out"): calibrate fits on them where this folder exists.
SHARED_TRANSCRIBED = REPO_ROOT.parent / "shared" / "data" / "transcribed"
#: A fitted constant that moves more than this (relative) across regime folds is flagged.
SPREAD_LIMIT = 0.30


@dataclass
class CalibrationData:
    """Measurement files to fit on, by format."""

    vidur_mlp: list[Path] = field(default_factory=list)
    vidur_network: list[Path] = field(default_factory=list)
    mlenergy: list[Path] = field(default_factory=list)
    custom_allreduce: list[Path] = field(default_factory=list)
    nccl_tables: list[Path] = field(default_factory=list)  # AIConfigurator's, one host each
    gemm_tables: list[Path] = field(default_factory=list)
    decode_attention_tables: list[Path] = field(default_factory=list)
    context_attention_tables: list[Path] = field(default_factory=list)
    moe_tables: list[Path] = field(default_factory=list)
    mla_prompt_tables: list[Path] = field(default_factory=list)
    mla_decode_tables: list[Path] = field(default_factory=list)
    # serving runtimes (energylens.calibration.fit_runtime)
    runtime_kernels: list[Path] = field(default_factory=list)
    llm_inference_bench: list[Path] = field(default_factory=list)
    # nccl-tests all-reduce runs across nodes (energylens.calibration.fit_scale_out)
    nccl_tests: list[Path] = field(default_factory=list)
    # this project's NVML power runs, ``<gpu>/<run>/power*.csv`` (fit_power)
    power_tables: list[Path] = field(default_factory=list)
    stream_tables: list[Path] = field(default_factory=list)  # energylens-gpu GEMM times
    elementwise_tables: list[Path] = field(default_factory=list)  # energylens-gpu small kernels

    def all_files(self) -> list[Path]:
        """Every file, sorted."""
        return sorted({*self.vidur_mlp, *self.vidur_network, *self.mlenergy,
                       *self.custom_allreduce, *self.nccl_tables, *self.gemm_tables,
                       *self.decode_attention_tables, *self.context_attention_tables,
                       *self.moe_tables, *self.mla_prompt_tables, *self.mla_decode_tables,
                       *self.runtime_kernels,
                       *self.llm_inference_bench, *self.nccl_tests, *self.power_tables,
                       *self.stream_tables, *self.elementwise_tables})


def discover(root: Path) -> CalibrationData:
    """Find the known layouts (``vidur/``, ``mlenergy/``) under a folder like ``data/measurements``."""
    root = Path(root)
    if not root.is_dir():
        raise CalibrationDataError(f"{root}: no such data folder")
    tasks = sorted((root / "mlenergy" / "tasks").glob("*.json"))
    models = sorted((root / "mlenergy" / "models").glob("*.json"))
    return CalibrationData(
        vidur_mlp=sorted((root / "vidur" / "compute").glob("*/*/*/mlp.csv")),
        vidur_network=sorted((root / "vidur" / "network").glob("*/*.csv")),
        mlenergy=tasks or models,  # model files repeat the task files' rows
        custom_allreduce=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/comm/*/*/custom_allreduce_perf.parquet")),
        nccl_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/comm/nccl/*/nccl_perf.parquet")),
        gemm_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/gemm/vllm/*/gemm_perf.parquet")),
        decode_attention_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/attention/vllm/*/generation_attention_perf.parquet")),
        context_attention_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/attention/vllm/*/context_attention_perf.parquet")),
        moe_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/moe/vllm/*/moe_perf.parquet")),
        mla_prompt_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/mla/trtllm/*/context_mla_perf.parquet")),
        mla_decode_tables=sorted((root / "aiconfigurator" / "kernels").glob(
            "*/mla/trtllm/*/generation_mla_perf.parquet")),
        runtime_kernels=aic_tables(root / "aiconfigurator" / "kernels"),
        llm_inference_bench=sorted((root / "llm-inference-bench").glob("All_results.csv")),
        nccl_tests=sorted((root / "transcribed").glob("nccl_tests_allreduce_*.csv")),
        power_tables=sorted((root / "energylens-gpu").glob("*/*/power*.csv")),
        stream_tables=sorted((root / "energylens-gpu").glob("*/*/gemm.csv")),
        elementwise_tables=sorted((root / "energylens-gpu").glob("*/*/elementwise.csv")),
    )


def merge(*parts: CalibrationData) -> CalibrationData:
    """Union of several discoveries and user files."""
    out = CalibrationData()
    for part in parts:
        for f in fields(CalibrationData):
            getattr(out, f.name).extend(p for p in getattr(part, f.name)
                                        if p not in getattr(out, f.name))
    return out


def vidur_gpu(path: Path) -> str:
    """GPU of a Vidur ``compute/<gpu>/<org>/<model>/mlp.csv`` path (``h100`` -> H100-SXM)."""
    return load_gpu(path.parts[-4]).name


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Outcome:
    """Fitted calibration and the fit reports behind it."""

    calibration: Calibration
    provenance: dict[str, dict[str, dict[str, Any]]]  # section key -> constant -> entry
    fits: dict[str, dict[str, Any]]
    data: CalibrationData


def _fit_scale_out(*, path: Path, links: dict[str, LinkConstants], prov: dict[str, Any],
                   fits: dict[str, Any], leave_out: bool, log: Callable[[str], None]) -> None:
    """The scale-out link of an nccl-tests run across nodes, beside its scale-up constants."""
    run = read_nccl_tests(path)
    intra_key = f"{run.gpu.name}:{run.gpu.intra_node.kind}"
    key = f"{run.gpu.name}:{run.gpu.inter_node.kind}"
    log(f"scale-out {key}: fitting {len(SCALE_OUT_PARAMS)} all-reduce constants on {path.name}")
    base = links.get(key, LinkConstants())
    result = fit_scale_out(run=run, intra=links.get(intra_key, LinkConstants()), base=base,
                           leave_out=leave_out)
    fit_id = f"nccl-tests/{key}"
    fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_half_the_sizes_out")
    links[key] = replace(base, **result.values)
    prov.setdefault(f"links/{key}", {}).update(
        {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
         for k, v in result.values.items()})


def _link_entries(*, values: dict[str, float], fixed: dict[str, float], fit_id: str,
                  report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Provenance of a link fit's values: those its form fixes assumed, the rest fitted."""
    return {k: (entry(value=v, kind="assumed", note=f"fixed by the form of {fit_id}")
                if k in fixed else entry(value=v, kind="fitted", fit_id=fit_id, report=report))
            for k, v in values.items()}


def _fit_nccl_table(*, path: Path, links: dict[str, LinkConstants], prov: dict[str, Any],
                    fits: dict[str, Any], leave_out: bool, log: Callable[[str], None]) -> None:
    """The links one host's NCCL table measures. Its all-reduce constants take the place
    of Vidur's where both measured a link (NCCL 2.27-2.29 timed as engines run it, against
    Vidur's older eager calls: docs/gpus.md); Vidur's send/recv constants stay. A kind
    measured on this GPU alone (PCIe: how fast it runs depends on the host, which no GPU
    file names) also stands for the kind, for GPUs with no constants of it of their own."""
    for key, result in fit_nccl_table(path=path, leave_out=leave_out).items():
        gpu, kind = key.split(":", 1)
        _, fixed = table_form(kind)
        log(f"links {key}: fitting {len(result.values) - len(fixed)} collective constants on "
            f"{path.parent.name}/{path.name}" + (" (in place of Vidur's)" if key in links else ""))
        fit_id = f"aiconfigurator-nccl/{key}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result,
                                  leave_out_kind="leave_one_group_size_out")
        links[key] = replace(links.get(key, LinkConstants()), **result.values)
        prov.setdefault(f"links/{key}", {}).update(
            _link_entries(values=result.values, fixed=fixed, fit_id=fit_id, report=fits[fit_id]))
        if [k for k in links if k.split(":", 1)[-1] == kind] == [key]:
            links[kind] = links[key]
            prov[f"links/{kind}"] = {
                k: entry(value=v, kind="assumed",
                         note=f"{gpu}'s host ({fit_id}), the only one measured on {kind}")
                for k, v in result.values.items()}


def calibrate(*, data: CalibrationData, leave_out: bool = True, jobs: int = 1,
              log: Callable[[str], None] = lambda _: None) -> Outcome:
    """Run every fit the data allows."""
    if not data.all_files():
        raise CalibrationDataError("no measurement files found to calibrate on")
    require_data_or_borrows(measured=measured_gpus(vidur_mlp=data.vidur_mlp, mlenergy=data.mlenergy))
    kernels: dict[str, KernelConstants] = {}
    links: dict[str, LinkConstants] = {}
    runtimes: dict[str, RuntimeConstants] = {}
    prov: dict[str, dict[str, dict[str, Any]]] = {}
    fits: dict[str, dict[str, Any]] = {}

    report_memory_streams(folders=sorted({p.parents[1] for p in data.stream_tables}), fits=fits,
                        log=log)
    by_gpu: dict[str, list[Path]] = {}
    for path in data.vidur_mlp:
        by_gpu.setdefault(vidur_gpu(path), []).append(path)
    for gpu, files in sorted(by_gpu.items()):
        log(f"kernels {gpu}: fitting {len(KERNEL_PARAMS) + len(VECTOR_PARAMS)} latency constants "
            f"on {len(files)} files")
        result = fit_gpu_kernels(files=files, gpu_name=gpu, leave_out=leave_out)
        fit_id = f"vidur-mlp/{gpu}"
        fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_model_out")
        kernels[gpu] = replace(KernelConstants(), **result.values)
        prov[f"kernels/{gpu}"] = {k: entry(value=v, kind="fitted", fit_id=fit_id, report=fits[fit_id])
                                  for k, v in result.values.items()}

    if data.vidur_network:
        log(f"links: fitting collectives on {len(data.vidur_network)} files")
        cases = vidur_link_cases(files=data.vidur_network)
        for key, result in fit_vidur_links(cases=cases, leave_out=leave_out).items():
            fit_id = f"vidur-network/{key}"
            fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_group_size_out")
            links[key] = replace(LinkConstants(), **result.values)
            _, fixed = vidur_form(cases[key])
            prov[f"links/{key}"] = _link_entries(values=result.values, fixed=fixed,
                                                 fit_id=fit_id, report=fits[fit_id])

    for path in data.nccl_tables:
        _fit_nccl_table(path=path, links=links, prov=prov, fits=fits, leave_out=leave_out, log=log)

    for path in data.nccl_tests:
        _fit_scale_out(path=path, links=links, prov=prov, fits=fits, leave_out=leave_out, log=log)

    for folder in sorted({p.parents[1] for p in data.power_tables}):
        fit_power_folder(folder=folder, kernels=kernels, prov=prov, fits=fits, log=log)

    for path in data.gemm_tables:
        fit_precision_table(path=path, kernels=kernels, prov=prov, fits=fits, log=log)
    fit_gemm_transfers(tables=data.gemm_tables, kernels=kernels, prov=prov, fits=fits, log=log)
    report_gemm_curves(tables=data.gemm_tables, kernels=kernels, prov=prov, fits=fits,
                        leave_out=leave_out, log=log)

    if data.elementwise_tables:
        report_elementwise(paths=data.elementwise_tables, kernels=kernels, links=links,
                         runtimes=runtimes, prov=prov, fits=fits, log=log)
    if data.decode_attention_tables:
        # the decode-attention fit prices the kernel with each GPU's other kernel constants
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    for path in data.decode_attention_tables:
        fit_kv_attention_table(path=path, kernels=kernels, prov=prov, fits=fits,
                          leave_out=leave_out, log=log)
    if data.context_attention_tables and not data.decode_attention_tables:
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    for path in data.context_attention_tables:
        # after the decode fit: the prefill kernel's price includes its KV reads and tiles
        report_context_attention(path=path, kernels=kernels, fits=fits, leave_out=leave_out,
                               log=log)
    if data.moe_tables and not (data.decode_attention_tables or data.context_attention_tables):
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    for path in data.moe_tables:
        fit_moe_table(path=path, kernels=kernels, prov=prov, fits=fits, leave_out=leave_out, log=log)

    if data.mla_prompt_tables and not (data.decode_attention_tables
                                       or data.context_attention_tables or data.moe_tables):
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    for path in data.mla_prompt_tables:
        fit_mla_prompt_table(path=path, kernels=kernels, prov=prov, fits=fits, leave_out=leave_out,
                        log=log)
    if data.mla_decode_tables and not (data.decode_attention_tables or data.mla_prompt_tables
                                       or data.context_attention_tables or data.moe_tables):
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    for path in data.mla_decode_tables:
        fit_mla_decode_table(path=path, kernels=kernels, prov=prov, fits=fits, log=log)

    for path in data.custom_allreduce:
        fit_custom_allreduce_table(path=path, runtimes=runtimes, prov=prov, fits=fits,
                              leave_out=leave_out, log=log)

    if data.mlenergy:
        from energylens.measurements.formats import load_measurements

        gpus: set[str] = set()
        for path in data.mlenergy:
            for row in load_measurements(format="mlenergy", path=path).rows:
                try:
                    gpus.add(load_gpu(str(row.input["gpu_model"])).name)
                except UnknownGPUError:
                    continue
        borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
        bases: dict[str, Calibration] = {}
        serving_values: dict[str, dict[str, float]] = {}
        for gpu in sorted(gpus):
            base = Calibration(kernels=dict(kernels), links=dict(links), runtimes=dict(runtimes))
            bases[gpu] = base
            log(f"serving {gpu}: fitting {len(serving_params(gpu))} engine and power constants")
            result, _ = fit_serving(files=data.mlenergy, gpu_name=gpu, base=base,
                                    leave_out=leave_out, jobs=jobs)
            fit_id = f"mlenergy/{gpu}"
            serving_values[gpu] = dict(result.values)
            fits[fit_id] = fit_report(fit_id=fit_id, result=result, leave_out_kind="leave_one_model_out")
            fits[fit_id]["task_input_tokens"] = dict(TASK_INPUT_TOKENS)
            if result.leave_out_groups:
                fits[fit_id]["leave_one_model_out_by_group"] = {
                    g: {k: v.as_dict() for k, v in sorted(m.items())}
                    for g, m in sorted(result.leave_out_groups.items())}
            if result.in_sample_groups:
                fits[fit_id]["in_sample_by_group"] = {
                    g: {k: v.as_dict() for k, v in sorted(m.items())}
                    for g, m in sorted(result.in_sample_groups.items())}
            for name, value in result.values.items():
                fitted = entry(value=value, kind="fitted", fit_id=fit_id, report=fits[fit_id])
                if name.startswith(RUNTIME_PREFIX):
                    constant = name[len(RUNTIME_PREFIX):]
                    key = runtime_key(runtime=RUNTIME, gpu=gpu)
                    runtimes[key] = replace(runtimes.get(key, RuntimeConstants()),
                                            **{constant: value})
                    prov.setdefault(f"runtimes/{key}", {})[constant] = fitted
                elif name.startswith(LINK_PREFIX):
                    link_kind, constant = name[len(LINK_PREFIX):].rsplit(".", 1)
                    key = f"{gpu}:{link_kind}"
                    links[key] = replace(links.get(key, LinkConstants()), **{constant: value})
                    prov.setdefault(f"links/{key}", {})[constant] = fitted
                else:
                    kernels[gpu] = replace(kernels.get(gpu, KernelConstants()), **{name: value})
                    prov.setdefault(f"kernels/{gpu}", {})[name] = fitted
    if data.runtime_kernels or data.llm_inference_bench:  # other serving runtimes
        base = Calibration(kernels=dict(kernels), links=dict(links), runtimes=dict(runtimes))
        found = fit_runtimes(aiconfigurator=data.runtime_kernels,
                             llm_inference_bench=data.llm_inference_bench, base=base, log=log,
                             jobs=jobs)
        apply_fits(fits=found, runtimes=runtimes, prov=prov)
        fits.update(found.fits)
    borrow_from_relatives(kernels=kernels, links=links, runtimes=runtimes, prov=prov)
    fill_priors(runtimes=runtimes, prov=prov)  # what no data and no relative gives: assumed
    calibration = Calibration(kernels=kernels, links=links, runtimes=runtimes, source="calibrate")
    compare_measured_power(fits=fits, calibration=calibration, log=log)
    compare_measured_memory(fits=fits, calibration=calibration)
    if data.mlenergy and leave_out:
        for gpu in sorted(gpus):
            log(f"serving {gpu}: leave-one-regime-out folds ({len(FOLDS)} refits)")
            folds = regime_folds(files=data.mlenergy, gpu_name=gpu, base=bases[gpu], jobs=jobs,
                                 borrowed=_fitted_elsewhere(gpu, gpus=gpus, prov=prov,
                                                            calibration=calibration))
            spec = load_gpu(gpu)
            if spec.borrows_from is not None:
                folds.update(generation_fold(files=data.mlenergy, gpu=spec,
                                             calibration=calibration))
            full = fits[f"mlenergy/{gpu}"]
            full["spread_across_regime_folds"] = constant_spread(
                full=serving_values[gpu], folds=folds)
            fits[f"regimes/mlenergy/{gpu}"] = folds
            for name, spread in full["spread_across_regime_folds"].items():
                if spread > SPREAD_LIMIT:
                    log(f"  {name} moves {100 * spread:.0f} % across regime folds "
                        f"(> {100 * SPREAD_LIMIT:.0f} %): identified by one regime")
    return Outcome(calibration=calibration, provenance=prov, fits=fits, data=data)


def _fitted_elsewhere(gpu: str, *, gpus: Iterable[str], prov: dict[str, dict[str, dict[str, Any]]],
                      calibration: Calibration) -> dict[str, float]:
    """The EP-layer overhead the serving fit of the other GPUs found (their mean), for the
    folds of ``gpu`` that no expert-parallel row identifies it in; {} where none did."""
    constant = EP_OVERHEAD[len(RUNTIME_PREFIX):]
    found = [getattr(calibration.runtime(runtime=RUNTIME, gpu=other), constant)
             for other in sorted(gpus) if other != gpu
             and prov.get(f"runtimes/{runtime_key(runtime=RUNTIME, gpu=other)}", {})
             .get(constant, {}).get("kind") == "fitted"]
    return {EP_OVERHEAD: float(np.mean(found))} if found else {}


def unidentified_constants(fits: dict[str, dict[str, Any]]) -> list[str]:
    """``fit/constant`` of every constant that ended at a bound of its range in a fit on
    all the data (the regime folds are reported, not judged, here; a fit reported and not
    applied sets no constant)."""
    return [f"{fit_id}/{name}" for fit_id, report in sorted(fits.items())
            if not fit_id.startswith("regimes/") and report.get("applied", True)
            for name in report.get("at_bound", [])]


def unidentified_reasons() -> dict[str, dict[str, str]]:
    """Why each constant :func:`unidentified_constants` names is at a bound (its bound, the
    reason, where it is discussed): ``energylens/data/accuracy/unidentified.yaml``."""
    found = resources.files("energylens.data").joinpath("accuracy/unidentified.yaml")
    data = yaml.safe_load(found.read_text()) if found.is_file() else None
    return data if isinstance(data, dict) else {}


def to_yaml(outcome: Outcome) -> str:
    """The calibration file text (see :data:`energylens.calibration.file.FORMAT_VERSION`)."""
    cal = outcome.calibration
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "generated_by": f"energylens calibrate (energylens {__version__})",
        "regenerate": "energylens calibrate --output energylens/data/calibration.yaml",
        "data": [{"path": rel_path(p), "sha256": _sha256(p)} for p in outcome.data.all_files()],
        "kernels": {},
        "links": {},
        "runtimes": {},
    }
    for gpu, constants in sorted(cal.kernels.items()):
        known = outcome.provenance.get(f"kernels/{gpu}", {})
        doc["kernels"][gpu] = {name: known.get(name, entry(value=value, kind="default"))
                               for name, value in asdict(constants).items()}
    for key, link in sorted(cal.links.items()):
        known = outcome.provenance.get(f"links/{key}", {})
        doc["links"][key] = {name: known.get(name, entry(value=value, kind="default"))
                             for name, value in asdict(link).items()}
    for key, section in sorted(cal.runtimes.items()):
        runtime, gpu = key.split("/", 1)
        known = outcome.provenance.get(f"runtimes/{key}", {})
        doc["runtimes"].setdefault(runtime, {})[gpu] = {
            name: known.get(name, entry(value=value, kind="default"))
            for name, value in asdict(section).items()}
    doc["fits"] = outcome.fits
    header = ("# EnergyLens calibration: generated by `energylens calibrate`; do not edit by hand.\n"
              "# kind: fitted (value, data fitted on, fit residual), assumed (borrowed, with a\n"
              "# note) or default (built-in, not identified by the data). `fits` holds in-sample\n"
              "# and leave-one-group-out errors (mape/median_ape are fractions).\n")
    return header + yaml.safe_dump(doc, sort_keys=False, width=100)


def write(outcome: Outcome, path: Path) -> None:
    """Write the calibration file atomically: a temporary file beside it, renamed over it, so
    that an interrupted write leaves the old file or the new one, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(to_yaml(outcome))
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(name, 0o666 & ~mask)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
