"""Time the small memory-bound kernels of a transformer layer on one GPU: RMSNorm, the
residual add, fused residual add + RMSNorm, SiLU x mul and rotary embedding (NeoX halves).

What no public table gives EnergyLens for a GPU without a Vidur profile (H200): Vidur
times these ops on A100 and H100 only, so the norm, rope, activation and elementwise
constants of other GPUs are borrowed. Each kernel is written here in Triton as the serving
engines write theirs (one pass over its inputs and outputs, fp32 math, bf16 tensors): one
program per token row for the norms and for rope (every head of the token), flat blocks
for the add and the activation. Shapes: the model geometries of :data:`GEOMETRIES` (hidden size,
tensor-parallel shard of the MLP and of the heads), 1 to 16,384 tokens.

Two ways of timing each (op, shape), both as one CUDA graph of R calls, median of 5 replays
divided by R (the board as found: no clock or power setting is changed):

- ``hot``: every call on the same tensors, back to back, as Vidur profiles ops and as a
  forward pass hands a small activation from one kernel to the next through L2;
- ``cold``: calls cycle over copies of the tensors that together exceed twice the L2, so
  every call reads HBM.

    python benchmarks/gpu/measure_elementwise.py --out DIR   # writes DIR/elementwise.csv

Columns (SI): ``op`` (rmsnorm, add, add_rmsnorm, silu_mul, rope), ``geometry``, ``hidden``,
``ffn_shard`` (the activation's output width on one GPU), ``q_heads``, ``kv_heads`` (on one
GPU), ``head_dim``, ``tp``, ``tokens``, ``mode`` (hot / cold), ``copies`` (tensor sets cycled),
``calls`` (per graph), ``time_s`` (per call), ``bytes`` (read + written by one call, bf16
tensors; the norm weight and the rope table counted once), ``bandwidth_bytes_per_s``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_kernels import log, write_csv  # noqa: E402

DEV = torch.device("cuda")
BF16 = torch.bfloat16
HEAD_DIM = 128
#: (name, hidden, ffn, query heads, kv heads, tp): Llama-3.1-8B, Llama-3.1-70B at TP 1/4/8,
#: Qwen3-32B at TP 2 (a 5,120-wide hidden state).
GEOMETRIES = (
    ("llama3.1-8b", 4096, 14336, 32, 8, 1),
    ("llama3.1-70b", 8192, 28672, 64, 8, 1),
    ("llama3.1-70b", 8192, 28672, 64, 8, 4),
    ("llama3.1-70b", 8192, 28672, 64, 8, 8),
    ("qwen3-32b", 5120, 25600, 64, 8, 2),
)
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
EPS = 1e-6


@triton.jit
def _rmsnorm(x_ptr, w_ptr, out_ptr, d, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < d
    x = tl.load(x_ptr + row * d + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / d + eps)
    tl.store(out_ptr + row * d + cols, (x * inv * w).to(tl.bfloat16), mask=mask)


@triton.jit
def _add_rmsnorm(x_ptr, res_ptr, w_ptr, out_ptr, d, eps, BLOCK: tl.constexpr):
    """res += x (written back, the next layer's residual); out = rmsnorm(res) * w."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < d
    h = (tl.load(x_ptr + row * d + cols, mask=mask, other=0.0).to(tl.float32)
         + tl.load(res_ptr + row * d + cols, mask=mask, other=0.0).to(tl.float32))
    tl.store(res_ptr + row * d + cols, h.to(tl.bfloat16), mask=mask)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / d + eps)
    tl.store(out_ptr + row * d + cols, (h * inv * w).to(tl.bfloat16), mask=mask)


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(tl.bfloat16), mask=mask)


@triton.jit
def _silu_mul(gu_ptr, out_ptr, f, BLOCK: tl.constexpr):
    """out[t, :] = silu(gu[t, :f]) * gu[t, f:] (gate and up side by side, as engines fuse
    their GEMM)."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < f
    g = tl.load(gu_ptr + row * 2 * f + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * f + f + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * f + cols, (g / (1.0 + tl.exp(-g)) * u).to(tl.bfloat16), mask=mask)


@triton.jit
def _rope_heads(base, cos, sin, heads, HEADS: tl.constexpr, HALF: tl.constexpr):
    rows = tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, HALF)[None, :]
    mask = rows < heads
    offs = rows * 2 * HALF + cols
    a = tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(base + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(base + offs, (a * cos - b * sin).to(tl.bfloat16), mask=mask)
    tl.store(base + HALF + offs, (b * cos + a * sin).to(tl.bfloat16), mask=mask)


@triton.jit
def _rope(q_ptr, k_ptr, pos_ptr, cos_sin_ptr, q_heads, kv_heads, QH: tl.constexpr,
          KH: tl.constexpr, HALF: tl.constexpr):
    """NeoX rotary embedding in place on every query and key head of one token (one
    program per token, as vLLM's kernel); ``cos_sin`` is [positions, 2 x HALF] (cos then
    sin), fp32."""
    token = tl.program_id(0)
    cols = tl.arange(0, HALF)[None, :]
    pos = tl.load(pos_ptr + token)
    cos = tl.load(cos_sin_ptr + pos * 2 * HALF + cols)
    sin = tl.load(cos_sin_ptr + pos * 2 * HALF + HALF + cols)
    _rope_heads(q_ptr + token * q_heads * 2 * HALF, cos, sin, q_heads, QH, HALF)
    _rope_heads(k_ptr + token * kv_heads * 2 * HALF, cos, sin, kv_heads, KH, HALF)


def cos_sin_table(positions: int) -> torch.Tensor:
    """[positions, HEAD_DIM]: cos then sin of Llama's rotary angles (base 500,000), fp32."""
    inv = 1.0 / 500000.0 ** (torch.arange(0, HEAD_DIM, 2, device=DEV, dtype=torch.float32) / HEAD_DIM)
    angles = torch.arange(positions, device=DEV, dtype=torch.float32)[:, None] * inv[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).contiguous()


