"""Fit serving-runtime constants per (runtime, GPU) (``runtimes.<rt>.<gpu>`` sections).

Two sources, each identifying what it can:

* AIConfigurator's kernel tables (``<gpu>/{gemm,attention}/<engine>/<version>/*.parquet``,
  measured by NVIDIA per engine): on the shapes both engines measured, the median ratio
  of vLLM's kernel time to TensorRT-LLM's is TensorRT-LLM's efficiency relative to vLLM's
  kernels (which the GPU's kernel constants describe): large bf16 GEMMs (compute),
  skinny bf16 GEMMs (weight streaming), context attention, long-context generation
  attention (KV reads), decode-size fused-MoE ops (expert weight streaming). vLLM is the
  reference (scale 1, its constants stay as fitted); SGLang has no table, so its kernels
  are assumed to be vLLM's.
* LLM-Inference-Bench static batches (``All_results.csv``: whole-batch latency of ``batch``
  prompts of L tokens in and L out): with the runtime's kernels priced by the model at zero
  overhead (prefill ``P``, decode ``D``, ``N`` steps of ``B`` sequences), the measured
  latency is ``a P + b D + N (step + B per_sequence) + H handoff`` (``H``: the hand-offs
  between pipeline stages the row makes, llama.cpp's layer split over several GPUs); a
  bounded linear least-squares fit on relative errors gives the engine's step and
  per-sequence overheads (``a = b = 1``),
  and for llama.cpp (no kernel table) ``b`` as an effective memory/KV efficiency scale
  (1/b), refined by re-pricing with the scale applied (:data:`LIB_FREE`). A coefficient
  that ends at a bound of its range is reported (``at_bound``).
  vLLM's rows ran its V0 engine (2024, before ``legacy_overheads_until`` in its profile):
  its two overheads are fitted into the ``vllm@legacy`` sections, which only releases
  before 0.8.0 read (later ones keep those fitted on ML.ENERGY's vLLM 0.11.1).
  llama.cpp's ``Batch Size`` is its prompt batch (``-b``): each row is one sequence whose
  prompt runs in ceil(L / b) passes (the throughput column counts one sequence).

Runtimes and GPUs that no data identifies get their profile's priors, marked ``assumed``
(:func:`fill_priors`, after :func:`energylens.calibration.transfer.borrow_from_relatives`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, lsq_linear

from energylens.calibration.fitting import ErrorStats, map_forked
from energylens.calibration.transfer import lending_relatives
from energylens.cost.constants import Calibration, RuntimeConstants, runtime_key
from energylens.deployment import Deployment
from energylens.errors import ConfigError, UnknownGPUError, UnknownModelError
from energylens.hardware import load_gpu
from energylens.measurements.bench_screen import SCREEN, floor_s
from energylens.measurements.formats import load_measurements
from energylens.measurements.inference_bench import (
    BenchSetup,
    UnmodelledRow,
    bench_setup,
    price,
)
from energylens.runtime import get_runtime, runtime_names
from energylens.runtime.profile import REFERENCE_RUNTIME, legacy_runtime, release_key

#: AIConfigurator engine folder -> runtime; the reference engine's kernels are the GPU's.
AIC_ENGINES = {"trtllm": "trtllm", "vllm": "vllm"}
AIC_REFERENCE = "vllm"
#: Fewest shapes both engines measured for a kernel scale to be fitted.
MIN_SHAPES = 8
#: AIConfigurator GPU folder -> GPU database name.
AIC_GPUS = {"a100_sxm": "A100-80GB-SXM", "h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM",
            "b200_sxm": "B200", "gb200": "GB200", "l40s": "L40S"}
#: Which of (a, b, step, per_sequence, handoff) the LLM-Inference-Bench fit frees, per
#: runtime (default: the two overheads only; no other runtime's rows split layers over GPUs).
#: llama.cpp (GGUF kernels, no table; one sequence per row, models from 7B to 72B, so decode
#: time and step overhead separate): b, an effective memory/KV scale, its step overhead and
#: its stage hand-off (rows on 1, 2 and 4 GPUs of the same models); its prompt share is too
#: small to identify a, and one sequence per row leaves the per-sequence overhead
#: unidentified. DeepSpeed-MII's
#: rows (7-8B models only) cannot tell its decode time from its step overhead: its kernels
#: are assumed to be vLLM's (scales 1).
#: Habana's DeepSpeed on Gaudi2 (no kernel table; H100's curves stand in for MME/TPC kernels;
#: 7B-72B models, 1-8 cards, batches 1-64 of 128-2,048 tokens): both effective scales and
#: both overheads. SambaFlow on SN40L (no kernel table, no launch floors: its decode is
#: weights streamed once per step; 7B-70B models on 8 sockets, batches 1-32): the decode
#: scale and both overheads; its prompts (at most 2,048 x 16 tokens on 8 x 638 TFLOPS) are
#: too small a share of a row to identify a prefill scale.
#: The all-reduce arrival time (``collective_sync_s``, the sixth coefficient) is free wherever
#: a group has rows on one GPU and on several (tensor-parallel) of the same runtime, so that
#: it is not the step overhead under another name; llama.cpp splits layers, no all-reduce.
#: Where every row all-reduces (vLLM on MI250: two dies per package, so no row runs on one
#: GPU), it is held at 0 and recorded so: the step overhead carries it, and a relative's
#: value added after the fit would count it twice.
Free = tuple[bool, bool, bool, bool, bool, bool]
LIB_FREE: dict[str, Free] = {
    "llama.cpp": (False, True, True, False, True, False),
    "deepspeed-habana": (True, True, True, True, False, True),
    "sambaflow": (False, True, True, True, False, True),
}
OVERHEADS_ONLY: Free = (False, False, True, True, False, True)
#: Constants each coefficient of the fit sets.
COEFFICIENT_CONSTANTS = (("gemm_efficiency_scale", "attention_efficiency_scale"),
                         ("memory_efficiency_scale", "kv_bandwidth_scale"),
                         ("step_overhead_s",), ("per_sequence_overhead_s",),
                         ("stage_handoff_s",), ("collective_sync_s",))
#: Bounds of the LLM-Inference-Bench fit: (a, b, step_s, per_sequence_s, handoff_s, sync_s);
#: a kernel scale (1/a, 1/b) stays within [0.1, 2].
LOW = np.array([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
HIGH = np.array([10.0, 10.0, 50e-3, 5e-3, 0.5, 1e-3])
#: HBM shares of an unsplit decode-attention kernel (``paged_attention_v1_above`` in a
#: profile: vLLM V0's paged attention v1) tried for a legacy section, 0 = not priced; one
#: is kept where its fit lowers the soft-L1 cost by more than ``V1_MIN_GAIN`` (2: Akaike's
#: price of a parameter) below the fit without it.
V1_SHARES = (0.0, 0.15, 0.2, 0.25, 0.3, 0.4, 0.55, 0.75, 0.95)
V1_MIN_GAIN = 2.0
#: Relative residual beyond which a row counts less (soft-L1 loss): a few rows the static
#: batch cannot describe (waves of a batch larger than the KV space) must not set the fit.
ROBUST_SCALE = 0.1
#: A row measured faster than 1/IMPLAUSIBLE of the model's zero-overhead time is left out
#: (TensorRT-LLM H100 Qwen2-7B rows of 2,048 tokens in 0.05-3 s: 25 us to 1.6 ms per
#: decode step of a 7B model, below the time to read its weights once).
IMPLAUSIBLE = 3.0
#: Typical sizes of (a, b, step_s, per_sequence_s, handoff_s, sync_s) for the optimiser.
TYPICAL = np.array([1.0, 1.0, 1e-3, 1e-5, 1e-3, 1e-5])
#: Hand-off time the model is priced at once more to count a row's hand-offs.
_HANDOFF_PROBE_S = 1e-3
#: All-reduce arrival time the model is priced at once more to count a row's all-reduces.
_SYNC_PROBE_S = 1e-5
#: Range of a fitted effective kernel scale.
SCALE_RANGE = (0.1, 2.0)
#: Re-pricing rounds of the effective kernel scales.
ROUNDS = 3
SCALES = ("gemm_efficiency_scale", "attention_efficiency_scale", "memory_efficiency_scale",
          "expert_bandwidth_scale",
          "kv_bandwidth_scale", "mha_kv_bandwidth_scale")


@dataclass
class RuntimeFits:
    """Fitted (runtime, GPU) constants, their provenance entries and the fit reports."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)  # "<rt>/<gpu>" -> values
    provenance: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    fits: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, *, runtime: str, gpu: str, values: dict[str, float], fit_id: str,
            report: dict[str, Any], note: str | None = None) -> None:
        """Record fitted ``values`` of (runtime, GPU) and the report of fit ``fit_id``."""
        key = runtime_key(runtime=runtime, gpu=gpu)
        self.values.setdefault(key, {}).update(values)
        self.fits[fit_id] = report
        entries = self.provenance.setdefault(f"runtimes/{key}", {})
        for name, value in values.items():
            entry: dict[str, Any] = {"value": float(f"{value:.6g}"), "kind": "fitted",
                                     "fit": fit_id, "fitted_on": report["data"],
                                     "residual": {"rms_log": report["rms_log_residual"]}}
            if note:
                entry["note"] = note
            entries[name] = entry


