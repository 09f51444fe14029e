"""One plain GEMM, ``(m x k) @ (k x n)``, priced as the cost model prices a linear layer.

Kernel tables (this project's `benchmarks/gpu/measure_kernels.py`, AIConfigurator's
`gemm_perf.parquet`) time GEMMs one shape at a time; the fits and checks against them price
each shape with the same kernel code a model's step uses.
"""

from __future__ import annotations

from functools import cache

from energylens.cost.constants import KernelConstants
from energylens.cost.kernels import Kernel, compile_layer
from energylens.cost.roofline import ClockState, KernelCost, kernel_cost
from energylens.cost.work import Size
from energylens.hardware import GPU
from energylens.model.spec import LayerSpec, parse_einsum


@cache
def _gemm_kernel() -> Kernel:
    layer = LayerSpec(name="gemm", ops=(parse_einsum(name="gemm", text="Y[m,n] = X[m,k] * W[k,n]"),))
    return compile_layer(layer=layer, sizes={"m": 1, "n": 1, "k": 1}, degrees={},
                         fusion=frozenset()).kernels[0]


def gemm_cost(*, m: Size, n: Size, k: Size, dtype: str, gpu: GPU,
              constants: KernelConstants) -> KernelCost:
    """The cost of one GEMM with ``dtype`` weights at the boost clock; ``m``, ``n`` and ``k``
    are numbers, or arrays of one shape per element (the sizes are the kernel's phase, so
    an array prices every shape at once)."""
    return kernel_cost(kernel=_gemm_kernel(), phase={"m": m, "n": n, "k": k}, window=None,
                       gpu=gpu, constants=constants,
                       clock=ClockState.at(gpu=gpu, freq_mhz=None, constants=constants),
                       weight_dtype=dtype)
