"""Render ``docs/accuracy.md`` and parity plots from an :class:`AccuracyReport`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from energylens.calibration.regimes import distinct_refits, metric_of
from energylens.measurements.bench_screen import SCREEN
from energylens.measurements.mlenergy import TASK_INPUT_TOKENS
from energylens.measurements.vidur_ops import GEMM_OPS
from energylens.validation.accuracy import (
    FITTED,
    REGIME_GPUS,
    REGIME_LIMIT,
    REGIME_METRICS,
    TARGETS,
    AccuracyReport,
    Dataset,
    Target,
    regime_fold_keys,
)

COMMAND = "energylens validate --all --write-docs docs/"
#: Fit variable -> the constant it sets, where they differ (``fit_serving.materialise``).
FIT_VARIABLES = {"tensor_power_share": "energy_per_tensor_flop_j"}
REGIME_FOLD_METRICS = ("energy_per_token_joules", "median_itl_ms", "avg_power_watts",
                       "output_throughput_tokens_per_sec")
PLOTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    # dataset -> (file name, metrics, axis label)
    "vidur-mlp-H100-SXM": ("parity_vidur_gemm_h100.png", GEMM_OPS, "GEMM kernel time (ms)"),
    "vidur-mlp-A100-80GB-SXM": ("parity_vidur_gemm_a100.png", GEMM_OPS, "GEMM kernel time (ms)"),
    "vidur-network-h100_dgx": ("parity_allreduce_h100_dgx.png", ("all_reduce",),
                               "all-reduce time (ms)"),
    "vidur-network-a100_dgx": ("parity_allreduce_a100_dgx.png", ("all_reduce",),
                               "all-reduce time (ms)"),
    "mlenergy-H100": ("parity_mlenergy_h100.png",
                      ("energy_per_token_joules", "median_itl_ms"), "measured vs predicted"),
    "mlenergy-B200": ("parity_mlenergy_b200.png",
                      ("energy_per_token_joules", "median_itl_ms"), "measured vs predicted"),
}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _parity(dataset: Dataset, metrics: tuple[str, ...], label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [m for m in metrics if any(m in r.predicted for r in dataset.rows)]
    if not panels:
        return
    split = dataset.name.startswith("mlenergy")
    fig, axes = plt.subplots(1, len(panels) if split else 1,
                             figsize=(5.0 * (len(panels) if split else 1), 4.6), squeeze=False)
    span: list[float] = []
    for i, metric in enumerate(panels):
        ax = axes[0][i if split else 0]
        x = np.array([r.measured[metric] for r in dataset.rows
                      if r.error is None and metric in r.predicted])
        y = np.array([r.predicted[metric] for r in dataset.rows
                      if r.error is None and metric in r.predicted])
        ax.scatter(x, y, s=6 if x.size > 300 else 14, alpha=0.5, label=metric)
        span = ([] if split else span) + [float(np.min(x)), float(np.min(y)),
                                          float(np.max(x)), float(np.max(y))]
        if split or i == len(panels) - 1:
            lo, hi = min(span) / 1.3, max(span) * 1.3
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            for f in (0.9, 1.1):
                ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_xlabel(f"measured {metric if split else label}")
            ax.set_ylabel(f"predicted {metric if split else label}")
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{dataset.title} (in-sample; dotted: ±10 %)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fit_table(report: AccuracyReport, fit: str, metrics: list[str], held_key: str) -> list[str]:
    node: dict[str, Any] = report.fits.get(fit, {})
    held = node.get(held_key, {})
    lines = ["| metric | in-sample MAPE (fit) | held-out MAPE | rows |", "|---|---|---|---|"]
    for m in metrics:
        if m in node.get("in_sample", {}):
            ins = node["in_sample"][m]
            out = held.get(m, {}).get("mape")
            lines.append(f"| {m} | {_pct(ins['mape'])} | {_pct(out)} | {ins['n']} |")
    return lines


def _measured_fit(node: dict[str, Any]) -> list[str]:
    """A fit on this project's own measurements: its values, what the calibration took."""
    applied = node.get("applied")
    taken = (", ".join(applied) or "none") if isinstance(applied, list) else \
        ("all" if applied else "none (reported)")
    lines = [f"Measured on {len(node.get('data', []))} file(s) of this project; applied: {taken}.",
             "", "| constant | measured | calibration / measured |", "|---|---|---|"]
    ratios = {**node.get("fitted_over_measured", {}), **node.get("calibrated_over_measured", {})}
    for name, value in node["measured"].items():
        ratio = ratios.get(name)
        lines.append(f"| {name} | {value:.4g} | {'-' if ratio is None else f'{ratio:.3g}'} |")
    held = node.get("held_out_kernels")
    if held:
        lines += ["", f"Held-out kernels' board power: {_pct(held['power_mape'])} MAPE "
                  f"({held['n']} kernels)."]
    return [*lines, ""]