# --- AIConfigurator kernel tables ----------------------------------------------------------

#: (table folder, file, join keys, filter, scale it measures).
_GEMM_KEYS = ["m", "n", "k"]
_MOE_KEYS = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
             "moe_tp_size", "moe_ep_size", "distribution"]
_ATTENTION_KEYS = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                   "window_size", "kv_cache_dtype", "attn_dtype", "step"]


def _kv_streams(d: pd.DataFrame) -> pd.Series:
    """Decode-attention rows that stream a BF16 KV cache of at least 64 MB (full attention)."""
    return ((d.window_size == 0) & (d.kv_cache_dtype == "bfloat16")
            & (d.batch_size * d.step * d.num_key_value_heads * d.head_dim * 4 >= 64e6))


def _regimes() -> list[tuple[str, str, list[str], Callable[[pd.DataFrame], pd.Series], str]]:
    return [
        ("gemm", "gemm_perf.parquet", _GEMM_KEYS,
         lambda d: (d.gemm_dtype == "bfloat16") & (d.m >= 1024) & (d.n >= 1024) & (d.k >= 1024),
         "gemm_efficiency_scale"),
        ("gemm", "gemm_perf.parquet", _GEMM_KEYS,
         lambda d: (d.gemm_dtype == "bfloat16") & (d.m <= 16) & (d.n * d.k >= 4096 * 4096),
         "memory_efficiency_scale"),
        ("attention", "context_attention_perf.parquet", _ATTENTION_KEYS,
         lambda d: (d.window_size == 0) & (d.kv_cache_dtype == "bfloat16")
         & (d.attn_dtype == "bfloat16") & (d.isl >= 1024),
         "attention_efficiency_scale"),
        # decode attention, grouped-query and one-query-head-per-KV-head shapes apart (an
        # engine may run a kernel of its own for each: TensorRT-LLM's XQA and masked MHA)
        ("attention", "generation_attention_perf.parquet", _ATTENTION_KEYS,
         lambda d: _kv_streams(d) & (d.num_heads > d.num_key_value_heads),
         "kv_bandwidth_scale"),
        ("attention", "generation_attention_perf.parquet", _ATTENTION_KEYS,
         lambda d: _kv_streams(d) & (d.num_heads == d.num_key_value_heads),
         "mha_kv_bandwidth_scale"),
        # decode-size MoE ops, balanced routing, gated experts; per shape each engine's
        # fastest kernel (several per dtype)
        ("moe", "moe_perf.parquet", _MOE_KEYS,
         lambda d: (d.distribution == "balanced") & (d.num_tokens <= 128)
         & ~d.kernel_source.astype(str).str.contains("nongated"),
         "expert_bandwidth_scale"),
    ]


