"""Argonne LLM-Inference-Bench ``All_results.csv`` / ``power_results.csv`` /
``TP_EP_PP_results.csv`` -> ``batch`` rows.

A row is one static batch of ``Batch Size`` requests with ``Input Output Length`` tokens
in and out on ``Num of Hardware`` GPUs (tensor parallel, or the layout its ``Parallelism
Type`` names: ``tp``, ``pp``, ``ep``, ``moe_tp``; an MI250 package counts as its two
GPUs, :func:`~energylens.measurements.inference_bench.bench_devices`): ``Latency`` is the whole batch
end to end (``e2e_s``), ``Throughput`` input + output tokens per second
(``total_tokens_per_s``), ``avg_power`` (mW in the file) the board power (``power_w``).

Where a row's throughput x latency is the tokens of ONE sequence (2 x length, within
5 %) although its batch is larger, the bench did not run ``Batch Size`` sequences at once
(its llama.cpp rows: ``Batch Size`` is the engine's ``-b``, the prompt tokens per forward
pass). Each row is written as the validator reads it
(:func:`energylens.measurements.inference_bench.bench_setup`): llama.cpp's as one sequence
whose prompt runs in passes of ``Batch Size`` tokens (``prefill_chunk_tokens``), its GPUs
splitting the layers (``pp``); the others' as ``Batch Size`` sequences over ``tp`` GPUs.

``framework``: the bench's name, except where it is ambiguous as a runtime spelling: its
``Deepspeed`` rows ran Habana's DeepSpeed fork on Gaudi2, written as ``deepspeed-habana``
(a bare ``deepspeed`` reads as DeepSpeed-MII, :data:`energylens.measurements.inference_bench.RUNTIMES`).
``runtime_version``: the release a framework's rows are read as where a profile fact
changes since (:data:`energylens.measurements.inference_bench.RELEASES`: TensorRT-LLM as a
0.x release, before its overlap scheduler), empty elsewhere (the profile's).
``identical_prompts``: ``true`` on the rows of frameworks whose batches repeat one prompt
(:data:`energylens.measurements.inference_bench.IDENTICAL_PROMPTS`), empty elsewhere.

The bench's time-to-first-token files (``Fig_21/all_results_TTFT.csv``,
``Fig_22/all_results_TTFT_ITL.csv``: ``Input Length`` and ``Output Length`` apart, 16
prompts of 1,024 tokens and one output token) become ``batch`` rows with ``ttft_s``, the
prefill of the whole batch: their ``TTFT Latency`` (Fig_22) or ``Latency`` (Fig_21, one
output token: the same time). Fig_22's ``end_latency`` is the 1,024-in, 1,024-out run of
``All_results.csv`` and is not carried.
"""

from __future__ import annotations

from pathlib import Path

from energylens.measurements.convert import Converted, Options
from energylens.measurements.formats import (
    LIB_LAYOUT,
    _count,
    _csv_rows,
    _fail,
    _positive,
    bench_gpu,
    load_measurements,
)
from energylens.measurements.inference_bench import (
    IDENTICAL_PROMPTS,
    RELEASES,
    RUNTIMES,
    UnmodelledRow,
    bench_devices,
    bench_layout,
    bench_setup,
)

#: Bench framework names that a runtime spelling would misread, written as their runtime.
AMBIGUOUS = {"Deepspeed": RUNTIMES["Deepspeed"]}

SAME = 0.05  # relative tolerance of "throughput x latency = the tokens of one sequence"


#: Columns that mark a time-to-first-token file (lengths in and out apart).
TTFT_LENGTHS = ("Input Length", "Output Length")
_TTFT_INPUT = ("Hardware", "Num of Hardware", "Framework", "Model", *TTFT_LENGTHS, "Batch Size")


