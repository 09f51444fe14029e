"""The kernels ``benchmarks/gpu/measure_decode_step.py`` runs that a serving engine's layer
(the model's kernel plan) does not: the script is plain PyTorch, so its RMSNorm is eager
ops and its SiLU x mul two kernels, and its FP8 linear layers pad the activation before
the cast. Priced with the model's own small-kernel constants (elementwise and activation
classes: a launch floor plus the bytes at the class's share of HBM peak), so that the
engine-free steps are compared with a price of the program that was timed.

Per RMSNorm ``x * rsqrt(x.float().pow(2).mean(-1) + eps).to(x.dtype) * w``: the model's
norm kernel stands for the last multiply (reads the row, writes it); the script also runs
the cast to fp32, the square, the mean, the add, the rsqrt, the cast back and the first
multiply. Per gated MLP: ``silu(gate) * up`` is a SiLU kernel and a multiply where the
model prices one SiLU x mul kernel. Per FP8 linear layer: ``F.pad`` to a multiple of 16
rows before the cast (the cast is the model's quantisation kernel). The script has no
final norm (``x[:, -1] @ head``), so the model's is left as it is: one fused kernel.
"""

from __future__ import annotations

from functools import cache

from energylens.cost.kernels import Kernel
from energylens.cost.roofline import kernel_cost
from energylens.cost.step import StepContext
from energylens.cost.work import Size, quantised_tensor
from energylens.model.spec import Einsum, OpKind, TensorRef

ROW = ("b", "m", "d")  # one token's hidden vector
FFN = ("b", "m", "f")  # one token's FFN activation (one of gate / up)
REDUCED = ("b", "m")  # one value per token


def script_tensor(name: str, ranks: tuple[str, ...], dtype: str | None = None) -> TensorRef:
    ref = TensorRef(name=name, ranks=ranks)
    return ref if dtype is None else quantised_tensor(ref, dtype)


def script_pass(name: str, reads: tuple[TensorRef, ...], write: TensorRef, *,
          kind: OpKind = "elementwise", function: str = "add", sizes: dict[str, int]) -> Kernel:
    """One eager PyTorch op: a kernel reading ``reads`` and writing ``write`` (1 FLOP per
    element; its class by ``function``: ``silu_mul`` an activation, others elementwise)."""
    op = Einsum(name=name, output=write, inputs=reads, kind=kind, function=function,
                flops_per_element=1.0)
    return Kernel(name=name, ops=(op,), op_sizes=(dict(sizes),), reads=reads, writes=(write,),
                  io_sizes={t.name: dict(sizes) for t in (*reads, write)}, is_expert=False)


@cache
def script_kernels(*, hidden: int, ffn: int, fp8: bool) -> tuple[Kernel, ...]:
    """The extra kernels of one layer of the script (see the module docstring)."""
    sizes = {"d": hidden, "f": ffn}
    x = script_tensor("X", ROW)
    xf, x2 = script_tensor("XF", ROW, "fp32"), script_tensor("X2", ROW, "fp32")
    ms, me, rs = (script_tensor(n, REDUCED, "fp32") for n in ("MS", "ME", "RS"))
    rb = script_tensor("RB", REDUCED)
    norm = (script_pass("to_fp32", (x,), xf, function="copy", sizes=sizes),
            script_pass("pow", (xf,), x2, sizes=sizes),
            script_pass("mean", (x2,), ms, kind="reduction", sizes=sizes),
            script_pass("add_eps", (ms,), me, sizes=sizes),
            script_pass("rsqrt", (me,), rs, sizes=sizes),
            script_pass("to_bf16", (rs,), rb, function="copy", sizes=sizes),
            script_pass("mul_rsqrt", (x, rb), script_tensor("XR", ROW), sizes=sizes))
    silu = script_pass("silu", (script_tensor("G", FFN),), script_tensor("SG", FFN), function="silu_mul",
                 sizes=sizes)
    kernels: tuple[Kernel, ...] = (*norm, *norm, silu)
    if fp8:  # one pad per linear layer's input: N, O (hidden wide), N2, and Z (FFN wide)
        pads = tuple(script_pass(f"pad_{n}", (script_tensor(n, ranks),), script_tensor(f"{n}P", ranks),
                           function="copy", sizes=sizes)
                     for n, ranks in (("N", ROW), ("O", ROW), ("N2", ROW), ("Z", FFN)))
        kernels = (*kernels, *pads)
    return kernels


def script_overhead(*, ctx: StepContext, tokens: Size) -> tuple[float, float, float]:
    """(time s, compute J, memory J) of the script's extra kernels over one step of
    ``tokens`` tokens in total (every layer), at the context's clock."""
    model = ctx.graph.model
    extra = script_kernels(hidden=model.hidden_size, ffn=model.ffn_size,
                           fp8=ctx.activation_dtype is not None)
    phase: dict[str, Size] = {"b": 1.0, "m": tokens}
    time = compute = memory = 0.0
    for kernel in extra:
        cost = kernel_cost(kernel=kernel, phase=phase, window=None, gpu=ctx.gpu,
                           constants=ctx.constants, clock=ctx.clock,
                           weight_dtype=ctx.weight_dtype)
        time += float(cost.latency_s)
        compute += float(cost.compute_energy_j)
        memory += float(cost.memory_energy_j)
    layers = model.num_layers
    return time * layers, compute * layers, memory * layers

