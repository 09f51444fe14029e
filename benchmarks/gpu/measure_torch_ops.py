"""Time the small PyTorch ops of ``measure_decode_step.py``'s forward step, one by one.

The engine-free steps (``steps_<dtype>.csv``) run plain PyTorch: an eager RMSNorm
(``x * rsqrt(x.float().pow(2).mean(-1) + eps).to(x.dtype) * w``, eight kernels), the
residual adds, ``silu(gate) * up`` as two kernels, and for FP8 weights ``F.pad`` and the cast
to FP8 before each GEMM. Those are PyTorch's generic kernels, not an engine's fused ones
(``measure_elementwise.py`` times those), so the steps are priced with these. Each op is
timed as the step runs it, inside a CUDA graph, back to back on the same tensors (median
of 5 replays / calls), at Llama-3.1-8B's widths (hidden 4,096, FFN 14,336) and 1 to
16,384 tokens (a decode step's batch, a prefill's prompt).

    python benchmarks/gpu/measure_torch_ops.py --out DIR   # writes DIR/torch_ops.csv

Columns (SI): ``op``, ``hidden``, ``ffn``, ``tokens``, ``calls`` (per graph), ``time_s`` (per
call), ``bytes`` (read + written by the op's kernel, as the step's tensors hold them).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_elementwise import time_graph  # noqa: E402
from measure_kernels import log, write_csv  # noqa: E402

DEV = torch.device("cuda")
BF16, FP32, FP8 = torch.bfloat16, torch.float32, torch.float8_e4m3fn
HIDDEN, FFN = 4096, 14336
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def ops(t: int) -> dict[str, tuple[Callable[[], object], int]]:
    """op -> (a call on preallocated tensors, bytes it reads and writes)."""
    d, f = HIDDEN, FFN
    x = torch.randn(t, d, device=DEV, dtype=BF16)
    y = torch.randn(t, d, device=DEV, dtype=BF16)
    w = torch.randn(d, device=DEV, dtype=BF16)
    xf = x.float()
    x2 = xf.pow(2)
    ms = x2.mean(-1, keepdim=True)
    me = ms + 1e-6
    rs = torch.rsqrt(me)
    rb = rs.to(BF16)
    xr = x * rb
    gu = torch.randn(t, 2 * f, device=DEV, dtype=BF16)
    sg = F.silu(gu[..., :f])
    pad = (-t) % 16
    row, row32, one32, one = t * d * 2, t * d * 4, t * 4, t * 2
    return {
        "to_fp32": (lambda: x.float(), row + row32),
        "pow": (lambda: xf.pow(2), 2 * row32),
        "mean": (lambda: x2.mean(-1, keepdim=True), row32 + one32),
        "add_eps": (lambda: ms + 1e-6, 2 * one32),
        "rsqrt": (lambda: torch.rsqrt(me), 2 * one32),
        "to_bf16": (lambda: rs.to(BF16), one32 + one),
        "mul_rsqrt": (lambda: x * rb, 2 * row + one),
        "mul_weight": (lambda: xr * w, 2 * row + d * 2),
        "rms_chain": (lambda: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)
                                              + 1e-6).to(BF16) * w,
                      row + row32 + 2 * row32 + row32 + one32 + 4 * one32 + one32 + one
                      + 2 * row + one + 2 * row + d * 2),
        "add": (lambda: x + y, 3 * row),
        "silu": (lambda: F.silu(gu[..., :f]), 2 * t * f * 2),
        "mul_up": (lambda: sg * gu[..., f:], 3 * t * f * 2),
        "pad": (lambda: F.pad(x, (0, 0, 0, pad)), row + (t + pad) * d * 2),
        "cast_fp8": (lambda: x.to(FP8), row + t * d),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    rows: list[dict[str, object]] = []
    for tokens in TOKENS:
        calls_of = ops(tokens)
        for op, (call, nbytes) in calls_of.items():
            seconds, calls = time_graph(lambda _i, call=call: call())
            rows.append({"op": op, "hidden": HIDDEN, "ffn": FFN, "tokens": tokens,
                         "calls": calls, "time_s": f"{seconds:.6g}", "bytes": nbytes})
        log(f"{tokens} tokens: " + ", ".join(f"{r['op']} {float(str(r['time_s'])) * 1e6:.2f} us"
                                             for r in rows[-len(calls_of):]))
        torch.cuda.empty_cache()
    write_csv(args.out / "torch_ops.csv", rows)
    log(f"wrote {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