def aic_tables(root: Path) -> list[Path]:
    """The AIConfigurator tables under ``root`` (``kernels/``) that the fit reads."""
    files = {f for _, f, _, _, _ in _regimes()}
    return sorted(p for p in Path(root).glob("*/*/*/*/*.parquet") if p.name in files
                  and p.parts[-5] in AIC_GPUS and p.parts[-3] in AIC_ENGINES)


def _table(files: list[Path], *, gpu_dir: str, folder: str, engine: str, name: str) -> Path | None:
    found = sorted(p for p in files if p.parts[-5] == gpu_dir and p.parts[-4] == folder
                   and p.parts[-3] == engine and p.name == name)
    return found[-1] if found else None  # the newest version folder


def _read(path: Path) -> pd.DataFrame:
    """A kernel table; older versions lack ``window_size`` (full attention only)."""
    table = pd.read_parquet(path)
    if "window_size" not in table.columns and "attention" in path.parts:
        table["window_size"] = 0
    return table


def fit_aic_scales(*, files: list[Path], fits: RuntimeFits,
                   log: Callable[[str], None] = lambda _: None) -> None:
    """Kernel-efficiency scales of every non-reference engine per GPU, into ``fits``."""
    for gpu_dir, gpu in sorted(AIC_GPUS.items()):
        for engine, runtime in sorted(AIC_ENGINES.items()):
            if engine == AIC_REFERENCE:
                continue
            values: dict[str, float] = {}
            used: list[Path] = []
            stats: dict[str, dict[str, float | int]] = {}
            logs: list[float] = []
            for folder, name, keys, keep, scale in _regimes():
                own = _table(files, gpu_dir=gpu_dir, folder=folder, engine=engine, name=name)
                ref = _table(files, gpu_dir=gpu_dir, folder=folder, engine=AIC_REFERENCE, name=name)
                if own is None or ref is None:
                    continue
                a, b = _read(own), _read(ref)
                on = [k for k in keys if k in a.columns and k in b.columns]
                a, b = a[keep(a)], b[keep(b)]
                if folder == "moe":  # several kernels per shape: the fastest of each engine
                    a, b = (t.groupby(on, as_index=False).agg(latency=("latency", "min"))
                            for t in (a, b))
                joined = a.merge(b, on=on, suffixes=("_own", "_ref"))
                joined = joined[(joined.latency_own > 0) & (joined.latency_ref > 0)]
                if len(joined) < MIN_SHAPES:
                    continue
                ratio = np.log(joined.latency_ref.to_numpy() / joined.latency_own.to_numpy())
                values[scale] = float(np.exp(np.median(ratio)))
                residual = ratio - np.median(ratio)
                logs.extend(residual.tolist())
                used += [own, ref]
                stats[scale] = {"n_shapes": int(len(joined)),
                                "ratio_p25": round(float(np.exp(np.quantile(ratio, 0.25))), 4),
                                "ratio_p75": round(float(np.exp(np.quantile(ratio, 0.75))), 4)}
            if not values:
                continue
            fit_id = f"aiconfigurator-kernels/{runtime}/{gpu}"
            report = {"data": sorted({_rel(p) for p in used}), "n_points": len(logs),
                      "rms_log_residual": round(float(np.sqrt(np.mean(np.square(logs)))), 5),
                      "shapes": stats, "fit": fit_id,
                      "notes": [f"median ratio of {AIC_REFERENCE}'s kernel time to {engine}'s "
                                "on the shapes both measured (1 = as the GPU's kernel constants)"]}
            log(f"runtime {runtime} {gpu}: {len(values)} kernel scales from AIConfigurator "
                + ", ".join(f"{k} {v:.3f}" for k, v in values.items()))
            fits.add(runtime=runtime, gpu=gpu, values=values, fit_id=fit_id, report=report)


