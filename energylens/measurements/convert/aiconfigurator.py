"""AIConfigurator's ``silicon_sample.csv`` (NVIDIA's end-to-end serving measurements) ->
``load`` rows (closed loop: ``silicon_concurrency`` clients, from the provenance string).

Aggregated rows only (``mode=agg``): disaggregated rows have separate prefill and decode
worker layouts, which the format cannot express, and are counted in a note. Layout in
the engine's terms: ``tp`` = ``tp_size`` (attention), ``ep`` = ``moe_ep_size``, ``moe_tp``
= ``moe_tp_size``, ``attention_dp`` = ``attention_dp_size``; GPUs = ``tp_size x
attention_dp_size x pp_size``; ``dtype`` = ``precision`` (``gemm_quant_mode`` where
empty). ``silicon_tpot_ms`` is written as ``tpot_s``: the source does not say whether it
is a mean or a median. ``num_requests`` = 10 x the concurrency: the runs' size as the
project's SOURCES.md records it (means over every request of the run, no warm-up left
out). Rows whose ``tp_size`` is ``moe_tp_size x moe_ep_size`` with the two equal (N) and
no attention DP are written as the N-GPU launch ``tp`` = ``ep`` = N, ``moe_tp`` = 1 (TP
attention, experts split N ways): every such row whose id names its layout says
``tpN_epN`` (125 of the 249; the others are named by a config number), and
``..._c4_tp8_ep8_954`` (``tp_size`` 64) repeats the TPOT and TTFT of
``..._c4_tp8_0_ep8_0_1252`` (``tp_size`` 8, ``moe_tp_size`` 1) to the last digit: the
dump multiplied the expert split into ``tp_size``. The same multiplication is read into
attention-DP rows: TensorRT-LLM ``attention_dp_size`` N x N with ``moe_tp_size`` =
``moe_ep_size`` = N and ``tp_size`` 1 (``dsr1_b200_trtllm_fp4_agg_1024x8192_c256_cfg191``,
64 = 8 x 8, repeats ``..._c256_tp8_0_ep8_0_1080``: attention DP 8, EP 8) is written as
attention DP N, ``ep`` = N; vLLM ``tp_size`` = ``attention_dp_size`` = N with
``moe_ep_size`` N x N (``kimik2_5_b200_vllm_fp4_agg_8192x1024_c4_cfg635``, 4 x 4 with EP
16, repeats ``kimi_k2_5_gap_analysis_..._8192x1024_c4_tp4_ep4_13`` rounded) as ``tp`` =
``ep`` = N without attention DP. The evidence is a twin that records the N-GPU layout (same
engine, GPU, model, DeepSeek-R1 and -V3 taken as one, clients and lengths; TTFT and TPOT
within 0.2 %): 103 of the 249 rows of the first kind have one (72 bit-identical), 23 of
the 37 TensorRT-LLM attention-DP rows (19 bit-identical), 30 of the 97 vLLM ones (all
Kimi-K2.5 on B200, twinned by 2-decimal gap-analysis rows; no MiniMax-M2.5 row, e.g.
``minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734``). The rows without a twin are read
the same way by assumption (data/measurements/SOURCES.md). Rows that record ``tp_size`` =
``moe_tp_size`` = N > 8 with
``moe_ep_size`` 1 and no attention DP (55, all DeepSeek-R1 on GB200, TensorRT-LLM at N =
12-64 and SGLang at 72) are written as attention DP N with ``ep`` = N (wide EP): read
literally they cannot run (N = 12, 20, 24, 28, 36, 40, 48, 52 and 72 do not divide the
model's 128 MLA heads, which both engines split evenly, and most do not divide an expert's
2,048 columns), and attention DP over the NVL72 rack with every GPU an expert rank is both
engines' published GB200 DeepSeek-R1 recipe (TensorRT-LLM ``enable_attention_dp`` with
``moe_expert_parallel_size`` = the world size and a 288-slot MoE load balancer; SGLang
``--enable-dp-attention`` with DeepEP and 32 redundant experts; recalled). Assumed from
that (the ids, ``..._tp36_ep1_11``, repeat the dump's fields). With ``load_as_serving`` each row is
written as steady-state ``serving`` at ``batch`` = the concurrency instead (every
client's request in flight: an approximation of the closed loop).

KV-cache precision: the rows do not record it. Where the checkpoint a row must have loaded
is an NVIDIA Model Optimizer one (:data:`MODELOPT_CHECKPOINTS`), which declares an FP8 KV
cache (:data:`energylens.model.zoo.MODELOPT_KV_DTYPE`), and the row's engine stores what
the checkpoint declares when ``--kv-dtype`` is auto in the row's release (TensorRT-LLM;
vLLM from its profile's ``checkpoint_kv_since``), the row is written with ``kv_dtype``
fp8. Where a run of a campaign (one engine release, GPU, model, precision and day) held
more tokens in flight, by its own measured TTFT, TPOT and clients, than a 16-bit cache
holds (:mod:`energylens.measurements.convert.kv_evidence`), the campaign's rows of a narrow
checkpoint are written with ``kv_dtype`` fp8 too; otherwise ``kv_dtype`` stays empty
(auto).

Replicas: a row run under NVIDIA Dynamo (``image=nvcr.io/nvidia/ai-dynamo/...`` in its
provenance) serves its clients with several workers of the recorded layout behind one
frontend. The rows do not name the worker count, but their load does: every Dynamo row
whose ``silicon_concurrency`` exceeds ``batch_size x attention_dp_size`` is a whole
multiple k of it (24 rows: k = 2, 4, 8 or 32; the 1.3.0rc5 rows' k x layout GPUs is 64,
a full rack's allotment), the load AIConfigurator's generator gives k workers each filled
to its batch. Those rows are written with ``dp`` = k replicas (``num_gpus`` k times the
layout's). No row run without Dynamo has a concurrency above its batch. Assumed from
that arithmetic (the generator's rule is not published beside the rows).

Speculative decoding: the rows do not record it, but three TensorRT-LLM DeepSeek-R1
campaigns (:data:`MTP_CAMPAIGNS`: model, GPU, release, measurement date) show it. At the
same layout, concurrency and lengths their TPOT is 0.43-0.87 times (median 0.59-0.67) that
of DeepSeek-V3 on the same release, while every other campaign of R1 repeats V3's TPOT to
the last digit (R1 and V3 share one architecture); B200 1.2.0rc6.post3 against
1.2.0rc6.post2 (a patch release): TPOT 1.15-2.32 times faster (median 1.44-1.70), the gain
largest at 4 clients and shrinking with load, and TTFT not lower, as a draft head that
adds a pass per step does. A speedup above 2 (2.32 at 4 clients, 1,024 / 8,192 tokens,
FP8 on 8 B200) needs at least two drafts per step; written with ``speculative_tokens`` 3,
the multi-token-prediction depth of TensorRT-LLM's published DeepSeek-R1 latency recipe
(``num_nextn_predict_layers: 3``; recalled, kind assumed). Which rows, and the depth, are
set from these pairs, not from the validation error. The acceptance of each draft is not
DeepSeek's published 0.85 for natural text: the runs' prompts are random tokens. It is
fitted (:data:`MTP_ACCEPTANCE`): the value at which the model's TPOT on the B200 campaigns'
120 rows (two releases, FP8 and NVFP4, 4-256 clients, TP 4-8 and attention DP 4-8) has a
median log error of zero, 0.670; the H200 campaign (41 rows) held out comes out at 13.8 %
TPOT MAPE with it (24.9 % at 0.85), and fitted alone gives 0.611 (B200 then 15.1 %;
``benchmarks/fit_mtp_acceptance.py`` reruns both folds). R1's
GB200 campaign (2025-11-17) has no V3 or earlier release to compare with and is left as
recorded.

One SGLang campaign ran each configuration twice (:data:`MTP_PAIRED_CAMPAIGNS`: DeepSeek-R1
FP8 on 8 B200, 0.5.9, 2026-03-25, tensor parallel 8 without EP): one run repeats V3's TPOT
to the last digit at the same layout, clients and lengths, the other is 0.67-0.91 times it
(most at 4 clients, less with load) at a TTFT 1.02-2.06 times V3's, the same signature.
There the row-level pair decides: a row whose TPOT is more than 5 % below that of every V3
row of its configuration on the same release ran a draft head; its twin, and a row with no
V3 row to compare with, stay as recorded. Written with ``speculative_tokens`` 1, SGLang's
published DeepSeek MTP recipe (``--speculative-num-steps 1 --speculative-eagle-topk 1
--speculative-num-draft-tokens 2``; recalled, kind assumed), which the largest speedup
(1.50x at 4 clients, 1,024 / 8,192 tokens) admits, and the acceptance fitted on TensorRT-LLM's
campaigns above (the same benchmark's random-token prompts): nothing fitted on these rows.

Work in progress: rows whose provenance says ``wip=True`` (runs NVIDIA's database marks as
work in progress; the source's SOURCES.md says to treat them with care) carry ``wip`` true,
every other row ``wip`` false: a carried column (``validate`` ignores it), so that their
error can be read apart (``benchmarks/validate_load_aic.py``). None is left out.

Repeats: the dump holds many measurements more than once (the same run filed under two
campaign names or two configuration numbers, or copied with its TTFT and TPOT rounded to
2 decimals). A repeat would weight its configuration twice or three times in every error
over the rows, so the converter writes one row per measurement: among rows whose every
column the model reads (:data:`energylens.measurements.user_csv.KNOWN` less the metrics)
and ``wip`` agree, a row is a repeat of a row kept before it when its ``silicon_ttft_ms``
and ``silicon_tpot_ms`` are each bit-identical to the kept row's, or differ from them by
less than :data:`SAME_NUMBER` (relative: the last printed digit of a mean the dump
recomputed), or are both written with at most :data:`ROUNDED_DECIMALS` decimals and equal
the kept row's rounded to that many (a rounded copy: the full-precision row is kept
whatever the order). The kept row keeps its own ``id``. No two rows of the same inputs
closer than 0.08 % in either metric exist beyond these, so the rule has no borderline
case. Labels are compared as the model reads them: a checkpoint by the zoo entry it
resolves to, a release by its number (a build tag without one, as the profile's release).
So DeepSeek-R1 runs filed a second time as DeepSeek-V3 (one architecture, one zoo entry;
185 rows) and a SGLang nightly filed under ``nightly-dev`` and
``nightly-dev-20260216-d3bae71e`` (15 rows) count once, under the label met first: either
label predicts the same, and two runs do not agree in a 16-digit mean TTFT and TPOT.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from energylens.errors import ConfigError, EnergyLensError
from energylens.measurements.convert import Converted, Options
from energylens.measurements.convert.kv_evidence import NARROW, fp8_campaigns
from energylens.measurements.formats import _csv_rows, _fail, _positive
from energylens.measurements.user_csv import KNOWN, METRICS
from energylens.model.zoo import MODELOPT_KV_DTYPE, resolve_model_name
from energylens.runtime import get_runtime
from energylens.runtime.profile import release_key

_KEYS = ("id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
         "precision", "gemm_quant_mode", "mode", "isl", "osl", "tp_size", "pp_size", "attention_dp_size",
         "moe_tp_size", "moe_ep_size", "batch_size", "silicon_ttft_ms", "silicon_tpot_ms")
#: A disaggregated row's pool columns: ``<pool>_<key>`` for each pool and key.
_POOL_KEYS = ("num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
              "moe_ep_size", "batch_size")
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
_DYNAMO = re.compile(r"image=nvcr\.io/nvidia/ai-dynamo/")
#: A Dynamo runtime image and its tag (Dynamo's release, not the engine's).
_DYNAMO_IMAGE = re.compile(r"nvcr\.io/nvidia/ai-dynamo/[\w.-]+-runtime:(\S+)")
#: Checkpoints only NVIDIA's Model Optimizer publishes, by (``model_path``,
#: ``gemm_quant_mode``): every NVFP4 checkpoint (model publishers release none), and
#: per-tensor FP8 of Qwen3-32B (Qwen's own FP8 release is block-scaled, ``fp8_block``; the
#: per-tensor one AIConfigurator ships beside its rows is Qwen3-32B-FP8-Static-PerTensor,
#: a ModelOpt checkpoint). ``None`` stands for any model.
MODELOPT_CHECKPOINTS: frozenset[tuple[str | None, str]] = frozenset(
    {(None, "nvfp4"), ("Qwen/Qwen3-32B", "fp8")})
#: Campaigns run with multi-token prediction (module docstring): (``model_path``,
#: ``system``, ``backend_version``, the ``measured=`` date of the provenance).
MTP_CAMPAIGNS: frozenset[tuple[str, str, str, str]] = frozenset({
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "1.1.0rc2.post2", "2026-01-14"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "1.2.0rc6.post3", "2026-02-05"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "1.2.0rc6.post3", "2026-02-06"),
    ("deepseek-ai/DeepSeek-R1", "h200_sxm", "1.1.0rc2.post2", "2026-01-14")})
#: Campaigns that ran each configuration with and without multi-token prediction; the
#: pair decides per row (module docstring). Same key as :data:`MTP_CAMPAIGNS`.
MTP_PAIRED_CAMPAIGNS: frozenset[tuple[str, str, str, str]] = frozenset({
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "0.5.9", "2026-03-25")})
#: The model whose rows, of the same architecture, tell a paired campaign's plain runs.
MTP_TWIN_MODEL = "deepseek-ai/DeepSeek-V3"
#: A paired row this much faster than its configuration's every V3 row ran a draft head.
MTP_PAIR_SPEEDUP = 0.95
#: Draft tokens per step of those campaigns, by engine (module docstring).
MTP_DRAFT_TOKENS = {"trtllm": 3, "sglang": 1}
#: Acceptance of each draft in those campaigns, fitted on the B200 ones' TPOT (kind:
#: fitted; H200's held out: module docstring).
MTP_ACCEPTANCE = 0.67
_MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\d)")
#: Requests per client in a run ("runs of 10 x concurrency requests": ../shared SOURCES.md).
RUN_REQUESTS_PER_CLIENT = 10
_WIP = re.compile(r"\bwip=True\b")
#: Two TTFTs (TPOTs) of the same inputs closer than this (relative) are one number printed
#: twice (module docstring): the pairs that differ at all differ by under 1e-14.
SAME_NUMBER = 1e-12
#: Decimals (ms) of a rounded copy of a measurement (module docstring).
ROUNDED_DECIMALS = 2
#: The columns of a converted row a prediction reads, and ``wip``: rows repeat one another
#: only where all of them agree.
_INPUTS = (*(k for k in KNOWN if k not in METRICS), "wip")
_Metrics = tuple[str, str]


def _int(path: Path, row: dict[str, str], key: str, n: int) -> int:
    value = _positive(path, key, row[key], n)
    if not value.is_integer():
        raise _fail(path, f"column '{key}' must be an integer, got {row[key]!r} in row {n}")
    return int(value)


def _stated(path: Path, row: dict[str, str], key: str, n: int) -> int | None:
    """A layout size, or None where the row leaves it empty or 0 (not stated)."""
    return None if row[key].strip() in ("", "0") else _int(path, row, key, n)


def _kv_dtype(row: dict[str, str]) -> str | None:
    """The KV-cache precision the row's engine ran with, where the checkpoint and the
    engine's auto rule settle it (see the module docstring); else None."""
    quant = row["gemm_quant_mode"]
    if (None, quant) not in MODELOPT_CHECKPOINTS \
            and (row["model_path"], quant) not in MODELOPT_CHECKPOINTS:
        return None
    try:
        follows = get_runtime(row["backend"]).follows_checkpoint_kv(
            version=row["backend_version"] or None)
    except EnergyLensError:  # an engine without a profile: left to the predictor's refusal
        return None
    return MODELOPT_KV_DTYPE if follows else None


