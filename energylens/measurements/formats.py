"""Measurement file loaders for ``energylens validate FORMAT FILE`` and ``energylens calibrate``.

``load_measurements(format=..., path=...)`` reads one file into a ``MeasurementSet``: one
``MeasurementRow`` per measured configuration, with the source's own column names in
``input`` (the key fields) and ``measured`` (the metrics, in the source's units), and
whatever else a predictor needs in ``context`` (task, GPU, interconnect, ...). Any
problem with a file raises ``MeasurementError`` with a one-line message that names the
file and, where relevant, the column or key. Formats (see ``data/measurements/SOURCES.md``):

- ``mlenergy``: ML.ENERGY leaderboard task file or model file (JSON).
- ``vidur-mlp``: Vidur per-operator compute profile ``mlp.csv`` (ms).
- ``vidur-network``: Vidur ``all_reduce.csv`` / ``send_recv.csv`` (bytes, ms).
- ``splitwise``: Splitwise-style prompt/token timing CSV (ms).
- ``llmcompass-matmul``: LLMCompass ``matmul_<GPU>.csv`` (no header, units in the cells).
- ``llmcompass-layer``: LLMCompass ``transformer_{prefill,decode}_<GPU>.csv`` (one GPT-3-175B
  layer's twelve op times, one per line, seconds).
- ``aiconfigurator-nccl``: AIConfigurator's NCCL ``nccl_perf.parquet`` (elements, ms; as
  ``vidur-network`` rows, in bytes).
- ``llm-inference-bench``: Argonne LLM-Inference-Bench ``All_results.csv``,
  ``power_results.csv`` and ``TP_EP_PP_results.csv`` (s, tokens/s, mW).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energylens.errors import MeasurementError

MAX_OP_MS = 10_000.0  # a per-kernel / per-collective median above 10 s means a unit error
MAX_POWER_PER_GPU_W = 2_000.0  # above any GPU's board power: a mW or kW mix-up




@dataclass(frozen=True, kw_only=True)
class MeasurementRow:
    """One measured configuration: key fields, measured metrics and predictor context."""

    input: dict[str, Any]
    measured: dict[str, float]
    context: dict[str, Any]


@dataclass
class MeasurementSet:
    """All rows of one measurement file."""

    format: str
    file: str
    rows: list[MeasurementRow]


# --- value parsing ---------------------------------------------------------------------


def _fail(path: Path, message: str) -> MeasurementError:
    return MeasurementError(f"{path}: {message}")


def _where(row: int | None) -> str:
    return "" if row is None else f" in row {row}"


def _float(path: Path, column: str, raw: Any, row: int | None = None) -> float:
    """A finite number from a CSV cell or JSON value."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise _fail(path, f"column '{column}' has no value{_where(row)}")
    if isinstance(raw, bool):
        raise _fail(path, f"column '{column}' has non-numeric value {raw!r}{_where(row)}")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise _fail(path, f"column '{column}' has non-numeric value {raw!r}{_where(row)}") from None
    if not math.isfinite(value):
        raise _fail(path, f"column '{column}' has non-finite value {raw!r}{_where(row)}")
    return value


def _positive(path: Path, column: str, raw: Any, row: int | None = None) -> float:
    value = _float(path, column, raw, row)
    if value <= 0:
        raise _fail(path, f"column '{column}' must be positive, got {value:g}{_where(row)}")
    return value


def _count(path: Path, column: str, raw: Any, row: int | None = None) -> int:
    """A positive integer (``8`` or ``8.0``)."""
    value = _positive(path, column, raw, row)
    if not value.is_integer():
        raise _fail(path, f"column '{column}' must be an integer, got {raw!r}{_where(row)}")
    return int(value)


def _ms(path: Path, column: str, raw: Any, row: int | None = None) -> float:
    """A time in milliseconds: positive and below ``MAX_OP_MS``."""
    value = _positive(path, column, raw, row)
    if value >= MAX_OP_MS:
        raise _fail(
            path,
            f"column '{column}' value {value:g}{_where(row)} is not below {MAX_OP_MS:g}; "
            "expected milliseconds",
        )
    return value