# --- LLM-Inference-Bench static batches ----------------------------------------------------

@dataclass(frozen=True)
class BenchRow:
    """One static-batch row: what the model prices and what was measured."""

    model: str
    gpu: str
    deployment: Deployment
    sequences: int  # sequences in the batch
    tokens: int  # L in and L out
    prompt_passes: int  # forward passes of the prompt (llama.cpp: ceil(L / its -b))
    latency_s: float


def bench_rows(files: list[Path]) -> tuple[dict[tuple[str, str], list[BenchRow]], dict[str, int]]:
    """Rows by (runtime, GPU), and skipped rows by reason."""
    out: dict[tuple[str, str], list[BenchRow]] = {}
    skipped: dict[str, int] = {}
    for path in files:
        for row in load_measurements(format="llm-inference-bench", path=path).rows:
            v = row.input
            try:
                gpu = load_gpu(str(row.context["gpu"])).name
                setup = bench_setup(v)
            except UnknownGPUError:
                why = f"GPU {v['Hardware']} not in the database"
            except UnmodelledRow:
                why = f"framework {v['Framework']} has no runtime profile"
            else:
                out.setdefault((setup.runtime, gpu), []).append(BenchRow(
                    model=str(v["Model"]), gpu=gpu, deployment=setup.deployment,
                    sequences=setup.sequences, tokens=setup.tokens,
                    prompt_passes=setup.prompt_passes,
                    latency_s=float(row.measured["latency_s"])))
                continue
            skipped[why] = skipped.get(why, 0) + 1
    return out, skipped


def _floor_s(row: BenchRow) -> float:
    """Least latency ``row`` could have run in (:mod:`energylens.measurements.bench_screen`)."""
    floor = floor_s(model=row.model, gpu=row.gpu, devices=row.deployment.total_gpus,
                    output_tokens=row.tokens)
    return 0.0 if floor is None else floor


def _priced(row: BenchRow, calibration: Calibration, *, counts: bool = True,
            section: str | None = None) -> tuple[float, float, float, float, float] | None:
    """(prefill s, decode s, engine steps, stage hand-offs, all-reduces) of ``row`` at the
    calibration's kernels, or None when the model cannot price it (unknown model,
    infeasible, out of memory). Hand-offs and all-reduces are counted as the model times
    them: the latency's change per second of hand-off (all-reduce arrival) time of runtime
    ``section`` (default: the row's runtime), 0 on one pipeline stage (one GPU per stage),
    or when ``counts`` is False, for callers that read the latency only."""
    setup = BenchSetup(runtime=str(row.deployment.runtime), deployment=row.deployment,
                       sequences=row.sequences, tokens=row.tokens)
    try:
        run = price(model=row.model, gpu=row.gpu, setup=setup, calibration=calibration)
    except (UnknownModelError, ConfigError):
        return None
    if not run.prediction.feasible:
        return None
    runtime = section or str(row.deployment.runtime)
    now = calibration.runtime(runtime=runtime, gpu=row.gpu)

    def per_second(field: str, step: float) -> float:
        probe = price(model=row.model, gpu=row.gpu, setup=setup,
                      calibration=calibration.with_runtime(
                          runtime=runtime, gpu=row.gpu, **{field: getattr(now, field) + step}))
        return ((probe.prefill_s + probe.decode_s) - (run.prefill_s + run.decode_s)) / step

    handoff = per_second("stage_handoff_s", _HANDOFF_PROBE_S) \
        if counts and row.deployment.pp > 1 else 0.0
    syncs = per_second("collective_sync_s", _SYNC_PROBE_S) \
        if counts and row.deployment.tp > 1 else 0.0
    return (run.prefill_s, run.decode_s, float(row.prompt_passes + row.tokens - 1), handoff,
            syncs)


