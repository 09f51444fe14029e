"""The cost model's price of MLA prompt attention against TensorRT-LLM's measured kernel.

Usage: python benchmarks/validate_mla_context.py [--kv-dtype bfloat16|fp8] [--min-isl N]
       [--min-heads N] [--runtime trtllm] [--csv OUT.csv]

AIConfigurator times TensorRT-LLM's MLA context (prefill) attention alone
(``data/measurements/aiconfigurator/kernels/<gpu>/mla/trtllm/1.3.0rc20/context_mla_perf
.parquet``; ``num_heads`` per GPU, ``batch_size`` prompts of ``isl`` tokens each, no cached
prefix, ``latency`` in ms; DeepSeek-V3's head dimensions, 192 for ``q k^T`` and 128 for
``a v``). Each row is priced as a prediction prices a DeepSeek-V3 prompt on that GPU: the
prompt (decompressed) form of the model's MLA layer at tensor parallelism 128 /
``num_heads`` (``energylens/data/families/attention_mla_prompt.yaml``), its fused
attention kernel ``qk+soft+av`` (the kernel the table times; with the GPU's
``prompt_attention_*`` constants where calibrate fitted them: on H100 and H200 on these
rows, 16-128 heads and prompts of >= 128 tokens, so in-sample there) and, reported apart, the
``kv_b`` / ``v_b`` decompression GEMMs the same form runs over the prompt's latent (the
table does not say whether the engine's op includes them). Prints, per GPU, MAPE and
median error of the attention kernel, its predicted / measured ratio per prompt length,
and the share of the dense BF16 peak the measured kernel reaches at the longest prompts
(FLOPs: batch x isl (isl + 1) / 2 causal pairs x heads x (192 + 128) x 2) against the
model's. Default rows: a bf16 KV cache, 16-128 heads per GPU (tensor parallelism <= 8),
prompts of >= 128 tokens.
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


def price_table(*, folder: str, kv_dtype: str, min_isl: int, min_heads: int,
                runtime: str) -> pd.DataFrame:
    """One row per measured shape: measured and predicted seconds, per kernel."""
    table = pd.read_parquet(next((TABLES / folder / "mla" / "trtllm").glob(
        "*/context_mla_perf.parquet")))
    table = table[(table.kv_cache_dtype == kv_dtype) & (table.isl >= min_isl)
                  & (table.num_heads >= min_heads) & (HEADS % table.num_heads == 0)]
    gpu = load_gpu(GPUS[folder])
    model = get_model(MODEL)
    group = next(g for g in build_graph(model).groups if g.prompt_attention is not None)
    calibration = calibration_for_gpu(resolve_calibration(None), gpu)
    rows = []
    for heads, shapes in table.groupby("num_heads"):
        tp = HEADS // int(heads)
        ctx = step_context(model=model, gpu=gpu, calibration=calibration,
                           deployment=Deployment(tp=tp, moe_tp=tp, runtime=runtime,
                                                 weight_dtype="fp8", kv_dtype="bf16"))
        assert group.prompt_attention is not None
        prompt = compile_layer(layer=group.prompt_attention, sizes=group.sizes,
                               degrees=dict(ctx.degrees), fusion=ctx.fusion)
        kernels = [k for k in prompt.kernels if k.touches_context]
        constants = ctx.constants.for_prompt_attention()
        for shape in shapes.itertuples():
            phase = {"b": float(shape.batch_size), "m": float(shape.isl),
                     "p": float(shape.isl), "n": 1.0, "t": 1.0}
            priced = {k.name: float(kernel_cost(
                kernel=k, phase=phase, window=group.window, gpu=gpu, constants=constants,
                clock=ctx.clock, weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype,
                compute_slowdown=1.0).latency_s) for k in kernels}
            rows.append({"gpu": gpu.name, "heads": int(heads), "batch": int(shape.batch_size),
                         "isl": int(shape.isl), "measured_s": float(shape.latency) * 1e-3,
                         "attention_s": priced[ATTENTION],
                         "decompression_s": sum(v for k, v in priced.items() if k != ATTENTION),
                         "peak_flops_per_s": gpu.peak_flops_per_s("bf16")})
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame) -> None:
    """MAPE, median and ratio per prompt length, per GPU."""
    flops = frame.batch * frame.isl * (frame.isl + 1) / 2 * frame.heads * (192 + 128) * 2
    frame = frame.assign(ratio=frame.attention_s / frame.measured_s,
                         measured_share=flops / frame.measured_s / frame.peak_flops_per_s,
                         model_share=flops / frame.attention_s / frame.peak_flops_per_s)
    for gpu, rows in frame.groupby("gpu", sort=False):
        error = rows.ratio - 1
        with_gemms = (rows.attention_s + rows.decompression_s) / rows.measured_s - 1
        print(f"{gpu}: {len(rows)} shapes, attention kernel MAPE {100 * error.abs().mean():.1f} %, "
              f"median {100 * error.median():+.1f} %; with kv_b/v_b "
              f"{100 * with_gemms.median():+.1f} % median")
        for isl, at in rows.groupby("isl"):
            print(f"  isl {isl:6d}: predicted / measured median {np.median(at.ratio):.2f} "
                  f"(range {at.ratio.min():.2f}-{at.ratio.max():.2f}, {len(at)} shapes)")
        long = rows[rows.isl >= 8192]
        if len(long):
            print(f"  isl >= 8192: share of the dense BF16 peak, measured kernel "
                  f"{np.median(long.measured_share):.2f}, model {np.median(long.model_share):.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kv-dtype", default="bfloat16", choices=("bfloat16", "fp8"))
    parser.add_argument("--min-isl", type=int, default=128,
                        help="leave out shorter prompts (default 128)")
    parser.add_argument("--min-heads", type=int, default=16,
                        help="leave out fewer query heads per GPU (default 16: TP <= 8)")
    parser.add_argument("--runtime", default="trtllm", help="runtime whose kernel scales price it")
    parser.add_argument("--csv", type=Path, help="also write every priced row here")
    args = parser.parse_args()
    frame = pd.concat([price_table(folder=folder, kv_dtype=args.kv_dtype, min_isl=args.min_isl,
                                   min_heads=args.min_heads, runtime=args.runtime)
                       for folder in GPUS if (TABLES / folder / "mla").is_dir()])
    report(frame)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
