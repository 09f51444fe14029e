"""The cost model's fused-MoE price against vLLM's measured Triton kernels at every token
count, prefill included, and a check of the rows against the GPU's HBM peak.

Usage: python benchmarks/validate_moe_prefill.py [--tables DIR] [--gpus h100_sxm,h200_sxm]
       [--kernels triton|all] [--csv OUT.csv]

``energylens calibrate`` fits the fused-MoE HBM share on the decode rows (<= 128 tokens) of
AIConfigurator's vLLM MoE tables (``energylens/calibration/fit_moe.py``; the shipped copies
hold those rows only). This script reads the whole tables from ``../shared/data/
aiconfigurator/kernels`` (``--tables``), the same balanced-routing, larger-than-L2 Triton
rows, fastest kernel per shape (``--kernels all``: every kernel family, as the Blackwell
tables need, which time FlashInfer's kernels only), 1 to 16,384 tokens, and prices each row
with the shipped
calibration exactly as the fit does (``fit_moe.case_latency_s``: top-k, dispatch, gate+up,
activation, down, combine). Prints predicted / measured per weight dtype and token band,
and per expert split for DeepSeek-V3's shape (hidden 7,168, 256 experts, top 8), and how
many rows the reader left out because their weights, read once by the experts the
balanced routing reaches, would need more than the GPU's HBM peak in the measured time.
Validation only: nothing is fitted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from energylens.calibration import fit_moe
from energylens.calibration.file import default_calibration
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "aiconfigurator" / "kernels"
BANDS = [0, 16, 128, 1024, 4096, 16384]


def price_rows(*, path: Path, family: str | None) -> pd.DataFrame | None:
    """Every kept row of one table (kernels of ``family``; None: all): measured and
    predicted seconds, and the bandwidth its weight reads would need. None if it keeps
    no row."""
    table = fit_moe.read_table(path=path, max_tokens=BANDS[-1], family=family)
    if not table.cases:
        return None
    gpu = load_gpu(table.gpu)
    constants = default_calibration().kernel(table.gpu)
    rows = []
    for case in table.cases:
        predicted = fit_moe.case_latency_s(case=case, gpu=gpu, constants=constants)
        rows.append(pd.DataFrame({
            "gpu": gpu.name, "dtype": case.weight_dtype, "hidden": case.hidden,
            "experts": case.experts, "top_k": case.top_k, "moe_tp": case.moe_tp, "ep": case.ep,
            "tokens": case.tokens, "measured_s": case.measured_s, "predicted_s": predicted,
            "faster_than_hbm_in_table": table.faster_than_hbm}))
    return pd.concat(rows, ignore_index=True)


def report(frame: pd.DataFrame) -> None:
    frame = frame.assign(ratio=frame.predicted_s / frame.measured_s,
                         band=pd.cut(frame.tokens, BANDS))
    for gpu, rows in frame.groupby("gpu", sort=False):
        print(f"{gpu}: {len(rows)} rows ({rows.faster_than_hbm_in_table.iloc[0]} left out: "
              "faster than HBM)")
        summary = rows.groupby(["dtype", "band"], observed=True).ratio.agg(
            median="median", mape=lambda r: float(np.mean(np.abs(r - 1))), rows="size")
        print(summary.round(2).to_string())
        deepseek = rows[(rows.hidden == 7168) & (rows.experts == 256) & (rows.top_k == 8)]
        if len(deepseek):
            print("  DeepSeek-V3 shape, predicted / measured median, per moe_tp:")
            print(deepseek.groupby(["dtype", "moe_tp", "band"], observed=True).ratio.median()
                  .unstack().round(2).to_string())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=SHARED)
    parser.add_argument("--gpus", default="h100_sxm,h200_sxm",
                        help="table folders (default: the Hopper GPUs the fit uses)")
    parser.add_argument("--kernels", choices=("triton", "all"), default="triton",
                        help="kernel families priced (default: vLLM's Triton kernels, the ones "
                             "the GPUs' constants describe; Blackwell tables have none)")
    parser.add_argument("--csv", type=Path, help="also write every priced row here")
    args = parser.parse_args()
    paths = [sorted((args.tables / gpu / "moe" / "vllm").glob("*/moe_perf.parquet"))[-1]
             for gpu in args.gpus.split(",")
             if list((args.tables / gpu / "moe" / "vllm").glob("*/moe_perf.parquet"))]
    if not paths:
        parser.error(f"no vLLM MoE tables under {args.tables}")
    family = fit_moe.KERNEL_FAMILY if args.kernels == "triton" else None
    frames = [f for f in (price_rows(path=p, family=family) for p in paths) if f is not None]
    if not frames:
        parser.error(f"no {args.kernels} kernel rows in the tables of {args.gpus} "
                     "(Blackwell tables time FlashInfer's kernels: --kernels all)")
    frame = pd.concat(frames, ignore_index=True)
    report(frame)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
