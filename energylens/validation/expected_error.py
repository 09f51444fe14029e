"""How far off a prediction is likely to be: the held-out error of comparable predictions.

``energylens calibrate`` refits the serving constants with whole regimes of ML.ENERGY's
measurements left out and predicts them (``energylens.calibration.regimes``): more GPUs
than it was fitted on, FP8 where it saw BF16, long outputs where it saw chat, a model
family it never saw, a GPU with no serving rows of its own. A prediction falls in some of
those held-out regimes; the worst held-out MAPE among them, per metric, is what it should
expect. Those folds exist for the GPUs with serving rows (H100, B200); any other GPU's
serving constants are borrowed from a relative, which the ``gpu-generation`` fold measures
(B200 predicted from H100's constants). A prediction under load (``load`` workload) adds
the TTFT and TPOT errors of its runtime on AIConfigurator's measured serving rows (its GPU's
when measured, else the runtime's over every GPU), which no constant was fitted on. A
static batch, and any prediction on a GPU without regime folds, adds the end-to-end latency
error of its runtime's static batches on its GPU in LLM-Inference-Bench, where the bench
ran them (held out by model where calibrate fitted the runtime there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from energylens.calibration.file import calibration_fits
from energylens.cost.constants import Calibration
from energylens.deployment import Deployment
from energylens.hardware import GPU
from energylens.model.config import ModelConfig
from energylens.workloads import Workload
from energylens.yamlfile import safe_load

#: Key prefix of the regime folds in a calibration file's ``fits`` section.
FOLDS_PREFIX = "regimes/mlenergy/"
#: Fold metric -> the prediction field it validates (ML.ENERGY's median inter-token
#: latency is compared with the predicted TPOT).
METRICS = {"energy_per_token_joules": "energy_per_output_token_j", "median_itl_ms": "tpot_s"}
#: Weight precisions of the precision fold's training side ("fit BF16"): 16-bit weights
#: (``energylens.calibration.regimes`` splits its rows by this set).
SIXTEEN_BIT = frozenset({"bf16", "bfloat16", "fp16", "float16"})
#: The task fold fits on ML.ENERGY's chat rows (473-token prompts, read from its KV-limited runs; mean outputs
#: 388-1,464 tokens, measured) and predicts reasoning (outputs of 1,560-11,861) and
#: fill-in-the-middle (2,048-token prompts): a workload beyond chat's lengths falls in it.
LONG_OUTPUT_TOKENS = 1_500
LONG_PROMPT_TOKENS = 1_024
FAMILY_FOLDS = {"dense": "family: fit MoE, predict dense",
                "moe": "family: fit dense, predict MoE",
                "hybrid": "family: fit transformers, predict hybrid Mamba-2"}
GPU_COUNT_FOLD = "gpu-count: fit 1-2 GPUs, predict 4-8"
PRECISION_FOLD = "precision: fit BF16, predict FP8/MXFP4"
TASK_FOLD = "task: fit chat, predict reasoning/FIM"
GENERATION_REGIME = "gpu-generation"
#: Key prefix of calibrate's LLM-Inference-Bench fits (static batches per runtime and GPU),
#: and the field their end-to-end latency error is reported as.
BENCH_PREFIX = "llm-inference-bench/"
STATIC_BATCH_FIELD = "static_batch_latency_s"
#: TTFT and TPOT under load, per (runtime, GPU), measured against AIConfigurator's serving
#: rows (written by ``benchmarks/validate_load_aic.py --write-accuracy``).
LOAD_ACCURACY = "accuracy/aiconfigurator_load.yaml"


@dataclass(frozen=True, kw_only=True)
class HeldOutError:
    """The held-out MAPE (a share) of one predicted field in the fold that bounds it."""

    field: str
    mape: float
    fold: str
    rows: int


@dataclass(frozen=True, kw_only=True)
class ExpectedError:
    """The worst held-out error per field over the folds a prediction falls in."""

    errors: tuple[HeldOutError, ...]
    folds: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON form: per field its MAPE (a share), fold and row count; the folds looked at."""
        return {**{e.field: {"mape": e.mape, "fold": e.fold, "rows": e.rows}
                   for e in self.errors},
                "folds": list(self.folds), "notes": list(self.notes)}

    def line(self) -> str:
        """One line for the table view."""
        names = {"energy_per_output_token_j": "energy per output token", "tpot_s": "TPOT",
                 "ttft_s": "TTFT", STATIC_BATCH_FIELD: "static-batch latency"}
        parts = ", ".join(f"{names[e.field]} {100 * e.mape:.1f} %" for e in self.errors)
        worst = sorted({e.fold for e in self.errors})
        docs = "docs/accuracy.md, docs/load.md" if any(
            e.field == "ttft_s" for e in self.errors) else "docs/accuracy.md"
        text = (f"expected error (held-out MAPE of comparable predictions): {parts} "
                f"(worst fold: {'; '.join(worst)}; {docs})")
        return " ".join([text, *self.notes])


