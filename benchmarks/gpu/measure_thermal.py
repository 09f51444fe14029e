"""Board power against temperature on one GPU: how much static (leakage) power grows as the
chip warms, under a fixed load and at idle (it never changes clocks or power settings)::

    python benchmarks/gpu/measure_thermal.py --out DIR

A fixed workload at a fixed clock does the same work every second, so any drift of its
power while the chip heats is leakage (and whatever else grows with temperature); an idle
board cooling down gives the same slope at the idle voltage. Writes to ``DIR``:

- ``thermal.csv``: a time series, one row per NVML sample (~20 per second): ``phase``,
  ``t_s`` since the start, ``power_w`` (NVML's power reading), ``energy_j`` (the
  total-energy counter since the start), ``temperature_c`` (GPU), ``memory_temperature_c``
  (HBM, where NVML reports it), ``sm_clock_mhz``, ``memory_clock_mhz``,
  ``clock_event_reasons``, ``calls`` (workload calls finished so far in the phase).
- ``gemm_power.csv``: bf16 GEMMs of the shapes decode and prefill steps run, each back to
  back for 2 s under the energy counter (as ``measure_kernels.py``'s ``power.csv``).
- ``device.json`` as ``measure_kernels.py`` writes it.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from pathlib import Path

import torch
from measure_kernels import (
    BF16,
    DEV,
    Nvml,
    device_info,
    gemm_fn,
    log,
    nvml,
    open_gpu,
    sustained,
    write_csv,
)

NVML_FI_DEV_MEMORY_TEMP = 82  # nvml.h field id: HBM temperature


class Recorder:
    """Samples NVML every 50 ms into rows tagged with the current phase."""

    def __init__(self, nv: Nvml) -> None:
        self.nv, self.h = nv, nv.h
        self.rows: list[dict] = []
        self.phase, self.calls = "start", 0
        self.t0 = time.perf_counter()
        self.e0 = nv.energy_j()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict:
        h = self.h
        row = {"phase": self.phase, "t_s": time.perf_counter() - self.t0,
               "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1e3,
               "energy_j": self.nv.energy_j() - self.e0,
               "temperature_c": nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
               "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
               "memory_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
               "calls": self.calls}
        with contextlib.suppress(Exception):
            v = nvml.nvmlDeviceGetFieldValues(h, [NVML_FI_DEV_MEMORY_TEMP])[0]
            if v.nvmlReturn == 0:
                row["memory_temperature_c"] = v.value.uiVal
        with contextlib.suppress(Exception):
            row["clock_event_reasons"] = hex(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        return row

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rows.append(self._sample())
            time.sleep(0.05)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def hold(rec: Recorder, phase: str, seconds: float, fn=None) -> None:
    """Idle (``fn`` None) or run ``fn`` back to back for ``seconds`` under ``phase``."""
    torch.cuda.synchronize()
    rec.phase, rec.calls = phase, 0
    end = time.perf_counter() + seconds
    if fn is None:
        time.sleep(seconds)
        return
    while time.perf_counter() < end:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
        rec.calls += 4
    log(f"{phase}: {rec.calls} calls, {rec.rows[-1]['power_w']:.0f} W, "
        f"{rec.rows[-1]['temperature_c']} C")


def thermal(nv: Nvml, out: Path, load_s: float, cool_s: float) -> None:
    m = n = k = 8192
    fn, ws = gemm_fn(m, n, k, BF16)
    box = [0]

    def gemm_gap() -> None:
        box[0] += 1
        fn(box[0])
        torch.cuda._sleep(3_000_000)
    src = torch.empty(2 ** 31, device=DEV, dtype=torch.uint8).random_()
    dst = torch.empty(2 ** 31, device=DEV, dtype=torch.uint8)

    def copy_gap() -> None:
        dst.copy_(src)
        torch.cuda._sleep(2_000_000)
    gemm_gap()
    copy_gap()
    torch.cuda.synchronize()
    with Recorder(nv) as rec:
        try:
            hold(rec, "idle_start", 20.0)
            hold(rec, "gemm_bf16_8192_gap3M", load_s, gemm_gap)
            hold(rec, "idle_cooling_1", cool_s)
            hold(rec, "copy_2GiB_gap2M", load_s / 2, copy_gap)
            hold(rec, "idle_cooling_2", cool_s * 0.75)
        finally:
            write_csv(out / "thermal.csv", rec.rows)
    log(f"thermal: {len(rec.rows)} samples")


def gemm_power(nv: Nvml, out: Path) -> None:
    rows: list[dict] = []
    shapes = [(mm, 28672, 4096) for mm in (64, 256, 1024, 4096)]
    shapes += [(mm, 4096, 14336) for mm in (64, 256, 1024)]
    shapes += [(256, 7168, 8192), (256, 8192, 3584), (2048, 1536, 2048)]
    for m, n, k in shapes:
        try:
            f, ws = gemm_fn(m, n, k, BF16)
            box = [0]

            def call(f=f, box=box) -> None:
                box[0] += 1
                f(box[0])
            r = sustained(nv, call, seconds=2.0)
            r.update(kernel=f"gemm_bf16_{m}x{n}x{k}", flops_per_call=2.0 * m * n * k,
                     dram_bytes_per_call=2.0 * (n * k + m * k + m * n),
                     note="random bf16 operands, weights cycled past L2")
            rows.append(r)
            log(f"gemm {m}x{n}x{k}: {r['power_w']:.0f} W, {r['time_per_call_s'] * 1e6:.1f} us")
            del ws
        except Exception as exc:  # noqa: BLE001 - keep the other shapes
            rows.append({"kernel": f"gemm_bf16_{m}x{n}x{k}", "error": str(exc).splitlines()[0][:160]})
        torch.cuda.empty_cache()
        write_csv(out / "gemm_power.csv", rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load-seconds", type=float, default=120.0)
    ap.add_argument("--cool-seconds", type=float, default=60.0)
    args = ap.parse_args()
    nv = open_gpu(args.out)
    if nv is None:
        return 2
    device_info(nv, args.out)
    thermal(nv, args.out, args.load_seconds, args.cool_seconds)
    gemm_power(nv, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
