"""Measure one GPU's kernels with NVML power: what no public table gives EnergyLens.

Run on a machine with one NVIDIA GPU, PyTorch and nvidia-ml-py (it never changes clocks
or power settings)::

    python benchmarks/gpu/measure_kernels.py --out DIR

Writes to ``DIR``:

- ``device.json``: the board as NVML and PyTorch report it (memory, power limit, clocks,
  driver), read, not assumed.
- ``power.csv``: one row per sustained kernel (>= 2 s under NVML's energy counter): mean
  board power, energy per call, time per call, FLOPs and DRAM bytes per call (counted
  from the shapes), SM clock and temperature during the window. Idle rows bracket the run.
- ``power_gemm.csv``: as ``power.csv`` for GEMMs of M = 1 ... 4,096 over decode and prefill
  shapes, each with a spin gap of 1.5x its time (full clock) and a few back to back.
- ``gemm.csv``: bf16 and fp8 (per-tensor scaled, ``torch._scaled_mm``) GEMM time per call
  over the (N, K) of Llama-3.1-8B/70B and a Qwen3-30B-A3B expert, M = 1 ... 8,192
  (CUDA-graph replays over weight copies that together exceed L2, median of 5).
- ``attention.csv``: PyTorch SDPA prefill (causal) and decode (one query) attention time.
- ``memcopy.csv``: device-to-device copy time from 64 KiB to 4 GiB.

Every section runs on its own: one that fails is logged and the others still write.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import pynvml as nvml
except ImportError:  # pragma: no cover - the script needs NVML on the GPU machine
    nvml = None

DEV = torch.device("cuda")
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
#: (name, N, K): output and input features of the layers measured.
GEMM_SHAPES = (
    ("llama8b.qkv", 6144, 4096), ("llama8b.o", 4096, 4096),
    ("llama8b.gate_up", 28672, 4096), ("llama8b.down", 4096, 14336),
    ("llama70b.qkv", 10240, 8192), ("llama70b.o", 8192, 8192),
    ("llama70b.gate_up", 57344, 8192), ("llama70b.down", 8192, 28672),
    ("llama70b_tp8.qkv", 1280, 8192), ("llama70b_tp8.o", 8192, 1024),
    ("llama70b_tp8.gate_up", 7168, 8192), ("llama70b_tp8.down", 8192, 3584),
    ("qwen3_30b_a3b.expert_gate_up", 1536, 2048), ("qwen3_30b_a3b.expert_down", 2048, 768),
)
GEMM_M = (1, 8, 32, 128, 512, 2048, 8192)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Nvml:
    """NVML handle of GPU 0 with a power sampler thread."""

    def __init__(self) -> None:
        nvml.nvmlInit()
        self.h = nvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[float] = []
        self.clocks: list[float] = []
        self.temps: list[float] = []
        self.reasons: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def energy_j(self) -> float:
        return nvml.nvmlDeviceGetTotalEnergyConsumption(self.h) / 1e3

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(nvml.nvmlDeviceGetPowerUsage(self.h) / 1e3)
            self.clocks.append(nvml.nvmlDeviceGetClockInfo(self.h, nvml.NVML_CLOCK_SM))
            self.temps.append(nvml.nvmlDeviceGetTemperature(self.h, nvml.NVML_TEMPERATURE_GPU))
            with contextlib.suppress(Exception):
                self.reasons.add(int(nvml.nvmlDeviceGetCurrentClocksEventReasons(self.h)))
            time.sleep(0.02)

    def start(self) -> None:
        self.samples, self.clocks, self.temps, self.reasons = [], [], [], set()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        med = statistics.median
        return {"sampled_power_w": med(self.samples) if self.samples else math.nan,
                "sm_clock_mhz": med(self.clocks) if self.clocks else math.nan,
                "temperature_c": max(self.temps) if self.temps else math.nan,
                "clock_event_reasons": "|".join(hex(r) for r in sorted(self.reasons))}


def device_info(nv: Nvml, out: Path) -> None:
    p = torch.cuda.get_device_properties(0)
    info: dict[str, object] = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "name": p.name,
        "multiprocessors": p.multi_processor_count, "total_memory_bytes": p.total_memory,
        "l2_bytes": getattr(p, "L2_cache_size", None),
    }
    h = nv.h
    q = {
        "nvml_name": lambda: nvml.nvmlDeviceGetName(h),
        "driver": lambda: nvml.nvmlSystemGetDriverVersion(),
        "memory_total_bytes": lambda: nvml.nvmlDeviceGetMemoryInfo(h).total,
        "power_limit_w": lambda: nvml.nvmlDeviceGetPowerManagementLimit(h) / 1e3,
        "power_limit_default_w": lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1e3,
        "power_limit_range_w": lambda: [
            v / 1e3 for v in nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)],
        "max_sm_clock_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM),
        "max_mem_clock_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM),
        "default_app_sm_clock_mhz": lambda: nvml.nvmlDeviceGetDefaultApplicationsClock(
            h, nvml.NVML_CLOCK_SM),
        "supported_sm_clocks_mhz": lambda: sorted(nvml.nvmlDeviceGetSupportedGraphicsClocks(
            h, nvml.nvmlDeviceGetSupportedMemoryClocks(h)[0])),
        "pcie_gen": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "persistence_mode": lambda: nvml.nvmlDeviceGetPersistenceMode(h),
        "vbios": lambda: nvml.nvmlDeviceGetVbiosVersion(h),
        "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
    }
    for key, fn in q.items():
        try:
            v = fn()
            info[key] = v.decode() if isinstance(v, bytes) else v
        except Exception as exc:  # noqa: BLE001 - record what NVML refuses
            info[key] = f"unavailable: {exc}"
    (out / "device.json").write_text(json.dumps(info, indent=1))
    log(f"device: {info['name']} mem {info['total_memory_bytes']} limit {info.get('power_limit_w')} W")


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def graph_time_s(fn, *, target_s: float = 0.02, replays: int = 5) -> float:
    """Median time per call of ``fn`` from CUDA-graph replays of R calls (events)."""
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(0)
    torch.cuda.synchronize()
    est = max(time.perf_counter() - t0, 2e-6)
    r = int(min(max(target_s / est, 1), 200))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(2):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(r):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / r)
    del g
    return statistics.median(times)


def weight_copies(n: int, k: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Enough (n, k) weights that cycling through them misses L2 (>= 256 MB together)."""
    per = n * k * (1 if dtype == FP8 else 2)
    count = int(min(max(math.ceil(256e6 / per), 1), 64))
    out = []
    for _ in range(count):
        w = torch.randn(n, k, device=DEV, dtype=BF16) / math.sqrt(k)
        out.append(w.to(dtype) if dtype == FP8 else w)
    return out