def expected_error(*, model: ModelConfig, gpu: GPU, deployment: Deployment, workload: Workload,
                   calibration: Calibration, kv_limited: bool = False,
                   disaggregated: bool = False) -> ExpectedError | None:
    """The held-out error a prediction of ``model`` on ``gpu`` should expect, from the
    regime folds in ``calibration``'s file; None where the file has none (built-in
    defaults, an overlay, a file written without them). ``kv_limited``: the prediction's
    KV cache decided how many requests run (a load run that queued or preempted them), so
    its TTFT and TPOT carry the error of the measured rows the KV cache decided.
    ``disaggregated``: a load served on prefill and decode pools, which carries the error
    of the measured disaggregated rows instead."""
    fits = calibration_fits(calibration)
    by_gpu = {key[len(FOLDS_PREFIX):]: entry for key, entry in fits.items()
              if key.startswith(FOLDS_PREFIX) and isinstance(entry, dict)}
    if not by_gpu:
        return None
    if gpu.name in by_gpu:
        folds = {f"{gpu.name} {name}": by_gpu[gpu.name].get(name)
                 for name in _regimes(model=model, deployment=deployment, workload=workload)}
    else:  # serving constants borrowed from a relative: as the gpu-generation fold did
        folds = {f"{name_gpu} {name}": entry for name_gpu, entries in sorted(by_gpu.items())
                 for name, entry in entries.items()
                 if isinstance(entry, dict) and entry.get("regime") == GENERATION_REGIME}
    errors = [worst for metric, field in METRICS.items()
              if (worst := _worst(folds=folds, metric=metric, field=field)) is not None]
    looked_at = tuple(folds)
    if workload.kind == "batch" or gpu.name not in by_gpu:
        bench = _bench_error(fits=fits, runtime=deployment.runtime, gpu=gpu.name)
        if bench is None and gpu.engines_from is not None:  # its engines' constants' source
            bench = _bench_error(fits=fits, runtime=deployment.runtime, gpu=gpu.engines_from)
        if bench is not None:
            errors.append(bench)
            looked_at += (bench.fold,)
    if workload.kind == "load":
        errors = _with_load(errors, runtime=deployment.runtime, gpu=gpu.name,
                            kv_limited=kv_limited, disaggregated=disaggregated)
        looked_at += tuple(sorted({e.fold for e in errors} - set(folds)))
    if not errors:
        return None
    notes: list[str] = []
    if deployment.runtime != "vllm" and not any(e.field == "ttft_s" for e in errors):
        notes.append(f"The folds are vLLM serving rows; {deployment.runtime}'s engine "
                     f"constants are {_checked_where(fits=fits, runtime=deployment.runtime)}.")
    return ExpectedError(errors=tuple(errors), folds=looked_at, notes=tuple(notes))


def _checked_where(*, fits: dict[str, Any], runtime: str) -> str:
    """Where ``runtime``'s own constants meet measurements: AIConfigurator's serving rows
    under load, LLM-Inference-Bench's static batches (on which GPUs), or nowhere."""
    places = []
    if runtime in load_accuracy_table().get("runtimes", {}):
        places.append("checked under load in docs/load.md")
    prefix = f"{BENCH_PREFIX}{runtime}/"
    gpus = sorted(key[len(prefix):] for key in fits if key.startswith(prefix))
    if gpus:
        places.append(f"fitted and checked on LLM-Inference-Bench static batches on "
                      f"{', '.join(gpus)} (docs/k-shot.md)")
    return " and ".join(places) or "checked against no measurement (docs/runtimes.md)"


def _regimes(*, model: ModelConfig, deployment: Deployment, workload: Workload) -> list[str]:
    """The folds whose held-out side this prediction belongs to."""
    kind = "hybrid" if model.hybrid is not None else "moe" if model.moe is not None else "dense"
    names = [FAMILY_FOLDS[kind]]
    if deployment.total_gpus / deployment.replicas >= 4:
        names.append(GPU_COUNT_FOLD)
    dtype = (deployment.weight_dtype or model.weight_dtype or "bf16").lower()
    if dtype not in SIXTEEN_BIT:
        names.append(PRECISION_FOLD)
    if (workload.output_tokens > LONG_OUTPUT_TOKENS
            or workload.input_tokens > LONG_PROMPT_TOKENS):
        names.append(TASK_FOLD)
    return names