def _bool(path: Path, column: str, raw: Any, row: int | None = None) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise _fail(path, f"column '{column}' has non-boolean value {raw!r}{_where(row)}")


def _text(path: Path, column: str, raw: Any, row: int | None = None) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise _fail(path, f"column '{column}' must be a non-empty string{_where(row)}")
    return raw.strip()


# --- file reading ----------------------------------------------------------------------


def read_text(path: Path) -> str:
    """A measurement file's UTF-8 text; one-line :class:`MeasurementError` if it is missing,
    a folder, not UTF-8 or empty."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, expected a file") from None
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text") from None
    if not text.strip():
        raise _fail(path, "empty file")
    return text


def _csv_rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[dict[str, str]]]:
    """Header and data rows of a CSV with a header line; checks ``required`` columns."""
    reader = csv.DictReader(io.StringIO(read_text(path)))
    header = [name.strip() for name in reader.fieldnames or []]
    reader.fieldnames = header
    missing = [name for name in required if name not in header]
    if missing:
        names = ", ".join(f"'{name}'" for name in missing)
        raise _fail(path, f"missing column{'s' if len(missing) > 1 else ''} {names}")
    rows = list(reader)
    if not rows:
        raise _fail(path, "no data rows")
    return header, rows


def _numbered(rows: list[dict[str, str]]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows numbered from 1 (the first data row), as named in error messages."""
    return enumerate(rows, start=1)


def _no_gpu(path: Path, expected: str) -> MeasurementError:
    return _fail(path, f"cannot infer the GPU from the path (expected {expected}); give --gpu "
                       "(gpu= in Python)")


# --- ML.ENERGY -------------------------------------------------------------------------

_MLENERGY_INPUT = (
    "model_id",
    "gpu_model",
    "num_gpus",
    "tensor_parallel",
    "expert_parallel",
    "data_parallel",
    "weight_precision",
    "max_num_seqs",
    "avg_batch_size",
    "avg_output_len",
    "task",
)
_MLENERGY_MEASURED = (
    "energy_per_token_joules",
    "median_itl_ms",
    "avg_power_watts",
    "output_throughput_tokens_per_sec",
)
_MLENERGY_COUNTS = ("num_gpus", "tensor_parallel", "expert_parallel", "data_parallel")
_MLENERGY_CONTEXT = (
    "nickname",
    "architecture",
    "total_params_billions",
    "activated_params_billions",
    "task_display_name",
)
_MLENERGY_SHARED = ("model_id", "weight_precision", "task", *_MLENERGY_CONTEXT)