def _zero_overheads(calibration: Calibration, *, runtime: str, gpu: str,
                    scales: dict[str, float]) -> Calibration:
    """``calibration`` with no engine overhead for (runtime, GPU) and these kernel scales."""
    return calibration.with_runtime(runtime=runtime, gpu=gpu, step_overhead_s=0.0,
                                    per_sequence_overhead_s=0.0, stage_handoff_s=0.0,
                                    collective_sync_s=0.0, **scales)


def _design(rows: list[BenchRow],
            priced: list[tuple[float, float, float, float, float]]) -> np.ndarray:
    """Columns (P, D, N, N B, H, S) divided by the measured latency (relative residuals)."""
    x = np.array([[p, d, n, n * r.sequences, h, s]
                  for r, (p, d, n, h, s) in zip(rows, priced, strict=True)])
    return x / np.array([r.latency_s for r in rows])[:, None]


def _solve(x: np.ndarray, *, free: Free) -> np.ndarray:
    """Coefficients (a, b, step, per_sequence, handoff, sync) minimising the soft-L1
    relative residuals ``x @ c - 1`` within the bounds; the ones not ``free`` stay at a = b
    = 1, 0 overheads."""
    fixed = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    idx = [i for i, f in enumerate(free) if f]
    rest = x[:, [i for i, f in enumerate(free) if not f]] @ fixed[[not f for f in free]]
    sub = x[:, idx]
    start = np.asarray(lsq_linear(sub, 1.0 - rest, bounds=(LOW[idx], HIGH[idx])).x)
    start = np.clip(start, LOW[idx], HIGH[idx])

    def residuals(c: np.ndarray) -> np.ndarray:
        return np.asarray(sub @ c + rest - 1.0)

    result = least_squares(residuals, start, bounds=(LOW[idx], HIGH[idx]), loss="soft_l1",
                           f_scale=ROBUST_SCALE, x_scale=TYPICAL[idx])
    out = fixed.copy()
    out[idx] = result.x
    return out


def _at_bound(solution: np.ndarray, free: Free) -> list[str]:
    """Constants whose free coefficient ended at a bound of its range."""
    out: list[str] = []
    for i, is_free in enumerate(free):
        near = min(abs(solution[i] - LOW[i]), abs(solution[i] - HIGH[i]))
        if is_free and near <= 1e-6 * max(TYPICAL[i], abs(solution[i])):
            out += COEFFICIENT_CONSTANTS[i]
    return out


@dataclass
class _BenchFit:
    """A whole bench fit of one group's rows: every trial (one per
    ``v1_kv_bandwidth_share`` on the grid), the chosen one and its share, the values it
    writes, whether the all-reduce time was held at 0, and the calibration that prices
    the rows with them."""

    trials: list[_GroupFit]
    chosen: int
    shares: tuple[float, ...]
    values: dict[str, float]
    carried: bool
    calibration: Calibration

    @property
    def share(self) -> float:
        """The chosen ``v1_kv_bandwidth_share`` (0: not priced)."""
        return self.shares[self.chosen]


def _bench_fit(rows: list[BenchRow], *, base: Calibration, target: str, gpu: str,
               scales: dict[str, float], wanted: Free,
               shares: tuple[float, ...]) -> _BenchFit | None:
    """The bench fit of ``rows`` from ``base`` and the kernel ``scales`` (each share of the
    grid tried, kernel scales re-priced in rounds where free, the share chosen on these rows
    alone); None with fewer than 8 rows to fit."""
    trials = [_fit_group(rows, base=base if not share else base.with_runtime(
                  runtime=target, gpu=gpu, v1_kv_bandwidth_share=share),
                         target=target, gpu=gpu, scales=dict(scales), free=wanted)
              for share in shares]
    chosen = 0
    for i, trial in enumerate(trials[1:], start=1):
        if len(trial.x) == len(trials[0].x) and \
                trial.cost < trials[chosen].cost - (V1_MIN_GAIN if chosen == 0 else 0.0):
            chosen = i
    x, _, solution, free, fitted_scales, _ = trials[chosen].parts
    if len(x) < 8:
        return None
    values = {name: float(solution[i]) for i in (2, 3, 4, 5) if free[i]
              for name in COEFFICIENT_CONSTANTS[i]}
    if shares[chosen] or any(abs(t.cost - trials[0].cost) > V1_MIN_GAIN for t in trials[1:]):
        # a share, or none where some share's fit differs (the rows tell: recorded, so
        # that no relative's share is filled in); unrecorded where no row decides
        values["v1_kv_bandwidth_share"] = shares[chosen]
    carried = wanted[5] and not free[5] and bool(np.all(x[:, 5]))
    if carried:  # held at 0 by the fit: recorded, so that no relative's value is added
        values["collective_sync_s"] = 0.0
    values.update({name: fitted_scales[name] for i in (0, 1) if free[i]
                   for name in COEFFICIENT_CONSTANTS[i]})
    calibration = _zero_overheads(base, runtime=target, gpu=gpu,
                                  scales=fitted_scales).with_runtime(
        runtime=target, gpu=gpu, **{k: v for k, v in values.items() if k not in SCALES})
    return _BenchFit(trials=trials, chosen=chosen, shares=shares, values=values,
                     carried=carried, calibration=calibration)