def _bench_error(*, fits: dict[str, Any], runtime: str, gpu: str) -> HeldOutError | None:
    """End-to-end latency error of ``runtime``'s static batches on ``gpu`` in
    LLM-Inference-Bench (``calibrate``'s ``llm-inference-bench/<runtime>/<gpu>`` entry: held
    out by model where the fit could hold a model out, else in-sample)."""
    entry = fits.get(f"{BENCH_PREFIX}{runtime}/{gpu}")
    if not isinstance(entry, dict):
        return None
    held = entry.get("leave_one_model_out", {}).get("latency_s")
    if isinstance(held, dict):
        found, how = held, "held out by model"
    else:
        found, how = entry.get("in_sample", {}).get("latency_s"), "in-sample"
    if not isinstance(found, dict) or found.get("mape") is None:
        return None
    return HeldOutError(field=STATIC_BATCH_FIELD, mape=float(found["mape"]),
                        rows=int(found.get("n", 0)),
                        fold=f"LLM-Inference-Bench static batches ({runtime} on {gpu}, {how})")


@cache
def load_accuracy_table() -> dict[str, Any]:
    """The shipped table of TTFT/TPOT errors under load (empty if there is none)."""
    found = resources.files("energylens.data").joinpath(LOAD_ACCURACY)
    data = safe_load(found.read_text()) if found.is_file() else None
    return data if isinstance(data, dict) else {}


def _with_load(errors: list[HeldOutError], *, runtime: str, gpu: str, kv_limited: bool,
               disaggregated: bool = False) -> list[HeldOutError]:
    """``errors`` with the TTFT error under load and the TPOT error the worse of the fold's
    and the one under load, from the runtime's rows on ``gpu`` (or on every GPU), or from
    the rows the KV cache decided when ``kv_limited`` (every runtime and GPU); from the
    disaggregated rows when ``disaggregated`` (the runtime's on ``gpu``, else all of them)."""
    table = load_accuracy_table()
    rows_of = "AIConfigurator serving rows under load"
    if disaggregated:
        block = table.get("disaggregated")
        table = block if isinstance(block, dict) else {}
        rows_of, kv_limited = "AIConfigurator's disaggregated serving rows", False
    group = next((g for g in table.get("groups", [])
                  if g.get("runtime") == runtime and g.get("gpu") == gpu), None)
    where = f"{runtime} on {gpu}"
    if group is None:
        group, where = table.get("runtimes", {}).get(runtime), f"{runtime}, every GPU measured"
    if group is None and disaggregated:
        group, where = table.get("all"), "every engine and GPU measured"
    if kv_limited and isinstance(table.get("kv_limited"), dict):
        group, where = table["kv_limited"], "the rows a full KV cache decided, every engine and GPU"
    if not isinstance(group, dict):
        return errors
    basis = f"{rows_of} ({where})"
    rows = int(group.get("rows", 0))
    out = [e for e in errors if e.field != "tpot_s"]
    out.append(HeldOutError(field="ttft_s", mape=float(group["ttft_s"]), fold=basis, rows=rows))
    under_load = HeldOutError(field="tpot_s", mape=float(group["tpot_s"]), fold=basis, rows=rows)
    fold = next((e for e in errors if e.field == "tpot_s"), None)
    out.append(under_load if fold is None or under_load.mape >= fold.mape else fold)
    return out


def _worst(*, folds: dict[str, Any], metric: str, field: str) -> HeldOutError | None:
    """The fold with the largest held-out MAPE of ``metric``, reported as ``field``."""
    found = [HeldOutError(field=field, mape=float(entry["errors"][metric]["mape"]), fold=name,
                          rows=int(entry["errors"][metric].get("n", 0)))
             for name, entry in folds.items()
             if isinstance(entry, dict)
             and isinstance(entry.get("errors", {}).get(metric), dict)
             and entry["errors"][metric].get("mape") is not None
             and math.isfinite(float(entry["errors"][metric]["mape"]))]  # NaN: no figure
    return max(found, key=lambda e: e.mape, default=None)


__all__ = ["ExpectedError", "HeldOutError", "expected_error", "load_accuracy_table"]
