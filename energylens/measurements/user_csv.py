"""The one measurement CSV that ``validate measurements`` and ``calibrate --from`` read.

A row is one measured configuration: ``model, gpu, num_gpus`` (required), the layout,
runtime and precision, the workload (``batch``: one static batch; ``serving``: steady
state at ``batch`` running sequences; ``load``: open or closed loop, answered by a
registered workload kind named ``load``, else refused) and any subset of the metric
columns in SI units. Columns the format does not know are carried through unchanged.
:func:`load_user_csv` reads and checks a file (one-line :class:`MeasurementError`);
:func:`row_case` turns a row into ``predict`` inputs, or an :class:`UnsupportedRow` with
the reason; :func:`predicted_metrics` turns a prediction into the format's metrics.
The format is documented in ``docs/measurements.md``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from energylens.cost.moe import Routing
from energylens.deployment import KV_DTYPES, WEIGHT_DTYPES, Deployment
from energylens.errors import EnergyLensError, MeasurementError
from energylens.hardware import load_gpu
from energylens.measurements.formats import read_text
from energylens.model.config import ModelConfig
from energylens.model.zoo import get_model
from energylens.runtime import get_runtime, runtime_name, runtime_names
from energylens.runtime.profile import release_key
from energylens.workloads import Prediction, Workload, kind_names

REQUIRED = ("model", "gpu", "num_gpus")
#: Layout: ``tp`` is the engine's tensor-parallel size (attention), ``ep`` its expert-
#: parallel size, ``moe_tp`` the tensor-parallel split of each expert, ``attention_dp``
#: data-parallel attention, ``dp`` independent replicas.
COUNTS = ("num_gpus", "tp", "pp", "ep", "dp", "moe_tp")
#: The engine's cap on the running requests of one scheduler, per attention rank (vLLM
#: --max-num-seqs, TensorRT-LLM --max_batch_size, SGLang --max-running-requests / dp).
#: AIConfigurator's ``batch_size`` is not it (clients per rank; docs/load.md).
SEQUENCE_CAP = "max_num_seqs"
#: The engine's prompt tokens per forward pass (``Deployment.prefill_chunk_tokens``).
PREFILL_CHUNK = "prefill_chunk_tokens"
#: Speculative decoding: draft tokens per step (MTP / EAGLE head; blank or 0: none) and
#: each draft's acceptance (blank: energylens.cost.speculative.DEFAULT_ACCEPTANCE).
SPECULATION = ("speculative_tokens", "draft_acceptance")
#: ``true`` where every sequence of a static batch was the same prompt (decoded greedily,
#: so a MoE step reads one sequence's experts; :class:`energylens.cost.moe.Routing`).
IDENTICAL_PROMPTS = "identical_prompts"
RUNTIME_COLUMNS = ("runtime", "engine", "framework", "backend")
TEXTS = ("runtime_version", "dtype", "kv_dtype", "workload")
NUMBERS = ("freq_mhz", "batch", "concurrency", "request_rate", "input_tokens", "output_tokens")
#: A load row's benchmark size: the requests its means and percentiles were taken over
#: (all of them, as benchmark_serving, GenAI-Perf and AIConfigurator report).
RUN_COUNTS = ("num_requests",)
#: A load row's prompt tokens every request shares, held once by the engine's prefix cache
#: (``Workload.shared_prefix_tokens``; blank or 0: none).
SHARED_PREFIX = "shared_prefix_tokens"
#: A load row's spread of request lengths: the coefficient of variation of the gamma its
#: input and output lengths are drawn from around their means (``Workload.length_cv``;
#: blank or 0: every request of the stated lengths).
LENGTH_CV = "length_cv"
#: Why a row is no measurement of the deployment's GPU work (``host-bound: ...``: the host
#: paced the run; ``<kind>: <why>``): predicted, never fitted on, scored apart as
#: ``<metric>[<kind>]``. The ML.ENERGY converter writes it for host-paced runs.
SCREENED = "screened"
WORKLOADS = ("batch", "serving", "load")
#: Disaggregated prefill/decode (a ``load`` row): each pool's layout on the row's GPU type,
#: ``<pool>_tp`` (attention), ``_ep``, ``_moe_tp``, ``_attention_dp`` as the colocated
#: columns, and ``_replicas`` (workers of that layout); ``num_gpus`` is both pools'.
POOLS = ("prefill", "decode")
POOL_LAYOUT = ("tp", "ep", "moe_tp", "attention_dp", "replicas")
POOL_COLUMNS = tuple(f"{pool}_{key}" for pool in POOLS for key in POOL_LAYOUT)
#: Metric columns (SI units): means, percentiles, rates, power and energy.
METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
           "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s",
           "e2e_p50_s", "e2e_p90_s", "e2e_p99_s",
           "request_throughput_per_s", "output_tokens_per_s", "total_tokens_per_s", "power_w",
           "energy_per_output_token_j", "energy_per_request_j")
KNOWN = (*REQUIRED, *COUNTS[1:], "attention_dp", *POOL_COLUMNS, SEQUENCE_CAP, PREFILL_CHUNK,
         *SPECULATION, IDENTICAL_PROMPTS, SHARED_PREFIX, LENGTH_CV, SCREENED,
         *RUNTIME_COLUMNS, *TEXTS, *NUMBERS, *RUN_COUNTS, *METRICS)
#: Metric columns given in milliseconds (``ttft_ms``, ``tpot_p90_ms``, as benchmark_serving
#: and GenAI-Perf print them) -> the SI column; their values are divided by 1,000 on reading.
MILLISECOND_METRICS = {f"{m[:-2]}_ms": m for m in METRICS if m.endswith("_s")}
#: Benchmarks' own names of columns (vLLM's flags, GenAI-Perf's and AIConfigurator's ISL /
#: OSL) -> ours. ``batch_size`` is none of ours: AIConfigurator's means clients per rank.
COLUMN_SPELLINGS = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp",
                    "expert_parallel_size": "ep", "data_parallel_size": "dp",
                    "max_concurrency": "concurrency", "isl": "input_tokens",
                    "osl": "output_tokens", "input_len": "input_tokens",
                    "output_len": "output_tokens", "num_prompts": "num_requests",
                    "gpu_count": "num_gpus", "num_gpu": "num_gpus"}
#: Provenance a converter writes (the benchmark's ``date``: ``measurements convert
#: vllm-benchmark``): carried through unread, like any other column, not noted as foreign.
CARRIED = ("date",)

#: Other spellings (vLLM's --dtype and --kv-cache-dtype, torch's names) -> ours.
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8",
           "fp8_e5m2": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
           "fp8_e4m3fn": "fp8", "fp8_block": "fp8", "fp8_dynamic": "fp8", "w8a8_fp8": "fp8",
           "fp4": "nvfp4", "f16": "fp16",  # llama.cpp's name of a 16-bit GGUF
           # 4-bit weights with 16-bit activations (vLLM/TGI --quantization names)
           "awq": "int4", "awq_marlin": "int4", "gptq": "int4", "gptq_marlin": "int4",
           "marlin": "int4", "w4a16": "int4", "int4_awq": "int4", "awq_int4": "int4",
           "int4_gptq": "int4", "gptq_int4": "int4",
           # 8-bit integer weights and activations (SmoothQuant-style W8A8)
           "w8a8": "int8", "w8a8_int8": "int8"}

#: ``attention_dp`` as SGLang's flag.
_ON, _OFF = ("true", "yes"), ("false", "no")


class UnsupportedRow(Exception):
    """A row the model cannot predict; the message is the reason reported."""


@dataclass(frozen=True, kw_only=True)
class UserRow:
    """One data row: every column as read (``columns``), the known ones parsed
    (``values``: None where empty) and the measured metrics present."""

    number: int  # 1 = first data row
    columns: dict[str, str]
    values: dict[str, Any]
    measured: dict[str, float]

    def as_input(self) -> dict[str, Any]:
        """The row's columns: known ones parsed (``attention_dp`` given as a flag as that
        flag), unknown ones unchanged."""
        def shown(column: str, raw: str) -> Any:
            value = self.values.get(column)
            if column == "attention_dp" and raw.strip().lower() in _ON + _OFF:
                return raw.strip().lower() in _ON
            return int(value) if isinstance(value, float) and value.is_integer() else value

        return {k: (shown(k, v) if k in KNOWN else v) for k, v in self.columns.items()}


@dataclass(frozen=True, kw_only=True)
class UserMeasurements:
    """A whole file: its rows and the columns it carries without reading them."""

    path: str
    rows: list[UserRow]
    ignored: tuple[str, ...]
    metrics: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Case:
    """The ``predict`` inputs of one row; a disaggregated row's ``pools`` (prefill, decode:
    each a pool's deployment on ``gpu``), whose ``deployment`` is the decode pool's."""

    model: ModelConfig
    gpu: str
    deployment: Deployment
    workload: Workload
    pools: tuple[Deployment, Deployment] | None = None


def _fail(path: Path, message: str) -> MeasurementError:
    return MeasurementError(f"{path}: {message}")


def _number(path: Path, column: str, raw: str, row: int) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _fail(path, f"column '{column}' has non-numeric value {raw!r} in row {row}") from None
    if not math.isfinite(value) or value <= 0:
        raise _fail(path, f"column '{column}' must be a positive number, got {raw!r} in row {row}")
    return value


def _nonnegative(path: Path, column: str, raw: str, row: int) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _fail(path, f"column '{column}' has non-numeric value {raw!r} in row {row}") from None
    if not math.isfinite(value) or value < 0:
        raise _fail(path, f"column '{column}' must be a number >= 0, got {raw!r} in row {row}")
    return value


def _count(path: Path, column: str, raw: str, row: int, *, zero: bool = False) -> int:
    """A whole number >= 1 (>= 0 with ``zero``)."""
    value = (_nonnegative if zero else _number)(path, column, raw, row)
    if not value.is_integer():
        raise _fail(path, f"column '{column}' must be an integer, got {raw!r} in row {row}")
    return int(value)


def _attention_dp(path: Path, raw: str, row: int) -> int:
    """``true``/``false`` (SGLang's flag: true = over every attention rank) or a size."""
    text = raw.strip().lower()
    if text in _OFF:
        return 1
    if text in _ON:
        return 0  # enabled, size not given
    return _count(path, "attention_dp", raw, row)


def _flag(path: Path, column: str, raw: str, row: int) -> bool:
    text = raw.strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise _fail(path, f"column '{column}' must be true or false, got {raw!r} in row {row}")


def _parse(path: Path, header: list[str], cells: dict[str, str], number: int) -> UserRow:
    values: dict[str, Any] = dict.fromkeys(KNOWN)
    for column in header:
        raw = (cells.get(column) or "").strip()
        if not raw or column not in KNOWN:
            continue
        if column in COUNTS or column in RUN_COUNTS or column in POOL_COLUMNS \
                or column in (SEQUENCE_CAP, PREFILL_CHUNK, "concurrency"):
            values[column] = _count(path, column, raw, number)
        elif column == "attention_dp":
            values[column] = _attention_dp(path, raw, number)
        elif column == IDENTICAL_PROMPTS:
            values[column] = _flag(path, column, raw, number)
        elif column in ("speculative_tokens", SHARED_PREFIX):
            values[column] = _count(path, column, raw, number, zero=True)
        elif column == LENGTH_CV:
            values[column] = _nonnegative(path, column, raw, number)
        elif column in NUMBERS or column in METRICS or column == "draft_acceptance":
            values[column] = _number(path, column, raw, number)
        elif column in RUNTIME_COLUMNS:
            values[column], release = _runtime_release(raw)
            if release is not None:
                given = (cells.get("runtime_version") or "").strip()
                if given and given.lstrip("vV") != release:
                    raise _fail(path, f"column '{column}' names release {release} "
                                      f"({raw.strip()!r}) where runtime_version says {given!r} "
                                      f"in row {number}")
                values["runtime_version"] = release
        else:
            values[column] = raw
    for column in REQUIRED:
        if values[column] is None:
            raise _fail(path, f"column '{column}' has no value in row {number}")
    workload = values["workload"]
    if workload is not None and workload.lower() not in WORKLOADS:
        raise _fail(path, f"column 'workload' must be one of {', '.join(WORKLOADS)}, "
                          f"got {workload!r} in row {number}")
    values["workload"] = (workload or "batch").lower()
    batch = values["batch"]
    if values["workload"] == "batch" and batch is not None and not batch.is_integer():
        raise _fail(path, f"column 'batch' must be an integer on a batch row (whole sequences), "
                          f"got {cells['batch'].strip()!r} in row {number}")
    runtimes = {values[c] for c in RUNTIME_COLUMNS if values[c] is not None}
    if len(runtimes) > 1:
        raise _fail(path, f"columns {', '.join(RUNTIME_COLUMNS)} disagree ({', '.join(sorted(runtimes))}) "
                          f"in row {number}")
    values["runtime"] = runtimes.pop() if runtimes else None
    measured = {m: float(values[m]) for m in METRICS if values[m] is not None}
    return UserRow(number=number, columns={k: cells.get(k) or "" for k in header}, values=values,
                   measured=measured)


def _table(path: Path, text: str) -> tuple[list[str], list[list[str]]]:
    """The header and the data rows (blank lines skipped), split at the file's delimiter (a
    comma, unless the header is one field holding a ';' or a tab), without the columns that
    have neither a name nor a value (a spreadsheet's trailing separators)."""
    records = [r for r in csv.reader(io.StringIO(text)) if r]
    if records and len(records[0]) == 1:
        delimiter = next((d for d in ";\t" if d in records[0][0]), None)
        if delimiter is not None:
            records = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if r]
    header = [name.strip() for name in records[0]] if records else []
    data = records[1:]
    for number, cells in enumerate(data, start=1):
        if len(cells) > len(header):
            raise _fail(path, f"row {number} has more fields than the header")
    keep = [i for i, name in enumerate(header)
            if name or any(i < len(cells) and cells[i].strip() for cells in data)]
    return [header[i] for i in keep], [[cells[i] if i < len(cells) else "" for i in keep]
                                       for cells in data]