def fit_bench(*, files: list[Path], base: Calibration, fits: RuntimeFits,
              log: Callable[[str], None] = lambda _: None, jobs: int = 1) -> None:
    """Engine overheads (and effective kernel scales where no table exists) per (runtime,
    GPU) from LLM-Inference-Bench, on top of ``base`` and the scales already in ``fits``;
    each group's leave-one-model-out folds on ``jobs`` processes."""
    groups = _screened_groups(files, log=log)
    tables = {key: dict(values) for key, values in fits.values.items()}  # before any bench fit
    for (runtime, gpu), rows in sorted(groups.items()):
        fit_id = f"llm-inference-bench/{runtime}/{gpu}"
        target = _constants_runtime(runtime, rows)
        scales = _kernel_scales(tables, runtime=runtime, gpu=gpu)
        wanted = LIB_FREE.get(runtime, OVERHEADS_ONLY)
        shares: tuple[float, ...] = V1_SHARES if (target != runtime
                               and get_runtime(runtime).paged_attention_v1_above) else (0.0,)
        found = _bench_fit(rows, base=base, target=target, gpu=gpu, scales=scales,
                           wanted=wanted, shares=shares)
        if found is None:
            log(f"runtime {runtime} {gpu}: fewer than 8 priceable rows, not fitted")
            continue
        share, trials, values_out = found.share, found.trials, found.values
        _, _, solution, free, _, implausible = trials[found.chosen].parts
        report_v1: str | None = None
        if len(shares) > 1:
            report_v1 = (f"v1_kv_bandwidth_share {share:g} chosen on the grid "
                         f"{', '.join(f'{v:g}' for v in shares)} (0: not priced; soft-L1 cost "
                         + ", ".join(f"{t.cost:.1f}" for t in trials) + ")")
        report = _latency_report(rows=rows, calibration=found.calibration, fit_id=fit_id,
                                 files=files)
        bound = _at_bound(solution, free) + [
            name for name in values_out if name in SCALES and values_out[name] in SCALE_RANGE]
        if bound:
            report["at_bound"] = sorted(set(bound))
        if report_v1 is not None:
            report.setdefault("notes", []).append(report_v1)
            if share in (shares[1], shares[-1]):
                report["at_bound"] = sorted({*report.get("at_bound", []),
                                             "v1_kv_bandwidth_share"})
        if found.carried:
            report.setdefault("notes", []).append(
                "collective_sync_s held at 0: every row all-reduces, so the step overhead "
                "carries the all-reduce arrival time")
        if implausible:
            report.setdefault("notes", []).append(
                f"{implausible} rows measured faster than 1/{IMPLAUSIBLE:g} of the model's "
                "zero-overhead time left out of the fit")
        # a share no row's price depends on (every trial's design alike) need not be
        # chosen again in each fold: every fold would keep 0
        same = all(np.array_equal(t.x, trials[0].x) for t in trials[1:])
        held = _leave_one_model_out(
            rows, scored=[r for r, _ in _latency(rows, found.calibration)],
            fit=partial(_bench_fit, base=base, target=target, gpu=gpu, scales=scales,
                        wanted=wanted, shares=(0.0,) if same else shares), jobs=jobs)
        if held is not None:
            report["leave_one_model_out"] = {"latency_s": held.as_dict()}
        log(f"runtime {runtime} {gpu}: " + ", ".join(f"{k} {v:.4g}" for k, v in values_out.items())
            + f"; latency MAPE {100 * report['in_sample']['latency_s']['mape']:.1f} % "
              f"on {report['n_points']} rows" + (f"; at a bound: {', '.join(bound)}" if bound
                                                  else ""))
        note = ("effective scale from LLM-Inference-Bench end-to-end latency (decode part)"
                if free[1] else None)
        if target != runtime:
            note = (f"{runtime} releases before {get_runtime(runtime).legacy_overheads_until}"
                    " only (the bench's engine generation)")
        fits.add(runtime=target, gpu=gpu, values=values_out, fit_id=fit_id, report=report,
                 note=note)


@dataclass
class _GroupFit:
    """One run of the bench fit over a group's rows: the design, models, solution, freed
    coefficients, kernel scales and rows left out, and its soft-L1 cost."""

    parts: tuple[np.ndarray, list[str], np.ndarray, Free, dict[str, float], int]
    cost: float

    @property
    def x(self) -> np.ndarray:
        """The design matrix (one row per priced bench row)."""
        return self.parts[0]


