"""The cost model's price of MLA decode attention against TensorRT-LLM's measured kernel.

Usage: python benchmarks/validate_mla_decode.py [--calibration FILE] [--runtime trtllm]
       [--min-heads N] [--csv OUT.csv] [--module [--prompt]]

AIConfigurator times TensorRT-LLM's MLA generation (decode) attention alone
(``data/measurements/aiconfigurator/kernels/<gpu>/mla/trtllm/1.3.0rc20/generation_mla_perf
.parquet``; ``num_heads`` query heads per GPU, ``batch_size`` sequences of ``step`` cached
tokens, bf16 and fp8 KV cache, ``latency`` in ms; DeepSeek-V3's 576-wide latent). Each row
is priced as a prediction prices a DeepSeek-V3 decode step on that GPU: the weight-absorbed
form of the model's MLA layer at tensor parallelism 128 / ``num_heads``, its fused
attention kernel ``qk+soft+av`` with the GPU's ``mla_decode_*`` constants where calibrate
applied them (fitted on these rows: in-sample; ``calibrate`` logs the held-out error of
each half of the head counts fitted on the other). Prints per GPU and cache dtype the MAPE
and median error over every row and over the serving range (<= 256 sequences of 512-16,384
cached tokens, 16, 32 and 128 heads: TP 8, TP 4, attention DP).

``--module`` checks the whole attention module instead, against a table nothing is fitted
on (``mla_generation_module_perf.parquet``, TensorRT-LLM on H100, H200 and B200: the
module's GEMMs, norms, rope, absorbed BMMs and attention, BF16 or block-FP8 GEMMs): the sum
of the model's kernels of the MLA layer from ``q_a`` to ``o`` in one decode step of
DeepSeek-V3 on one GPU at tensor parallelism 128 / ``num_heads`` (from a step's own
breakdown, so the runtime's fusions and kernel scales apply). ``--module --prompt`` does
the same for a prompt step (``mla_context_module_perf.parquet``: ``batch_size`` prompts of
``isl`` tokens, no cached prefix; H100, H200, B200 and GB200), whose MLA context kernels the
model prices in the decompressed form.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from energylens.calibration.file import resolve_calibration
from energylens.cost.kernels import compile_layer
from energylens.cost.roofline import kernel_cost
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model import get_model
from energylens.model.families import build_graph
from energylens.predict import calibration_for_gpu, step_context

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "data" / "measurements" / "aiconfigurator" / "kernels"
#: Table folder -> hardware-database name.
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "b200_sxm": "B200", "gb200": "GB200"}
MODEL = "deepseek-ai/DeepSeek-V3"
HEADS = 128  # DeepSeek-V3's query heads: num_heads per GPU = HEADS / tensor parallelism
ATTENTION = "qk+soft+av"
KV = {"bfloat16": "bf16", "fp8": "fp8"}


def price_table(*, folder: str, calibration: Path | None, runtime: str,
                min_heads: int) -> pd.DataFrame:
    """One row per measured shape: measured and predicted seconds."""
    table = pd.read_parquet(next((TABLES / folder / "mla" / "trtllm").glob(
        "*/generation_mla_perf.parquet")))
    table = table[(table.num_heads >= min_heads) & (HEADS % table.num_heads == 0)
                  & (table.latency > 0)]
    gpu = load_gpu(GPUS[folder])
    model = get_model(MODEL)
    group = next(g for g in build_graph(model).groups if g.prompt_attention is not None)
    resolved = calibration_for_gpu(resolve_calibration(calibration), gpu)
    rows = []
    for (heads, kv), shapes in table.groupby(["num_heads", "kv_cache_dtype"]):
        tp = HEADS // int(heads)
        ctx = step_context(model=model, gpu=gpu, calibration=resolved,
                           deployment=Deployment(tp=tp, moe_tp=tp, runtime=runtime,
                                                 weight_dtype="fp8", kv_dtype=KV[str(kv)]))
        compiled = compile_layer(layer=group.layer, sizes=group.sizes,
                                 degrees=dict(ctx.degrees), fusion=ctx.fusion)
        kernel = next(k for k in compiled.kernels if k.name == ATTENTION)
        phase = {"b": shapes.batch_size.to_numpy(dtype=float),
                 "m": np.ones(len(shapes)), "p": shapes.step.to_numpy(dtype=float) + 1.0,
                 "n": np.ones(len(shapes)), "t": np.ones(len(shapes))}
        cost = kernel_cost(kernel=kernel, phase=phase, window=group.window, gpu=gpu,
                           constants=ctx.constants.for_mla_decode(), clock=ctx.clock,
                           weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype)
        rows.append(pd.DataFrame({
            "gpu": gpu.name, "kv_dtype": KV[str(kv)], "heads": int(heads),
            "batch": shapes.batch_size.to_numpy(), "context": phase["p"],
            "measured_s": shapes.latency.to_numpy(dtype=float) * 1e-3,
            "predicted_s": np.broadcast_to(cost.latency_s, (len(shapes),))}))
    return pd.concat(rows)


#: Kernels of a decode step's MLA layer the attention module holds (q_a through o; the
#: runtime's quantisation kernels before them counted too, named quant_*).
MODULE = ("q_a+kv_a", "q_b", "rope", "absorb", ATTENTION, "uv", "o")
GEMMS = {"bfloat16": "bf16", "fp8_block": "fp8"}


def price_module(*, folder: str, calibration: Path | None, runtime: str,
                 min_heads: int, prompt: bool = False) -> pd.DataFrame:
    """One row per measured module shape (BF16 and block-FP8 GEMMs): measured and predicted
    seconds of the attention module of one layer in a decode step (``prompt``: a prompt
    step)."""
    from energylens.cost.step import STEP_RECORDER, SequenceGroup, step_cost

    name = "mla_context_module_perf" if prompt else "mla_generation_module_perf"
    path = next((TABLES / folder / "mla" / "trtllm").glob(f"*/{name}.parquet"), None)
    if path is None:
        return pd.DataFrame()
    table = pd.read_parquet(path)
    table = table[(table.num_heads >= min_heads) & (HEADS % table.num_heads == 0)
                  & table.gemm_type.isin(list(GEMMS)) & (table.latency > 0)]
    gpu = load_gpu(GPUS[folder])
    model = get_model(MODEL)
    resolved = calibration_for_gpu(resolve_calibration(calibration), gpu)
    rows = []
    for (heads, kv, gemm), shapes in table.groupby(["num_heads", "kv_cache_dtype", "gemm_type"]):
        tp = HEADS // int(heads)
        ctx = step_context(model=model, gpu=gpu, calibration=resolved,
                           deployment=Deployment(tp=tp, moe_tp=tp, runtime=runtime,
                                                 weight_dtype=GEMMS[str(gemm)],
                                                 kv_dtype=KV[str(kv)]))
        for shape in shapes.itertuples():
            seconds: dict[str, float] = {}

            def record(group, item, latency, energy, critical,  # type: ignore[no-untyped-def]
                       seconds=seconds):
                if critical and group.prompt_attention is not None and group.layer.name == "moe":
                    name = item if isinstance(item, str) else item.name
                    seconds[name] = seconds.get(name, 0.0) + float(np.max(latency)) / group.count

            token = STEP_RECORDER.set(record)
            tokens = int(shape.isl) if prompt else 1
            context = int(shape.isl) if prompt else int(shape.step)
            try:
                step_cost(ctx=ctx, seqs=[SequenceGroup(sequences=int(shape.batch_size),
                                                       new_tokens=tokens, context=context)])
            finally:
                STEP_RECORDER.reset(token)
            module = sum(v for k, v in seconds.items()
                         if k in MODULE or (k.startswith("quant") and "E" not in k))
            rows.append({"gpu": gpu.name, "kv_dtype": KV[str(kv)], "gemm": GEMMS[str(gemm)],
                         "heads": int(heads), "batch": int(shape.batch_size),
                         "context": float(context),
                         "measured_s": float(shape.latency) * 1e-3, "predicted_s": module})
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame) -> None:
    """MAPE and median error per GPU and cache dtype, over every row and the serving range."""
    frame = frame.assign(error=frame.predicted_s / frame.measured_s - 1)
    keys = ["gpu", "kv_dtype", *(["gemm"] if "gemm" in frame else [])]
    print(f"| {' | '.join(keys)} | rows | MAPE | median | serving-range rows | MAPE | median |")
    print("|---" * (len(keys) + 6) + "|")
    for key, rows in frame.groupby(keys, sort=False):
        inside = rows[(rows.batch <= 256) & rows.context.between(512, 16384)
                      & rows.heads.isin([16, 32, 128])]
        print(f"| {' | '.join(map(str, key))} | {len(rows)} | {100 * rows.error.abs().mean():.1f} % | "
              f"{100 * rows.error.median():+.1f} % | {len(inside)} | "
              f"{100 * inside.error.abs().mean():.1f} % | {100 * inside.error.median():+.1f} % |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calibration", type=Path, help="calibration file (default: shipped)")
    parser.add_argument("--runtime", default="trtllm", help="runtime whose kernel scales price it")
    parser.add_argument("--min-heads", type=int, default=16,
                        help="leave out fewer query heads per GPU (default 16: TP <= 8)")
    parser.add_argument("--csv", type=Path, help="also write every priced row here")
    parser.add_argument("--module", action="store_true",
                        help="the whole attention module against the module table")
    parser.add_argument("--prompt", action="store_true",
                        help="with --module: prompt steps against the context module table")
    args = parser.parse_args()
    folders = [f for f in GPUS if (TABLES / f / "mla").is_dir()]
    if args.module:
        frame = pd.concat([price_module(folder=f, calibration=args.calibration,
                                        runtime=args.runtime, min_heads=args.min_heads,
                                        prompt=args.prompt) for f in folders],
                          ignore_index=True)
    else:
        frame = pd.concat([price_table(folder=f, calibration=args.calibration,
                                       runtime=args.runtime, min_heads=args.min_heads)
                           for f in folders], ignore_index=True)
    report(frame)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