def _seconds(milliseconds: str) -> str:
    """A millisecond cell as seconds (a cell that is no number is left for the parser to
    refuse)."""
    try:
        return repr(float(milliseconds) / 1e3) if milliseconds.strip() else milliseconds
    except ValueError:
        return milliseconds


def load_user_csv(path: str | Path) -> UserMeasurements:
    """Read a measurement CSV; one-line :class:`MeasurementError` on any problem."""
    p = Path(path)
    header, data = _table(p, read_text(p))
    spelled = {name.lower(): name for name in (*KNOWN, *CARRIED)} | COLUMN_SPELLINGS
    milliseconds = {i for i, name in enumerate(header) if name.lower() in MILLISECOND_METRICS}
    header = [MILLISECOND_METRICS[name.lower()] if i in milliseconds  # ``ttft_ms``: ttft_s
              else spelled.get(name.lower(), name)  # ``Model,GPU``: ours
              for i, name in enumerate(header)]
    data = [[_seconds(cell) if i in milliseconds else cell for i, cell in enumerate(cells)]
            for cells in data]
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise _fail(p, f"column '{duplicated[0]}' appears more than once")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise _fail(p, f"missing column{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(repr(c) for c in missing)} (required: {', '.join(REQUIRED)})")
    metrics = tuple(m for m in METRICS if m in header)
    if not metrics:
        raise _fail(p, f"no metric column; expected any of {', '.join(METRICS)}")
    rows = []
    for number, cells in enumerate(data, start=1):
        if any(v.strip() for v in cells):
            rows.append(_parse(p, header, dict(zip(header, cells, strict=True)), number))
    if not rows:
        raise _fail(p, "no data rows")
    ignored = tuple(h for h in header if h not in KNOWN and h not in CARRIED)
    return UserMeasurements(path=str(p), rows=rows, ignored=ignored, metrics=metrics)


