"""``energylens validate``, ``energylens calibrate`` and ``energylens regress``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from energylens.cli.argtypes import non_negative_int, positive_int
from energylens.cli.jsonout import print_json
from energylens.cli.paths import check_output
from energylens.cli.tables import console as make_console
from energylens.errors import CalibrationDataError, ConfigError
from energylens.measurements.formats import FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``validate``, ``calibrate`` and ``regress`` commands."""
    v = sub.add_parser(
        "validate", help="predict every row of a measurement file and report MAPE",
        description="Predict every row of FILE (a FORMAT measurement file) and report MAPE "
                    "per metric with a per-row table. With --all: every known file under "
                    "--data, against the accuracy targets (--write-docs DIR also writes "
                    "DIR/accuracy.md and parity plots).")
    v.add_argument("format", nargs="?", choices=(*FORMATS, "measurements", "kernels", "steps"),
                   metavar="FORMAT",
                   help=f"one of {', '.join(FORMATS)}, measurements (the measurement CSV of "
                        "docs/measurements.md), kernels (FILE: a run folder of "
                        "data/measurements/energylens-gpu: GEMM and attention times), or steps "
                        "(FILE: a steps_<dtype>.csv of benchmarks/gpu/measure_decode_step.py "
                        "or a folder of them: whole forward steps, time and energy)")
    v.add_argument("file", nargs="?", metavar="FILE")
    v.add_argument("--gpu", help="GPU the file was measured on (default: from the file/path)")
    v.add_argument("--topology", help="vidur-network: interconnect (nvswitch, nvlink-pairwise; "
                                      "default: from the folder name)")
    v.add_argument("--calibration", help="calibration file (default: the shipped one)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--max-rows", type=non_negative_int, default=None, help="rows in the table (default: all)")
    v.add_argument("--all", action="store_true", help="every known file under --data")
    v.add_argument("--data", default=None, help="data folder for --all (default: data/measurements)")
    v.add_argument("--write-docs", metavar="DIR", help="with --all: write DIR/accuracy.md + PNGs")
    v.add_argument("--k-shot", type=int, default=None, metavar="K",
                   help="measurements (per --group-by group) or steps (per file): fit an overlay "
                        "on K rows, score the others")
    v.add_argument("--group-by", default=None, metavar="COLS",
                   help="measurements with --k-shot: comma list of columns that form a group")
    v.add_argument("--seed", type=non_negative_int, default=0, help="with --k-shot: row choice")
    v.add_argument("--forget-fits-on", metavar="DATA_FILE", default=None,
                   help="measurements with --k-shot: each group starts from the calibration "
                        "without the engine constants it fitted on DATA_FILE (as the "
                        "calibration file names it) for the group's runtimes and GPUs: a rig "
                        "it never saw")
    v.set_defaults(handler=_cmd_validate, parser=v)

    c = sub.add_parser(
        "calibrate", help="fit the cost model's constants to measurements",
        description="Fit kernel latency curves (Vidur per-op), collective curves (Vidur NCCL) "
                    "and serving/power constants (ML.ENERGY) and write a versioned "
                    "calibration file with per-constant provenance and held-out errors.")
    c.add_argument("--data", action="append", default=None,
                   help="data folder with the known layout (repeatable; default: data/measurements)")
    c.add_argument("--vidur-mlp", action="append", default=[], metavar="FILE",
                   help="extra Vidur mlp.csv (path .../compute/<gpu>/<org>/<model>/mlp.csv)")
    c.add_argument("--vidur-network", action="append", default=[], metavar="FILE")
    c.add_argument("--mlenergy", action="append", default=[], metavar="FILE")
    c.add_argument("--nccl-tests", action="append", default=None, metavar="FILE",
                   help="nccl-tests all-reduce across nodes, nccl_tests_allreduce_<k>x<g>_<GPU>_"
                        "<cluster>.csv (default: those in ../shared/data/transcribed, which "
                        "are not redistributed with the repository, when that folder exists)")
    c.add_argument("--from", dest="from_csv", metavar="FILE.csv", default=None,
                   help="fit a few-shot overlay on the rows of a measurement CSV "
                        "(docs/measurements.md) on top of --base, instead of refitting")
    c.add_argument("--base", default=None, metavar="FILE",
                   help="with --from: the calibration the overlay scales (default: the shipped one)")
    c.add_argument("--output", "-o", default="calibration.yaml",
                   help="file to write (default: ./calibration.yaml; the shipped one is "
                        "energylens/data/calibration.yaml)")
    c.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    c.add_argument("--no-leave-out", action="store_true",
                   help="skip the leave-one-group-out refits (faster; no held-out errors)")
    c.add_argument("--jobs", type=positive_int, default=None,
                   help="processes for held-out refits (default: 2)")
    c.add_argument("--quiet", action="store_true")
    c.add_argument("--allow-unidentified", action="store_true",
                   help="exit 0 even if a fitted constant ended at a bound of its range "
                        "(not identified by the data); the file records them either way")
    c.set_defaults(handler=_cmd_calibrate)

    r = sub.add_parser(
        "regress", help="fit e = a0*tin + a1*tout + a2*tin*tout to predictions (Wilkins 2024)")
    r.add_argument("--model", required=True,
                   help="zoo name, HF repo id or a config.json path")
    r.add_argument("--gpu", required=True, help="GPU name (energylens gpus lists them)")
    r.add_argument("--num-gpus", type=positive_int, help="GPUs in all (default: tp*pp*ep)")
    for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert")):
        r.add_argument(f"--{name}", type=positive_int, default=1,
                       help=f"{what}-parallel degree")
    r.add_argument("--batch", type=positive_int, default=32, help="sequences per batch")
    r.add_argument("--workload", choices=("batch", "serving"), default="batch",
                   help="batch: one static batch; serving: continuous batching")
    r.add_argument("--input-tokens", type=_int_list, default=None, metavar="N,N,...",
                   help="prompt lengths of the grid, two or more (default: "
                        "64,128,256,512,1024,2048)")
    r.add_argument("--output-tokens", type=_int_list, default=None, metavar="N,N,...",
                   help="output lengths of the grid, two or more (default: "
                        "32,64,128,256,512,1024)")
    r.add_argument("--calibration", help="calibration file (default: the shipped one)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(handler=_cmd_regress)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.all:
        if args.format is not None or args.file is not None:
            args.parser.error("--all validates every known file under --data; give it without "
                              "FORMAT and FILE")
        return _validate_all(args)
    unread = [flag for flag, given in (("--data", args.data), ("--write-docs", args.write_docs))
              if given is not None]
    if unread:
        args.parser.error(f"{', '.join(unread)}: only --all reads "
                          f"{'it' if len(unread) == 1 else 'them'}")
    if args.format is None or args.file is None:
        args.parser.error("validate needs FORMAT and FILE (or --all)")
    if args.format == "measurements":
        if args.gpu is not None or args.topology is not None:  # read nowhere: say so
            args.parser.error("--gpu and --topology do not apply to 'validate measurements': "
                              "each row names its GPU (the gpu column)")
        from energylens.cli.measurements import validate_measurements

        return validate_measurements(args)
    if args.group_by is not None or (args.k_shot is not None and args.format != "steps"):
        args.parser.error("--k-shot applies to 'validate measurements' and 'validate steps', "
                          "--group-by to 'validate measurements' only")
    if args.format == "kernels":
        from energylens.cli.kernels import validate_kernels_command

        return validate_kernels_command(args)
    if args.format == "steps":
        from energylens.cli.steps import validate_steps_command

        return validate_steps_command(args)
    from rich.console import Console  # on use: other commands never load rich

    from energylens.validation.predictors import validate

    if args.gpu is not None:
        _check_gpu_override(args)
    # a spinner on a terminal (stderr), so that a long file is visibly at work
    with Console(stderr=True).status(f"predicting every row of {args.file} ..."):
        report = validate(format=args.format, path=args.file, gpu=args.gpu,
                          calibration=args.calibration, topology=args.topology)
    from energylens.cli.measurements import none_predicted

    failed = sum(1 for r in report.rows if r.error)
    if args.json:
        print_json(report.as_dict())
        return none_predicted(failed) if 0 < failed == len(report.rows) else 0
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    summary = Table(title=f"{args.format}: {args.file}")
    for column in ("metric", "MAPE", "median APE", "rows"):
        summary.add_column(column, justify="right" if column != "metric" else "left")
    for name, err in report.metrics.items():
        summary.add_row(escape(name), f"{100 * err.mape:.1f} %", f"{100 * err.median_ape:.1f} %",
                        str(err.n))
    console.print(summary)
    for metric, why in report.notes.items():
        console.print(f"not predicted: {metric}: {why}")
    if failed:
        console.print(f"{failed} of {len(report.rows)} rows not predicted (reason per row below)")
    # per-row columns: the measured metrics (not the screened-group lines of the summary)
    metrics = ([m for m in report.metrics if "[" not in m]
               or sorted({m for r in report.rows for m in r.measured}))
    table = Table(title="rows (measured / predicted / error)")
    keys = list(report.rows[0].input) if report.rows else []
    for column in (*keys, *metrics, "note"):
        table.add_column(column)
    for row in report.rows[: args.max_rows]:
        cells = [str(row.input.get(k, "")) for k in keys]
        for m in metrics:
            meas, pred = row.measured.get(m), row.predicted.get(m)
            if meas is None:
                cells.append("")
            elif pred is None:
                cells.append(f"{_fmt(meas)} / -")
            else:
                cells.append(f"{_fmt(meas)} / {_fmt(pred)} / {100 * (pred / meas - 1):+.0f}%")
        cells.append(escape(row.error or row.screened or ""))
        table.add_row(*cells)
    console.print(table)
    return none_predicted(failed) if 0 < failed == len(report.rows) else 0


#: Formats whose rows record the GPU they ran on (``--gpu`` would relabel them); the
#: others take theirs from the path, which ``--gpu`` may correct.
ROW_GPU_FORMATS = ("mlenergy", "splitwise", "llm-inference-bench", "aiconfigurator-nccl")


def _check_gpu_override(args: argparse.Namespace) -> None:
    """Refuse an unknown ``--gpu``, and one that disagrees with the GPUs a file's rows
    record (:data:`ROW_GPU_FORMATS`): it would price every row on it, silently."""
    from energylens.errors import UnknownGPUError
    from energylens.hardware import load_gpu
    from energylens.measurements.formats import load_measurements

    asked = load_gpu(args.gpu).name  # an unknown name is the whole command's error
    if args.format not in ROW_GPU_FORMATS:
        return
    recorded = set()
    for row in load_measurements(format=args.format, path=args.file).rows:
        name = row.context.get("gpu")
        try:
            recorded.add(load_gpu(str(name)).name if name else None)
        except UnknownGPUError:
            recorded.add(str(name))
    recorded.discard(None)
    if recorded - {asked}:
        raise ConfigError(f"--gpu {args.gpu}: {args.file}'s rows record their GPUs "
                          f"({', '.join(sorted(str(g) for g in recorded))}); --gpu would price "
                          f"every row on {asked}: leave it out")


def _validate_all(args: argparse.Namespace) -> int:
    from rich.console import Console

    from energylens.validation.accuracy import DEFAULT_DATA, TARGETS, collect

    with Console(stderr=True).status("predicting every known measurement file ..."):
        report = collect(data=Path(args.data) if args.data else DEFAULT_DATA,
                         calibration=args.calibration)
    if args.write_docs:
        from energylens.validation.docs import write_docs

        for path in write_docs(report, Path(args.write_docs)):
            print(f"wrote {path}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for target in TARGETS:
        held, now = report.leave_out(target), report.in_sample(target)
        gate = report.gating(target)
        rows.append({"target": target.name, "limit": target.limit, "in_sample": now,
                     "held_out": held, "meets": None if gate is None else gate <= target.limit})
    if args.json:
        print_json({"calibration": report.calibration_source, "targets": rows,
                    "datasets": {k: {m: e.as_dict() for m, e in d.summary.items()}
                                 for k, d in report.datasets.items()}})
        return 0
    from rich.table import Table

    table = Table(title=f"accuracy targets (calibration: {report.calibration_source})")
    for column in ("target", "limit", "in-sample", "held out", "meets"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["target"], f"{100 * row['limit']:.0f} %",
                      "-" if row["in_sample"] is None else f"{100 * row['in_sample']:.1f} %",
                      "-" if row["held_out"] is None else f"{100 * row['held_out']:.1f} %",
                      {None: "?", True: "yes", False: "NO"}[row["meets"]])
    make_console().print(table)
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import time

    from energylens.calibration.run import (
        REPO_ROOT,
        SHARED_TRANSCRIBED,
        CalibrationData,
        calibrate,
        discover,
        merge,
        unidentified_constants,
        write,
    )

    output = Path(args.output)
    if args.from_csv is not None:
        from energylens.cli.measurements import calibrate_overlay

        unread = [flag for flag, given in (
            ("--jobs", args.jobs is not None), ("--no-leave-out", args.no_leave_out),
            ("--data", args.data is not None), ("--vidur-mlp", args.vidur_mlp),
            ("--vidur-network", args.vidur_network), ("--mlenergy", args.mlenergy),
            ("--nccl-tests", args.nccl_tests is not None)) if given]
        if unread:
            raise ConfigError(f"{', '.join(unread)}: --from fits an overlay on its own rows "
                              "with no held-out refits; only a full calibration reads "
                              f"{'it' if len(unread) == 1 else 'them'}")
        check_output(output, force=args.force)
        return calibrate_overlay(args)
    if args.base is not None:
        raise ConfigError("--base: only --from reads it (the calibration an overlay scales)")
    roots = [Path(d) for d in (args.data or [REPO_ROOT / "data" / "measurements"])]
    extra = CalibrationData(vidur_mlp=[Path(p) for p in args.vidur_mlp],
                            vidur_network=[Path(p) for p in args.vidur_network],
                            mlenergy=[Path(p) for p in args.mlenergy],
                            nccl_tests=[Path(p) for p in args.nccl_tests or []])
    if args.nccl_tests is None:
        extra.nccl_tests = sorted(SHARED_TRANSCRIBED.glob("nccl_tests_allreduce_*.csv"))
    for path in extra.all_files():
        if not path.is_file():
            raise CalibrationDataError(f"{path}: no such measurement file")
    data = merge(*(discover(r) for r in roots), extra)
    check_output(output, force=args.force)  # before minutes of fitting, not after
    start = time.time()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.time() - start:6.1f} s] {message}", file=sys.stderr)

    outcome = calibrate(data=data, leave_out=not args.no_leave_out,
                        jobs=max(2 if args.jobs is None else args.jobs, 1), log=log)
    write(outcome, output)
    log(f"wrote {output}")
    unidentified = unidentified_constants(outcome.fits)
    if unidentified and not args.allow_unidentified:
        raise CalibrationDataError(
            f"wrote {output}, but {len(unidentified)} fitted constants ended at a bound of their "
            f"range (not identified by the data): {', '.join(unidentified)}; "
            f"--allow-unidentified accepts them")
    return 0


