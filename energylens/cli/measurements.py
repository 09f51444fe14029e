"""``energylens measurements convert``, ``validate measurements`` and ``calibrate --from``:
the measurement CSV of ``docs/measurements.md``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from energylens.cli.jsonout import print_json
from energylens.cli.paths import check_output
from energylens.cli.tables import console as make_console
from energylens.cost.constants import Calibration
from energylens.errors import CalibrationFileError, ConfigError, MeasurementError
from energylens.measurements.convert import FORMATS

T = TypeVar("T")

if TYPE_CHECKING:
    from energylens.validation.kshot import BlindBase


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``measurements convert``."""
    m = sub.add_parser("measurements", help="the measurement CSV: convert published files to it")
    msub = m.add_subparsers(dest="measurements_command", required=True)
    c = msub.add_parser("convert", help="write a published measurement file as a measurement CSV",
                        description="Convert FILE (a FORMAT file) to the measurement CSV of "
                                    "docs/measurements.md.")
    c.add_argument("format", choices=FORMATS, metavar="FORMAT", help=f"one of {', '.join(FORMATS)}")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--output", "-o", default=None, help="CSV to write (default: standard output)")
    c.add_argument("--gpu", help="GPU the file was measured on, where it does not say")
    c.add_argument("--num-gpus", type=int, help="vllm-benchmark: GPUs, where the result does not say")
    c.add_argument("--tp", type=int, help="vllm-benchmark: tensor-parallel size")
    c.add_argument("--runtime", help="vllm-benchmark: the serving engine, where the result "
                                     "names only the client API (backend openai, openai-chat)")
    c.add_argument("--load-as-serving", action="store_true",
                   help="aiconfigurator: closed-loop rows as steady-state serving at batch = "
                        "concurrency (an approximation) instead of workload=load")
    c.add_argument("--disaggregated", action="store_true",
                   help="aiconfigurator: the rows of separate prefill and decode workers "
                        "(mode=disagg, written with prefill_* and decode_* pool columns) "
                        "instead of the aggregated ones")
    c.set_defaults(handler=_cmd_convert)


def _cmd_convert(args: argparse.Namespace) -> int:
    from energylens.measurements.convert import Options, converters, to_csv

    options = Options(gpu=args.gpu, num_gpus=args.num_gpus, tp=args.tp, runtime=args.runtime,
                      load_as_serving=args.load_as_serving, disaggregated=args.disaggregated)
    converted = converters()[args.format](Path(args.file), options)
    text = to_csv(converted)
    for note in converted.notes:
        print(f"energylens: note: {note}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    check_output(out, force=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {len(converted.rows)} rows to {out}", file=sys.stderr)
    return 0


def _calibration(name: str | None) -> Calibration:
    from energylens.calibration.file import default_calibration, load_calibration

    return default_calibration() if name is None else load_calibration(name)


def _blind(calibration: Calibration, data_file: str | None) -> BlindBase | None:
    """``--forget-fits-on``: the blind base's inputs, checked against the calibration."""
    from energylens.calibration.file import calibration_document
    from energylens.validation.kshot import BlindBase

    if data_file is None:
        return None
    from energylens.calibration.forget import repository_path

    document = calibration_document(calibration)
    named = {str(f) for by_gpu in (document.get("runtimes") or {}).values()
             for section in by_gpu.values() for entry in section.values()
             if isinstance(entry, dict) for f in entry.get("fitted_on") or []}
    if repository_path(data_file) not in {repository_path(f) for f in named}:
        example = f" (it names e.g. {sorted(named)[0]})" if named else ""
        raise ConfigError(f"--forget-fits-on: no engine constant of {calibration.source} was "
                          f"fitted on {data_file}{example}")
    return BlindBase(document=document, data_file=data_file)