_Layout = tuple[int, int | None, int | None, int | None]
#: A recorded MoE-TP degree above this (one HGX board) is read as wide EP (module docstring).
WIDE_EP_ABOVE = 8


def _unsquared(*, tp: int, adp: int | None, moe_tp: int | None, ep: int | None) -> _Layout | None:
    """The N-GPU launch (tp, attention_dp, moe_tp, ep) of a row whose layout the dump
    multiplied to N x N GPUs (module docstring), or None for any other row."""
    if adp in (None, 1) and moe_tp is not None and moe_tp > 1 and moe_tp == ep \
            and tp == moe_tp * ep:
        return ep, adp, 1, ep  # TP attention over N, experts N ways
    if adp is None or adp == 1 or moe_tp is None or ep is None:
        return None
    if tp == 1 and moe_tp > 1 and moe_tp == ep and adp == moe_tp * ep:
        return 1, ep, 1, ep  # attention DP over N, experts N ways
    if tp > 1 and tp == adp and moe_tp == 1 and ep == tp * adp:
        return tp, 1, 1, tp  # TP attention over N, experts N ways
    return None


def _wide_ep(*, tp: int, adp: int | None, moe_tp: int | None, ep: int | None) -> _Layout | None:
    """Attention DP N with N expert ranks for a row that records MoE TP N > 8 with no EP
    and no attention DP (module docstring), or None for any other row."""
    if tp > WIDE_EP_ABOVE and moe_tp == tp and ep in (None, 1) and adp in (None, 1):
        return 1, tp, 1, tp
    return None


