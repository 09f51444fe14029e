"""TTFT and TPOT errors of ``--workload load`` on AIConfigurator's measured serving rows,
per engine and GPU (issue 12 validation).

Usage: python benchmarks/validate_load_aic.py [--rows CSV | --silicon FILE] [--json RESULT]
       python benchmarks/validate_load_aic.py --prompt-load [--rows CSV]
       python benchmarks/validate_load_aic.py --prefill-ratio [--rows CSV]
       python benchmarks/validate_load_aic.py --campaigns [--json RESULT]
       python benchmarks/validate_load_aic.py --layouts [--json RESULT]
       python benchmarks/validate_load_aic.py --write-accuracy [--json RESULT]
       python benchmarks/validate_load_aic.py --unrecorded-kv-dtype fp8 [--save OUT.json]
       python benchmarks/validate_load_aic.py --scale-bound [--json RESULT]
Predicts every row of the shipped measurement CSV
``data/measurements/aiconfigurator/silicon_sample_agg.csv`` (AIConfigurator's aggregated
rows: closed loops of ``silicon_concurrency`` clients, fixed lengths) with ``energylens
validate measurements --json`` (``--silicon``: convert a raw ``silicon_sample.csv`` first
with ``energylens measurements convert aiconfigurator``; ``--json``: read a saved result)
and prints MAPE per (engine, GPU), with the rows left out and why, and apart the rows whose
predicted run a full KV cache decided, the rows of runs the source marks work in
progress (``wip`` true) and the rows served through NVIDIA Dynamo (their provenance names a
``dynamo_version``), each kept in every other line too.

``--prefill-ratio`` (the TTFT diagnosis of docs/load.md): each row's measured TTFT over
the model's TTFT of one request alone (the static-batch kind, batch 1, same deployment),
median and spread per (engine, GPU, client concurrency). A fixed front-end latency would
make the ratio fall as the prefill grows; queueing of prefills keeps it a function of the
concurrency. The rule ratio = a + b x concurrency is fitted on the vLLM H100 rows (medians
per concurrency) and its TTFT error printed on every other (engine, GPU), held out.

``--prompt-load``: per campaign, the prompt work each row reports as a share of what its
deployment can do: measured requests per second (clients / (TTFT + (output - 1) x TPOT))
times the model's prefill time of one prompt alone (per replica, rows without attention
DP). A saturated engine approaches 1; a row well above it served its prompts faster than
one prompt at a time can be computed (prefix-cache hits, shared prompts), which a
measurement of the engine-free step can confirm (docs/load.md).

``--unrecorded-kv-dtype fp8``: the rows do not record their KV-cache precision; the
converter leaves it to the engine's default (16 bits, or the checkpoint's where the engine
follows it). This reading predicts every row of an 8-bit or narrower checkpoint with no
recorded KV precision with an FP8 cache instead (``--save``: write the result as JSON
for ``--json`` and ``--campaigns``), so the two readings can be compared per campaign.
Diagnostic only: the accuracy table is written from the rows as recorded.

``--write-accuracy``: the MAPE table (per engine and GPU, per engine, all rows) as
``energylens/data/accuracy/aiconfigurator_load.yaml``, which ``predict`` reads to state
the TTFT and TPOT error to expect of a ``load`` prediction
(``energylens.validation.expected_error``); with ``--disaggregated RESULT`` (a saved
result of ``data/measurements/aiconfigurator/silicon_sample_disagg.csv``, the rows served
on separate prefill and decode pools) their table beside it, which ``docs/accuracy.md``
shows.

``--scale-bound``: how low any correction by a constant factor could take each engine's
TPOT MAPE: the factor per engine, per (engine, GPU) and per (engine, GPU, model) that
minimises the MAPE of its own rows, fitted on the very rows it is scored on (in sample: a
bound, not an accuracy). Where even one factor per (engine, GPU, model) leaves an engine
above its target, no per-engine constant can meet it; the rest is shape within a model's
campaigns (concurrency, lengths) and what the rows do not record.

``--engine-time-bound``: how far engine constants could take each engine's TPOT MAPE:
every row's predicted TPOT with, to first order, the shipped time per step and per running
sequence (concurrency over the row's schedulers, capped at its ``max_batch_size``) taken out
and three non-negative times put in: per step, per running sequence, and per decoder layer
under tensor parallelism (TP > 1), chosen on a grid per engine to minimise its MAPE: in
sample, and with each GPU and each model held out (chosen on the engine's other rows, scored
on the held-out ones). First order: the shift ignores what a slower step does to queues and
prompt interleaving.

``--campaigns``: TPOT error per measurement campaign (engine, GPU, model, the engine build
named in the provenance and the month measured). One model on one GPU and engine measured
in several campaigns shows where a campaign ran something the row does not record (docs/
load.md: TensorRT-LLM DeepSeek-R1 campaigns 1.5-2x faster than others at low
concurrency, the signature of multi-token prediction).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import statistics
import tempfile
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from energylens.cli.main import main as energylens
from energylens.errors import EnergyLensError
from energylens.measurements.convert.kv_evidence import NARROW
from energylens.measurements.user_csv import UnsupportedRow, load_user_csv, row_case
from energylens.predict import predict

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "data" / "measurements" / "aiconfigurator" / "silicon_sample_agg.csv"
ACCURACY = REPO / "energylens" / "data" / "accuracy" / "aiconfigurator_load.yaml"
#: AIConfigurator's disaggregated rows (``measurements convert aiconfigurator
#: --disaggregated``): ``--rows`` them for their table, ``--disaggregated`` a saved result
#: of them to write it beside the aggregated one.
DISAGG_ROWS = REPO / "data" / "measurements" / "aiconfigurator" / "silicon_sample_disagg.csv"


def _validate(rows: Path) -> dict[str, object]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if energylens(["validate", "measurements", str(rows), "--json"]):
            raise SystemExit("validation failed")
    result: dict[str, object] = json.loads(out.getvalue())
    return result


def _converted(silicon: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        rows = Path(folder) / "aic.csv"
        if energylens(["measurements", "convert", "aiconfigurator", str(silicon), "-o", str(rows)]):
            raise SystemExit("conversion failed")
        return _validate(rows)


def _campaign(provenance: str) -> str:
    """The engine build and month a row's provenance names (``1.2.0rc6.post3 2026-02``), or
    the build folder of a gap-analysis source file."""
    fields = dict(part.strip().split("=", 1) for part in provenance.split(";") if "=" in part)
    if "source_file" in fields:  # gap-analysis rows: .../<gpu>/<engine>/<build>/<model>.csv
        return f"{Path(fields['source_file']).parent.name} gap-analysis"
    build = fields.get("image", "").rsplit(":", 1)[-1]
    if not build:  # db-dump rows name the image as a bare last field
        build = provenance.rsplit(";", 1)[-1].strip().rsplit(":", 1)[-1]
    return f"{build[-22:]} {fields.get('measured', '?')[:7]}"


def campaigns(result: dict[str, Any]) -> None:
    """TPOT and TTFT MAPE and median signed error per (engine, GPU, model, campaign)."""
    errors: dict[tuple[str, str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in result["rows"]:
        measured, predicted = row["input"], row["predicted"]
        if predicted:
            key = (measured["runtime"], measured["gpu"], measured["model"],
                   _campaign(str(measured.get("provenance", ""))))
            errors[key].append(((predicted["tpot_s"] / measured["tpot_s"] - 1) * 100,
                                (predicted["ttft_s"] / measured["ttft_s"] - 1) * 100))
    print("| engine | GPU | model | campaign (build, month measured) | rows | TPOT MAPE | "
          "TPOT median error | TTFT MAPE | TTFT median error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (engine, gpu, model, campaign), pairs in sorted(errors.items()):
        tpot, ttft = ([p[i] for p in pairs] for i in (0, 1))
        print(f"| {engine} | {gpu} | {model} | {campaign} | {len(pairs)} | "
              f"{statistics.mean(abs(e) for e in tpot):.1f} % | {statistics.median(tpot):+.1f} % | "
              f"{statistics.mean(abs(e) for e in ttft):.1f} % | {statistics.median(ttft):+.1f} % |")


def layouts(result: dict[str, Any]) -> None:
    """TPOT MAPE and median signed error per (engine, parallel layout) over the MoE models'
    rows without attention DP: experts split by TP alone against experts placed by EP."""
    from energylens.model import get_model

    is_moe: dict[str, bool] = {}
    errors: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for row in result["rows"]:
        measured, predicted = row["input"], row["predicted"]
        if not predicted or int(measured.get("attention_dp") or 1) > 1:
            continue
        name = str(measured["model"])
        if name not in is_moe:
            is_moe[name] = get_model(name).moe is not None
        if is_moe[name]:
            key = (measured["runtime"], int(measured.get("tp") or 1), int(measured.get("ep") or 1))
            errors[key].append((predicted["tpot_s"] / measured["tpot_s"] - 1) * 100)
    print("| engine | layout | rows | TPOT MAPE | TPOT median error |")
    print("|---|---|---|---|---|")
    for (engine, tp, ep), signed in sorted(errors.items()):
        layout = f"TP{tp}" + (f" EP{ep}" if ep > 1 else "")
        print(f"| {engine} | {layout} | {len(signed)} | "
              f"{statistics.mean(abs(e) for e in signed):.1f} % | "
              f"{statistics.median(signed):+.1f} % |")


def with_kv_dtype(rows: Path, kv_dtype: str, folder: Path) -> Path:
    """A copy of the measurement CSV ``rows`` in which every row of a narrow checkpoint
    without a recorded KV precision has ``kv_dtype``."""
    with rows.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields, table = list(reader.fieldnames or []), list(reader)
    out = folder / f"kv-{kv_dtype}.csv"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in table:
            if row.get("dtype") in NARROW and not row.get("kv_dtype"):
                row = {**row, "kv_dtype": kv_dtype}
            writer.writerow(row)
    return out


#: The subset the concurrency rule is fitted on; every other (engine, GPU) is held out.
FIT_ON = ("vllm", "h100_sxm")


def _alone(row: Any, cache: dict[tuple[object, ...], float]) -> tuple[Any, float] | None:
    """The row's case and the model's TTFT of one of its prompts alone (batch 1, the same
    deployment; cached per deployment and prompt), or None when the row is not readable."""
    try:
        case = row_case(row)
    except (EnergyLensError, UnsupportedRow):
        return None
    single = replace(case.workload, kind="batch", batch=1.0, output_tokens=2.0,
                     concurrency=None, request_rate=None, num_requests=None)
    key = (case.model.name, case.gpu, case.deployment, single)
    if key not in cache:
        try:
            cache[key] = predict(model=case.model, gpu=case.gpu, deployment=case.deployment,
                                 workload=single).ttft_s
        except EnergyLensError:
            cache[key] = float("nan")
    return case, cache[key]


def _alone_ttft(rows: Path) -> list[tuple[str, str, int, float, float]]:
    """(engine, GPU, concurrency, measured TTFT, TTFT of one request alone) per row."""
    cache: dict[tuple[object, ...], float] = {}
    out = []
    for row in load_user_csv(rows).rows:
        found = _alone(row, cache) if "ttft_s" in row.measured else None
        if found is None:
            continue
        v = row.values
        out.append((str(v["runtime"]), str(row.columns["gpu"]), int(v["concurrency"]),
                    row.measured["ttft_s"], found[1]))
    return out


def prefill_ratio(rows: Path) -> None:
    """Print the ratio table and the held-out error of the fitted concurrency rule."""
    data = [r for r in _alone_ttft(rows) if r[4] == r[4] and r[4] > 0]
    groups: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for engine, gpu, clients, measured, alone in data:
        groups[(engine, gpu)][clients].append(measured / alone)
    print("| engine | GPU | concurrency: median ratio (quartiles) [rows] |\n|---|---|---|")
    for (engine, gpu), by_c in sorted(groups.items()):
        cells = []
        for clients, ratios in sorted(by_c.items()):
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            cells.append(f"{clients}: {statistics.median(ratios):.1f} ({q[0]:.1f}-{q[2]:.1f}) "
                         f"[{len(ratios)}]")
        print(f"| {engine} | {gpu} | {'; '.join(cells)} |")
    fit = groups[FIT_ON]
    xs = sorted(fit)
    ys = [statistics.median(fit[c]) for c in xs]
    slope, intercept = statistics.linear_regression(xs, ys)
    print(f"\nfitted on {FIT_ON}: ratio = {intercept:.2f} + {slope:.4f} x concurrency")
    print("| engine | GPU | rows | TTFT MAPE of the rule |\n|---|---|---|---|")
    for (engine, gpu), by_c in sorted(groups.items()):
        errors = [abs((intercept + slope * c) / r - 1) * 100 for c, rs in by_c.items() for r in rs]
        held = "" if (engine, gpu) != FIT_ON else " (fitted)"
        print(f"| {engine} | {gpu}{held} | {len(errors)} | {statistics.mean(errors):.1f} % |")


def prompt_load(rows: Path) -> None:
    """The largest prompt load per campaign, and its rows above 1.3."""
    cache: dict[tuple[object, ...], float] = {}
    loads: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for row in load_user_csv(rows).rows:
        v = row.values
        if int(float(v.get("attention_dp") or 1)) != 1 or int(float(v.get("dp") or 1)) != 1:
            continue
        found = _alone(row, cache) if {"ttft_s", "tpot_s"} <= set(row.measured) else None
        if found is None:
            continue
        case, alone = found
        e2e = row.measured["ttft_s"] + (float(v["output_tokens"]) - 1) * row.measured["tpot_s"]
        campaign = _campaign(str(row.columns.get("provenance", "")))
        loads[(str(v["runtime"]), str(row.columns["gpu"]), case.model.name, campaign)].append(
            float(v["concurrency"]) / e2e * alone)
    print("| engine | GPU | model | campaign | rows | largest prompt load | rows above 1.3 |")
    print("|---|---|---|---|---|---|---|")
    for (engine, gpu, model, campaign), values in sorted(
            loads.items(), key=lambda kv: -max(kv[1])):
        print(f"| {engine} | {gpu} | {model} | {campaign} | {len(values)} | {max(values):.2f} "
              f"| {sum(x > 1.3 for x in values)} |")


def write_accuracy(errors: dict[tuple[str, str], dict[str, list[float]]], *, source: Path,
                   kv_limited: dict[str, list[float]],
                   apart: dict[str, dict[str, list[float]]] | None = None,
                   disaggregated: tuple[_Errors, Path] | None = None) -> None:
    """The MAPE (a share) of TTFT and TPOT per (engine, GPU), per engine, over all rows and
    over the rows whose prediction the KV cache decided (``kv_limited``: a row's ``note``)
    and over each subset of :data:`APART` (``apart``), as the YAML file ``expected_error``
    reads (GPU names as ``energylens gpus`` lists them); ``disaggregated``: the errors of
    the disaggregated rows and their file, written apart the same way."""
    import datetime
    import hashlib

    import yaml

    from energylens.hardware import load_gpu

    def entry(rows: list[dict[str, list[float]]]) -> dict[str, float]:
        ttft = [e for group in rows for e in group["ttft_s"]]
        tpot = [e for group in rows for e in group["tpot_s"]]
        return {"rows": len(ttft), "ttft_s": round(statistics.mean(ttft) / 100, 4),
                "tpot_s": round(statistics.mean(tpot) / 100, 4)}

    engines = sorted({engine for engine, _ in errors})
    calibration = REPO / "energylens" / "data" / "calibration.yaml"
    document = {
        "generated_by": "python benchmarks/validate_load_aic.py --write-accuracy",
        "date": datetime.date.today().isoformat(),
        # the shipped calibration the rows were predicted with (tests hold the two together)
        "calibration_sha256": hashlib.sha256(calibration.read_bytes()).hexdigest(),
        "source": str(source.resolve().relative_to(REPO)) if source.resolve().is_relative_to(REPO)
        else str(source),
        "what": "MAPE (a share) of the load kind's mean TTFT and TPOT on AIConfigurator's measured "
                "aggregated serving rows (closed loops of client concurrency 1-1024, fixed "
                "lengths), predicted with the shipped calibration, which was not fitted on them "
                "(except the draft acceptance of three TensorRT-LLM DeepSeek-R1 campaigns, "
                "docs/load.md)",
        "groups": [{"runtime": engine, "gpu": load_gpu(gpu).name, **entry([group])}
                   for (engine, gpu), group in sorted(errors.items())],
        "runtimes": {engine: entry([g for (e, _), g in errors.items() if e == engine])
                     for engine in engines},
        "all": entry(list(errors.values())),
    }
    if kv_limited:  # rows whose predicted run the KV cache decided (queued or preempted
        # requests): their TTFT hangs on a KV precision the rows do not record (docs/load.md)
        document["kv_limited"] = entry([kv_limited])
    for name, rows in (apart or {}).items():  # subsets kept in every figure, shown apart
        if rows:
            document[name] = entry([rows])
    if disaggregated is not None:  # two pools per row: not what a colocated load reads
        pools, where = disaggregated
        document["disaggregated"] = {
            "source": str(where.resolve().relative_to(REPO))
            if where.resolve().is_relative_to(REPO) else str(where),
            "what": "MAPE (a share) of the mean TTFT and TPOT of AIConfigurator's measured "
                    "disaggregated rows that name their prefill and decode workers (closed "
                    "loops of 1-12,288 clients); the TTFT holds the request handoff fitted "
                    "on the 46 of them at 8 clients or fewer (held out by engine and by GPU: "
                    "benchmarks/fit_disagg_handoff.py)",
            "groups": [{"runtime": engine, "gpu": load_gpu(gpu).name, **entry([group])}
                       for (engine, gpu), group in sorted(pools.items())],
            "all": entry(list(pools.values()))}
    ACCURACY.parent.mkdir(parents=True, exist_ok=True)
    ACCURACY.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    print(f"wrote {ACCURACY}")


def _best_scale_mape(pairs: list[tuple[float, float]]) -> float:
    """The least MAPE (%) of ``scale x predicted`` against measured over (measured,
    predicted) ``pairs``, the scale searched on a grid from 1/3 to 3 (in sample)."""
    best = float("inf")
    for step in range(-1100, 1101):
        scale = 3.0 ** (step / 1100)
        best = min(best, statistics.mean(abs(scale * p / m - 1) for m, p in pairs))
    return 100 * best


def scale_bound(result: dict[str, Any]) -> None:
    """Per engine: TPOT MAPE now and with the best factor per engine, per (engine, GPU)
    and per (engine, GPU, model), each fitted on the rows it is scored on."""
    rows = [(r["input"], r["predicted"]) for r in result["rows"] if r["predicted"]]
    print("| engine | rows | TPOT MAPE | best factor per engine | per (engine, GPU) "
          "| per (engine, GPU, model) |")
    print("|---|---|---|---|---|---|")
    for engine in sorted({m["runtime"] for m, _ in rows}):
        mine = [(m, p) for m, p in rows if m["runtime"] == engine]
        pairs = [(m["tpot_s"], p["tpot_s"]) for m, p in mine]
        cells = [f"{statistics.mean(abs(p / m - 1) for m, p in pairs) * 100:.1f} %"]
        for keys in ((), ("gpu",), ("gpu", "model")):
            groups: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
            for m, p in mine:
                groups[tuple(str(m[k]) for k in keys)].append((m["tpot_s"], p["tpot_s"]))
            total = sum(_best_scale_mape(g) * len(g) for g in groups.values())
            cells.append(f"{total / len(pairs):.1f} %")
        print(f"| {engine} | {len(pairs)} | " + " | ".join(cells) + " |")


#: Grid of the engine times put in (s): per step, per running sequence, per decoder layer
#: under tensor parallelism.
STEP_SHIFTS = [i * 1.0e-4 for i in range(21)]
SEQUENCE_SHIFTS = [i * 4.0e-6 for i in range(13)]
TP_LAYER_SHIFTS = [i * 5.0e-6 for i in range(9)]


def _engine_rows(result: dict[str, Any], engine: str) -> list[tuple[str, str, list[float]]]:
    """(GPU, model, [measured TPOT, predicted TPOT less the shipped step and sequence
    times, running sequences, TP layers]) per row."""
    from energylens.calibration.file import default_calibration
    from energylens.hardware import load_gpu
    from energylens.model.zoo import get_model

    calibration = default_calibration()
    out = []
    for r in result["rows"]:
        m, p = r["input"], r["predicted"]
        if not p or m["runtime"] != engine:
            continue
        ranks = int(m.get("attention_dp") or 1)
        schedulers = max(1, int(m["num_gpus"]) // (int(m["tp"]) * ranks * int(m.get("pp") or 1))) \
            * ranks
        running = float(m["concurrency"]) / schedulers
        if m.get("max_batch_size"):
            running = min(running, float(m["max_batch_size"]))
        layers = get_model(str(m["model"])).num_layers if int(m["tp"]) > 1 else 0
        shipped = calibration.runtime(runtime=engine, gpu=load_gpu(str(m["gpu"])).name)
        rest = float(p["tpot_s"]) - shipped.step_overhead_s \
            - shipped.per_sequence_overhead_s * running
        out.append((str(m["gpu"]), str(m["model"]),
                    [float(m["tpot_s"]), rest, running, float(layers)]))
    return out


def _best_shift(rows: list[list[float]]) -> tuple[float, tuple[float, float, float]]:
    """The least TPOT MAPE over the shift grid on ``rows``, and the shifts reaching it."""
    import numpy as np

    a = np.asarray(rows)
    best = (float("inf"), (0.0, 0.0, 0.0))
    for step in STEP_SHIFTS:
        for seq in SEQUENCE_SHIFTS:
            base = a[:, 1] + step + seq * a[:, 2]
            for layer in TP_LAYER_SHIFTS:
                mape = float(np.mean(np.abs(np.maximum(base + layer * a[:, 3], 1e-6) / a[:, 0] - 1)))
                if mape < best[0]:
                    best = (mape, (step, seq, layer))
    return best


def _held_out(rows: list[tuple[str, str, list[float]]], key: int) -> float:
    """Pooled MAPE of each group of ``key`` (0: GPU, 1: model) under the shifts chosen on
    the engine's other rows."""
    import numpy as np

    total = 0.0
    for group in sorted({r[key] for r in rows}):
        train = [r[2] for r in rows if r[key] != group]
        test = np.asarray([r[2] for r in rows if r[key] == group])
        if not train:
            return float("nan")
        step, seq, layer = _best_shift(train)[1]
        shifted = test[:, 1] + step + seq * test[:, 2] + layer * test[:, 3]
        total += float(np.sum(np.abs(np.maximum(shifted, 1e-6) / test[:, 0] - 1)))
    return total / len(rows)


def engine_time_bound(result: dict[str, Any]) -> None:
    """Per engine: TPOT MAPE now, with the best engine-time shifts in sample, and with each
    GPU or model held out (``--engine-time-bound``)."""
    print("| engine | rows | TPOT MAPE | engine times chosen in sample (per step, per "
          "sequence, per TP layer) | each GPU held out | each model held out |")
    print("|---|---|---|---|---|---|")
    engines = sorted({r["input"]["runtime"] for r in result["rows"] if r["predicted"]})
    for engine in engines:
        rows = _engine_rows(result, engine)
        now = statistics.mean(abs(p["tpot_s"] / m["tpot_s"] - 1) for m, p in (
            (r["input"], r["predicted"]) for r in result["rows"])
            if p and m["runtime"] == engine)
        mape, (step, seq, layer) = _best_shift([r[2] for r in rows])
        print(f"| {engine} | {len(rows)} | {100 * now:.1f} % | {100 * mape:.1f} % "
              f"({step * 1e6:+.0f} us, {seq * 1e6:+.0f} us, {layer * 1e6:+.0f} us) "
              f"| {100 * _held_out(rows, 0):.1f} % | {100 * _held_out(rows, 1):.1f} % |")


_Errors = dict[tuple[str, str], dict[str, list[float]]]


def _is_wip(measured: dict[str, Any]) -> bool:
    """Whether a row is of a run its source marks work in progress (the converter's ``wip``
    column, ``true``)."""
    return str(measured.get("wip", "")).strip().lower() == "true"


def _through_dynamo(measured: dict[str, Any]) -> bool:
    """Whether a row's run served the engine through NVIDIA Dynamo (its provenance names a
    ``dynamo_version``: Dynamo's front end and router in front of the engine's workers)."""
    return "dynamo_version=" in str(measured.get("provenance", ""))


#: Subsets of the rows shown apart (kept in every other figure): key -> (label, test).
APART = {"wip": ("rows of work-in-progress runs", _is_wip),
         "dynamo": ("rows served through NVIDIA Dynamo", _through_dynamo)}


def row_errors(result: dict[str, Any]) -> tuple[_Errors, dict[str, list[float]],
                                                 dict[str, dict[str, list[float]]], Counter[str]]:
    """Absolute and signed TTFT and TPOT errors (%) per (engine, GPU) of a ``validate
    measurements --json`` result; the absolute ones of the rows a full KV cache decided
    (a ``note``) and of each subset of :data:`APART`, apart; and the rows left out, by
    reason."""
    errors: _Errors = defaultdict(lambda: defaultdict(list))
    kv_limited: dict[str, list[float]] = defaultdict(list)
    apart: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in APART}
    left_out: Counter[str] = Counter()
    for row in result["rows"]:
        measured, predicted = row["input"], row["predicted"]
        if not predicted:
            left_out[str(row.get("error") or "no prediction").split(";")[0][:70]] += 1
            continue
        group = errors[(measured["runtime"], measured["gpu"])]
        for metric in ("ttft_s", "tpot_s"):
            error = abs(predicted[metric] / measured[metric] - 1) * 100
            group[metric].append(error)
            group[f"{metric}_signed"].append((predicted[metric] / measured[metric] - 1) * 100)
            if row.get("note"):
                kv_limited[metric].append(error)
            for name, (_, member) in APART.items():
                if member(measured):
                    apart[name][metric].append(error)
    return errors, kv_limited, apart, left_out