def gemm_fn(m: int, n: int, k: int, dtype: torch.dtype):
    ws = weight_copies(n, k, dtype)
    x = torch.randn(m, k, device=DEV, dtype=BF16)
    if dtype == FP8:
        x = x.to(FP8)
        one = torch.ones((), device=DEV, dtype=torch.float32)

        def run(i: int) -> torch.Tensor:
            return torch._scaled_mm(x, ws[i % len(ws)].t(), scale_a=one, scale_b=one, out_dtype=BF16)
    else:
        def run(i: int) -> torch.Tensor:
            return x @ ws[i % len(ws)].t()
    return run, ws


def gemm_sweep(out: Path) -> None:
    rows = []
    for dtype, label in ((BF16, "bf16"), (FP8, "fp8")):
        for name, n, k in GEMM_SHAPES:
            for m0 in GEMM_M:
                m = max(16, m0) if dtype == FP8 else m0
                if dtype == FP8 and m0 < 16 and m0 != GEMM_M[0]:
                    continue
                row = {"dtype": label, "layer": name, "m": m, "n": n, "k": k}
                try:
                    fn, ws = gemm_fn(m, n, k, dtype)
                    t = graph_time_s(fn)
                    del ws
                    row.update(time_s=t, tflops=2 * m * n * k / t / 1e12,
                               weight_bytes=n * k * (1 if dtype == FP8 else 2))
                except Exception as exc:  # noqa: BLE001
                    row.update(error=str(exc).splitlines()[0][:160])
                rows.append(row)
            torch.cuda.empty_cache()
        log(f"gemm {label}: {sum('time_s' in r for r in rows)} timed")
        write_csv(out / "gemm.csv", rows)