def _layout(path: Path, row: dict[str, str], n: int, prefix: str = "",
            ) -> tuple[_Layout, int, bool, bool, bool]:
    """(tp, attention_dp, moe_tp, ep) of ``row``'s layout (a pool's with ``prefix``
    ``prefill_`` or ``decode_``), its pipeline size, whether it was a multiplied layout or
    a wide-EP one read as the module docstring says, and whether it left a size unstated."""
    tp, pp = (_int(path, row, prefix + k, n) for k in ("tp_size", "pp_size"))
    adp, moe_tp, ep = (_stated(path, row, prefix + k, n)
                       for k in ("attention_dp_size", "moe_tp_size", "moe_ep_size"))
    layout: _Layout = (tp, adp, moe_tp, ep)
    launch = _unsquared(tp=tp, adp=adp, moe_tp=moe_tp, ep=ep)
    if launch is not None:
        layout = launch
    widened = _wide_ep(tp=layout[0], adp=layout[1], moe_tp=layout[2], ep=layout[3])
    return (widened or layout, pp, launch is not None, widened is not None,
            None in (adp, moe_tp, ep))


def _dynamo_workers(row: dict[str, str], *, concurrency: int, attention_dp: int) -> int:
    """Workers a Dynamo-run row served its clients with (1 for any other row): the whole
    multiple its concurrency is of ``batch_size x attention_dp`` (module docstring)."""
    if _DYNAMO.search(row["silicon_data_source"]) is None:
        return 1
    try:
        per_worker = float(row["batch_size"]) * attention_dp
    except ValueError:
        return 1
    workers = concurrency / per_worker if per_worker > 0 else 1.0
    return int(workers) if workers > 1 and workers.is_integer() else 1