def convert(path: Path, options: Options) -> Converted:
    """One row per measured batch, the framework as ``framework``."""
    header, _ = _csv_rows(path, ())
    if all(name in header for name in TTFT_LENGTHS):
        return _convert_ttft(path)
    out = Converted(rows=[])
    single = 0
    for row in load_measurements(format="llm-inference-bench", path=path, gpu=options.gpu).rows:
        v, m = row.input, row.measured
        if v.get(LIB_LAYOUT):  # written as TP over every GPU, it would be a wrong claim
            try:
                bench_layout(v)
            except UnmodelledRow as exc:
                raise _fail(path, f"a {v['Model']} row: {exc}") from None
        n, tokens = bench_devices(v), int(v["Input Output Length"])
        batch = int(v["Batch Size"])
        one = abs(m["throughput_tokens_per_s"] * m["latency_s"] / (2 * tokens) - 1) <= SAME
        try:
            setup = bench_setup(v)
            layout = setup.deployment
            tp, pp, ep, moe_tp = layout.tp, layout.pp, layout.ep, layout.moe_tp
            chunk, sequences = layout.prefill_chunk_tokens, setup.sequences
        except UnmodelledRow:  # converted as measured; refused when predicted
            tp, pp, ep, moe_tp, chunk, sequences = n, 1, 1, None, None, 1 if one else batch
        converted = {"model": v["Model"], "gpu": row.context["gpu"], "num_gpus": n, "tp": tp,
                     "pp": pp if pp > 1 else None, "ep": ep if ep > 1 else None,
                     "moe_tp": moe_tp,
                     "framework": AMBIGUOUS.get(str(v["Framework"]), v["Framework"]),
                     "runtime_version": RELEASES.get(str(v["Framework"])), "workload": "batch",
                     "identical_prompts": "true" if v["Framework"] in IDENTICAL_PROMPTS else None,
                     "batch": sequences, "prefill_chunk_tokens": chunk,
                     "input_tokens": tokens, "output_tokens": tokens, "e2e_s": m["latency_s"],
                     "total_tokens_per_s": m["throughput_tokens_per_s"]}
        if "avg_power_w" in m:
            converted["power_w"] = m["avg_power_w"]
        if one and batch > 1:
            single += 1
        out.rows.append(converted)
    if single:
        out.notes.append(f"{single} row(s) with Batch Size > 1 whose throughput x latency is one "
                         "sequence's tokens (llama.cpp's, whose Batch Size is its -b): written as "
                         "batch 1, the prompt in passes of Batch Size tokens "
                         "(prefill_chunk_tokens)")
    return out


def _convert_ttft(path: Path) -> Converted:
    """A time-to-first-token file: one ``batch`` row per measured prefill (``ttft_s``)."""
    header, rows = _csv_rows(path, _TTFT_INPUT)
    column = "TTFT Latency" if "TTFT Latency" in header else "Latency"
    if column not in header:
        raise _fail(path, "missing column 'TTFT Latency' (or 'Latency')")
    out = Converted(rows=[])
    for n, row in enumerate(rows, start=1):
        framework = row["Framework"]
        if RUNTIMES.get(framework) == "llama.cpp":  # its Batch Size is the prompt pass size
            raise _fail(path, f"row {n}: llama.cpp time-to-first-token rows are not read")
        gpus = bench_devices({"Hardware": row["Hardware"],
                              "Num of Hardware": _count(path, "Num of Hardware",
                                                        row["Num of Hardware"], n)})
        out.rows.append({
            "model": row["Model"], "gpu": bench_gpu(row["Hardware"]), "num_gpus": gpus,
            "tp": gpus, "framework": AMBIGUOUS.get(framework, framework),
            "runtime_version": RELEASES.get(framework), "workload": "batch",
            "identical_prompts": "true" if framework in IDENTICAL_PROMPTS else None,
            "batch": _count(path, "Batch Size", row["Batch Size"], n),
            "input_tokens": _count(path, "Input Length", row["Input Length"], n),
            "output_tokens": _count(path, "Output Length", row["Output Length"], n),
            "ttft_s": _positive(path, column, row[column], n)})
    if "end_latency" in header:
        out.notes.append("end_latency (the All_results.csv run of the same model at 1,024 "
                         "tokens in and out) is not carried")
    return out