def error_table(errors: _Errors, *, kv_limited: dict[str, list[float]],
                apart: dict[str, dict[str, list[float]]]) -> list[str]:
    """Markdown: MAPE and median signed error per (engine, GPU), all rows, and the MAPE of
    the rows a full KV cache decided and of each subset of :data:`APART`."""
    out = ["| engine | GPU | rows | TTFT MAPE | TTFT median error | TPOT MAPE | TPOT median error |",
           "|---|---|---|---|---|---|---|"]
    every: dict[str, list[float]] = defaultdict(list)
    for (engine, gpu), group in sorted(errors.items()):
        for metric in ("ttft_s", "tpot_s"):
            every[metric] += group[metric]
        out.append(f"| {engine} | {gpu} | {len(group['ttft_s'])} | "
                   f"{statistics.mean(group['ttft_s']):.1f} % "
                   f"| {statistics.median(group['ttft_s_signed']):+.1f} % "
                   f"| {statistics.mean(group['tpot_s']):.1f} % "
                   f"| {statistics.median(group['tpot_s_signed']):+.1f} % |")
    if every:
        out.append(f"| all | | {len(every['ttft_s'])} | {statistics.mean(every['ttft_s']):.1f} % | "
                   f"| {statistics.mean(every['tpot_s']):.1f} % | |")
    for name, rows in (("rows the KV cache decided", kv_limited),
                       *((label, apart.get(key, {})) for key, (label, _) in APART.items())):
        if rows:
            out.append(f"| {name} | | {len(rows['ttft_s'])} | {statistics.mean(rows['ttft_s']):.1f} % "
                       f"| | {statistics.mean(rows['tpot_s']):.1f} % | |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--rows", type=Path, default=ROWS, help="a measurement CSV")
    source.add_argument("--silicon", type=Path, help="a raw AIConfigurator silicon_sample.csv")
    source.add_argument("--json", type=Path, help="a saved 'validate measurements --json' result")
    parser.add_argument("--prefill-ratio", action="store_true",
                        help="measured TTFT over one request's prefill, per concurrency")
    parser.add_argument("--prompt-load", action="store_true",
                        help="per campaign, the prompt work rows report over their capacity")
    parser.add_argument("--campaigns", action="store_true",
                        help="TPOT error per measurement campaign instead of per engine/GPU")
    parser.add_argument("--layouts", action="store_true",
                        help="TPOT error of the MoE models' rows per engine and TP/EP layout")
    parser.add_argument("--scale-bound", action="store_true",
                        help="the least TPOT MAPE one factor per engine / GPU / model reaches")
    parser.add_argument("--engine-time-bound", action="store_true",
                        help="the least TPOT MAPE first-order engine-time shifts reach, held out "
                             "by GPU and by model")
    parser.add_argument("--unrecorded-kv-dtype", choices=("fp8",),
                        help="read rows of 8-bit or narrower checkpoints with no recorded KV "
                             "precision as running this KV cache (diagnostic)")
    parser.add_argument("--save", type=Path, help="write the validation result as JSON")
    parser.add_argument("--write-accuracy", action="store_true",
                        help=f"write the MAPE table to {ACCURACY.relative_to(REPO)}")
    parser.add_argument("--disaggregated", type=Path, metavar="RESULT",
                        help="with --write-accuracy: a saved 'validate measurements --json' "
                             f"result of {DISAGG_ROWS.relative_to(REPO)}, written beside")
    args = parser.parse_args()
    if args.prefill_ratio:
        prefill_ratio(args.rows)
        return
    if args.prompt_load:
        prompt_load(args.rows)
        return
    if args.unrecorded_kv_dtype and (args.json or args.silicon or args.write_accuracy):
        parser.error("--unrecorded-kv-dtype reads --rows and is never written as the accuracy")
    if args.json:
        result = json.loads(args.json.read_text())
    elif args.unrecorded_kv_dtype:
        with tempfile.TemporaryDirectory() as folder:
            result = _validate(with_kv_dtype(args.rows, args.unrecorded_kv_dtype, Path(folder)))
    else:
        result = _converted(args.silicon) if args.silicon else _validate(args.rows)
    if args.save:
        args.save.write_text(json.dumps(result))
    if args.campaigns:
        campaigns(result)
        return
    if args.layouts:
        layouts(result)
        return
    if args.scale_bound:
        scale_bound(result)
        return
    if args.engine_time_bound:
        engine_time_bound(result)
        return
    errors, kv_limited, apart, left_out = row_errors(result)
    print("\n".join(error_table(errors, kv_limited=kv_limited, apart=apart)))
    if args.write_accuracy:
        pools = None
        if args.disaggregated:
            pools = (row_errors(json.loads(args.disaggregated.read_text()))[0], DISAGG_ROWS)
        write_accuracy(errors, source=args.silicon or args.rows, kv_limited=kv_limited,
                       apart=apart, disaggregated=pools)
    print("\nleft out:")
    for reason, count in left_out.most_common():
        print(f"- {count} rows: {reason}")


if __name__ == "__main__":
    main()