def _configuration(row: dict[str, str]) -> tuple[str, ...]:
    """What a run of ``row`` is besides its model: engine, release, GPU, precision, layout,
    clients and lengths."""
    found = _CONCURRENCY.search(row["silicon_data_source"])
    return (row["backend"], row["backend_version"], row["system"],
            row["precision"] or row["gemm_quant_mode"], row["tp_size"], row["pp_size"],
            row["attention_dp_size"], row["moe_tp_size"], row["moe_ep_size"],
            found.group(1) if found else "", row["isl"], row["osl"])


def _twin_tpots(rows: list[dict[str, str]]) -> dict[tuple[str, ...], list[float]]:
    """The measured TPOTs of :data:`MTP_TWIN_MODEL`'s aggregated rows, by configuration."""
    out: dict[tuple[str, ...], list[float]] = {}
    for row in rows:
        if row["model_path"] == MTP_TWIN_MODEL and row["mode"] == "agg":
            try:
                out.setdefault(_configuration(row), []).append(float(row["silicon_tpot_ms"]))
            except ValueError:
                continue
    return out


def _drafted(row: dict[str, str], twins: dict[tuple[str, ...], list[float]]) -> bool:
    """Whether ``row`` ran multi-token prediction (module docstring): a campaign that did,
    or a paired campaign's run faster than every twin run of its configuration."""
    measured = _MEASURED.search(row["silicon_data_source"])
    if measured is None:
        return False
    key = (row["model_path"], row["system"], row["backend_version"], measured.group(1))
    if key in MTP_CAMPAIGNS:
        return True
    plain = twins.get(_configuration(row))
    if key not in MTP_PAIRED_CAMPAIGNS or not plain:
        return False
    try:
        return float(row["silicon_tpot_ms"]) < MTP_PAIR_SPEEDUP * min(plain)
    except ValueError:
        return False