# --- a row -> predict inputs --------------------------------------------------------------


def _dtype(raw: str | None, allowed: tuple[str, ...], what: str) -> str | None:
    if raw is None or raw.lower() == "auto":
        return None
    key = raw.strip().lower().replace("-", "_").replace(" ", "_")  # fp8-e4m3 as fp8_e4m3
    name = _DTYPES.get(key, key)
    if name not in allowed:
        raise UnsupportedRow(f"{what} {raw!r} is not modelled (known: {', '.join(allowed)})")
    return name


#: An engine named with its release in one cell: ``vLLM 0.6.3``, ``sglang==0.4.1``,
#: ``TensorRT-LLM v0.12.0`` (a release has at least a major and a minor number).
_NAMED_RELEASE = re.compile(r"^(?P<name>.*?[a-z.])[\s=_-]*v?(?P<release>\d+\.\d+\S*)$",
                            re.IGNORECASE)


def _runtime_release(raw: str) -> tuple[str, str | None]:
    """A runtime cell's registry name, and the release it names, if any."""
    text = raw.strip()
    found = _NAMED_RELEASE.match(text)
    if found is not None and runtime_name(found.group("name")) in runtime_names():
        return runtime_name(found.group("name")), found.group("release")
    return runtime_name(text), None


def _release(raw: str | None) -> str | None:
    """The row's engine release, or None (the profile's) for a build that names none
    (``nightly-dev``): which release's facts it has is not known."""
    if raw is None:
        return None
    try:
        release_key(raw)
    except EnergyLensError:
        return None
    return raw