def _regime_rows(report: AccuracyReport) -> list[str]:
    """Every leave-one-regime-out fold, worst first (by its worse of energy and ITL)."""
    rows = []
    for gpu in REGIME_GPUS:
        folds = report.fits.get(f"regimes/mlenergy/{gpu}", {})
        for key in regime_fold_keys(gpu):
            entry = folds.get(key, {})
            errs = {m: metric_of(entry, m) for m in REGIME_FOLD_METRICS}
            worst = max((v for m, v in errs.items() if m in dict(REGIME_METRICS) and v is not None),
                        default=None)
            rows.append((worst, gpu, key, entry, errs))
    rows.sort(key=lambda r: -1.0 if r[0] is None else r[0], reverse=True)
    lines = ["| fold | GPU | rows fitted / predicted | energy per token | inter-token latency "
             "| average power | throughput |", "|---|---|---|---|---|---|---|"]
    for _, gpu, key, entry, errs in rows:
        lines.append(f"| {key} | {gpu} | {entry.get('train_rows', '–')} / "
                     f"{entry.get('test_rows', '–')} | "
                     + " | ".join(_pct(errs[m]) for m in REGIME_FOLD_METRICS) + " |")
    return lines


def _constants(report: AccuracyReport) -> list[str]:
    """How many constants the data fits, and how far each serving constant moves when a
    regime is left out."""
    counts = {kind: 0 for kind in ("fitted", "measured", "assumed", "default")}
    for section in report.constants.values():
        for entry in section.values():
            counts[entry["kind"]] = counts.get(entry["kind"], 0) + 1
    lines = [f"The shipped calibration holds {counts['fitted']} fitted constants, "
             f"{counts['measured']} measured by this project (`docs/power.md`), "
             f"{counts['assumed']} borrowed (`assumed`) and {counts['default']} built-in "
             "defaults (not identified by any data), over every GPU, link and runtime.", ""]
    from energylens.calibration.run import unidentified_constants, unidentified_reasons

    unidentified = unidentified_constants(report.fits)
    lines += ["**Not identified**: fitted constants that ended at a bound of their range in a "
              "fit on all the data (`energylens calibrate` exits with an error on them unless "
              "`--allow-unidentified`; the shipped file was written with it), and why each "
              "does (`energylens/data/accuracy/unidentified.yaml`; a test fails on one left "
              "unexplained):" if unidentified else "**Not identified**: none (no fitted "
              "constant ended at a bound of its range in a fit on all the data).", ""]
    if unidentified:
        why = unidentified_reasons()
        lines += ["| constant | bound | why | see |", "|---|---|---|---|"]
        lines += [f"| `{name}` | {why.get(name, {}).get('bound', '–')} | "
                  f"{why.get(name, {}).get('why', 'not explained')} | "
                  f"{why.get(name, {}).get('see', '–')} |" for name in unidentified]
        lines.append("")
    for gpu in REGIME_GPUS:
        spread = report.fits.get(f"mlenergy/{gpu}", {}).get("spread_across_regime_folds", {})
        if not spread:
            continue
        full = report.fits.get(f"mlenergy/{gpu}", {})
        # refitted folds (not the borrowed generation fold), none that repeats the full fit
        fits = [full, *distinct_refits(folds=report.fits.get(f"regimes/mlenergy/{gpu}", {}),
                                       full_rows=full.get("n_points")).values()]
        bound = {name: sum(1 for fit in fits if name in {
            FIT_VARIABLES.get(b, b) for b in fit.get("at_bound", [])}) for name in spread}
        lines += [f"Serving constants of {gpu}: (max - min) over the full fit and the regime "
                  "folds, as a share of the largest value (100 %: some fold drives it to zero); "
                  "more than 30 % means one regime alone identifies the constant, and one that "
                  "ends at a bound of its range is not identified at all. A fold that trains "
                  "on exactly the full fit's rows (fit transformers, predict hybrid: no fit "
                  "sees a hybrid row) repeats the full fit and is not counted again.", "",
                  f"| constant | spread | flagged | at a bound in (of {len(fits)} distinct "
                  "fits) |",
                  "|---|---|---|---|"]
        for name, value in sorted(spread.items(), key=lambda x: -x[1]):
            flagged = "**yes**" if value > 0.30 or bound[name] else "no"
            lines.append(f"| `{name}` | {_pct(value)} | {flagged} | {bound[name]} |")
        lines.append("")
    return lines