def _campaign(row: dict[str, Any]) -> tuple[str, ...]:
    """A converted row's campaign: engine, release, GPU, model, precision and the day it
    was measured (runs launched with the same flags)."""
    measured = _MEASURED.search(str(row["provenance"]))
    return (row["runtime"], str(row["runtime_version"]), row["gpu"], row["model"],
            str(row["dtype"]), measured.group(1) if measured else "")


def _decimals(text: str) -> int:
    mantissa = text.strip().lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def _short(metrics: _Metrics) -> bool:
    return all(_decimals(m) <= ROUNDED_DECIMALS for m in metrics)


def _repeats(mine: _Metrics, kept: _Metrics) -> str | None:
    """How the TTFT and TPOT (ms, as the source writes them) ``mine`` repeat ``kept``:
    ``identical``, ``last digit`` or ``rounded`` (module docstring), or None."""
    a, b = [float(m) for m in mine], [float(m) for m in kept]
    if a == b:
        return "identical"
    if all(abs(x - y) < SAME_NUMBER * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True)):
        return "last digit"
    if _short(mine) and not _short(kept) \
            and all(x == round(y, ROUNDED_DECIMALS) for x, y in zip(a, b, strict=True)):
        return "rounded"
    return None


def _as_read(key: str, value: Any) -> Any:
    """A label as the model reads it (module docstring): a checkpoint's zoo entry, a
    release's number (None: a build tag, read as the profile's release); else ``value``."""
    try:
        if key == "model":
            return resolve_model_name(value)
        if key == "runtime_version" and value:
            return release_key(value)
    except ConfigError:
        return None  # a build tag
    except EnergyLensError:
        pass  # a checkpoint the zoo does not hold: its own label
    return value


