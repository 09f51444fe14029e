"""Human-readable tables of a prediction (ms, GB and kJ at the edge only)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported on use: a --json prediction never loads it
    from rich.console import Console

    from energylens.deployment import Deployment
    from energylens.predict import Prediction


def console() -> Console:
    """A console that does not truncate tables when output is not a terminal, nor break its
    lines of prose there (a pipe or a file keeps each line whole)."""
    from search.console import PipeConsole

    return PipeConsole() if sys.stdout.isatty() else PipeConsole(width=200, soft_wrap=True)


def print_prediction(result: Prediction, *, console: Console | None = None,
                     slos: bool = True) -> None:
    """Print the summary and the per-phase energy breakdown (a load run's SLO figures
    where ``slos``: the workload has bounds)."""
    from rich.markup import escape
    from rich.table import Table

    from search.console import PipeConsole

    console = console or PipeConsole()
    pooled = " + " in result.gpu  # a disaggregated pair names each pool's GPUs
    where = f"{result.gpu}, {result.num_gpus} GPUs" if pooled \
        else f"{result.num_gpus} x {result.gpu}"
    console.print(f"[bold]{result.model}[/] on {where} "
                  f"({result.workload} workload): "
                  + ("[green]feasible: true[/]" if result.feasible
                     else f"[red]feasible: false[/] ({escape(str(result.infeasible_reason))})"))
    if not result.feasible and not math.isfinite(result.ttft_s):
        console.print("[yellow]no figures: it cannot run as given (memory per GPU "
                      f"{result.memory_per_gpu_gb:.1f} GB)[/]")
        return
    if not result.feasible:
        console.print("[yellow]the figures below price the deployment as if it fit: it cannot "
                      "run as given (its memory per GPU is the least it needs, one sequence)[/]")
    summary = Table(show_header=False)
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    rows = [
        ("memory per GPU", f"{result.memory_per_gpu_gb:.1f} GB"),
        ("TTFT", f"{result.ttft_s * 1e3:.1f} ms"),
        ("TPOT" if result.workload == "batch" else "inter-token latency",
         f"{result.tpot_s * 1e3:.2f} ms"),
        ("output tokens/s", f"{result.output_tokens_per_s:,.0f}"),
        ("average power (all GPUs)", f"{result.avg_power_w:,.0f} W"),
        ("energy per output token", f"{result.energy_per_output_token_j:.3f} J"),
        ("energy per request", f"{result.energy_per_request_j:,.1f} J"),
    ]
    for name, value in rows:
        summary.add_row(name, value)
    console.print(summary)
    from energylens.workloads.load import LoadPrediction

    under_load = isinstance(result, LoadPrediction)
    # under load the phases are the run's measured window, summed over its steps: the
    # steps that carry prompts and the decode-only ones, each with its wall time
    steady = result.workload == "serving"
    breakdown = Table(title="Energy over the measured window, per kind of step (J)"
                      if under_load else "One mean step: decode and the prompts it admits (J)"
                      if steady else "Energy breakdown (J)")
    for column in ("steps" if under_load else "phase",
                   "time" if under_load or steady else "latency",
                   "compute", "memory", "communication", "static", "total"):
        breakdown.add_column(column, justify="right")
    names = ("with prompts", "decode only") if under_load else ("prefill", "decode")
    for name, phase in zip(names, (result.prefill, result.decode), strict=True):
        time = (f"{phase.latency_s:,.2f} s" if under_load
                else f"{phase.latency_s * 1e3:.1f} ms")
        breakdown.add_row(name, time, f"{phase.compute_j:,.1f}", f"{phase.memory_j:,.1f}",
                          f"{phase.communication_j:,.1f}", f"{phase.static_j:,.1f}",
                          f"{phase.energy_j:,.1f}")
    console.print(breakdown)
    if isinstance(result, LoadPrediction):
        print_load(result.load, console=console, slos=slos)


def capacity_note(*, limit: str, deployment: Deployment) -> str:
    """``limit`` (:func:`~energylens.workloads.capacity.kv_cache_limit`: what the KV cache
    decided) with what holds more."""
    narrower = "" if deployment.kv_dtype == "fp8" else "an 8-bit KV cache (--kv-dtype fp8), "
    return f"{limit}; {narrower}more GPUs per replica or shorter requests hold more"


def print_load(load: Mapping[str, float | int | bool], *, console: Console,
               slos: bool = True) -> None:
    """Latency percentiles (ms) and the rates, queue figures and, where ``slos`` (the
    workload has bounds), SLO figures of a load run."""
    from rich.table import Table

    latencies = Table(title="Latency under load (ms)")
    for column in ("latency", "mean", "p50", "p90", "p99"):
        latencies.add_column(column, justify="right")
    for name in ("ttft", "tpot", "itl", "e2e"):
        latencies.add_row(name.upper(), *(f"{float(load[f'{name}_{s}_s']) * 1e3:,.1f}"
                                          for s in ("mean", "p50", "p90", "p99")))
    console.print(latencies)
    met = (f", goodput {float(load['goodput_requests_per_s']):.3f} req/s (SLO attainment "
           f"{float(load['slo_attainment']):.1%}, SLOs met: {str(load['slo_met']).lower()})"
           if slos else "")
    console.print(f"requests/s {float(load['requests_per_s']):.3f}{met}, "
                  f"mean running {float(load['mean_running']):.1f}, mean queue "
                  f"{float(load['mean_queue_length']):.2f}, preemptions {int(load['preemptions'])}, "
                  f"idle energy {float(load['idle_energy_j']):,.0f} J", highlight=False)
    if "capacity_requests_per_s" in load:
        console.print(f"capacity: {float(load['capacity_requests_per_s']):.3g} requests/s "
                      f"({float(load['capacity_per_gpu']):.3g} per GPU) with the SLO "
                      "attainment asked and the engine keeping up", highlight=False)


def print_breakdown(breakdown: Mapping[str, Any], *, console: Console) -> None:
    """``predict --breakdown``: time (critical GPU) and energy (all the replica's GPUs) of a
    decode step and of one prompt's prefill per class of work (energylens.cost.breakdown)."""
    from rich.table import Table

    from energylens.cost.breakdown import CLASSES

    steps = {"decode": f"decode step ({float(breakdown['decode_sequences']):g} sequences)",
             "prefill": "prefill (one prompt)"}
    table = Table(title="Where a step's time (critical GPU) and energy (all GPUs) go")
    table.add_column("work")
    for title in steps.values():
        table.add_column(f"{title}: time", justify="right")
        table.add_column("energy", justify="right")
    totals = {(step, unit): sum(breakdown[step][unit].values())
              for step in steps for unit in ("seconds", "joules")}

    def cell(step: str, unit: str, label: str) -> str:
        value = breakdown[step][unit].get(label)
        if value is None:
            return "-"
        shown = f"{value * 1e3:,.3f} ms" if unit == "seconds" else f"{value:,.3f} J"
        return f"{shown} ({value / totals[(step, unit)]:.0%})"

    for label in CLASSES:
        if any(label in breakdown[step][unit] for step in steps for unit in ("seconds", "joules")):
            table.add_row(label, *(cell(step, unit, label) for step in steps
                                   for unit in ("seconds", "joules")))
    table.add_row("step", *(f"{totals[(step, 'seconds')] * 1e3:,.3f} ms" if unit == "seconds"
                            else f"{totals[(step, 'joules')]:,.3f} J"
                            for step in steps for unit in ("seconds", "joules")))
    console.print(table)


def print_layouts(options: Sequence[Mapping[str, Any]], *, console: Console) -> None:
    """``predict --layouts``: every layout of the same GPUs that runs the workload, fastest
    TPOT first, with the flags that predict it and its running sequences per busy replica
    (a KV cache or a cap that holds fewer shows there), each figure against the layout as
    given (against the fastest where that one does not run); then one line per layout that
    does not run, with the reason."""
    from rich.table import Table

    runs = [o for o in options if o["feasible"]]
    base = next((o for o in runs if o["as_given"]), runs[0] if runs else None)
    against = "the layout as given, *" if base is not None and base["as_given"] \
        else "the fastest"
    table = Table(title=f"Every layout of the same GPUs, fastest TPOT first (change against "
                        f"{against})")
    columns = (("TPOT", "tpot_s", "{:.2f} ms"), ("TTFT", "ttft_s", "{:.1f} ms"),
               ("energy/token", "energy_per_output_token_j", "{:.4f} J"),
               ("output tokens/s", "output_tokens_per_s", "{:,.0f}"))
    for name in ("layout", "flags", "running"):
        table.add_column(name, justify="right" if name == "running" else "left")
    for name, _, _ in columns:
        table.add_column(name, justify="right")
    for option in runs:
        label = str(option["layout"]) + (" *" if option["as_given"] else "")
        cells = []
        for _, key, fmt in columns:
            value = float(option[key])
            text = fmt.format(value * (1e3 if key in ("tpot_s", "ttft_s") else 1.0))
            if base is not None and option is not base:
                text += f" ({value / float(base[key]) - 1:+.0%})"
            cells.append(text)
        running = option["running_batch"]
        table.add_row(label, str(option["flags"]),
                      "-" if running is None else f"{float(running):,.1f}", *cells)
    console.print(table)
    for option in options:
        if not option["feasible"]:
            console.print(f"does not run: {option['layout']}"
                          + (" (as given)" if option["as_given"] else "")
                          + f": {option['reason']}", highlight=False)


def print_what_if(variants: Sequence[Mapping[str, Any]], *, console: Console) -> None:
    """``predict --what-if``: each single change's figures and their change against the
    deployment as given (the first row)."""
    from rich.table import Table

    base = variants[0]
    table = Table(title="What one change would do (against the first row)")
    columns = (("energy/token", "energy_per_output_token_j", "{:.4f} J"),
               ("TPOT", "tpot_s", "{:.2f} ms"), ("TTFT", "ttft_s", "{:.1f} ms"),
               ("output tokens/s", "output_tokens_per_s", "{:,.0f}"))
    for name in ("change", *(c for c, _, _ in columns), "GPUs"):
        table.add_column(name, justify="left" if name == "change" else "right")
    for variant in variants:
        if not variant["feasible"]:
            table.add_row(str(variant["change"]), *(["-"] * len(columns)),
                          f"{variant['num_gpus'] or '-'}  ({variant['reason']})")
            continue
        cells = []
        for _, key, fmt in columns:
            value = float(variant[key])
            scale = 1e3 if key in ("tpot_s", "ttft_s") else 1.0
            text = fmt.format(value * scale)
            if variant is not base and base["feasible"]:
                text += f" ({value / float(base[key]) - 1:+.0%})"
            cells.append(text)
        table.add_row(str(variant["change"]), *cells, str(variant["num_gpus"]))
    console.print(table)
