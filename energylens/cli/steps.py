"""``energylens validate steps PATH``: measured forward steps against the cost model."""

from __future__ import annotations

import argparse

from energylens.cli.jsonout import print_json
from energylens.cli.tables import console as make_console


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _signed(value: float) -> str:
    return f"{100 * value:+.1f} %"


def validate_steps_command(args: argparse.Namespace) -> int:
    """Print time / energy / power MAPE per (GPU, dtype, phase), worst first, then the rows
    (or ``--json``); with ``--k-shot K`` the rows no overlay was fitted on."""
    from energylens.validation.steps import validate_steps
    from energylens.validation.steps_kshot import k_shot_steps

    k_shot = None
    if args.k_shot is not None:
        k_shot = k_shot_steps(path=args.file, k=args.k_shot, seed=args.seed, gpu=args.gpu,
                              calibration=args.calibration)
        report = k_shot.report
    else:
        report = validate_steps(path=args.file, gpu=args.gpu, calibration=args.calibration)
    if args.json:
        print_json(report.as_dict() if k_shot is None else k_shot.as_dict())
        return 0
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    for title, groups in (("per (GPU, weight dtype, phase)", report.groups),
                          ("per file (all phases)", report.totals)):
        summary = Table(title=f"steps {title}: {escape(report.path)} "
                              f"(calibration: {escape(report.calibration)})")
        for column in ("gpu", "dtype", "phase", "rows", "time MAPE", "time median",
                       "energy MAPE", "energy median", "energy worst", "power MAPE",
                       "power median"):
            summary.add_column(column, justify="left" if column in ("gpu", "dtype", "phase")
                               else "right")
        for g in groups:
            summary.add_row(g.gpu, g.dtype, g.phase, str(g.n), _pct(g.time.mape),
                            _signed(g.time.median_error), _pct(g.energy.mape),
                            _signed(g.energy.median_error), f"{100 * g.energy.max_ape:.0f} %",
                            _pct(g.power.mape), _signed(g.power.median_error))
        console.print(summary)
    for i in report.idle:
        measured = " / ".join(f"{w:.0f}" for w in i.measured_w) or "-"
        console.print(f"idle {escape(i.path)}: measured {measured} W (CUDA context held), "
                      f"static_power_w {i.static_power_w:.0f} W ({i.gpu})")
    if report.failed:
        console.print(f"{report.failed} rows the script could not measure (not counted)")
    for where, why in report.unpriced.items():
        console.print(f"not predicted: {escape(where)}: {escape(why)}")
    if args.max_rows != 0:
        table = Table(title="rows (measured / predicted / error)")
        for column in ("gpu", "dtype", "phase", "shape", "SM MHz", "time ms", "energy J",
                       "power W"):
            table.add_column(column, justify="left" if column in ("gpu", "dtype", "phase",
                                                                  "shape") else "right")
        for row in report.rows[: args.max_rows]:
            e, p = row.errors, row.predicted
            clock = "-" if row.sm_clock_mhz is None else f"{row.sm_clock_mhz:.0f}"
            table.add_row(
                row.gpu, row.dtype, row.phase, row.shape,
                clock + (" capped" if row.power_capped else ""),
                f"{row.measured_time_s * 1e3:.2f} / {p.latency_s * 1e3:.2f} / "
                f"{100 * e['time']:+.0f} %",
                f"{row.measured_energy_j:.2f} / {p.energy_j:.2f} / {100 * e['energy']:+.0f} %",
                f"{row.measured_power_w:.0f} / {p.power_w:.0f} / {100 * e['power']:+.0f} %")
        console.print(table)
    if k_shot is None:
        console.print(f"{len(report.rows)} steps predicted (step_cost at the boost clock, no "
                      f"engine overhead); error = predicted / measured - 1; validation only: "
                      f"nothing is fitted to these measurements")
        return 0
    for group, factors in sorted(k_shot.overlays.items()):
        moved = ", ".join(f"{name} x{value:.3g}" for name, value in factors.items()) or "none"
        console.print(f"overlay {escape(group)} (K = {k_shot.k}, seed {k_shot.seed}): {moved}")
    console.print(f"{len(report.rows)} held-out steps scored, {len(k_shot.fitted_on)} fitted on "
                  f"(not in the tables); error = predicted / measured - 1")
    return 0