def _cmd_regress(args: argparse.Namespace) -> int:
    from energylens.deployment import Deployment
    from energylens.hardware import load_gpu
    from energylens.validation.regression import (
        DEFAULT_INPUT_TOKENS,
        DEFAULT_OUTPUT_TOKENS,
        fit_energy_regression,
    )

    for flag, lengths in (("--input-tokens", args.input_tokens),
                          ("--output-tokens", args.output_tokens)):
        if lengths is not None and len(set(lengths)) < 2:
            raise ConfigError(f"{flag} {','.join(map(str, lengths))}: one length cannot "
                              "separate the fit's terms (a0*tin, a1*tout and a2*tin*tout are "
                              "collinear); give two or more")
    gpu = load_gpu(args.gpu).name
    deployment = Deployment(num_gpus=args.num_gpus, tp=args.tp, pp=args.pp, ep=args.ep)
    fit = fit_energy_regression(model=args.model, gpu=args.gpu, deployment=deployment,
                                batch=args.batch, workload=args.workload,
                                input_tokens=args.input_tokens or DEFAULT_INPUT_TOKENS,
                                output_tokens=args.output_tokens or DEFAULT_OUTPUT_TOKENS,
                                calibration=args.calibration)
    if args.json:
        print_json(fit.as_dict())
        return 0
    console = make_console()
    console.print(f"[bold]{fit.model}[/] on {deployment.total_gpus} x {gpu} "
                  f"({fit.workload}, batch {fit.batch:g}): e = a0*tin + a1*tout + a2*tin*tout")
    console.print(f"a0 = {fit.a0:.4g} J/token, a1 = {fit.a1:.4g} J/token, "
                  f"a2 = {fit.a2:.4g} J/token^2, R^2 = {fit.r2:.4f} over {fit.n} grid points")
    return 0