def _fit_group(rows: list[BenchRow], *, base: Calibration, target: str, gpu: str,
               scales: dict[str, float], free: Free) -> _GroupFit:
    """The linear bench fit of ``rows`` on ``base`` (kernel scales re-priced where free)."""
    x = np.zeros((0, len(COEFFICIENT_CONSTANTS)))
    models: list[str] = []
    solution = np.zeros(len(COEFFICIENT_CONSTANTS))
    implausible = 0
    for _ in range(ROUNDS if free[0] or free[1] else 1):
        cal = _zero_overheads(base, runtime=target, gpu=gpu, scales=scales)
        priced = [(r, _priced(r, cal, section=target)) for r in rows]
        pairs = [(r, p) for r, p in priced
                 if p is not None and p[0] + p[1] <= IMPLAUSIBLE * r.latency_s]
        implausible = sum(1 for r, p in priced
                          if p is not None and p[0] + p[1] > IMPLAUSIBLE * r.latency_s)
        if len(pairs) < 8:
            break
        x = _design([r for r, _ in pairs], [p for _, p in pairs])
        models = [r.model for r, _ in pairs]
        if not np.any(x[:, 4]):  # no row hands off between stages: nothing to fit
            free = (*free[:4], False, free[5])
        if np.all(x[:, 5]) or not np.any(x[:, 5]):  # all-reduces in all rows or none
            free = (*free[:5], False)
        solution = _solve(x, free=free)
        for i in (0, 1):  # fold a (prefill), b (decode) into the scales and re-price
            for name in COEFFICIENT_CONSTANTS[i] if free[i] else ():
                scales[name] = float(np.clip(scales.get(name, 1.0) / solution[i],
                                             *SCALE_RANGE))
    z = ((x @ solution - 1.0) / ROBUST_SCALE) ** 2 if len(x) else np.zeros(0)
    cost = float(np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))  # least_squares' soft_l1
    return _GroupFit(parts=(x, models, solution, free, scales, implausible), cost=cost)


def _kernel_scales(tables: dict[str, dict[str, float]], *, runtime: str,
                   gpu: str) -> dict[str, float]:
    """The kernel scales (runtime, GPU) is predicted with: each one fitted on its own
    kernel tables (``tables``: the ``<runtime>/<gpu>`` values of :func:`fit_aic_scales`),
    else the nearest relative's that was (as :mod:`energylens.calibration.transfer` lends
    it after the fits), so that the overheads are fitted on the kernel prices the
    predictions use. Scales no GPU of the chain has from tables are left to ``base``."""
    scales: dict[str, float] = {}
    for owner in (gpu, *lending_relatives(gpu)):
        known = tables.get(runtime_key(runtime=runtime, gpu=owner), {})
        for name in SCALES:
            if name in known and name not in scales:
                scales[name] = known[name]
    return scales


def _constants_runtime(runtime: str, rows: list[BenchRow]) -> str:
    """The sections a fit of ``rows`` goes to: ``runtime``'s own, or its ``@legacy`` ones
    when the rows ran a release before its profile's ``legacy_overheads_until``."""
    until = get_runtime(runtime).legacy_overheads_until
    version = rows[0].deployment.runtime_version
    if until is not None and version is not None and release_key(version) < release_key(until):
        return legacy_runtime(runtime)
    return runtime


def _latency(rows: list[BenchRow], calibration: Calibration) -> list[tuple[BenchRow, float]]:
    """The rows the model prices at ``calibration`` and their latency (prefill + decode,
    overheads included), implausibly fast ones (:data:`IMPLAUSIBLE`) left out."""
    out = []
    for row in rows:
        priced = _priced(row, calibration, counts=False)
        if priced is not None and priced[0] + priced[1] <= IMPLAUSIBLE * row.latency_s:
            out.append((row, priced[0] + priced[1]))
    return out


def _latency_report(*, rows: list[BenchRow], calibration: Calibration, fit_id: str,
                    files: list[Path]) -> dict[str, Any]:
    """In-sample error of the model's latency on the rows :func:`_latency` keeps."""
    kept = _latency(rows, calibration)
    measured = np.array([r.latency_s for r, _ in kept])
    predicted = np.array([p for _, p in kept])
    logs = np.log(predicted / measured)
    report: dict[str, Any] = {
        "data": sorted({_rel(p) for p in files}), "n_points": len(kept),
        "rms_log_residual": round(float(np.sqrt(np.mean(logs ** 2))), 5) if kept else None,
        "in_sample": {"latency_s": ErrorStats.of(predicted, measured).as_dict()},
        "fit": fit_id,
    }
    if len(kept) < len(rows):
        report["notes"] = [f"{len(rows) - len(kept)} rows left out: the model cannot price "
                           f"them (infeasible, unknown model) or they were measured faster than "
                           f"1/{IMPLAUSIBLE:g} of its time"]
    return report