def _target_rows(report: AccuracyReport) -> list[str]:
    mlenergy = report.datasets.get("mlenergy-H100")
    fitted = None if mlenergy is None else mlenergy.summary.get(
        f"energy_per_token_joules[{FITTED}]")
    share = "" if mlenergy is None or fitted is None else \
        f" ({fitted.n} of the {mlenergy.n_rows} H100 rows)"
    lines = ["Both columns of a target score the same rows: the ML.ENERGY targets the rows the "
             f"serving fit uses{share}: no hybrid, host-bound or data-parallel-attention run, "
             "which are predicted but fitted on by nothing (see 'Rows predicted but never "
             "fitted'); the Vidur all-reduce targets the DGX rows within one node (2-8 GPUs over "
             "NVSwitch), the rows of Vidur's NVSwitch link fit, which leaves one group size out "
             "(a100_dgx's 16-GPU rows cross InfiniBand: another fit, in the dataset table); "
             "its in-sample column is the shipped constants on those rows, which since "
             "2026-12-01 are AIConfigurator's NCCL tables' (a cross-source check, not in "
             "sample: docs/gpus.md). The AIConfigurator NCCL targets score each table's "
             "all-reduce rows, its fit leaving one group size out.", "",
             "| target | limit | in-sample | held out | judged on | meets |",
             "|---|---|---|---|---|---|"]
    for t in TARGETS:
        held, now, gate = report.leave_out(t), report.in_sample(t), report.gating(t)
        judged = "held out" if held is not None else "in-sample"
        meets = "?" if gate is None else ("yes" if gate <= t.limit else "**no**")
        shown = _pct(now) + ("" if t.shipped or now is None else " (cross-source)")
        lines.append(f"| {t.name} | {100 * t.limit:.0f} % | {shown} | {_pct(held)} | "
                     f"{judged} | {meets} |")
    return lines


def _dataset_rows(report: AccuracyReport) -> list[str]:
    lines = ["| dataset | metric | MAPE | median APE | predicted rows | rows not predicted |",
             "|---|---|---|---|---|---|"]
    for d in report.datasets.values():
        for metric, err in d.summary.items():
            if "[" in metric:
                continue
            lines.append(f"| {d.title} | {metric} | {_pct(err.mape)} | {_pct(err.median_ape)} | "
                         f"{err.n} | {d.n_errors} of {d.n_rows} |")
    return lines