def _load_mlenergy(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Task file (``{"task", "configurations"}``) or model file (model keys at top level)."""
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise _fail(path, f"invalid JSON: {e.msg} at line {e.lineno}") from None
    configs = doc.get("configurations") if isinstance(doc, dict) else None
    if not isinstance(configs, list):
        raise _fail(path, "expected a JSON object with a 'configurations' list")
    if not configs:
        raise _fail(path, "no configurations")
    shared = {k: doc[k] for k in _MLENERGY_SHARED if k in doc}
    kind = "model" if "model_id" in doc else "task"
    rows = []
    for i, config in enumerate(configs):
        if not isinstance(config, dict):
            raise _fail(path, f"configuration {i} is not a JSON object")
        rows.append(_mlenergy_row(path, i, {**shared, **_flat_parallelism(config)}, kind, gpu))
    return rows


def _flat_parallelism(config: dict[str, Any]) -> dict[str, Any]:
    """Model files nest TP/EP/DP under ``parallelization``; task files have them flat."""
    nested = config.get("parallelization")
    if not isinstance(nested, dict):
        return config
    flat = {k: v for k, v in nested.items() if k != "notes"}
    return {**flat, **config, "parallelization_notes": nested.get("notes", "")}


def _mlenergy_row(path: Path, i: int, entry: dict[str, Any], kind: str, gpu: str | None) -> MeasurementRow:
    for key in (*_MLENERGY_INPUT, *_MLENERGY_MEASURED):
        if key not in entry:
            raise _fail(path, f"configuration {i}: missing key '{key}'")

    where = f"configuration {i}"
    values: dict[str, Any] = {}
    for name in _MLENERGY_INPUT:
        raw = entry[name]
        if name in _MLENERGY_COUNTS or name == "max_num_seqs":
            values[name] = _json_count(path, name, raw, where)
        elif name in ("avg_batch_size", "avg_output_len"):
            values[name] = _json_positive(path, name, raw, where)
        else:
            values[name] = _json_text(path, name, raw, where)
    measured = {name: _json_positive(path, name, entry[name], where) for name in _MLENERGY_MEASURED}
    _check_mlenergy_units(path, where, values, measured)
    context: dict[str, Any] = {
        "task": values["task"],
        "source": kind,
        "gpu": gpu or values["gpu_model"],
    }
    for name in (*_MLENERGY_CONTEXT, "parallelization_notes"):
        if name in entry:
            context[name] = entry[name]
    return MeasurementRow(input=values, measured=measured, context=context)


def _json_positive(path: Path, key: str, raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _fail(path, f"{where}: key '{key}' has non-numeric value {raw!r}")
    if not math.isfinite(raw) or raw <= 0:
        raise _fail(path, f"{where}: key '{key}' must be positive, got {raw!r}")
    return float(raw)


def _json_count(path: Path, key: str, raw: Any, where: str) -> int:
    value = _json_positive(path, key, raw, where)
    if not value.is_integer():
        raise _fail(path, f"{where}: key '{key}' must be an integer, got {raw!r}")
    return int(value)


def _json_text(path: Path, key: str, raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise _fail(path, f"{where}: key '{key}' must be a non-empty string, got {raw!r}")
    return raw


def _check_mlenergy_units(path: Path, where: str, values: dict[str, Any], measured: dict[str, float]) -> None:
    """Power per GPU below any board power; energy/token = power / throughput (J = W·s)."""
    per_gpu = measured["avg_power_watts"] / values["num_gpus"]
    if per_gpu >= MAX_POWER_PER_GPU_W:
        raise _fail(
            path,
            f"{where}: key 'avg_power_watts' is {per_gpu:g} W per GPU; expected watts "
            f"(total over num_gpus) below {MAX_POWER_PER_GPU_W:g} W per GPU",
        )
    if measured["median_itl_ms"] >= MAX_OP_MS:
        raise _fail(path, f"{where}: key 'median_itl_ms' is not below {MAX_OP_MS:g}; expected ms")
    implied = measured["avg_power_watts"] / measured["output_throughput_tokens_per_sec"]
    if abs(implied / measured["energy_per_token_joules"] - 1) > 0.05:
        raise _fail(
            path,
            f"{where}: key 'energy_per_token_joules' = {measured['energy_per_token_joules']:g} "
            f"disagrees with avg_power_watts / output_throughput_tokens_per_sec = {implied:g}; "
            "check units",
        )


# --- Vidur compute ---------------------------------------------------------------------

_VIDUR_MLP_KEYS = (
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
)
_MEDIAN = re.compile(r"^time_stats\.(\w+)\.median$")


def _medians(path: Path, header: list[str]) -> dict[str, str]:
    """``{op: column}`` for every ``time_stats.<op>.median`` column."""
    ops = {m.group(1): name for name in header if (m := _MEDIAN.match(name))}
    if not ops:
        raise _fail(path, "missing column 'time_stats.<op>.median' (no median columns)")
    return ops


def _load_vidur_mlp(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Per-op kernel medians (ms) of one layer on one GPU, sharded for TP."""
    header, rows = _csv_rows(path, _VIDUR_MLP_KEYS)
    ops = _medians(path, header)
    parts = path.resolve().parts
    in_tree = parts[-5:-4] == ("compute",)  # .../compute/<gpu>/<org>/<model>/mlp.csv
    gpu = gpu or (parts[-4].upper() if in_tree else None)
    if gpu is None:
        raise _no_gpu(path, ".../compute/<gpu>/<org>/<model>/mlp.csv")
    model = "/".join(parts[-3:-1]) if in_tree else path.parent.name
    keys = [k for k in (*_VIDUR_MLP_KEYS, "vocab_size") if k in header]
    out = []
    for n, row in _numbered(rows):
        values: dict[str, Any] = {
            k: _bool(path, k, row[k], n) if k == "use_gated_mlp" else _count(path, k, row[k], n) for k in keys
        }
        measured = {op: _ms(path, column, row[column], n) for op, column in ops.items()}
        context = {"gpu": gpu, "model": model, "dtype": "fp16", "time_unit": "ms"}
        out.append(MeasurementRow(input=values, measured=measured, context=context))
    return out


# --- Vidur network ---------------------------------------------------------------------

_NETWORK_KEYS = ("collective", "num_workers", "devices_per_node", "size")
_LINKS = {"dgx": "nvswitch", "pairwise_nvlink": "nvlink-pairwise"}
#: Upstream copies, not independent measurements: (sku, file) -> the original. Their rows
#: are skipped by the link fits and labelled as such by ``validate --all``.
VIDUR_UPSTREAM_COPIES = {("h100_pairwise_nvlink", "send_recv.csv"): "a100_pairwise_nvlink/send_recv.csv"}


def _sku_context(path: Path, gpu: str | None) -> dict[str, Any]:
    """GPU and link from ``network/<gpu>_<dgx|pairwise_nvlink>/``; ``gpu`` overrides."""
    folder = path.resolve().parent
    sku = folder.name if folder.parent.name == "network" else None
    folder_gpu, _, link = (sku or "").partition("_")
    context: dict[str, Any] = {"sku": sku, "gpu": gpu or (folder_gpu.upper() or None)}
    context["link"] = _LINKS.get(link)
    if context["gpu"] is None:
        raise _no_gpu(path, ".../network/<gpu>_<dgx|pairwise_nvlink>/<collective>.csv")
    if sku is not None and (sku, path.name) in VIDUR_UPSTREAM_COPIES:
        context["duplicate_of"] = VIDUR_UPSTREAM_COPIES[(sku, path.name)]
    return context


def _load_vidur_network(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """NCCL collective medians (ms) by message size (bytes) and worker layout."""
    header, rows = _csv_rows(path, _NETWORK_KEYS)
    base = _sku_context(path, gpu)
    out = []
    for n, row in _numbered(rows):
        collective = _text(path, "collective", row["collective"], n)
        column = f"time_stats.{collective}.median"
        if column not in header:
            raise _fail(path, f"missing column '{column}'")
        values = {
            "collective": collective,
            **{k: _count(path, k, row[k], n) for k in _NETWORK_KEYS[1:]},
        }
        context = dict(base, time_unit="ms", size_unit="bytes")
        for extra in ("rank", "max_devices_per_node"):
            if row.get(extra):
                context[extra] = int(_float(path, extra, row[extra], n))
        measured = {collective: _ms(path, column, row[column], n)}
        out.append(MeasurementRow(input=values, measured=measured, context=context))
    return out


# --- Splitwise -------------------------------------------------------------------------

_SPLITWISE_INPUT = (
    "model",
    "hardware",
    "prompt_size",
    "batch_size",
    "token_size",
    "tensor_parallel",
)
_SPLITWISE_MEASURED = ("prompt_time", "token_time")


def _load_splitwise(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Prompt (prefill) and token (decode) times in ms per configuration."""
    _, rows = _csv_rows(path, (*_SPLITWISE_INPUT, *_SPLITWISE_MEASURED))
    out = []
    for n, row in _numbered(rows):
        values: dict[str, Any] = {
            k: _text(path, k, row[k], n) if k in ("model", "hardware") else _count(path, k, row[k], n)
            for k in _SPLITWISE_INPUT
        }
        measured = {k: _positive(path, k, row[k], n) for k in _SPLITWISE_MEASURED}
        context = {"gpu": gpu or values["hardware"], "time_unit": "ms"}
        out.append(MeasurementRow(input=values, measured=measured, context=context))
    return out


# --- LLMCompass matmul -----------------------------------------------------------------

_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_RATE_UNITS = {"tflops": 1e12, "gflops": 1e9, "pflops": 1e15}
_MATMUL_COLUMNS = ("M", "N", "K", "time", "TFLOPS")
_WITH_UNIT = re.compile(r"^\s*([-+0-9.eE]+)\s*([^\s0-9.]+)\s*$")


def _with_unit(path: Path, column: str, raw: str, units: dict[str, float], row: int) -> float:
    """``'0.1900ms'`` -> 1.9e-4 (scaled to the base unit); unknown units raise."""
    m = _WITH_UNIT.match(raw)
    if m is None:
        raise _fail(path, f"column '{column}' has no unit in {raw.strip()!r} in row {row}")
    number, unit = m.groups()
    scale = units.get(unit.lower()) or units.get(unit)
    if scale is None:
        raise _fail(
            path,
            f"column '{column}' has unknown unit {unit!r} in row {row} (expected one of {', '.join(units)})",
        )
    return _positive(path, column, number, row) * scale


def _load_llmcompass_matmul(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """fp16 GEMM ``M, N, K, time, TFLOPS`` (no header); checks time against TFLOPS."""
    gpu = gpu or (path.stem.partition("_")[2] or None)
    if gpu is None:
        raise _no_gpu(path, "matmul_<GPU>.csv")
    lines = list(csv.reader(io.StringIO(read_text(path))))
    out = []
    for n, cells in enumerate((c for c in lines if any(x.strip() for x in c)), start=1):
        if len(cells) != len(_MATMUL_COLUMNS):
            raise _fail(
                path,
                f"row {n} has {len(cells)} fields; expected {len(_MATMUL_COLUMNS)} "
                f"({', '.join(_MATMUL_COLUMNS)})",
            )
        m, nn, k = (_count(path, c, v, n) for c, v in zip("MNK", cells[:3], strict=True))
        time_s = _with_unit(path, "time", cells[3], _TIME_UNITS, n)
        rate = _with_unit(path, "TFLOPS", cells[4], _RATE_UNITS, n)
        if abs(2 * m * nn * k / time_s / rate - 1) > 0.05:
            raise _fail(
                path,
                f"column 'time' ({cells[3].strip()}) disagrees with 'TFLOPS' "
                f"({cells[4].strip()}) for 2*M*N*K FLOPs in row {n}; check units",
            )
        context = {"gpu": gpu, "dtype": "fp16", "tflops": rate / 1e12}
        out.append(
            MeasurementRow(input={"M": m, "N": nn, "K": k}, measured={"time_s": time_s}, context=context)
        )
    return out


# --- LLMCompass transformer layer --------------------------------------------------------

#: The ops of ``transformer_{prefill,decode}_<GPU>.csv``, one per line in this order
#: (``data/measurements/SOURCES.md``, row ``llmcompass/``: LLMCompass ``ae/figure5``).
LLMCOMPASS_LAYER_OPS: tuple[str, ...] = (
    "qkv", "q_mul_k", "a_mul_v", "wo", "w1", "w2", "softmax", "layernorm_mha",
    "layernorm_ffn", "gelu", "allreduce_mha", "allreduce_ffn")
LLMCOMPASS_PHASES = ("prefill", "decode")
#: The layer LLMCompass timed (its paper, ISCA 2024, Fig. 5): GPT-3-175B, batch 8, 2,048
#: tokens per sequence (decode: one new token after 2,048 of context), tensor parallel 4.
LLMCOMPASS_LAYER_SETUP = {"batch": 8, "tokens": 2048, "tp": 4}
#: The file names a GPU ``A100``; which card: decode's W1 GEMM reads its 12,288 x 12,288
#: fp16 TP-4 shard (302 MB) in 186 us = 1.62 TB/s, and W2 the same, above the 40 GB card's
#: 1.555 TB/s HBM peak (NVIDIA A100 datasheet) and below the 80 GB SXM card's 2.039 TB/s:
#: only the 80 GB card can stream it that fast.
LLMCOMPASS_GPUS: dict[str, str] = {"A100": "A100-80GB-SXM"}
#: Above any one op of this layer on one A100: the largest, prefill's W1 GEMM
#: (2 x 16,384 x 12,288 x 12,288 FLOPs = 4.9e12), takes 16 ms at the 312 TFLOP/s fp16
#: peak; a value of a second or more is a file in milliseconds.
MAX_LAYER_OP_S = 1.0


def _load_llmcompass_layer(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Twelve op times in seconds (no header, one per line, :data:`LLMCOMPASS_LAYER_OPS`);
    phase and GPU from the name ``transformer_<phase>_<GPU>.csv``."""
    text = read_text(path)
    parts = path.stem.split("_")
    phase = next((p for p in parts if p in LLMCOMPASS_PHASES), None)
    if phase is None:
        raise _fail(path, "cannot infer the phase from the name (expected "
                          "transformer_<prefill|decode>_<GPU>.csv)")
    named = parts[-1] if len(parts) >= 3 and parts[-1] not in LLMCOMPASS_PHASES else None
    gpu = gpu or (LLMCOMPASS_GPUS.get(named, named) if named else None)
    if gpu is None:
        raise _no_gpu(path, "transformer_<prefill|decode>_<GPU>.csv")
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
             if line.strip()]
    if len(lines) != len(LLMCOMPASS_LAYER_OPS):
        raise _fail(path, f"{len(lines)} values; expected {len(LLMCOMPASS_LAYER_OPS)}, one per "
                          f"line ({', '.join(LLMCOMPASS_LAYER_OPS)})")
    out = []
    for (n, value), op in zip(lines, LLMCOMPASS_LAYER_OPS, strict=True):
        if "," in value:
            raise _fail(path, f"line {n} has more than one field; expected one time in seconds")
        time_s = _positive(path, op, value, n)
        if time_s >= MAX_LAYER_OP_S:
            raise _fail(path, f"column '{op}' value {time_s:g} in row {n} is not below "
                              f"{MAX_LAYER_OP_S:g}; expected seconds")
        context = {"gpu": gpu, "phase": phase, "dtype": "fp16", **LLMCOMPASS_LAYER_SETUP}
        out.append(MeasurementRow(input={"op": op, "phase": phase}, measured={"time_s": time_s},
                                  context=context))
    return out


# --- LLM-Inference-Bench ---------------------------------------------------------------

_LIB_INPUT = ("Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length",
              "Batch Size")
#: The bench's hardware names that say less than which card ran: Argonne's Polaris, where
#: the bench's A100 rows ran, has four A100 SXM4 40 GB per node (ALCF Polaris system
#: description; recalled, kind assumed). The rows agree with 40 GB and not with 80 GB:
#: a batch takes 3.5-4.1x the time of the same batch at half the length (about 2x
#: expected) exactly where its KV cache outgrows a 40 GB card and not an 80 GB one:
#: Llama-2-7B on one A100 with TensorRT-LLM at 65,536 tokens (16 x 4,096: 87 s against
#: 23 s; 34 GB of KV cache beside 13.5 GB of weights), Llama-2-70B on four from 16 x
#: 2,048 tokens (TensorRT-LLM) and 16 x 1,024 (vLLM), whose 70B rows stop at 32
#: sequences of 256 tokens.
LIB_GPUS: dict[str, str] = {"Nvidia A100 GPU": "A100-40GB-SXM"}


def bench_gpu(hardware: str) -> str:
    """The GPU an LLM-Inference-Bench ``Hardware`` value names (:data:`LIB_GPUS`, else
    the value itself, resolved by the hardware database's aliases)."""
    return LIB_GPUS.get(hardware, hardware)


#: The column of the bench's layout comparison (``Fig_5_b/TP_EP_PP_results.csv``) naming
#: each row's parallelism (:data:`energylens.measurements.inference_bench.LAYOUTS`).
LIB_LAYOUT = "Parallelism Type"

#: Its ``avg_power`` column is in milliwatts: 222,122 for one A100 serving Llama-2-7B at
#: batch 1 is 222 W, between the board's idle (~60 W) and its 400 W TDP.
LIB_POWER_UNIT_W = 1e-3


def _load_llm_inference_bench(path: Path, gpu: str | None) -> list[MeasurementRow]:
    """Static batches of ``Batch Size`` requests of ``Input Output Length`` tokens in and
    out: end-to-end latency of the whole batch (s), throughput of input + output tokens
    (tokens/s), average board power where measured (mW in the file, W here), and the
    layout where the file names one (:data:`LIB_LAYOUT`)."""
    header, rows = _csv_rows(path, (*_LIB_INPUT, "Latency", "Throughput"))
    power = "avg_power" in header
    out = []
    for n, row in _numbered(rows):
        if not any((cell or "").strip() for cell in row.values()):
            continue  # the published power file has blank separator lines
        values: dict[str, Any] = {k: _text(path, k, row[k], n) for k in _LIB_INPUT[:4]}
        for key in _LIB_INPUT[4:]:
            values[key] = _count(path, key, row[key], n)
        values["Num of Hardware"] = _count(path, "Num of Hardware", row["Num of Hardware"], n)
        if LIB_LAYOUT in header:
            values[LIB_LAYOUT] = _text(path, LIB_LAYOUT, row[LIB_LAYOUT], n)
        measured = {"latency_s": _positive(path, "Latency", row["Latency"], n),
                    "throughput_tokens_per_s": _positive(path, "Throughput", row["Throughput"], n)}
        if power:
            measured["avg_power_w"] = _positive(path, "avg_power", row["avg_power"], n) * \
                LIB_POWER_UNIT_W
        out.append(MeasurementRow(input=values, measured=measured,
                                  context={"gpu": gpu or bench_gpu(values["Hardware"])}))
    return out


# --- AIConfigurator's NCCL tables (energylens.measurements.nccl_table) ---------------------


def _nccl_table(path: Path, gpu: str | None) -> list[MeasurementRow]:
    from energylens.measurements.nccl_table import load_nccl_table

    return load_nccl_table(path, gpu)


# --- dispatch --------------------------------------------------------------------------

_LOADERS: dict[str, Callable[[Path, str | None], list[MeasurementRow]]] = {
    "mlenergy": _load_mlenergy,
    "vidur-mlp": _load_vidur_mlp,
    "vidur-network": _load_vidur_network,
    "splitwise": _load_splitwise,
    "llmcompass-matmul": _load_llmcompass_matmul,
    "llmcompass-layer": _load_llmcompass_layer,
    "llm-inference-bench": _load_llm_inference_bench,
    "aiconfigurator-nccl": _nccl_table,
}
FORMATS: tuple[str, ...] = tuple(_LOADERS)


def load_measurements(*, format: str, path: str | Path, gpu: str | None = None) -> MeasurementSet:
    """Load one measurement file; ``gpu`` overrides the GPU inferred from the path."""
    p = Path(path)
    loader = _LOADERS.get(format)
    if loader is None:
        raise _fail(p, f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    return MeasurementSet(format=format, file=str(p), rows=loader(p, gpu))