def _leave_one_model_out(rows: list[BenchRow], *, scored: list[BenchRow],
                         fit: Callable[[list[BenchRow]], _BenchFit | None], jobs: int = 1,
                         ) -> ErrorStats | None:
    """Held-out latency error: per model, the whole fit (``fit``: rounds, share, overheads)
    run on the other models' ``rows`` (the folds on ``jobs`` forked processes), and this
    model's ``scored`` rows predicted with its calibration as the in-sample figure
    predicts them. A model whose fold has too few rows to fit, or whose row the fold
    cannot price, is not counted."""
    models = sorted({r.model for r in scored})
    if len(models) < 2:
        return None
    folds = map_forked(fit, [[r for r in rows if r.model != model] for model in models],
                       jobs=jobs)
    predicted, measured = [], []
    for model, found in zip(models, folds, strict=True):
        if found is None:
            continue
        for row in (r for r in scored if r.model == model):
            priced = _priced(row, found.calibration, counts=False)
            if priced is not None:
                predicted.append(priced[0] + priced[1])
                measured.append(row.latency_s)
    return ErrorStats.of(np.array(predicted), np.array(measured)) if predicted else None


def _screened_groups(files: list[Path], *, log: Callable[[str], None],
                     ) -> dict[tuple[str, str], list[BenchRow]]:
    """The bench's rows per (runtime, GPU), those faster than any GPU could run screened."""
    groups, skipped = bench_rows(files)
    for key, rows in groups.items():
        groups[key] = [r for r in rows if r.latency_s >= _floor_s(r)]
        if len(groups[key]) < len(rows):
            skipped[f"{SCREEN} on {key[0]}/{key[1]}: faster than reading the weights once per "
                    "output token at peak bandwidth"] = len(rows) - len(groups[key])
    for reason, count in sorted(skipped.items()):
        log(f"llm-inference-bench: {count} rows skipped ({reason})")
    return groups


# --- priors -------------------------------------------------------------------------------


def fill_priors(*, runtimes: dict[str, RuntimeConstants],
                prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """On every GPU the reference runtime (vLLM) has constants for and the runtime runs on,
    each other runtime's overheads that nothing identified (no fit, nothing borrowed) take
    what :meth:`~energylens.runtime.profile.RuntimeProfile.prior_overheads` gives (its
    profile's priors, or its ``prior_overheads_from`` runtime's on that GPU; vLLM's own
    all-reduce where it has one and no measured table), marked ``assumed`` with their
    source. vLLM's own sections are left alone."""
    gpus = sorted({key.split("/", 1)[1] for key in runtimes
                   if key.split("/", 1)[0] == REFERENCE_RUNTIME})
    for runtime in runtime_names():
        if runtime == REFERENCE_RUNTIME:
            continue
        profile = get_runtime(runtime)
        for gpu in gpus:
            if load_gpu(gpu).vendor not in profile.gpu_vendors:
                continue  # it does not run there (RuntimeProfile.check refuses it)
            key = runtime_key(runtime=runtime, gpu=gpu)
            own = prov.setdefault(f"runtimes/{key}", {})
            changes = profile.prior_overheads(gpu=gpu, runtimes=runtimes, known=frozenset(own))
            for name, (value, note) in changes.items():  # 6 significant digits, as fitted values
                own[name] = {"value": float(f"{value:.6g}"), "kind": "assumed", "note": note}
            if changes:
                runtimes[key] = replace(runtimes.get(key, RuntimeConstants()),
                                        **{name: value for name, (value, _) in changes.items()})


def apply_fits(*, fits: RuntimeFits, runtimes: dict[str, RuntimeConstants],
               prov: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Merge fitted values and their provenance into ``calibrate``'s dictionaries."""
    for key, values in fits.values.items():
        runtimes[key] = replace(runtimes.get(key, RuntimeConstants()), **values)
        prov.setdefault(f"runtimes/{key}", {}).update(fits.provenance.get(f"runtimes/{key}", {}))


def fit_runtimes(*, aiconfigurator: list[Path], llm_inference_bench: list[Path],
                 base: Calibration, log: Callable[[str], None] = lambda _: None,
                 jobs: int = 1) -> RuntimeFits:
    """Every (runtime, GPU) fit the two sources allow (kernel scales first); the bench's
    held-out folds on ``jobs`` processes."""
    fits = RuntimeFits()
    if aiconfigurator:
        fit_aic_scales(files=aiconfigurator, fits=fits, log=log)
    if llm_inference_bench:
        fit_bench(files=llm_inference_bench, base=base, fits=fits, log=log, jobs=jobs)
    return fits


def _rel(path: Path) -> str:
    from energylens.calibration.entries import rel_path as rel

    return rel(path)