def _norm_warps(d: int) -> int:
    return 4 if d <= 4096 else 8


class Case:
    """One (op, shape): a way to allocate one set of its tensors and to launch it on a set;
    ``bytes`` is one call's traffic."""

    def __init__(self, op: str, tokens: int, *, hidden: int, ffn_shard: int, q_heads: int,
                 kv_heads: int) -> None:
        self.op, self.tokens = op, tokens
        self.hidden, self.ffn_shard, self.q_heads, self.kv_heads = hidden, ffn_shard, q_heads, kv_heads
        t, d, f, e = tokens, hidden, ffn_shard, 2
        heads = (q_heads + kv_heads) * HEAD_DIM
        self.bytes = {"rmsnorm": 2 * t * d * e + d * e,
                      "add": 3 * t * d * e,
                      "add_rmsnorm": 4 * t * d * e + d * e,
                      "silu_mul": 3 * t * f * e,
                      "rope": 2 * t * heads * e + t * 4 + t * HEAD_DIM * 4}[op]
        self.max_pos = 16384
        if op == "rope":
            self.cos_sin = cos_sin_table(self.max_pos)
        self.weight = torch.ones(d, device=DEV, dtype=BF16)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        t, d, f = self.tokens, self.hidden, self.ffn_shard
        r = lambda *shape: torch.randn(*shape, device=DEV, dtype=BF16)  # noqa: E731
        if self.op == "rmsnorm":
            return r(t, d), torch.empty(t, d, device=DEV, dtype=BF16)
        if self.op == "add":
            return r(t, d), r(t, d), torch.empty(t, d, device=DEV, dtype=BF16)
        if self.op == "add_rmsnorm":
            return r(t, d), r(t, d), torch.empty(t, d, device=DEV, dtype=BF16)
        if self.op == "silu_mul":
            return r(t, 2 * f), torch.empty(t, f, device=DEV, dtype=BF16)
        positions = torch.randint(0, self.max_pos, (t,), device=DEV, dtype=torch.int32)
        return (r(t, self.q_heads * HEAD_DIM), r(t, self.kv_heads * HEAD_DIM), positions)

    def launch(self, bufs: tuple[torch.Tensor, ...]) -> None:
        t, d, f = self.tokens, self.hidden, self.ffn_shard
        if self.op == "rmsnorm":
            x, out = bufs
            _rmsnorm[(t,)](x, self.weight, out, d, EPS, BLOCK=triton.next_power_of_2(d),
                           num_warps=_norm_warps(d))
        elif self.op == "add_rmsnorm":
            x, res, out = bufs
            _add_rmsnorm[(t,)](x, res, self.weight, out, d, EPS,
                               BLOCK=triton.next_power_of_2(d), num_warps=_norm_warps(d))
        elif self.op == "add":
            x, y, out = bufs
            n = t * d
            _add[(triton.cdiv(n, 2048),)](x, y, out, n, BLOCK=2048, num_warps=4)
        elif self.op == "silu_mul":
            gu, out = bufs
            _silu_mul[(t, triton.cdiv(f, 1024))](gu, out, f, BLOCK=1024, num_warps=4)
        else:
            q, k, positions = bufs
            _rope[(t,)](q, k, positions, self.cos_sin, self.q_heads, self.kv_heads,
                        QH=triton.next_power_of_2(self.q_heads),
                        KH=triton.next_power_of_2(self.kv_heads), HALF=HEAD_DIM // 2,
                        num_warps=4)