def _same_runs(rows: list[dict[str, Any]], metrics: list[_Metrics]) -> list[int]:
    """Each row's run: rows of the same inputs as the model reads them (but the KV
    precision, which the evidence sets per campaign) and the same TTFT and TPOT as written
    are one run, filed under two campaigns; what one campaign's evidence shows of the run's
    cache holds for its copy (the module docstring's repeats)."""
    runs: dict[tuple[Any, ...], int] = {}
    return [runs.setdefault((*(_as_read(k, row.get(k)) for k in _INPUTS if k != "kv_dtype"),
                             *metrics[i]), len(runs)) for i, row in enumerate(rows)]


def drop_repeats(rows: list[dict[str, Any]], metrics: list[_Metrics]) -> tuple[
        list[dict[str, Any]], dict[str, int]]:
    """``rows`` without the repeats of another row (module docstring), in their order, and
    how many were dropped of each kind (first those bit-identical as written, in s); ``metrics``
    are each row's TTFT and TPOT as the source writes them (ms)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(_as_read(k, row.get(k)) for k in _INPUTS), []).append(i)
    dropped: dict[int, str] = {}
    for members in groups.values():
        first: dict[tuple[Any, ...], int] = {}
        for i in members:
            j = first.setdefault((rows[i]["ttft_s"], rows[i]["tpot_s"]), i)  # as written
            if j != i:
                dropped[i] = "identical"
        kept: list[int] = []
        for i in sorted(first.values(), key=lambda i: (_short(metrics[i]), i)):  # full first
            kind = next((k for k in (_repeats(metrics[i], metrics[j]) for j in kept) if k), None)
            if kind is None:
                kept.append(i)
            else:
                dropped[i] = kind
    counts = {kind: sum(1 for k in dropped.values() if k == kind)
              for kind in ("identical", "last digit", "rounded")}
    return [row for i, row in enumerate(rows) if i not in dropped], counts


def _measured(path: Path, row: dict[str, str], n: int, *,
              carried: dict[str, Any]) -> dict[str, Any]:
    """A row's columns after its model, GPU and layout: engine, precision, lengths, TTFT
    and TPOT, its id, the ``carried`` columns, and ``wip`` and its provenance. A
    ``backend_version`` that is the tag of the Dynamo runtime image the row ran (920
    disaggregated rows: ``tensorrtllm-runtime:0.8.1.post2`` beside ``backend_version``
    0.8.1.post2) is Dynamo's release, not the engine's: written as ``dynamo_version``, and
    the engine's release left empty (the profile's)."""
    image = _DYNAMO_IMAGE.search(row["silicon_data_source"])
    dynamo = image is not None and image.group(1) == row["backend_version"]
    return {"runtime": row["backend"],
            "runtime_version": None if dynamo else row["backend_version"],
            "dtype": row["precision"] or row["gemm_quant_mode"], "kv_dtype": _kv_dtype(row),
            "input_tokens": _int(path, row, "isl", n),
            "output_tokens": _int(path, row, "osl", n),
            "ttft_s": _positive(path, "silicon_ttft_ms", row["silicon_ttft_ms"], n) / 1e3,
            "tpot_s": _positive(path, "silicon_tpot_ms", row["silicon_tpot_ms"], n) / 1e3,
            "id": row["id"], **carried,
            **({"dynamo_version": row["backend_version"]} if dynamo else {}),
            "wip": "true" if _WIP.search(row["silicon_data_source"]) else "false",
            "provenance": row["silicon_data_source"]}


def _pools(path: Path, row: dict[str, str], n: int) -> tuple[dict[str, Any], dict[str, Any],
                                                             bool, bool]:
    """A disaggregated row's ``num_gpus`` and pool columns (``<pool>_tp`` ...
    ``<pool>_replicas``), each pool's ``batch_size`` to carry, and whether a pool's layout
    was read as multiplied or as wide EP."""
    layout: dict[str, Any] = {}
    carried: dict[str, Any] = {}
    squared = wide = False
    gpus = 0
    for pool in ("prefill", "decode"):
        (tp, adp, moe_tp, ep), pp, was_squared, was_wide, _ = _layout(path, row, n,
                                                                      f"{pool}_")
        if pp != 1:
            raise _fail(path, f"column '{pool}_pp_size' must be 1 in row {n} (the measurement "
                              "format's pools have no pipeline stages)")
        squared, wide = squared or was_squared, wide or was_wide
        workers = _int(path, row, f"{pool}_num_workers", n)
        layout |= {f"{pool}_tp": tp, f"{pool}_ep": ep, f"{pool}_moe_tp": moe_tp,
                   f"{pool}_attention_dp": adp, f"{pool}_replicas": workers}
        carried[f"{pool}_batch_size"] = row[f"{pool}_batch_size"]
        gpus += workers * tp * (adp or 1)
    return {"num_gpus": gpus, **layout}, carried, squared, wide


def convert(path: Path, options: Options) -> Converted:
    """One row per aggregated measurement."""
    pools = tuple(f"{pool}_{key}" for pool in ("prefill", "decode") for key in _POOL_KEYS)
    _, rows = _csv_rows(path, (*_KEYS, *pools) if options.disaggregated else _KEYS)
    twins = _twin_tpots(rows)
    out = Converted(rows=[])
    metrics: list[_Metrics] = []
    skipped = unstated = no_load = squared = fp8_kv = replicated = wide = speculative = 0
    in_flight = no_workers = 0
    mode = "disagg" if options.disaggregated else "agg"
    for n, row in enumerate(rows, start=1):
        if row["mode"] != mode:
            skipped += 1
            continue
        found = _CONCURRENCY.search(row["silicon_data_source"])
        if found is None:
            no_load += 1
            continue
        concurrency = int(found.group(1))
        if options.disaggregated:
            if not all(row[f"{pool}_num_workers"].strip() for pool in ("prefill", "decode")):
                no_workers += 1
                continue
            layout, carried, was_squared, was_wide = _pools(path, row, n)
            squared += was_squared
            wide += was_wide
            converted: dict[str, Any] = {
                "model": row["model_path"], "gpu": options.gpu or row["system"], **layout,
                **_measured(path, row, n, carried=carried), "workload": "load",
                "concurrency": concurrency,
                "num_requests": RUN_REQUESTS_PER_CLIENT * concurrency}
            if _drafted(row, twins):
                converted["speculative_tokens"] = MTP_DRAFT_TOKENS[row["backend"]]
                converted["draft_acceptance"] = MTP_ACCEPTANCE
                speculative += 1
            fp8_kv += converted["kv_dtype"] is not None
            out.rows.append(converted)
            metrics.append((row["silicon_ttft_ms"], row["silicon_tpot_ms"]))
            continue
        (tp, adp, moe_tp, ep), pp, was_squared, was_wide, was_unstated = _layout(path, row, n)
        unstated += was_unstated
        squared += was_squared
        wide += was_wide
        workers = _dynamo_workers(row, concurrency=concurrency, attention_dp=adp or 1)
        replicated += workers > 1
        converted = {
            "model": row["model_path"], "gpu": options.gpu or row["system"],
            "num_gpus": workers * tp * (adp or 1) * pp, "dp": workers if workers > 1 else None,
            "tp": tp, "pp": pp, "ep": ep, "moe_tp": moe_tp, "attention_dp": adp,
            **_measured(path, row, n, carried={"max_batch_size": row["batch_size"]})}
        if _drafted(row, twins):
            converted["speculative_tokens"] = MTP_DRAFT_TOKENS[row["backend"]]
            converted["draft_acceptance"] = MTP_ACCEPTANCE
            # the cap on running requests: the clients per attention rank. SGLang's default
            # with a draft is 48 (server_args, 0.5.3 and 0.5.9; runtime/sglang.py), under
            # which 64 clients of 1,024 + 8,192 tokens would queue 16 for a whole request,
            # while the 0.5.9 campaigns measured a TTFT of 0.93 s at 64 clients: they set
            # --max-running-requests to their concurrency. Inferred, not recorded
            # (batch_size is not the cap: docs/load.md).
            converted["max_num_seqs"] = -(-concurrency // (workers * (adp or 1)))
            speculative += 1
        fp8_kv += converted["kv_dtype"] is not None
        if options.load_as_serving:
            converted.update(workload="serving", batch=concurrency)
        else:
            converted.update(workload="load", concurrency=concurrency,
                             num_requests=RUN_REQUESTS_PER_CLIENT * concurrency)
        out.rows.append(converted)
        metrics.append((row["silicon_ttft_ms"], row["silicon_tpot_ms"]))
    # the evidence reads one deployment's cache: a colocated row's
    narrow = set() if options.disaggregated else fp8_campaigns(out.rows, campaign=_campaign)
    runs = _same_runs(out.rows, metrics)
    shown = {runs[i] for i, converted in enumerate(out.rows) if _campaign(converted) in narrow}
    for i, converted in enumerate(out.rows):
        if runs[i] in shown and not converted["kv_dtype"] and converted["dtype"] in NARROW:
            converted["kv_dtype"] = "fp8"
            in_flight += 1
    read = len(out.rows)
    out.rows, repeats = drop_repeats(out.rows, metrics)
    wip = sum(1 for converted in out.rows if converted["wip"] == "true")
    if skipped:
        out.notes.append(f"{skipped} aggregated row(s) left out: --disaggregated writes the "
                         "rows of separate prefill and decode workers" if options.disaggregated
                         else f"{skipped} disaggregated row(s) left out: write them with "
                         "--disaggregated (prefill and decode pools)")
    if no_workers:
        out.notes.append(f"{no_workers} disaggregated row(s) left out: no prefill_num_workers or "
                         "decode_num_workers, so their pools' sizes are unknown")
    if no_load:
        out.notes.append(f"{no_load} {'dis' if options.disaggregated else ''}aggregated row(s) "
                         "left out: no silicon_concurrency= in their provenance, so their load "
                         "is unknown")
    if squared:
        out.notes.append(f"{squared} row(s) record an N-GPU layout multiplied to N x N GPUs "
                         "(tp_size, or tp_size x attention_dp_size, = N x N): written as their "
                         "N-GPU launch, ep = N, moe_tp = 1 (see the converter's docstring)")
    if wide:
        out.notes.append(f"{wide} row(s) record MoE TP N > {WIDE_EP_ABOVE} (tp_size = moe_tp_size "
                         "= N, no EP, no attention DP), a layout that cannot run: written as "
                         "attention DP N with ep = N, the engines' wide-EP recipe (see the "
                         "converter's docstring)")
    if replicated:
        out.notes.append(f"{replicated} Dynamo row(s) written with dp = concurrency / (batch_size "
                         "x attention_dp_size) replicas: their load fills that many workers "
                         "(see the converter's docstring)")
    if fp8_kv:
        out.notes.append(f"{fp8_kv} row(s) written with kv_dtype {MODELOPT_KV_DTYPE}: a Model "
                         "Optimizer checkpoint on an engine that follows its KV declaration "
                         "(see the converter's docstring)")
    if in_flight:
        out.notes.append(f"{in_flight} row(s) written with kv_dtype fp8: a run of their campaign "
                         "(or of the campaign the same run is filed under again) held more "
                         "tokens in flight than a 16-bit cache holds (see "
                         "energylens/measurements/convert/kv_evidence.py)")
    if speculative:
        out.notes.append(f"{speculative} DeepSeek-R1 row(s) written with speculative_tokens "
                         f"{MTP_DRAFT_TOKENS['trtllm']} (TensorRT-LLM) or "
                         f"{MTP_DRAFT_TOKENS['sglang']} (SGLang), draft_acceptance "
                         f"{MTP_ACCEPTANCE}: their TPOT against DeepSeek-V3's shows multi-token "
                         "prediction (see the converter's docstring)")
    if any(repeats.values()):
        out.notes.append(f"{sum(repeats.values())} of the {read} aggregated row(s) dropped as "
                         "repeats of another row's measurement (the same inputs as the model reads "
                         "them and TTFT/TPOT: "
                         f"{repeats['identical']} bit-identical, {repeats['last digit']} to the "
                         f"last printed digit, {repeats['rounded']} rounded to "
                         f"{ROUNDED_DECIMALS} decimals); the other counts are of the "
                         f"{read} (see the converter's docstring)")
    if wip:
        out.notes.append(f"{wip} row(s) of runs marked wip=True (work in progress) of the "
                         f"{len(out.rows)} written carry wip true: kept, to be read apart")
    if unstated:
        out.notes.append(f"{unstated} row(s) leave attention_dp_size, moe_tp_size or moe_ep_size "
                         "empty or 0: written empty (read as the defaults; num_gpus = tp_size x "
                         "pp_size where attention_dp_size is not stated)")
    return out
