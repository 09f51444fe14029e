"""Time and board power of whole Llama-3.1-8B forward steps on one GPU, no serving engine.

The model's shapes with random weights, 32 layers: RMSNorm, fused QKV GEMM, PyTorch SDPA
attention over a contiguous bf16 KV cache (GQA 32/8, head dim 128), output GEMM, fused
gate/up GEMM, SiLU x mul, down GEMM, residual adds, the final norm and the LM head
(vocabulary 128,256). ``--dtype fp8``: the layers' weights in FP8 with per-tensor scales
(``torch._scaled_mm``, the activations cast to FP8 before each GEMM). No RoPE, no sampling,
no KV append, no engine: each step is one CUDA graph replay, so the time is the GPU's
alone. Decode steps take one token per sequence at (batch, context); prefill steps one
sequence of S tokens (causal). Each configuration is timed (median of graph replays) and
then replayed back to back for ``--seconds`` under NVML's energy counter.

    python benchmarks/gpu/measure_decode_step.py --out DIR [--dtype fp8]   # writes DIR/steps_<dtype>.csv

``--mixed``: steps of a continuous batch instead, ``batch`` decode sequences and one prompt
chunk of ``prefill_tokens`` tokens in the same forward pass (:data:`MIXED`, chunked prefill as
vLLM and SGLang run it), written to ``steps_<dtype>_mixed.csv``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_kernels import BF16, DEV, FP8, Nvml, idle, log, sustained, write_csv  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, LAYERS = 4096, 32, 8, 128, 14336, 128256, 32
DECODE = ((1, 1024), (8, 1024), (32, 1024), (64, 1024), (128, 1024), (256, 1024),
          (16, 4096), (64, 4096))
PREFILL = (512, 2048, 8192)
#: (decode sequences, their context, prompt tokens in the same step): chunked prefill.
MIXED = ((8, 1024, 512), (16, 1024, 2048), (64, 1024, 256), (64, 1024, 1024), (64, 1024, 4096),
         (128, 1024, 512), (32, 4096, 2048), (128, 2048, 2048))


ONE = None  # per-tensor fp8 scale (a device scalar), set in main


def weights(dtype: torch.dtype) -> list[dict[str, torch.Tensor]]:
    def w(n: int, k: int) -> torch.Tensor:
        return (torch.randn(n, k, device=DEV, dtype=BF16) / k ** 0.5).to(dtype)
    return [{"qkv": w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o": w(HIDDEN, HEADS * HEAD_DIM),
             "gate_up": w(2 * FFN, HIDDEN), "down": w(HIDDEN, FFN),
             "n1": torch.ones(HIDDEN, device=DEV, dtype=BF16),
             "n2": torch.ones(HIDDEN, device=DEV, dtype=BF16)} for _ in range(LAYERS)]


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T; fp8 weights: x quantised per call (a cast kernel, as engines do), rows padded
    to a multiple of 16 for torch._scaled_mm, per-tensor scales of one."""
    if w.dtype != FP8:
        return x @ w.t()
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    pad = (-m) % 16
    q = F.pad(rows, (0, 0, 0, pad)).to(FP8)
    y = torch._scaled_mm(q, w.t(), scale_a=ONE, scale_b=ONE, out_dtype=BF16)[:m]
    return y.reshape(*x.shape[:-1], w.shape[0])


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


def mixed_forward(xd: torch.Tensor, xp: torch.Tensor, layers, head: torch.Tensor,
                  caches) -> torch.Tensor:
    """One step of a continuous batch: ``xd`` (batch, 1, hidden) decode tokens over their
    caches and ``xp`` (1, P, hidden) a new prompt's chunk (causal, no cached prefix). The
    norms, GEMMs and adds see all batch + P tokens as one matrix; attention runs per
    group; the head takes each decode token and the prompt's last."""
    b, p_len = xd.shape[0], xp.shape[1]
    x = torch.cat([xd.reshape(b, HIDDEN), xp.reshape(p_len, HIDDEN)])
    for i, p in enumerate(layers):
        qkv = linear(rms(x, p["n1"]), p["qkv"])
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        qd = q[:b].view(b, 1, HEADS, HEAD_DIM).transpose(1, 2)
        ad = F.scaled_dot_product_attention(qd, *caches[i], enable_gqa=True)
        qp = q[b:].view(1, p_len, HEADS, HEAD_DIM).transpose(1, 2)
        kp = k[b:].view(1, p_len, KV_HEADS, HEAD_DIM).transpose(1, 2)
        vp = v[b:].view(1, p_len, KV_HEADS, HEAD_DIM).transpose(1, 2)
        ap = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True)
        a = torch.cat([ad.transpose(1, 2).reshape(b, HEADS * HEAD_DIM),
                       ap.transpose(1, 2).reshape(p_len, HEADS * HEAD_DIM)])
        x = x + linear(a, p["o"])
        gu = linear(rms(x, p["n2"]), p["gate_up"])
        x = x + linear(F.silu(gu[..., :FFN]) * gu[..., FFN:], p["down"])
    return torch.cat([x[:b], x[-1:]]) @ head.t()