def _with_row_progress(run: Callable[[Callable[[], None]], T], *, rows: int, what: str) -> T:
    """``run(on_row)`` under a bar of ``rows`` rows on stderr (where it is a terminal: a
    redirected stderr, or ``--json`` piped on, gets no escape codes)."""
    if not sys.stderr.isatty():
        return run(lambda: None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(what, total=rows)
        return run(lambda: progress.advance(task))


def validate_measurements(args: argparse.Namespace) -> int:
    """``energylens validate measurements FILE.csv [--k-shot K --group-by COLS]``."""
    from rich.console import Console  # on use: other commands never load rich

    from energylens.measurements.user_csv import load_user_csv
    from energylens.validation.kshot import k_shot, validate_measured

    if (args.k_shot is None) != (args.group_by is None):
        raise ConfigError("--k-shot and --group-by go together")
    if args.forget_fits_on is not None and args.k_shot is None:
        raise ConfigError("--forget-fits-on goes with --k-shot")
    measurements = load_user_csv(args.file)
    calibration = _calibration(args.calibration)
    if measurements.ignored:
        many = len(measurements.ignored) > 1
        print(f"energylens: note: column{'s' if many else ''} {', '.join(measurements.ignored)} "
              f"{'are' if many else 'is'} not part of the format: carried through, ignored",
              file=sys.stderr)
    if args.k_shot is None:
        report = _with_row_progress(
            lambda on_row: validate_measured(measurements, calibration=calibration,
                                             on_row=on_row),
            rows=len(measurements.rows), what=f"predicting the rows of {args.file}")
    else:
        with Console(stderr=True).status(f"predicting every row of {args.file} ..."):
            group_by = [c.strip() for c in args.group_by.split(",") if c.strip()]
            report = k_shot(measurements, k=args.k_shot, group_by=group_by, seed=args.seed,
                            calibration=calibration,
                            blind=_blind(calibration, args.forget_fits_on))
    if args.k_shot is not None and not any(e["n"] for e in report.metrics.values()):
        print(f"energylens: note: every row was fitted on (no group of {args.group_by} has "
              f"more than K = {args.k_shot} rows): nothing is scored; group by fewer columns "
              "or lower --k-shot", file=sys.stderr)
    failed = bool(report.rows) and all(outcome.error for outcome in report.rows)
    if args.json:
        print_json(report.as_dict())
        return none_predicted(len(report.rows)) if failed else 0
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    title = f"measurements: {args.file}" + (
        f" (k-shot K={args.k_shot} per {args.group_by}, MAPE on rows not fitted on)"
        if args.k_shot is not None else "")
    summary = Table(title=title)
    for column in ("metric", "MAPE", "rows"):
        summary.add_column(column, justify="left" if column == "metric" else "right")
    for name, err in report.metrics.items():  # escaped: "[impossible]" is not markup
        summary.add_row(escape(name), f"{100 * float(err['mape'] or 0):.1f} %", str(err["n"]))
    console.print(summary)
    groups = report.groups
    if groups:
        scored = [m for m in measurements.metrics if any(m in g for g in groups.values())]
        per_group = Table(title=f"MAPE per {args.group_by} (rows not fitted on, not screened)")
        for column in ("group", *scored):
            per_group.add_column(column, justify="left" if column == "group" else "right")
        for key, errors in groups.items():
            per_group.add_row(escape(key), *(
                f"{100 * float(errors[m]['mape'] or 0):.1f} % ({errors[m]['n']})"
                if m in errors else "-" for m in scored))
        console.print(per_group)
    for key, overlay in report.overlays.items():
        moved = ", ".join(f"{k} x{v:.3f}" for k, v in overlay.factors.items()) or "nothing moved"
        console.print(f"overlay {key}: {moved}", highlight=False)
    table = Table(title="rows (measured / predicted / error)")
    metrics = [m for m in report.metrics if m in measurements.metrics] or list(measurements.metrics)
    for column in ("row", "model", "gpu", "workload", *metrics, "note"):
        table.add_column(column)
    for outcome in report.rows[: args.max_rows]:
        row = outcome.row
        cells = [str(row.number) + (" (fit)" if outcome.fitted_on else ""), str(row.values["model"]),
                 str(row.values["gpu"]), str(row.values["workload"])]
        for m in metrics:
            meas, pred = row.measured.get(m), outcome.predicted.get(m)
            cells.append("" if meas is None else f"{meas:.4g} / -" if pred is None
                         else f"{meas:.4g} / {pred:.4g} / {100 * (pred / meas - 1):+.0f}%")
        cells.append(escape(outcome.error or outcome.screened or outcome.note or ""))
        table.add_row(*cells)
    console.print(table)
    return none_predicted(len(report.rows)) if failed else 0


def none_predicted(rows: int) -> int:
    """Exit code 1, with one stderr line, where no row of a file could be predicted."""
    print(f"energylens: error: none of the {rows} row{'s' if rows != 1 else ''} could be "
          "predicted (the reason per row is in the output)", file=sys.stderr)
    return 1


def calibrate_overlay(args: argparse.Namespace) -> int:
    """``energylens calibrate --from FILE.csv --output my.yaml``: fit and write an overlay."""
    import hashlib

    import yaml

    from energylens import __version__
    from energylens.calibration.file import default_calibration, load_calibration
    from energylens.calibration.overlay import (
        FACTOR_NAMES,
        bound_note,
        fit_overlay,
        overlay_document,
    )
    from energylens.measurements.user_csv import load_user_csv
    from energylens.validation.kshot import fit_rows

    measurements = load_user_csv(args.from_csv)
    # an overlay's base is a full calibration: an overlay file would write one that never loads
    base = (default_calibration() if args.base is None
            else load_calibration(args.base, overlay=False))
    rows, skipped = fit_rows(measurements, calibration=base)
    if not rows:
        raise MeasurementError(f"{args.from_csv}: no row can be fitted on "
                               f"(row {skipped[0][0]}: {skipped[0][1]})")
    for number, reason in skipped:
        print(f"energylens: note: row {number} not fitted: {reason}", file=sys.stderr)
    fit = fit_overlay(rows=rows, base=base)
    output = Path(args.output)
    base_name = "shipped" if args.base is None else str(Path(args.base).resolve())
    document = overlay_document(
        fit=fit, base=base_name,
        fitted_on={"file": str(args.from_csv),
                   "sha256": hashlib.sha256(Path(args.from_csv).read_bytes()).hexdigest(),
                   "rows": [r.number for r in measurements.rows
                            if r.number not in {n for n, _ in skipped}]},
        generated_by=f"energylens calibrate --from (energylens {__version__})")
    _write_atomic(yaml.safe_dump(document, sort_keys=False, width=100), output)
    out = sys.stdout
    print(f"overlay on {base.source}, fitted on {len(rows)} row(s) of {args.from_csv} "
          f"(GPUs: {', '.join(fit.overlay.gpus)})", file=out)
    for name in FACTOR_NAMES:
        value = fit.overlay.factors.get(name)
        if value is None:
            print(f"  {name:<20} unchanged", file=out)
        else:
            print(f"  {name:<20} x{value:.4f} ({100 * (value - 1):+.1f} %)"
                  + (" AT A BOUND" if name in fit.at_bound else ""), file=out)
    for name in fit.at_bound:
        print(f"energylens: warning: {name} {bound_note(name)}", file=sys.stderr)
    print(f"rms log error of the rows: {fit.rms_log_before:.4f} -> {fit.rms_log_after:.4f}; "
          f"wrote {output}", file=out)
    return 0


def _write_atomic(text: str, path: Path) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``."""
    import os
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(name, path)
    except OSError as exc:
        raise CalibrationFileError(f"{path}: cannot write ({exc.strerror or exc})") from None