def time_graph(launch: Callable[[int], object], *, min_calls: int = 1) -> tuple[float, int]:
    """Seconds per call of ``launch(i)`` (the i-th call of a graph), as the median of 5
    replays of one CUDA graph of back-to-back calls divided by the calls, and the calls
    per graph (enough for ~2 ms, 50 to 2,000, at least ``min_calls``)."""
    for i in range(max(3, min_calls)):  # compile and warm
        launch(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        launch(0)
    end.record()
    torch.cuda.synchronize()
    eager_s = start.elapsed_time(end) / 1e3 / 10
    calls = max(int(min(2000, max(50, 2e-3 / max(eager_s, 1e-7)))), min_calls)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        launch(0)
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                launch(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    del graph
    return statistics.median(times), calls


def time_case(case: Case, *, copies: int) -> tuple[float, int]:
    """Seconds per call and calls per graph of ``case`` cycling over ``copies`` tensor sets."""
    sets = [case.tensors() for _ in range(copies)]
    return time_graph(lambda i: case.launch(sets[i % copies]), min_calls=copies)


def cases() -> list[tuple[str, dict, Case]]:
    out, seen = [], set()
    for name, hidden, ffn, heads, kv_heads, tp in GEOMETRIES:
        shard = {"geometry": name, "hidden": hidden, "ffn_shard": ffn // tp,
                 "q_heads": heads // tp, "kv_heads": max(1, kv_heads // tp),
                 "head_dim": HEAD_DIM, "tp": tp}
        for op in ("rmsnorm", "add", "add_rmsnorm", "silu_mul", "rope"):
            key = (op, hidden) if op in ("rmsnorm", "add", "add_rmsnorm") else (
                op, shard["ffn_shard"], shard["q_heads"], shard["kv_heads"])
            if key in seen:  # the norms and the add see the full hidden state at any TP
                continue
            seen.add(key)
            for tokens in TOKENS:
                out.append((op, shard, Case(op, tokens, hidden=hidden,
                                            ffn_shard=shard["ffn_shard"],
                                            q_heads=shard["q_heads"],
                                            kv_heads=shard["kv_heads"])))
    return out


def check() -> None:
    """The kernels against PyTorch on one small shape each (a wrong kernel fails the run)."""
    t, d, f = 3, 4096, 1024
    x, y = (torch.randn(t, d, device=DEV, dtype=BF16) for _ in range(2))
    w = torch.randn(d, device=DEV, dtype=BF16)
    out = torch.empty_like(x)
    _rmsnorm[(t,)](x, w, out, d, EPS, BLOCK=4096)
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS) * w.float())
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    res = y.clone()
    _add_rmsnorm[(t,)](x, res, w, out, d, EPS, BLOCK=4096)
    h = x.float() + y.float()
    torch.testing.assert_close(res.float(), h, rtol=2e-2, atol=2e-2)
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    _add[(triton.cdiv(t * d, 2048),)](x, y, out, t * d, BLOCK=2048)
    torch.testing.assert_close(out, x + y)
    gu = torch.randn(t, 2 * f, device=DEV, dtype=BF16)
    act = torch.empty(t, f, device=DEV, dtype=BF16)
    _silu_mul[(t, 1)](gu, act, f, BLOCK=1024)
    ref = torch.nn.functional.silu(gu[:, :f].float()) * gu[:, f:].float()
    torch.testing.assert_close(act.float(), ref, rtol=2e-2, atol=2e-2)
    qh, kh, half = 3, 2, HEAD_DIM // 2
    q = torch.randn(t, qh * HEAD_DIM, device=DEV, dtype=BF16)
    k = torch.randn(t, kh * HEAD_DIM, device=DEV, dtype=BF16)
    pos = torch.tensor([0, 5, 9], device=DEV, dtype=torch.int32)
    cs = cos_sin_table(16)
    q0, k0 = q.clone(), k.clone()
    _rope[(t,)](q, k, pos, cs, qh, kh, QH=4, KH=2, HALF=half)
    for before, after, n in ((q0, q, qh), (k0, k, kh)):
        v = before.float().view(t, n, HEAD_DIM)
        cos = cs[pos.long(), :half][:, None]
        sin = cs[pos.long(), half:][:, None]
        a, b = v[..., :half], v[..., half:]
        ref = torch.cat([a * cos - b * sin, b * cos + a * sin], -1).view(t, -1)
        torch.testing.assert_close(after.float(), ref, rtol=2e-2, atol=2e-2)
    log("kernels match PyTorch")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 * 2**20))
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
            "name": props.name, "multiprocessors": props.multi_processor_count, "l2_bytes": l2}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm,"
             "temperature.gpu", "--format=csv"], capture_output=True, text=True,
            timeout=30).stdout
    except Exception as exc:  # noqa: BLE001 - recorded, not needed
        info["nvidia_smi"] = repr(exc)
    (args.out / "device_elementwise.json").write_text(json.dumps(info, indent=1))
    log(json.dumps(info))
    check()
    rows = []
    for op, shard, case in cases():
        for mode in ("hot", "cold"):
            one_set = case.bytes
            copies = 1 if mode == "hot" else int(min(64, max(2, math.ceil(2 * l2 / one_set))))
            seconds, calls = time_case(case, copies=copies)
            rows.append({"op": op, **shard, "tokens": case.tokens, "mode": mode,
                         "copies": copies, "calls": calls, "time_s": f"{seconds:.6g}",
                         "bytes": case.bytes,
                         "bandwidth_bytes_per_s": f"{case.bytes / seconds:.6g}"})
        log(f"{op} {shard['geometry']} tp{shard['tp']} {case.tokens}: "
            f"hot {float(rows[-2]['time_s']) * 1e6:.2f} us, cold {seconds * 1e6:.2f} us")
        torch.cuda.empty_cache()
    write_csv(args.out / "elementwise.csv", rows)
    log(f"wrote {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