def _reasons(report: AccuracyReport) -> list[str]:
    lines = []
    for d in report.datasets.values():
        reasons: dict[str, int] = {}
        for r in d.rows:
            if r.error:
                key = r.error if len(r.error) < 140 else r.error[:137] + "..."
                reasons[key] = reasons.get(key, 0) + 1
        for why, n in sorted(reasons.items(), key=lambda x: -x[1]):
            lines.append(f"- {d.title}: {n} row(s): {why}")
        for metric, why in d.unpredicted.items():
            lines.append(f"- {d.title}: metric `{metric}` not predicted: {why}")
    return lines or ["None: every row of every file `validate --all` reads predicts every measured metric."]


#: Model/deployments whose Wilkins-form regression the doc reports (batch 32, as Wilkins).
REGRESSIONS: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("llama-3.1-8b", "H100", {"tp": 1}),
    ("llama-3.1-70b", "H100", {"tp": 4}),
    ("qwen3-30b-a3b", "H100", {"ep": 4, "num_gpus": 4}),
    ("llama-2-70b", "A100-80GB", {"tp": 8}),
    ("mixtral-8x7b", "A100-80GB", {"tp": 4}),
)


def _regressions() -> list[str]:
    from energylens.deployment import Deployment
    from energylens.validation.regression import fit_energy_regression

    lines = ["| model | GPUs | a0 (J/input token) | a1 (J/output token) | a2 (J/token^2) | R^2 |",
             "|---|---|---|---|---|---|"]
    for model, gpu, layout in REGRESSIONS:
        deployment = Deployment(num_gpus=layout.get("num_gpus"), tp=layout.get("tp", 1),
                                ep=layout.get("ep", 1))
        fit = fit_energy_regression(model=model, gpu=gpu, deployment=deployment, batch=32)
        lines.append(f"| {model} | {fit.deployment['num_gpus']} x {gpu} {layout} | {fit.a0:.4g} | "
                     f"{fit.a1:.4g} | {fit.a2:.3g} | {fit.r2:.4f} |")
    return lines


#: ML.ENERGY row groups predicted but never fitted, and why (energylens/calibration/fit_serving.py).
UNFITTED_GROUPS = {
    "hybrid": "hybrid Mamba-2 models (kept out of every fit: the family fold predicts them unseen)",
    "host-bound": "runs the host paced (energylens/measurements/mlenergy_screen.py)",
    "dp-attention": "vLLM data-parallel attention + EP (throughput flat in the batch)",
}


def _unfitted_groups(report: AccuracyReport) -> list[str]:
    """MAPE of the ML.ENERGY rows no fit uses, per GPU and group."""
    out = ["| GPU | rows | why not fitted | n | energy per token | inter-token latency |",
           "|---|---|---|---|---|---|"]
    for name, dataset in sorted(report.datasets.items()):
        if not name.startswith("mlenergy-"):
            continue
        for group, why in UNFITTED_GROUPS.items():
            energy = dataset.summary.get(f"energy_per_token_joules[{group}]")
            itl = dataset.summary.get(f"median_itl_ms[{group}]")
            if energy is None or itl is None:
                continue
            out.append(f"| {name.removeprefix('mlenergy-')} | {group} | {why} | {energy.n} | "
                       f"{_pct(energy.mape)} | {_pct(itl.mape)} |")
    return out


def _screened(report: AccuracyReport) -> list[str]:
    """Per LLM-Inference-Bench (framework, GPU): screened rows and the latency MAPE with them."""
    out = ["| framework on GPU | screened rows | latency MAPE without | with them |",
           "|---|---|---|---|"]
    for dataset in report.datasets.values():
        screened = dataset.summary.get(f"latency_s[{SCREEN}]")
        if screened is None:
            continue
        without = dataset.summary.get("latency_s")
        with_them = dataset.summary[f"latency_s[with {SCREEN}]"]
        out.append(f"| {dataset.title} | {screened.n} of {with_them.n} | "
                   f"{_pct(without.mape) if without else '–'} | {_pct(with_them.mape)} |")
    return out


