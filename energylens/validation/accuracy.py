"""Accuracy against every measurement file, against the targets: ``validate --all``.

In-sample numbers are computed here, now, by predicting every row with the calibration
in use. Held-out numbers (leave one model out, leave one group size out) come from the
calibration file's ``fits`` section, written by ``energylens calibrate``, which refits
without each group in turn; recomputing them takes minutes, so it is not done here.
``write_docs`` renders ``docs/accuracy.md`` and parity plots from the same numbers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.file import SHIPPED
from energylens.errors import CalibrationDataError, UnknownGPUError
from energylens.hardware import load_gpu
from energylens.measurements.formats import VIDUR_UPSTREAM_COPIES, bench_gpu
from energylens.measurements.inference_bench import RUNTIMES
from energylens.measurements.vidur_ops import GEMM_OPS
from energylens.runtime.profile import legacy_runtime
from energylens.validation.predictors import MetricError, RowResult, ValidationReport, validate
from energylens.yamlfile import safe_load

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT / "data" / "measurements"


@dataclass(frozen=True)
class Target:
    """One accuracy target: a metric over a dataset, and which number gates it."""

    name: str
    dataset: str  # key of AccuracyReport.datasets
    metric: str | None  # key in the dataset's summary (None: judged on held-out rows only)
    limit: float  # MAPE fraction
    leave_out: tuple[str, ...] | None  # path into the calibration file's fits, if any
    # whether the shipped constants it is priced with come from that fit (False: its
    # in-sample column prices its rows with another source's constants, a cross-check)
    shipped: bool = True


#: ML.ENERGY row group of the rows the serving fit uses (``fit_serving.fitted_rows``): the
#: rows its leave-one-model-out figures score, so the in-sample column scores them too.
FITTED = "fitted"
MLENERGY_GROUPS = ("dense", "moe", "dense,1-gpu", "dense,multi-gpu", "moe,1-gpu",
                   "moe,multi-gpu")


def _mlenergy_targets() -> list[Target]:
    out = []
    fit = "mlenergy/H100-SXM"
    for metric, label in (("energy_per_token_joules", "energy per output token"),
                          ("median_itl_ms", "inter-token latency")):
        out.append(Target(f"ML.ENERGY H100 {label}, {FITTED} rows", "mlenergy-H100",
                          f"{metric}[{FITTED}]", 0.12,
                          (fit, "leave_one_model_out", metric, "mape")))
        for group in MLENERGY_GROUPS:
            out.append(Target(f"ML.ENERGY H100 {label}, {FITTED} rows, {group}", "mlenergy-H100",
                              f"{metric}[{FITTED},{group}]", 0.12,
                              (fit, "leave_one_model_out_by_group", group, metric, "mape")))
    return out


#: GPUs whose ML.ENERGY rows are split into leave-one-regime-out folds by ``calibrate``.
REGIME_GPUS = ("H100-SXM", "B200")
#: What every regime-out fold must reach (energy per token and inter-token latency).
REGIME_LIMIT = 0.10
REGIME_METRICS = (("energy_per_token_joules", "energy per output token"),
                  ("median_itl_ms", "inter-token latency"))


def regime_fold_keys(gpu: str) -> list[str]:
    """Keys of ``gpu``'s folds in the calibration file's ``regimes/mlenergy/<gpu>`` fit."""
    from energylens.calibration.regimes import FOLDS

    keys = [f"{fold.regime}: {fold.name}" for fold in FOLDS]
    relative = load_gpu(gpu).borrows_from
    if relative is not None:
        keys.append(f"gpu-generation: fit {relative}, predict {gpu}")
    return keys


def _regime_targets() -> list[Target]:
    return [Target(f"Regime-out {gpu} {key}: {label}", f"mlenergy-{gpu.split('-')[0]}", None,
                   REGIME_LIMIT, (f"regimes/mlenergy/{gpu}", key, "errors", metric, "mape"))
            for gpu in REGIME_GPUS for key in regime_fold_keys(gpu)
            for metric, label in REGIME_METRICS]


#: Small-kernel Vidur ops judged one by one (issue 10 item 8: <= 15 % per op class).
SMALL_KERNEL_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
SMALL_KERNEL_LIMIT = 0.15


def _small_kernel_targets() -> list[Target]:
    return [Target(f"Small-kernel per-op latency, Vidur {gpu.split('-')[0]}: {op}",
                   f"vidur-mlp-{gpu}", op, SMALL_KERNEL_LIMIT,
                   (f"vidur-mlp/{gpu}", "leave_one_model_out", op, "mape"))
            for gpu in ("H100-SXM", "A100-80GB-SXM") for op in SMALL_KERNEL_OPS]


#: Vidur NCCL rows run within one node (2-8 GPUs over NVSwitch): the rows the NVSwitch link
#: fit uses, and holds out one group size at a time.
ONE_NODE = "one node"


def _one_node(row: RowResult) -> bool:
    return int(row.input["num_workers"]) == int(row.input["devices_per_node"])


def _all_reduce_targets() -> list[Target]:
    """All-reduce on the DGX rows within one node, judged on the NVSwitch fit's leave one
    group size out (the a100_dgx file's 16-GPU rows cross InfiniBand: another fit). The
    shipped all-reduce constants of these GPUs are AIConfigurator's NCCL tables' fits."""
    return [Target(f"All-reduce latency, Vidur {sku}, {ONE_NODE} (2-8 GPUs, NVSwitch)",
                   f"vidur-network-{sku}", f"all_reduce[{ONE_NODE}]", 0.10,
                   (f"vidur-network/{gpu}:nvswitch", "leave_one_group_size_out", "all_reduce",
                    "mape"), shipped=False)
            for sku, gpu in (("h100_dgx", "H100-SXM"), ("a100_dgx", "A100-80GB-SXM"))]


#: AIConfigurator's NCCL tables that fit a link (three group sizes or more): folder, link.
NCCL_TABLE_LINKS = (("a100_sxm", "A100-80GB-SXM:nvswitch"), ("h100_sxm", "H100-SXM:nvswitch"),
                    ("h200_sxm", "H200-SXM:nvswitch"), ("b200_sxm", "B200:nvswitch"),
                    ("l40s", "L40S:pcie"))


def _nccl_table_targets() -> list[Target]:
    """All-reduce on each fitted NCCL table, judged on its fit's leave one group size out."""
    return [Target(f"All-reduce latency, AIConfigurator NCCL {folder} (2-8 GPUs, "
                   f"{link.split(':')[1]})", f"aiconfigurator-nccl-{folder}", "all_reduce", 0.10,
                   (f"aiconfigurator-nccl/{link}", "leave_one_group_size_out", "all_reduce",
                    "mape"))
            for folder, link in NCCL_TABLE_LINKS]


TARGETS: tuple[Target, ...] = (
    Target("GEMM per-op latency, Vidur H100", "vidur-mlp-H100-SXM", "gemm", 0.10,
           ("vidur-mlp/H100-SXM", "leave_one_model_out", "gemm", "mape")),
    Target("GEMM per-op latency, Vidur A100", "vidur-mlp-A100-80GB-SXM", "gemm", 0.10,
           ("vidur-mlp/A100-80GB-SXM", "leave_one_model_out", "gemm", "mape")),
    *_small_kernel_targets(),
    *_all_reduce_targets(),
    *_nccl_table_targets(),
    *_mlenergy_targets(),
    *_regime_targets(),
)


@dataclass
class Dataset:
    """Validation of one group of files, with summary metrics and per-row results."""

    name: str
    title: str
    files: list[str]
    rows: list[RowResult]
    summary: dict[str, MetricError]
    unpredicted: dict[str, str] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        """Rows in the files."""
        return len(self.rows)

    @property
    def n_errors(self) -> int:
        """Rows that could not be predicted (each with its reason)."""
        return sum(1 for r in self.rows if r.error is not None)


@dataclass
class AccuracyReport:
    """All datasets and the calibration file whose fits hold the held-out numbers."""

    datasets: dict[str, Dataset]
    fits: dict[str, Any]
    calibration_source: str
    constants: dict[str, dict[str, Any]] = field(default_factory=dict)  # section -> entries

    def leave_out(self, target: Target) -> float | None:
        """The held-out MAPE of ``target`` from the calibration file (None if not fitted)."""
        if target.leave_out is None:
            return None
        node: Any = self.fits
        for key in target.leave_out:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return None if node is None else float(node)

    def in_sample(self, target: Target) -> float | None:
        """The MAPE of ``target`` computed now with the calibration in use."""
        dataset = self.datasets.get(target.dataset)
        if dataset is None or target.metric is None or target.metric not in dataset.summary:
            return None
        return dataset.summary[target.metric].mape

    def gating(self, target: Target) -> float | None:
        """The number the target is judged on: held out where the data allows."""
        held = self.leave_out(target)
        return held if held is not None else self.in_sample(target)


def _merge(reports: list[ValidationReport]) -> tuple[list[RowResult], dict[str, str]]:
    rows: list[RowResult] = []
    notes: dict[str, str] = {}
    for report in reports:
        rows += report.rows
        notes.update(report.notes)
    return rows, notes


def _summary(rows: list[RowResult], extra: dict[str, Callable[[RowResult], bool]] | None = None,
             aggregate: dict[str, tuple[str, ...]] | None = None) -> dict[str, MetricError]:
    from energylens.validation.predictors import metric_errors

    summary = dict(metric_errors(rows))
    for name, metrics in (aggregate or {}).items():
        ape = [abs(r.predicted[m] / r.measured[m] - 1) for r in rows if r.error is None
               for m in metrics if m in r.predicted and m in r.measured]
        if ape:
            summary[name] = MetricError(mape=float(np.mean(ape)), median_ape=float(np.median(ape)),
                                        n=len(ape))
    for name, keep in (extra or {}).items():
        for metric, err in metric_errors(rows, keep).items():
            summary[f"{metric}[{name}]"] = err
    return summary


def bench_layout(row: RowResult) -> str:
    """The layout an LLM-Inference-Bench row ran, e.g. ``TP4 EP4`` (attention over four
    GPUs, whole experts over four), ``PP4``, ``1 GPU``; ``-`` where it is not read."""
    from energylens.measurements.inference_bench import UnmodelledRow, bench_setup

    try:
        d = bench_setup(row.input).deployment
    except UnmodelledRow:
        return "-"
    parts = [f"{name}{degree}" for name, degree in (("TP", d.tp), ("PP", d.pp), ("EP", d.ep))
             if degree > 1]
    return " ".join(parts) or "1 GPU"


def _layout_groups(rows: list[RowResult]) -> dict[str, Callable[[RowResult], bool]]:
    """One row group per layout the rows ran (:func:`bench_layout`)."""
    return {layout: (lambda r, layout=layout: bench_layout(r) == layout)  # type: ignore[misc]
            for layout in sorted({bench_layout(r) for r in rows})}


def _mlenergy_groups(rows: list[RowResult]) -> dict[str, Callable[[RowResult], bool]]:
    """Row groups of ML.ENERGY rows; ``host-bound`` runs are screened over all of ``rows``
    (every task file: the screen compares a model's tasks)."""
    from energylens.measurements.mlenergy_screen import host_bound_rows, row_key
    from energylens.model.zoo import get_model

    screened = host_bound_rows((r.input, r.measured) for r in rows)

    def kind(row: RowResult) -> str:
        try:
            model = get_model(str(row.input["model_id"]))
        except ValueError:
            return "unknown"
        if model.hybrid is not None:
            return "hybrid"
        return "moe" if model.moe is not None else "dense"

    def is_moe(row: RowResult) -> bool:
        return kind(row) == "moe"

    def is_dense(row: RowResult) -> bool:
        return kind(row) == "dense"

    def multi(row: RowResult) -> bool:
        return int(row.input["num_gpus"]) > 1

    def host_bound(row: RowResult) -> bool:
        return row_key(row.input) in screened

    def dp_attention(row: RowResult) -> bool:
        return int(row.input.get("data_parallel", 1)) > 1

    def fitted(row: RowResult) -> bool:
        return kind(row) in ("dense", "moe") and not host_bound(row) and not dp_attention(row)

    groups: dict[str, Callable[[RowResult], bool]] = {
        "dense": is_dense, "moe": is_moe, "hybrid": lambda r: kind(r) == "hybrid",
        "host-bound": host_bound, "dp-attention": dp_attention,
        "1-gpu": lambda r: not multi(r), "multi-gpu": multi,
        "dense,1-gpu": lambda r: is_dense(r) and not multi(r),
        "dense,multi-gpu": lambda r: is_dense(r) and multi(r),
        "moe,1-gpu": lambda r: is_moe(r) and not multi(r),
        "moe,multi-gpu": lambda r: is_moe(r) and multi(r),
        FITTED: fitted,
    }
    def fitted_and(keep: Callable[[RowResult], bool]) -> Callable[[RowResult], bool]:
        return lambda row: fitted(row) and keep(row)

    groups.update({f"{FITTED},{name}": fitted_and(groups[name]) for name in MLENERGY_GROUPS})
    return groups


def _calibration_doc(calibration: str | Path | None) -> tuple[dict[str, Any], str]:
    if calibration is None:
        shipped = resources.files("energylens.data").joinpath(SHIPPED)
        if not shipped.is_file():
            return {}, "built-in defaults (uncalibrated)"
        return safe_load(shipped.read_text()) or {}, f"energylens/data/{SHIPPED}"
    return safe_load(Path(calibration).read_text()) or {}, str(calibration)


def _sections(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every constants section of a calibration file, by ``kernels/..``, ``links/..``,
    ``runtimes/<runtime>/<gpu>``: constant -> entry (value, kind, ...)."""
    out = {f"{section}/{key}": constants for section in ("kernels", "links")
           for key, constants in (doc.get(section) or {}).items()}
    out.update({f"runtimes/{runtime}/{gpu}": constants
                for runtime, by_gpu in (doc.get("runtimes") or {}).items()
                for gpu, constants in by_gpu.items()})
    return out


def _bench_label(*, hardware: str, framework: str, doc: dict[str, Any]) -> str:
    """Whether ``framework``'s runtime constants on ``hardware`` were fitted on these very
    LLM-Inference-Bench rows (in-sample, with the fit's leave-one-model-out error where
    it has one) or come from elsewhere (never fitted on them)."""
    runtime = RUNTIMES.get(framework)
    if runtime is None:
        return "no runtime profile"
    try:
        gpu = load_gpu(bench_gpu(hardware)).name
    except UnknownGPUError:
        return "GPU not in the database"
    fit_id = f"llm-inference-bench/{runtime}/{gpu}"
    sections = doc.get("runtimes") or {}
    fitted = sorted(f"{name}" + (f" ({section})" if section != runtime else "")
                    for section in (runtime, legacy_runtime(runtime))
                    for name, entry in ((sections.get(section) or {}).get(gpu) or {}).items()
                    if isinstance(entry, dict) and entry.get("fit") == fit_id)
    if not fitted:
        return "never fitted"
    held = ((doc.get("fits") or {}).get(fit_id) or {}).get("leave_one_model_out", {})
    mape = (held.get("latency_s") or {}).get("mape")
    out = f"in-sample: {', '.join(fitted)} fitted on these rows"
    return out + (f"; leave-one-model-out latency MAPE {100 * mape:.1f} %" if mape is not None
                  else "")


def _ttft_rows(source: Path, calibration: str | Path | None) -> list[RowResult]:
    """The bench's time-to-first-token rows (its converter's batch rows), predicted."""
    from energylens.calibration.file import default_calibration, load_calibration
    from energylens.measurements.convert import Options, converters, to_csv
    from energylens.measurements.user_csv import load_user_csv
    from energylens.validation.kshot import validate_measured

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ttft.csv"
        path.write_text(to_csv(converters()["llm-inference-bench"](source, Options())))
        measurements = load_user_csv(path)
    cal = default_calibration() if calibration is None else load_calibration(calibration)
    report = validate_measured(measurements, calibration=cal)
    return [RowResult(input=r.row.as_input(), measured=dict(r.row.measured),
                      predicted=dict(r.predicted), error=r.error) for r in report.rows]


def collect(*, data: Path = DEFAULT_DATA, calibration: str | Path | None = None) -> AccuracyReport:
    """Validate every known file under ``data`` and gather the held-out numbers."""
    data = Path(data)
    if not data.is_dir():
        raise CalibrationDataError(f"{data}: no such data folder (expected the layout of "
                                   "data/measurements)")
    doc, source = _calibration_doc(calibration)
    fits = doc.get("fits", {})
    datasets: dict[str, Dataset] = {}

    def add(name: str, title: str, fmt: str, files: list[Path], **kwargs: Any) -> None:
        if not files:
            return
        reports = [validate(format=fmt, path=f, calibration=calibration) for f in files]
        rows, notes = _merge(reports)
        datasets[name] = Dataset(name=name, title=title, files=[str(f) for f in files],
                                 rows=rows, summary=_summary(rows, **kwargs), unpredicted=notes)

    compute = sorted((data / "vidur" / "compute").glob("*/*/*/mlp.csv"))
    for gpu in sorted({p.parts[-4] for p in compute}):
        name = load_gpu(gpu).name
        add(f"vidur-mlp-{name}", f"Vidur per-op kernel time, {name}", "vidur-mlp",
            [p for p in compute if p.parts[-4] == gpu], aggregate={"gemm": GEMM_OPS})
    for sku_dir in sorted((data / "vidur" / "network").glob("*")):
        copies = "".join(f" ({file}: {original} copied upstream, not this SKU's measurement)"
                         for (sku, file), original in sorted(VIDUR_UPSTREAM_COPIES.items())
                         if sku == sku_dir.name)
        add(f"vidur-network-{sku_dir.name}", f"Vidur NCCL collectives, {sku_dir.name}{copies}",
            "vidur-network", sorted(sku_dir.glob("*.csv")), extra={ONE_NODE: _one_node})
    for table in sorted((data / "aiconfigurator" / "kernels").glob("*/comm/nccl/*/nccl_perf.parquet")):
        folder, version = table.parts[-5], table.parts[-2]
        fitted = folder in dict(NCCL_TABLE_LINKS)
        add(f"aiconfigurator-nccl-{folder}", f"AIConfigurator NCCL {version} collectives, {folder} "
            + ("(all-reduce and all-to-all fitted on it; all-gather, reduce-scatter never)"
               if fitted else "(never fitted)"),
            "aiconfigurator-nccl", [table])
    add("llmcompass-matmul-A100", "LLMCompass fp16 GEMMs, A100", "llmcompass-matmul",
        sorted((data / "llmcompass").glob("matmul_*.csv")))
    for phase in ("prefill", "decode"):  # one dataset per phase: each its own MAPE line
        add(f"llmcompass-layer-{phase}-A100",
            f"LLMCompass GPT-3-175B layer ops, {phase}, 4 x A100 TP4 (never fitted)",
            "llmcompass-layer", sorted((data / "llmcompass").glob(f"transformer_{phase}_*.csv")))
    bench = data / "llm-inference-bench"
    for name, title, pattern in (
            ("llm-inference-bench", "LLM-Inference-Bench static batches", "All_results.csv"),
            ("llm-inference-bench-power", "LLM-Inference-Bench average power",
             "Fig_16_a_b/power_results.csv")):
        files = sorted(bench.glob(pattern))
        if not files:
            continue
        rows, notes = _merge([validate(format="llm-inference-bench", path=f,
                                       calibration=calibration) for f in files])
        for hardware, framework in sorted({(str(r.input["Hardware"]), str(r.input["Framework"]))
                                           for r in rows}):
            mine = [r for r in rows if (str(r.input["Hardware"]), str(r.input["Framework"]))
                    == (hardware, framework)]
            key = f"{name}-{hardware}-{framework}".replace(" ", "_")
            label = _bench_label(hardware=hardware, framework=framework, doc=doc)
            datasets[key] = Dataset(name=key, title=f"{title}, {framework} on {hardware} ({label})",
                                    files=[str(f) for f in files], rows=mine,
                                    summary=_summary(mine), unpredicted=notes)
    for layout_file in sorted(bench.glob("Fig_5_b/TP_EP_PP_results.csv")):
        rows, notes = _merge([validate(format="llm-inference-bench", path=layout_file,
                                       calibration=calibration)])
        datasets["llm-inference-bench-layouts"] = Dataset(
            name="llm-inference-bench-layouts",
            title="LLM-Inference-Bench layouts (tensor, pipeline, expert parallel and hybrids), "
                  "TensorRT-LLM on 1-4 A100 40 GB (layouts never fitted; the engine's A100 "
                  "constants fitted on All_results.csv, which repeats this file's TP rows)",
            files=[str(layout_file)], rows=rows, summary=_summary(rows, extra=_layout_groups(rows)),
            unpredicted=notes)
    for ttft_file in sorted(bench.glob("Fig_22/all_results_TTFT_ITL.csv")):
        rows = _ttft_rows(ttft_file, calibration)
        for hardware, framework in sorted({(str(r.input["gpu"]), str(r.input["framework"]))
                                           for r in rows}):
            mine = [r for r in rows if (str(r.input["gpu"]), str(r.input["framework"]))
                    == (hardware, framework)]
            key = f"llm-inference-bench-ttft-{hardware}-{framework}".replace(" ", "_")
            datasets[key] = Dataset(
                name=key, title=f"LLM-Inference-Bench time to first token of 16 x 1,024-token "
                                f"prompts, {framework} on {hardware} (never fitted)",
                files=[str(ttft_file)], rows=mine, summary=_summary(mine), unpredicted={})
    tasks = sorted((data / "mlenergy" / "tasks").glob("*.json"))
    if tasks:
        reports = [validate(format="mlenergy", path=f, calibration=calibration) for f in tasks]
        rows, _ = _merge(reports)
        for gpu in sorted({str(r.input["gpu_model"]) for r in rows}):
            mine = [r for r in rows if str(r.input["gpu_model"]) == gpu]
            datasets[f"mlenergy-{gpu}"] = Dataset(
                name=f"mlenergy-{gpu}", title=f"ML.ENERGY steady-state serving, {gpu}",
                files=[str(f) for f in tasks], rows=mine,
                summary=_summary(mine, extra=_mlenergy_groups(rows)))
    if not datasets:
        raise CalibrationDataError(f"{data}: no known measurement file in it (expected the "
                                   "layout of data/measurements: vidur/, mlenergy/tasks/, ...)")
    return AccuracyReport(datasets=datasets, fits=fits, calibration_source=source,
                          constants=_sections(doc))
