"""``energylens validate kernels RUN_FOLDER``: measured kernel times against the cost model."""

from __future__ import annotations

import argparse

from energylens.cli.jsonout import print_json
from energylens.cli.tables import console as make_console


def validate_kernels_command(args: argparse.Namespace) -> int:
    """Print MAPE per (kernel, dtype, regime), worst first, then the rows (or ``--json``)."""
    from energylens.measurements.energylens_gpu import load_kernel_run
    from energylens.validation.kernels import validate_kernels

    run = load_kernel_run(path=args.file)
    report = validate_kernels(run=run, gpu=args.gpu, calibration=args.calibration)
    if args.json:
        print_json(report.as_dict())
        return 0
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    summary = Table(title=f"kernels: {escape(report.path)} on {report.gpu} "
                          f"(calibration: {escape(report.calibration)})")
    for column in ("kernel", "dtype", "regime", "rows", "MAPE", "median error", "worst"):
        summary.add_column(column, justify="left" if column in ("kernel", "dtype", "regime")
                           else "right")
    for g in report.groups:
        summary.add_row(g.kernel, g.dtype, g.regime, str(g.n), f"{100 * g.mape:.1f} %",
                        f"{100 * g.median_error:+.1f} %", f"{100 * g.max_ape:.0f} %")
    console.print(summary)
    console.print(f"{len(report.rows)} rows predicted; regime by the datasheet roofline; "
                  f"error = predicted / measured - 1")
    if report.untimed:
        console.print(f"{report.untimed} rows the run could not time (not counted)")
    for shape, why in report.unpriced.items():
        console.print(f"not predicted: {escape(shape)}: {escape(why)}")
    if args.max_rows == 0:
        return 0
    table = Table(title="rows (measured / predicted)")
    for column in ("kernel", "dtype", "regime", "shape", "measured us", "predicted us", "error"):
        table.add_column(column)
    for row in report.rows[: args.max_rows]:
        table.add_row(row.kernel, row.dtype, row.regime, escape(row.shape),
                      f"{row.measured_s * 1e6:.1f}", f"{row.predicted_s * 1e6:.1f}",
                      f"{100 * row.error:+.0f} %")
    console.print(table)
    return 0