def forward(x: torch.Tensor, layers, head: torch.Tensor, caches, causal: bool) -> torch.Tensor:
    """One step: x is (batch, tokens, hidden); caches (k, v) per layer or None (prefill)."""
    b, t, _ = x.shape
    for i, p in enumerate(layers):
        qkv = linear(rms(x, p["n1"]), p["qkv"])
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        q = q.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        if caches is None:
            k = k.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
            v = v.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        else:
            k, v = caches[i]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        x = x + linear(a.transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM), p["o"])
        gu = linear(rms(x, p["n2"]), p["gate_up"])
        x = x + linear(F.silu(gu[..., :FFN]) * gu[..., FFN:], p["down"])
    return x[:, -1] @ head.t()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--host-gaps", action="store_true",
                    help="only decode batch 64 at 1,024 tokens, each step followed by a host "
                         "sleep of 0-20 ms (a serving engine's CPU time between steps)")
    ap.add_argument("--mixed", action="store_true",
                    help="only steps of decode sequences and a prompt chunk together "
                         "(MIXED: chunked prefill), written to steps_<dtype>_mixed.csv")
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16",
                    help="weights of the layers' GEMMs (the LM head stays bf16)")
    args = ap.parse_args()
    global ONE
    ONE = torch.ones((), device=DEV, dtype=torch.float32)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    nv = Nvml()
    layers = weights(FP8 if args.dtype == "fp8" else BF16)
    head = torch.randn(VOCAB, HIDDEN, device=DEV, dtype=BF16) / HIDDEN ** 0.5
    rows: list[dict] = []
    r = idle(nv, 2.0)
    r.update(phase="idle")
    rows.append(r)
    configs = [("decode", b, 1, ctx, 0) for b, ctx in DECODE] + [
        ("prefill", 1, s, 0, 0) for s in PREFILL]
    gaps = (0.0,)
    suffix = ""
    if args.host_gaps:
        configs, gaps = [("decode", 64, 1, 1024, 0)], (0.0, 0.5e-3, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3)
        suffix = "_host_gaps"
    if args.mixed:
        configs, suffix = [("mixed", b, 1, ctx, p) for b, ctx, p in MIXED], "_mixed"
    for (phase, batch, tokens, ctx, prompt), gap in [(c, g) for c in configs for g in gaps]:
        row = {"phase": phase, "batch": batch, "tokens": tokens, "context": ctx, "layers": LAYERS,
               "weight_dtype": args.dtype, "host_gap_s": gap, "prefill_tokens": prompt}
        try:
            caches = None
            if phase in ("decode", "mixed"):
                caches = [(torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device=DEV, dtype=BF16),
                           torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device=DEV, dtype=BF16))
                          for _ in range(LAYERS)]
            x = torch.randn(batch, tokens, HIDDEN, device=DEV, dtype=BF16)
            xp = torch.randn(1, prompt, HIDDEN, device=DEV, dtype=BF16)
            causal = phase == "prefill"

            def run(x=x, xp=xp, caches=caches, causal=causal, phase=phase) -> None:
                if phase == "mixed":
                    mixed_forward(x, xp, layers, head, caches)
                else:
                    forward(x, layers, head, caches, causal)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    run()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                run()
            times = []
            for _ in range(7):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            row["step_time_s"] = statistics.median(times)
            def step(g=g, gap=gap) -> None:
                g.replay()
                if gap:
                    torch.cuda.synchronize()
                    time.sleep(gap)
            row.update(sustained(nv, step, seconds=args.seconds))
            log(f"{phase} b={batch} t={tokens} ctx={ctx} prompt={prompt} gap={gap * 1e3:.1f} ms: "
                f"{row['step_time_s'] * 1e3:.2f} ms, "
                f"{row['power_w']:.0f} W, SM {row['sm_clock_mhz']:.0f} MHz")
            del g, caches, x, xp
        except Exception as exc:  # noqa: BLE001 - keep the other configurations
            row["error"] = str(exc).splitlines()[0][:160]
            log(f"{phase} b={batch} failed: {exc}")
        torch.cuda.empty_cache()
        rows.append(row)
        write_csv(args.out / f"steps_{args.dtype}{suffix}.csv", rows)
    r = idle(nv, 2.0)
    r.update(phase="idle_after")
    rows.append(r)
    write_csv(args.out / f"steps_{args.dtype}{suffix}.csv", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