def _input_sensitivity(report: AccuracyReport) -> list[str]:
    """ML.ENERGY H100 MAPE when each task's assumed input length is halved or doubled."""
    import numpy as np

    from energylens.measurements.mlenergy import UnsupportedRow, predict_row

    dataset = report.datasets.get("mlenergy-H100")
    if dataset is None:
        return []
    lines = ["| task | input tokens | energy/token MAPE | ITL MAPE | rows predicted |",
             "|---|---|---|---|---|"]
    for task, base in TASK_INPUT_TOKENS.items():
        rows = [r for r in dataset.rows if r.input["task"] == task]
        if not rows:
            continue
        for factor in (0.5, 1.0, 2.0):
            tasks = {**TASK_INPUT_TOKENS, task: base * factor}
            e, i = [], []
            for r in rows:
                try:
                    p = predict_row(r.input, input_tokens=tasks)
                except UnsupportedRow:
                    continue
                e.append(abs(p["energy_per_token_joules"] / r.measured["energy_per_token_joules"] - 1))
                i.append(abs(p["median_itl_ms"] / r.measured["median_itl_ms"] - 1))
            mark = " (used)" if factor == 1.0 else ""
            lines.append(f"| {task} | {base * factor:g}{mark} | {_pct(float(np.mean(e)))} | "
                         f"{_pct(float(np.mean(i)))} | {len(e)} of {len(rows)} |")
    return lines


#: Targets of TTFT and TPOT under load (issue 12), as MAPE shares.
LOAD_TARGETS = {"ttft_s": 0.15, "tpot_s": 0.08}


def _load_rows() -> list[str]:
    """The load kind's TTFT/TPOT MAPE per (engine, GPU) from the shipped table
    (``benchmarks/validate_load_aic.py --write-accuracy``; simulating the 1,806 rows takes
    minutes, so ``validate --all`` reads the table instead of rerunning it)."""
    from energylens.validation.expected_error import LOAD_ACCURACY, load_accuracy_table

    table = load_accuracy_table()
    if not table.get("groups"):
        return [f"No table (`energylens/data/{LOAD_ACCURACY}`): run `python "
                "benchmarks/validate_load_aic.py --write-accuracy`."]

    def met(value: float, metric: str) -> str:
        return "yes" if value <= LOAD_TARGETS[metric] else "no"

    what = str(table.get("what", "")).replace(" (a share)", "")
    lines = [f"{what}. Written {table.get('date', '?')} by "
             f"`{table.get('generated_by', '?')}` from `{table.get('source', '?')}` "
             f"(`energylens/data/{LOAD_ACCURACY}`; details and the diagnosis of the misses in "
             f"`docs/load.md`). Targets: TTFT <= {100 * LOAD_TARGETS['ttft_s']:.0f} %, TPOT <= "
             f"{100 * LOAD_TARGETS['tpot_s']:.0f} % MAPE.", "",
             "| engine | GPU | rows | TTFT MAPE | met | TPOT MAPE | met |", "|---|---|---|---|---|---|---|"]
    rows = [(g["runtime"], g["gpu"], g) for g in table["groups"]]
    rows += [(engine, "all", g) for engine, g in table.get("runtimes", {}).items()]
    if isinstance(table.get("all"), dict):
        rows.append(("all", "all", table["all"]))
    if isinstance(table.get("kv_limited"), dict):  # a subset of the rows above
        rows.append(("rows a full KV cache decided in the model", "all", table["kv_limited"]))
    if isinstance(table.get("wip"), dict):  # likewise
        rows.append(("rows of work-in-progress runs (wip=True)", "all", table["wip"]))
    if isinstance(table.get("dynamo"), dict):  # likewise
        rows.append(("rows served through NVIDIA Dynamo", "all", table["dynamo"]))
    for engine, gpu, g in rows:
        lines.append(f"| {engine} | {gpu} | {g['rows']} | {_pct(g['ttft_s'])} | "
                     f"{met(g['ttft_s'], 'ttft_s')} | {_pct(g['tpot_s'])} | "
                     f"{met(g['tpot_s'], 'tpot_s')} |")
    if isinstance(table.get("kv_limited"), dict):
        lines += ["", "The rows a full KV cache decided are those whose predicted run queued or "
                  "preempted requests for want of KV space (their KV precision is not recorded; "
                  "docs/load.md); `energylens predict` quotes them for a load run of that kind. "
                  "The work-in-progress rows are the runs AIConfigurator's file marks wip=True, "
                  "the Dynamo rows those whose provenance names a Dynamo release (the engine "
                  "behind Dynamo's front end and router, not its own server): both kept in every "
                  "figure above, shown apart."]
    pools = table.get("disaggregated")
    if isinstance(pools, dict) and isinstance(pools.get("all"), dict):
        lines += ["", f"Disaggregated prefill and decode: "
                  f"{str(pools.get('what', '')).replace(' (a share)', '')} "
                  f"(`{pools.get('source', '?')}`), each row predicted on its two pools; the "
                  "diagnosis in docs/load.md.", "",
                  "| engine | GPU | rows | TTFT MAPE | met | TPOT MAPE | met |",
                  "|---|---|---|---|---|---|---|"]
        for engine, gpu, g in [*((g["runtime"], g["gpu"], g) for g in pools.get("groups", [])),
                               ("all", "all", pools["all"])]:
            lines.append(f"| {engine} | {gpu} | {g['rows']} | {_pct(g['ttft_s'])} | "
                         f"{met(g['ttft_s'], 'ttft_s')} | {_pct(g['tpot_s'])} | "
                         f"{met(g['tpot_s'], 'tpot_s')} |")
    return lines