def _deployment(v: dict[str, Any], runtime: str, model: ModelConfig) -> Deployment:
    """The engine's layout (``tp`` attention TP, ``ep``, ``moe_tp``) as a Deployment, whose
    ``tp`` splits each expert and whose attention runs over ``tp x ep`` GPUs. A dense
    model has no experts: its ``moe_tp`` is not read. With ``attention_dp`` (a size, or
    enabled without one: one GPU per attention rank, as TensorRT-LLM's
    ``enable_attention_dp``) ``tp`` is one attention rank's TP and the MoE layer spans
    ``tp x attention_dp`` GPUs split ``ep x moe_tp`` ways."""
    n, pp, ep = int(v["num_gpus"]), int(v["pp"] or 1), int(v["ep"] or 1)
    dp = v["dp"]
    attention_dp = v["attention_dp"]
    common = {"num_gpus": n, "ep": ep, "pp": pp, "dp": dp, "runtime": runtime,
              "runtime_version": _release(v["runtime_version"]),
              "weight_dtype": _dtype(v["dtype"], WEIGHT_DTYPES, "dtype"),
              "kv_dtype": _dtype(v["kv_dtype"], KV_DTYPES, "kv_dtype"), "freq_mhz": v["freq_mhz"],
              "max_num_seqs": v[SEQUENCE_CAP], "prefill_chunk_tokens": v[PREFILL_CHUNK],
              "speculative_tokens": v["speculative_tokens"] or 0,
              "draft_acceptance": v["draft_acceptance"],
              "routing": Routing(identical_sequences=bool(v[IDENTICAL_PROMPTS]))}
    if attention_dp is not None and attention_dp != 1:
        if model.moe is None:  # before its tp: too few GPUs would make that 0
            raise UnsupportedRow(f"attention_dp lays out a MoE layer but {model.name} is a "
                                 "dense model (use dp for replicas)")
        if attention_dp == 0:  # enabled, size not given: every GPU of a replica is a rank
            attention_dp, tp = n // (pp * (dp or 1)), 1
        else:
            tp = v["tp"] or n // (pp * (dp or 1) * attention_dp)
        return Deployment(tp=tp, attention_dp=attention_dp, moe_tp=v["moe_tp"], **common)
    tp = v["tp"] or n // (pp * (dp or 1))
    if model.moe is not None and v["moe_tp"] is not None:  # ep x moe_tp must be tp
        return Deployment(tp=tp, moe_tp=v["moe_tp"], **common)
    if tp < 1 or tp % ep:
        raise UnsupportedRow(f"ep = {ep} does not divide tp = {tp}: the experts' group is the "
                             "attention group in the modelled layout")
    return Deployment(tp=tp // ep, **common)


def _workload(v: dict[str, Any]) -> Workload:
    kind = v["workload"]
    if v[IDENTICAL_PROMPTS] and kind != "batch":
        raise UnsupportedRow(f"{IDENTICAL_PROMPTS} describes a static batch; a {kind} row's "
                             "sequences are at different steps")
    if v[SHARED_PREFIX] and kind != "load":
        raise UnsupportedRow(f"{SHARED_PREFIX} is a load row's (requests sharing a cached "
                             f"prefix); a {kind} row has none")
    if v[LENGTH_CV] and kind != "load":
        raise UnsupportedRow(f"{LENGTH_CV} is a load row's (requests of varied lengths); a "
                             f"{kind} row's sequences have the stated lengths")
    for column in ("input_tokens", "output_tokens"):
        if v[column] is None:
            raise UnsupportedRow(f"no {column}: needed to predict a {kind} row")
    lengths = {"input_tokens": v["input_tokens"], "output_tokens": v["output_tokens"]}
    if kind == "batch":
        return Workload(kind="batch", batch=int(v["batch"] or 1), **lengths)
    if kind == "serving":
        if v["batch"] is None:
            raise UnsupportedRow("no batch: a serving row needs its mean running sequences")
        return Workload(kind="serving", batch=v["batch"], **lengths)
    if "load" not in kind_names():
        raise UnsupportedRow("serving under load is not simulated (no workload kind named "
                             "'load' is registered)")
    known = {f.name for f in fields(Workload)}
    if v["concurrency"] is not None and v["request_rate"] is not None:
        raise UnsupportedRow("an open loop capped at a concurrency (request_rate and "
                             "concurrency: vLLM --request-rate with --max-concurrency) is not "
                             "modelled")
    if v["concurrency"] is not None and "concurrency" in known:  # closed loop
        extra: dict[str, Any] = {"concurrency": v["concurrency"]}
    elif v["request_rate"] is not None and "request_rate" in known:  # open loop
        extra = {"request_rate": v["request_rate"]}
    else:
        raise UnsupportedRow("a load row needs its concurrency (closed loop) or request_rate "
                             "(open loop)")
    if v["num_requests"] is not None:  # a benchmark of these requests, averaged over all
        extra |= {"num_requests": v["num_requests"], "warmup_fraction": 0.0}
    if v[SHARED_PREFIX]:
        extra |= {"shared_prefix_tokens": v[SHARED_PREFIX]}
    if v[LENGTH_CV]:
        extra |= {"length_cv": v[LENGTH_CV]}
    return Workload(kind="load", batch=v["batch"] or 1, **lengths, **extra)


def _pools(v: dict[str, Any], runtime: str, model: ModelConfig,
           ) -> tuple[Deployment, Deployment] | None:
    """A disaggregated row's (prefill, decode) deployments, or None for a colocated row."""
    if all(v[c] is None for c in POOL_COLUMNS):
        return None
    if v["workload"] != "load":
        raise UnsupportedRow(f"prefill and decode pools serve a load row; a {v['workload']} "
                             "row runs on one deployment")
    if v["dp"] is not None:
        raise UnsupportedRow("dp beside pools: a pool's workers are its <pool>_replicas")
    pools = []
    for pool in POOLS:
        tp, ep, moe_tp, adp, replicas = (v[f"{pool}_{k}"] for k in POOL_LAYOUT)
        if tp is None:
            raise UnsupportedRow(f"no {pool}_tp: a pool's layout needs its tensor-parallel size")
        replicas = replicas or 1
        gpus = replicas * tp * (adp or 1) * int(v["pp"] or 1)
        pools.append(_deployment(v | {"num_gpus": gpus, "tp": tp, "ep": ep, "moe_tp": moe_tp,
                                      "attention_dp": adp, "dp": replicas}, runtime, model))
    if int(v["num_gpus"]) != pools[0].total_gpus + pools[1].total_gpus:
        raise UnsupportedRow(f"num_gpus {int(v['num_gpus'])} is not the pools' "
                             f"{pools[0].total_gpus} + {pools[1].total_gpus} GPUs")
    return pools[0], pools[1]


def row_case(row: UserRow) -> Case:
    """The ``predict`` inputs of ``row``; raises :class:`UnsupportedRow` with the reason."""
    v = row.values
    runtime = v["runtime"] or "vllm"
    if runtime not in runtime_names():
        raise UnsupportedRow(f"runtime {runtime!r} has no profile (known: {', '.join(runtime_names())})")
    try:
        get_runtime(runtime)
        model = get_model(str(v["model"]))
        pools = _pools(v, runtime, model)
        deployment = _deployment(v, runtime, model) if pools is None else pools[1]
        workload = _workload(v)
        gpu = load_gpu(str(v["gpu"])).name
    except EnergyLensError as exc:
        raise UnsupportedRow(str(exc).strip().splitlines()[0]) from None
    return Case(model=model, gpu=gpu, deployment=deployment, workload=workload, pools=pools)


def predicted_metrics(prediction: Prediction, workload: Workload) -> dict[str, float]:
    """The format's metrics from a prediction of ``workload``.

    ``batch``: every request of a static batch shares one timeline, so its percentiles are
    its means; ``serving``: means from the mean step, ``*_p50_s`` from the median step;
    ``load``: the means and percentiles the load kind's result carries (``<latency>_mean_s``
    as ``<latency>_s``, ``<latency>_pNN_s``, ``requests_per_s``).
    """
    p, batch = prediction, workload.batch
    s_in, s_out = workload.input_tokens, workload.output_tokens
    out = {"power_w": p.avg_power_w, "energy_per_output_token_j": p.energy_per_output_token_j,
           "energy_per_request_j": p.energy_per_request_j,
           "output_tokens_per_s": p.output_tokens_per_s,
           "total_tokens_per_s": p.output_tokens_per_s * (s_in + s_out) / s_out,
           "request_throughput_per_s": p.output_tokens_per_s / s_out, "ttft_s": p.ttft_s}
    if workload.kind == "batch":
        e2e = p.prefill.latency_s + p.decode.latency_s
        out.update(tpot_s=p.tpot_s, itl_s=p.tpot_s, e2e_s=e2e, e2e_p50_s=e2e, e2e_p90_s=e2e,
                   e2e_p99_s=e2e,
                   ttft_p50_s=p.ttft_s, ttft_p90_s=p.ttft_s, ttft_p99_s=p.ttft_s,
                   tpot_p50_s=p.tpot_s, tpot_p90_s=p.tpot_s, tpot_p99_s=p.tpot_s,
                   itl_p50_s=p.tpot_s, itl_p90_s=p.tpot_s, itl_p99_s=p.tpot_s,
                   request_throughput_per_s=batch / e2e)
    elif workload.kind == "serving":
        step = batch / p.output_tokens_per_s
        out.update(tpot_s=step, itl_s=step, tpot_p50_s=p.tpot_s, itl_p50_s=p.tpot_s,
                   e2e_s=p.ttft_s + (s_out - 1) * step)
    else:
        load = getattr(p, "load", None)
        found = load if isinstance(load, dict) else {}
        names = {m: m for m in METRICS} | {f"{x}_s": f"{x}_mean_s" for x in ("ttft", "tpot", "itl", "e2e")}
        names["request_throughput_per_s"] = "requests_per_s"
        out.update({m: float(found[key]) for m, key in names.items() if key in found})
    return {k: float(v) for k, v in out.items()}