def attention_sweep(out: Path) -> None:
    rows = []
    hq, hkv, d = 32, 8, 128
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        row = {"phase": "prefill", "batch": 1, "q_len": s, "kv_len": s, "heads_q": hq,
               "heads_kv": hkv, "head_dim": d, "causal": True}
        try:
            q = torch.randn(1, hq, s, d, device=DEV, dtype=BF16)
            kk = torch.randn(1, hkv, s, d, device=DEV, dtype=BF16)
            v = torch.randn(1, hkv, s, d, device=DEV, dtype=BF16)
            t = graph_time_s(lambda i, q=q, kk=kk, v=v: F.scaled_dot_product_attention(
                q, kk, v, is_causal=True, enable_gqa=True))
            flops = 4 * hq * d * s * s / 2
            row.update(time_s=t, flops=flops, tflops=flops / t / 1e12)
        except Exception as exc:  # noqa: BLE001
            row.update(error=str(exc).splitlines()[0][:160])
        rows.append(row)
    for b in (1, 8, 32, 128):
        for L in (1024, 4096, 16384):
            row = {"phase": "decode", "batch": b, "q_len": 1, "kv_len": L, "heads_q": hq,
                   "heads_kv": hkv, "head_dim": d, "causal": False}
            try:
                copies = max(1, min(8, int(256e6 // (2 * b * hkv * L * d * 2))))
                kvs = [(torch.randn(b, hkv, L, d, device=DEV, dtype=BF16),
                        torch.randn(b, hkv, L, d, device=DEV, dtype=BF16)) for _ in range(copies)]
                q = torch.randn(b, hq, 1, d, device=DEV, dtype=BF16)
                t = graph_time_s(lambda i, q=q, kvs=kvs, c=copies: F.scaled_dot_product_attention(
                    q, kvs[i % c][0], kvs[i % c][1], enable_gqa=True))
                kv_bytes = 2 * b * hkv * L * d * 2
                row.update(time_s=t, kv_bytes=kv_bytes, bandwidth_bytes_per_s=kv_bytes / t)
                del kvs
            except Exception as exc:  # noqa: BLE001
                row.update(error=str(exc).splitlines()[0][:160])
            rows.append(row)
            torch.cuda.empty_cache()
    write_csv(out / "attention.csv", rows)
    log(f"attention: {sum('time_s' in r for r in rows)} timed")


def event_time_s(fn, *, target_s: float = 0.02, repeats: int = 5) -> float:
    """Median time per call of ``fn`` launched eagerly (events around a burst)."""
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(0)
    torch.cuda.synchronize()
    r = int(min(max(target_s / max(time.perf_counter() - t0, 2e-6), 1), 200))
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(r):
            fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / r)
    return statistics.median(times)


def memcopy_sweep(out: Path) -> None:
    """Copies as an SM kernel (``torch.add(x, 0, out=y)`` on bf16: what an engine's
    elementwise ops do) and as ``copy_`` (cudaMemcpy: in a CUDA graph a memcpy node, which
    runs on the copy engines), each in a graph and eagerly."""
    rows = []
    for e in range(16, 33, 2):
        nbytes = 2 ** e
        copies = max(1, min(16, int(256e6 // nbytes)))
        src = [torch.randn(nbytes // 2, device=DEV, dtype=BF16) for _ in range(copies)]
        dst = torch.empty(nbytes // 2, device=DEV, dtype=BF16)
        for how, fn in (("kernel", lambda i, s=src, d=dst, c=copies: torch.add(s[i % c], 0.0, out=d)),
                        ("memcpy", lambda i, s=src, d=dst, c=copies: d.copy_(s[i % c]))):
            for timer, label in ((graph_time_s, "graph"), (event_time_s, "eager")):
                try:
                    t = timer(fn)
                    rows.append({"bytes": nbytes, "copy": how, "launch": label, "time_s": t,
                                 "bandwidth_rw_bytes_per_s": 2 * nbytes / t})
                except Exception as exc:  # noqa: BLE001
                    rows.append({"bytes": nbytes, "copy": how, "launch": label,
                                 "error": str(exc).splitlines()[0][:160]})
        del src, dst
        torch.cuda.empty_cache()
    write_csv(out / "memcopy.csv", rows)
    log(f"memcopy: {len(rows)} rows")


def sustained(nv: Nvml, fn, *, seconds: float, warm_s: float = 0.5) -> dict[str, float]:
    """Run ``fn`` back to back for ``seconds`` under NVML's energy counter."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    chunk = int(min(max(0.05 / max(time.perf_counter() - t0, 1e-6), 1), 5000))
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        for _ in range(chunk):
            fn()
        torch.cuda.synchronize()
    nv.start()
    e0, t0, calls = nv.energy_j(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(chunk):
            fn()
        calls += chunk
        torch.cuda.synchronize()
    t1, e1 = time.perf_counter(), nv.energy_j()
    extra = nv.stop()
    wall = t1 - t0
    return {"window_s": wall, "calls": calls, "energy_j": e1 - e0, "power_w": (e1 - e0) / wall,
            "time_per_call_s": wall / calls, "energy_per_call_j": (e1 - e0) / calls, **extra}


def idle(nv: Nvml, seconds: float) -> dict[str, float]:
    torch.cuda.synchronize()
    time.sleep(0.5)
    nv.start()
    e0, t0 = nv.energy_j(), time.perf_counter()
    time.sleep(seconds)
    t1, e1 = time.perf_counter(), nv.energy_j()
    extra = nv.stop()
    return {"window_s": t1 - t0, "calls": 0, "energy_j": e1 - e0, "power_w": (e1 - e0) / (t1 - t0), **extra}


def power_runs(nv: Nvml, out: Path, seconds: float) -> None:
    rows: list[dict] = []

    def add(name: str, make, flops: float = 0.0, nbytes: float = 0.0, note: str = "") -> None:
        try:
            fn = make()
            r = sustained(nv, fn, seconds=seconds)
            r.update(kernel=name, flops_per_call=flops, dram_bytes_per_call=nbytes, note=note)
            rows.append(r)
            log(f"power {name}: {r['power_w']:.0f} W, {r['time_per_call_s'] * 1e6:.1f} us/call, "
                f"SM {r['sm_clock_mhz']:.0f} MHz")
        except Exception as exc:  # noqa: BLE001
            rows.append({"kernel": name, "error": str(exc).splitlines()[0][:160]})
            log(f"power {name} failed: {exc}")
        torch.cuda.empty_cache()
        write_csv(out / "power.csv", rows)

    r = idle(nv, 3.0)
    r.update(kernel="idle_with_context", note="CUDA context held, nothing running")
    rows.append(r)
    log(f"idle: {r['power_w']:.1f} W")

    def sleep_kernel():
        return lambda: torch.cuda._sleep(1_000_000)
    add("spin_one_block", sleep_kernel,
        note="torch.cuda._sleep: one block spinning, clocks up, no memory traffic")

    def tiny():
        x = torch.zeros(1, device=DEV)
        return lambda: x.add_(1.0)
    add("tiny_launches", tiny, nbytes=8, note="1-element add back to back: launch-bound GPU")

    def copy():
        n = 2 ** 31
        src = torch.empty(n, device=DEV, dtype=torch.uint8).random_()
        dst = torch.empty(n, device=DEV, dtype=torch.uint8)
        return lambda: dst.copy_(src)
    add("copy_2GiB", copy, nbytes=2 * 2 ** 31, note="device-to-device copy, read + write")

    def fill():
        dst = torch.empty(2 ** 30, device=DEV, dtype=BF16)
        return lambda: dst.fill_(1.5)
    add("fill_2GiB", fill, nbytes=2 ** 31, note="write only")

    def silu_mul():
        a = torch.randn(2 ** 28, device=DEV, dtype=BF16)
        b = torch.randn(2 ** 28, device=DEV, dtype=BF16)
        o = torch.empty_like(a)
        return lambda: torch.mul(F.silu(a), b, out=o)
    add("silu_mul_256M", silu_mul, nbytes=2 * 2 ** 28 * 2 + 2 * 2 ** 28 * 2 * 2,
        note="F.silu (read a, write tmp) then mul (read tmp, b, write o): two kernels")

    def gemm(m, n, k, dtype):
        def make():
            fn, ws = gemm_fn(m, n, k, dtype)
            box = [0]

            def call():
                box[0] += 1
                return fn(box[0])
            call.ws = ws  # keep the weights alive
            return call
        return make
    for m, n, k in ((8192, 8192, 8192), (1024, 8192, 8192), (128, 8192, 8192), (8, 28672, 8192)):
        wbytes = n * k * 2
        add(f"gemm_bf16_{m}x{n}x{k}", gemm(m, n, k, BF16), flops=2 * m * n * k,
            nbytes=wbytes + 2 * m * (k + n), note="random bf16 operands, weights cycled past L2")
    for m, n, k in ((8192, 8192, 8192), (1024, 8192, 8192), (16, 28672, 8192)):
        add(f"gemm_fp8_{m}x{n}x{k}", gemm(m, n, k, FP8), flops=2 * m * n * k,
            nbytes=n * k + m * k + 2 * m * n, note="torch._scaled_mm, per-tensor scales, bf16 out")

    def prefill():
        s, hq, hkv, d = 8192, 32, 8, 128
        q = torch.randn(4, hq, s, d, device=DEV, dtype=BF16)
        kk = torch.randn(4, hkv, s, d, device=DEV, dtype=BF16)
        v = torch.randn(4, hkv, s, d, device=DEV, dtype=BF16)
        return lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
    add("sdpa_prefill_4x8192_h32kv8", prefill, flops=4 * 4 * 32 * 128 * 8192 * 8192 / 2,
        note="causal; flops = 4 b h d s^2 / 2")

    def decode():
        b, L, hq, hkv, d = 64, 4096, 32, 8, 128
        q = torch.randn(b, hq, 1, d, device=DEV, dtype=BF16)
        kk = torch.randn(b, hkv, L, d, device=DEV, dtype=BF16)
        v = torch.randn(b, hkv, L, d, device=DEV, dtype=BF16)
        return lambda: F.scaled_dot_product_attention(q, kk, v, enable_gqa=True)
    add("sdpa_decode_64x4096_h32kv8", decode, nbytes=2 * 64 * 8 * 4096 * 128 * 2,
        note="one query per sequence")

    r = idle(nv, 3.0)
    r.update(kernel="idle_after", note="CUDA context held, after the loaded runs (warm board)")
    rows.append(r)
    log(f"idle after: {r['power_w']:.1f} W")
    write_csv(out / "power.csv", rows)


def fma_kernel_maker():
    """A Triton kernel of fp32 FMAs on registers (vector, not tensor, FLOPs): 4 chains x
    ITERS FMAs per element, 8 x ITERS FLOPs; reads and writes 4 bytes each per element."""
    import triton
    import triton.language as tl

    @triton.jit
    def fma(x_ptr, y_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        a, b, c, d = x, x + 1.0, x + 2.0, x + 3.0
        for _ in range(ITERS):
            a = a * 0.9999 + 0.0001
            b = b * 0.9998 + 0.0002
            c = c * 0.9997 + 0.0003
            d = d * 0.9996 + 0.0004
        tl.store(y_ptr + offs, a + b + c + d, mask=offs < n)

    n, iters, block = 132 * 2048 * 16, 2048, 1024
    x = torch.randn(n, device=DEV, dtype=torch.float32)
    y = torch.empty_like(x)

    def run() -> None:
        fma[(n // block,)](x, y, n, ITERS=iters, BLOCK=block)
    return run, 8.0 * iters * n, 8.0 * n


def extra_power_runs(nv: Nvml, out: Path, seconds: float) -> None:
    """Duty-cycled GEMMs (kernel, then a one-block spin of a set number of cycles) so the
    board stays under its limit and the clock is the GPU's choice unthrottled; and vector
    FLOPs. Dynamic energy per kernel = (energy - idle power x window) / calls."""
    rows: list[dict] = []
    r = idle(nv, 3.0)
    r.update(kernel="idle_with_context", note="CUDA context held, nothing running")
    rows.append(r)
    log(f"idle: {r['power_w']:.1f} W")

    def run(name: str, fn, flops: float, nbytes: float, gap_cycles: int, note: str) -> None:
        def call() -> None:
            fn()
            if gap_cycles:
                torch.cuda._sleep(gap_cycles)
        try:
            r = sustained(nv, call, seconds=seconds)
            r.update(kernel=name, flops_per_call=flops, dram_bytes_per_call=nbytes,
                     gap_cycles=gap_cycles, note=note)
            rows.append(r)
            log(f"power {name} gap {gap_cycles}: {r['power_w']:.0f} W, "
                f"{r['time_per_call_s'] * 1e6:.1f} us/call, SM {r['sm_clock_mhz']:.0f} MHz")
        except Exception as exc:  # noqa: BLE001
            rows.append({"kernel": name, "gap_cycles": gap_cycles, "error": str(exc).splitlines()[0][:160]})
            log(f"power {name} failed: {exc}")
        write_csv(out / "power_duty.csv", rows)

    for label, dtype in (("bf16", BF16), ("fp8", FP8)):
        m = n = k = 8192
        fn, ws = gemm_fn(m, n, k, dtype)
        box = [0]

        def call(fn=fn, box=box) -> None:
            box[0] += 1
            fn(box[0])
        wbytes = n * k * (2 if dtype == BF16 else 1)
        for gap in (0, 2_000_000, 6_000_000, 20_000_000):
            run(f"gemm_{label}_8192x8192x8192", call, 2.0 * m * n * k, wbytes + 4 * m * k,
                gap, "random operands, weights cycled past L2; gap = torch.cuda._sleep cycles")
        del ws, fn
        torch.cuda.empty_cache()
    n = 2 ** 31
    src = torch.empty(n, device=DEV, dtype=torch.uint8).random_()
    dst = torch.empty(n, device=DEV, dtype=torch.uint8)
    for gap in (0, 2_000_000):
        run("copy_2GiB", lambda d=dst, s=src: d.copy_(s), 0.0, 2.0 * n, gap,
            "device-to-device copy_, read + write")
    try:
        fn, flops, nbytes = fma_kernel_maker()
        for gap in (0, 2_000_000):
            run("triton_fp32_fma", fn, flops, nbytes, gap, "vector fp32 FMAs on registers")
    except Exception as exc:  # noqa: BLE001
        log(f"fma kernel failed: {exc}")
    r = idle(nv, 3.0)
    r.update(kernel="idle_after", note="CUDA context held, after the loaded runs (warm board)")
    rows.append(r)
    write_csv(out / "power_duty.csv", rows)
    log(f"idle after: {r['power_w']:.1f} W")


def gemm_duty_runs(nv: Nvml, out: Path, seconds: float) -> None:
    """GEMMs of the shapes decode and prefill steps run, M = 1 ... 4,096, each followed by
    a one-block spin of 1.5x its own time so the board stays under its limit at the full
    clock (``power_gemm.csv``): their energy per call against FLOPs and bytes, held-out
    rows for ``fit_power``. A few run back to back too (held by the limit)."""
    rows: list[dict] = []

    def add(row: dict) -> None:
        rows.append(row)
        write_csv(out / "power_gemm.csv", rows)
    r = idle(nv, 3.0)
    r.update(kernel="idle_with_context", note="CUDA context held, nothing running")
    add(r)
    shapes = [(BF16, m, 28672, 4096) for m in (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]
    shapes += [(BF16, m, 4096, 14336) for m in (1, 16, 64, 256, 1024)]
    shapes += [(BF16, m, 1280, 8192) for m in (16, 256)]
    shapes += [(FP8, m, 28672, 4096) for m in (16, 64, 256, 1024, 4096)]
    back_to_back = {(BF16, 64, 28672, 4096), (BF16, 256, 28672, 4096), (BF16, 1024, 28672, 4096)}
    for dtype, m, n, k in shapes:
        label = "bf16" if dtype == BF16 else "fp8"
        name = f"gemm_{label}_{m}x{n}x{k}"
        try:
            fn, ws = gemm_fn(m, n, k, dtype)
            box = [0]
            t = event_time_s(fn)
            for gap in ([0] if (dtype, m, n, k) in back_to_back else []) + [int(1.5 * t * 1.98e9)]:
                def call(fn=fn, box=box, gap=gap) -> None:
                    box[0] += 1
                    fn(box[0])
                    if gap:
                        torch.cuda._sleep(gap)
                r = sustained(nv, call, seconds=seconds)
                nbytes = (2.0 if dtype == BF16 else 1.0) * (n * k + m * k) + 2.0 * m * n
                r.update(kernel=name, flops_per_call=2.0 * m * n * k, dram_bytes_per_call=nbytes,
                         gap_cycles=gap, note="weights cycled past L2; gap = torch.cuda._sleep cycles")
                add(r)
                log(f"{name} gap {gap}: {r['power_w']:.0f} W, {r['time_per_call_s'] * 1e6:.1f} us/call, "
                    f"SM {r['sm_clock_mhz']:.0f} MHz")
            del ws, fn
        except Exception as exc:  # noqa: BLE001 - keep the other shapes
            add({"kernel": name, "error": str(exc).splitlines()[0][:160]})
        torch.cuda.empty_cache()
    r = idle(nv, 3.0)
    r.update(kernel="idle_after", note="CUDA context held, after the loaded runs (warm board)")
    add(r)


def open_gpu(out: Path) -> Nvml | None:
    """Create ``out``, seed torch and open NVML on GPU 0; None (after an error line) where
    there is no CUDA GPU or no nvidia-ml-py."""
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available() or nvml is None:
        print("error: needs a CUDA GPU and nvidia-ml-py", file=sys.stderr)
        return None
    torch.manual_seed(0)
    return Nvml()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--power-seconds", type=float, default=2.0)
    ap.add_argument("--only", default="device,power,duty,gemm_duty,gemm,attention,memcopy")
    args = ap.parse_args()
    nv = open_gpu(args.out)
    if nv is None:
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    only = args.only.split(",")
    sections = (("device", lambda: device_info(nv, args.out)),
                ("power", lambda: power_runs(nv, args.out, args.power_seconds)),
                ("duty", lambda: extra_power_runs(nv, args.out, args.power_seconds)),
                ("gemm_duty", lambda: gemm_duty_runs(nv, args.out, args.power_seconds)),
                ("gemm", lambda: gemm_sweep(args.out)),
                ("attention", lambda: attention_sweep(args.out)),
                ("memcopy", lambda: memcopy_sweep(args.out)))
    for name, fn in sections:
        if name not in only:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001 - keep the other sections
            log(f"section {name} failed:\n{traceback.format_exc()}")
        log(f"section {name}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