def render(report: AccuracyReport, plots: list[str]) -> str:
    """The Markdown text of ``accuracy.md``."""
    out = [
        "# Accuracy",
        "",
        f"Generated by `{COMMAND}` (calibration: `{report.calibration_source}`); do not edit by "
        "hand. Regenerate after `energylens calibrate --output energylens/data/calibration.yaml`.",
        "`tests/test_accuracy_gate.py` fails when a number below regresses past its target.",
        "",
        "**In-sample** = every row predicted now with the shipped calibration, which was fitted "
        "on these same files. **Held out** = computed by `energylens calibrate`: each group is "
        "left out in turn, the constants are refitted on the rest and the left-out group is "
        "predicted (leave one *model* out for Vidur per-op and ML.ENERGY; leave one *group "
        "size* out for NVSwitch all-reduce). A target is judged on the held-out number where "
        "the data allows one, else in-sample.",
        "",
        "## Leave-one-regime-out folds (worst first)",
        "",
        "Each fold holds out a whole regime of the ML.ENERGY rows of one GPU, refits every "
        "serving constant from its initial value on the rest, and predicts the held-out rows "
        "(`energylens/calibration/regimes.py`); the gpu-generation fold predicts a GPU with "
        "no constant fitted on its serving rows: power and engine constants borrowed from its "
        "declared relative, only what its kernel tables measure kept. Target: every "
        f"fold <= {100 * REGIME_LIMIT:.0f} % on energy per token and inter-token latency.",
        "",
        *_regime_rows(report),
        "",
        "`energylens predict` states the error to expect of each prediction from these folds: "
        "per metric the worst fold whose held-out side the prediction falls in (its model "
        "family's always; gpu-count at 4 or more GPUs per replica; precision below 16-bit "
        "weights; task for outputs over 1,500 or prompts over 1,024 tokens; gpu-generation "
        "for a GPU with no serving rows of its own; static batches, and GPUs without folds, "
        "add their runtime's LLM-Inference-Bench latency error on that GPU; a load adds "
        "TTFT and TPOT on AIConfigurator's rows), and study reports carry it per Pareto "
        "point (`energylens/validation/expected_error.py`).",
        "",
        "Which held-out rows carry each fold over the target, what it would take to meet it "
        "and why that is not done: [regime-folds.md](regime-folds.md) (`python "
        "benchmarks/regime_fold_rows.py` prints each fold's rows per model, GPU count, "
        "precision and task with their signed errors).",
        "",
        "## Serving under load: AIConfigurator's measured rows, per engine and GPU",
        "",
        *_load_rows(),
        "",
        "## Fitted constants",
        "",
        *_constants(report),
        "## Targets",
        "",
        *_target_rows(report),
        "",
        "## Every dataset (in-sample)",
        "",
        *_dataset_rows(report),
        "",
        "## Held-out errors per fit",
        "",
    ]
    for fit in sorted(f for f in report.fits if not f.startswith("regimes/")):
        node = report.fits[fit]
        held_key = next((k for k in node if k.startswith("leave_one") and not k.endswith("group")),
                        None)
        metrics = sorted(node.get("in_sample", {}))
        out += [f"### `{fit}`", ""]
        if "measured" in node:  # this project's own measurements (fit_power, fit_memory)
            out += _measured_fit(node)
            continue
        out += [f"Fitted on {len(node.get('data', []))} file(s), "
                f"{node.get('n_points', 0)} points; rms log residual "
                f"{node.get('rms_log_residual', float('nan')):.3f}"
                + (f"; at a bound: {', '.join(node['at_bound'])}" if node.get("at_bound") else "")
                + ".", ""]
        out += _fit_table(report, fit, metrics, held_key or "")
        groups = node.get("leave_one_model_out_by_group", {})
        if groups:
            out += ["", "| group | metric | in-sample | held out (leave one model out) |",
                    "|---|---|---|---|"]
            ins = node.get("in_sample_by_group", {})
            for g, ms in groups.items():
                for m in ("energy_per_token_joules", "median_itl_ms"):
                    if m in ms:
                        out.append(f"| {g} | {m} | {_pct(ins.get(g, {}).get(m, {}).get('mape'))} "
                                   f"| {_pct(ms[m]['mape'])} |")
        out.append("")
    out += [
        "## Rows predicted but never fitted",
        "",
        "Every ML.ENERGY row is predicted; these groups are left out of every fit and of the "
        "regime folds (the hybrid rows have their own family fold) and are in the every-dataset "
        "figures above, not in the targets. Shipped calibration:",
        "",
        *_unfitted_groups(report),
        "",
        "LLM-Inference-Bench rows measured faster than reading the weights once per output "
        "token at peak memory bandwidth (`energylens/measurements/bench_screen.py`) are "
        "predicted, fitted by nothing and left out of the latency MAPE above:",
        "",
        *_screened(report),
        "",
        "## Rows not predicted (kept in `validate` output with their reason)",
        "",
        *_reasons(report),
        "",
        "## Assumptions that affect these numbers",
        "",
        "- ML.ENERGY rows do not record input lengths; per-task constants "
        + ", ".join(f"`{k}` = {v:g}" for k, v in TASK_INPUT_TOKENS.items())
        + " tokens: the chat length is read from the runs whose KV cache limited their "
        "running batch (`energylens/measurements/mlenergy_lengths.py`), the others are "
        "assumptions the data does not identify (reasoning in "
        "`energylens/measurements/mlenergy.py`).",
        "- Sensitivity of the ML.ENERGY H100 errors to the assumed input lengths (shipped "
        "calibration, no refit; longer prompts also make more rows infeasible in memory):",
        "",
        *_input_sensitivity(report),
        "",
        "- ML.ENERGY MoE rows with `expert_parallel = n`, `tensor_parallel = 1` are modelled as "
        "vLLM's expert parallelism: attention tensor-parallel over all n GPUs, experts split n "
        "ways (`Deployment(tp=1, ep=n, num_gpus=n)`).",
        "- B200 kernel latency curves are borrowed from the H100 fit (no per-op B200 profile "
        "in the data); B200 engine and power constants are fitted on its ML.ENERGY rows, "
        "except static power (idle with a CUDA context), which serving rows cannot tell from "
        "busy power: measured on H100 and H200 (NVML, `docs/power.md`), borrowed by B200.",
        "- GPUs with no data of their own (H200, H100 PCIe, A100 power and engine constants, "
        "L40S, MI300X) borrow every constant they lack from a measured relative, recorded as "
        "`assumed` in the calibration file: unchanged for latency curves, engine overheads and "
        "links; static and busy power scaled by TDP, energy per FLOP by TDP per peak FLOP/s "
        "(`energylens/calibration/transfer.py`). No number above tests them.",
        "",
        "## Workload energy regression (Wilkins et al. 2024)",
        "",
        "e = a0·τin + a1·τout + a2·τin·τout fitted to EnergyLens's own energy-per-request "
        "predictions (batch workload, batch 32, τin and τout in {64..2048} x {32..1024}); "
        "`energylens regress --model M --gpu G` reproduces a row. Wilkins et al. report "
        "R² 0.96-0.98 on measurements (A100, no KV cache), so only the form is comparable.",
        "",
        *_regressions(),
        "",
        "## Parity plots (in-sample)",
        "",
        *[f"![{p}]({p})" for p in plots],
        "",
        "## Elsewhere",
        "",
        "- Serving under load (the request-level simulator, `--workload load`) against "
        "AIConfigurator's measured serving rows at client concurrency 1-1,024, per engine and "
        "GPU: [load.md](load.md#error-on-published-measurements-under-load) "
        "(`python benchmarks/validate_load_aic.py`).",
        "- Inter-token latency percentiles (p50, p90, p99) of vLLM at a full running batch "
        "against ML.ENERGY's runs (the load kind; p90 and p99 never fitted on): "
        "[load.md](load.md#inter-token-latency-percentiles-at-a-full-batch-mlenergy) "
        "(`python benchmarks/validate_mlenergy_itl.py`).",
        "- Which parallel layout is fastest (tensor, pipeline, expert parallel, hybrids) against "
        "LLM-Inference-Bench's TensorRT-LLM layout comparison on one to four A100s, per layout "
        "and per batch (never fitted on): [layouts.md](layouts.md) "
        "(`python benchmarks/validate_layouts.py`).",
        "- MLA prompt attention against TensorRT-LLM's measured kernel on H100, H200, B200 and "
        "GB200, per prompt length: [kernels-h200.md](kernels-h200.md) "
        "(`python benchmarks/validate_mla_context.py`).",
        "- MLA decode attention against TensorRT-LLM's measured kernel on H100, H200, B200 and "
        "GB200, and the whole MLA attention module against AIConfigurator's module tables "
        "(never fitted on): [kernels-h200.md](kernels-h200.md) "
        "(`python benchmarks/validate_mla_decode.py [--module]`).",
        "- Few-shot calibration to your own measurements (`calibrate --from`, `validate "
        "measurements --k-shot`): the K = 0, 1, 3, 5 curves per dataset in "
        "[k-shot.md](k-shot.md); the measurement CSV in [measurements.md](measurements.md).",
        "",
    ]
    return "\n".join(out)


def write_docs(report: AccuracyReport, directory: Path) -> list[Path]:
    """Write ``accuracy.md`` and the parity PNGs into ``directory``; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    plots: list[str] = []
    for name, (filename, metrics, label) in PLOTS.items():
        if name in report.datasets:
            _parity(report.datasets[name], metrics, label, directory / filename)
            if (directory / filename).is_file():
                plots.append(filename)
                written.append(directory / filename)
    md = directory / "accuracy.md"
    md.write_text(render(report, plots))
    written.insert(0, md)
    return written


__all__ = ["Target", "render", "write_docs"]
