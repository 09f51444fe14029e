"""Empirical constants of the cost model, per GPU and per interconnect.

Defaults here are the speed-of-light tier (datasheet peaks with round-number
efficiencies, marked ``assumed``); ``energylens calibrate`` fits them to measurements
and writes a calibration file that :func:`energylens.calibration.load_calibration` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


@dataclass(frozen=True, kw_only=True)
class KernelConstants:
    """Latency and energy constants of one GPU model (SI units)."""

    gemm_efficiency_max: float = 0.75  # fraction of dense peak a large GEMM reaches
    gemm_k_half: float = 96.0  # K at which the GEMM main loop reaches half speed
    gemm_m_half: float = 16.0  # rows at which tensor-core tiles are half used
    wave_exponent: float = 0.5  # how strongly partial waves cost (0 = not at all)
    attention_efficiency_max: float = 0.45  # fused attention, fraction of dense peak
    # Prefill (m > 1) attention's slow ramp with length (per-tile prologue, softmax
    # rescaling, causal diagonal amortised over the keys a query row sees): its tensor
    # efficiency is also multiplied by X / (X + attention_m_half), X = query heads per KV
    # head x keys (r x p, p clipped to the window) = the qk/av GEMM rows m x r of a prompt
    # without cached prefix (m = p; per sequence and KV head: batch and KV heads are the
    # GEMM's batch). Decode (m = 1) has attention_tile_s instead. 0 = no ramp (as before).
    attention_m_half: float = 0.0
    # MLA's prompt (decompressed) attention, a multi-head kernel with 192/128-wide heads:
    # its own efficiency and ramp in the form above (calibration/fit_mla_prompt.py fits
    # them on TensorRT-LLM's MLA context table); 0 = priced as the grouped-query kernel.
    prompt_attention_efficiency_max: float = 0.0
    prompt_attention_m_half: float = 0.0
    # MLA's decode (weight-absorbed) attention, FlashMLA-style kernels (TensorRT-LLM's MLA
    # generation kernel, FlashMLA, FlashInfer's trtllm-gen MLA): every query head of a
    # sequence meets the one shared latent cache, the heads (x new tokens) the MMA's rows in
    # tiles of ``MLA_DECODE_ROW_TILE``. Its own share of the MMA peak, of HBM peak on the
    # latent cache, fixed time per (sequence, row tile) and per launch
    # (calibration/fit_mla_decode.py fits them on TensorRT-LLM's MLA generation table);
    # efficiency 0 = priced as the grouped-query kernel.
    mla_decode_efficiency_max: float = 0.0
    mla_decode_kv_bandwidth_efficiency: float = 0.0
    mla_decode_tile_s: float = 0.0
    mla_decode_overhead_s: float = 0.0
    # How a fused attention kernel's rows fill tensor-core tiles: 0 = the GEMM ramp
    # rows / (rows + gemm_m_half); > 0 = padded to whole tiles of this many rows, one
    # row tile per (sequence, KV head) work tile (MLA decode: MLA_DECODE_ROW_TILE).
    attention_row_tile: float = 0.0
    # Compute capability from which a fused attention kernel's MMAs run in the KV cache's
    # dtype where the GPU has that rate (an FP8 cache on Blackwell); 0 = always BF16 (an
    # FP8 cache dequantised to BF16 in the kernel).
    attention_kv_mma_from_cc: float = 0.0
    memory_efficiency_max: float = 0.80  # fraction of HBM peak reached by large streams
    memory_half_bytes: float = 1.0e6  # bytes at which achieved bandwidth is half its max
    kv_bandwidth_efficiency: float = 0.80  # fraction of HBM peak fused attention reaches on KV
    # Fused attention's fixed time per work tile, one (sequence, KV head) pair, amortised
    # over the SMs: page-table walk, prologue, split-KV reduction (0 = none, assumed).
    attention_tile_s: float = 0.0
    # An unsplit decode-attention kernel (vLLM V0's paged attention v1), used where a step's
    # sequences x query heads per GPU exceed ``v1_query_tiles_above``: one work-group per
    # sequence and query head streams the whole context, the cache read once per query head
    # at this share of HBM peak (0 = never; set per runtime release by ``calibration_for``).
    v1_kv_bandwidth_share: float = 0.0
    v1_query_tiles_above: float = 0.0
    # HBM fraction of BF16 fused-MoE GEMMs' large streams (assumed; calibration/fit_moe.py
    # fits it on AIConfigurator's vLLM MoE tables and reports it, not yet applied)
    expert_bandwidth_efficiency: float = 0.80
    vector_efficiency: float = 0.25  # elementwise/softmax FLOPs, fraction of fp32 peak
    roofline_sharpness: float = 3.0  # p of the p-norm that joins compute and memory time
    kernel_overhead_s: float = 4.0e-6  # fixed time of one kernel (launch, prologue, tail)
    # What an expert GEMM of a fused MoE adds to that (tokens sorted into per-expert tiles,
    # the scheduler's pass over the experts, block-scale loads; 0: none, assumed;
    # calibration/fit_moe.py fits it on AIConfigurator's vLLM MoE tables at decode sizes)
    expert_extra_overhead_s: float = 0.0
    # and what a block-scaled FP8 expert GEMM adds on top (activations quantised to 128-wide
    # groups before each grouped GEMM, the scales' loads; 0 assumed, fitted the same way)
    fp8_expert_extra_overhead_s: float = 0.0
    static_power_w: float = 100.0  # idle with a CUDA context, paid for the whole wall time
    busy_power_w: float = 150.0  # clocks and leakage while any kernel runs (at boost clock)
    energy_per_tensor_flop_j: float = 0.6e-12  # bf16 tensor-core FLOP (fp8 at half)
    energy_per_vector_flop_j: float = 3.0e-12
    energy_per_hbm_byte_j: float = 30.0e-12  # ~3.9 pJ/bit (HBM2, O'Connor et al. MICRO'17)
    voltage_floor: float = 0.55  # V(f_min)/V(f_max) ratio proxy for DVFS (assumed)
    memory_clock_sensitivity: float = 0.05  # memory-bound slowdown per unit of 1/f - 1
    # Small memory-bound kernels (no contraction), per class (``roofline.VECTOR_CLASSES``):
    # a launch floor and the share of HBM peak their streams reach.
    norm_overhead_s: float = 4.0e-6
    norm_bandwidth_efficiency: float = 0.80
    rope_overhead_s: float = 4.0e-6
    rope_bandwidth_efficiency: float = 0.80
    activation_overhead_s: float = 4.0e-6
    activation_bandwidth_efficiency: float = 0.80
    elementwise_overhead_s: float = 4.0e-6
    elementwise_bandwidth_efficiency: float = 0.80
    # How a small kernel's floor joins its stream time: latency = (floor^p + stream^p)^(1/p).
    # p = 1 adds them (the floor never overlaps the stream); a larger p lets the stream
    # hide under the floor (a kernel whose fixed latency and memory traffic overlap).
    norm_floor_sharpness: float = 1.0
    rope_floor_sharpness: float = 1.0
    activation_floor_sharpness: float = 1.0
    elementwise_floor_sharpness: float = 1.0
    # Fraction of its own peak an FP8 (FP4) GEMM reaches, relative to what a BF16 GEMM
    # reaches of the BF16 peak (1 = the datasheet's 2x (4x) rate is reached in full).
    fp8_gemm_efficiency_ratio: float = 1.0
    fp4_gemm_efficiency_ratio: float = 1.0
    # The HBM share of FP8 (4-bit float: NVFP4, MXFP4) fused-MoE kernels relative to BF16's
    # (1 = the same share of peak, the smaller weights read in proportionally less time).
    fp8_expert_bandwidth_ratio: float = 1.0
    fp4_expert_bandwidth_ratio: float = 1.0
    # The same for weight-only INT4 experts (W4A16: GPTQ/AWQ/compressed-tensors, Marlin's
    # fused MoE), relative to the BF16 share in use.
    int4_expert_bandwidth_ratio: float = 1.0


    def for_mla_decode(self) -> KernelConstants:
        """The constants MLA's decode-form attention is priced with: its own efficiency,
        cache bandwidth, tile and launch times, rows padded to whole tiles and MMAs in an
        FP8 cache's dtype on Blackwell, where they are set (efficiency > 0); the
        grouped-query kernel's otherwise."""
        if self.mla_decode_efficiency_max <= 0.0:
            return self
        found = _MLA_DECODE.get(id(self))
        if found is not None and found[0] is self:
            return found[1]
        derived = replace(self, attention_efficiency_max=self.mla_decode_efficiency_max,
                          attention_m_half=0.0,
                          kv_bandwidth_efficiency=self.mla_decode_kv_bandwidth_efficiency,
                          attention_tile_s=self.mla_decode_tile_s,
                          kernel_overhead_s=self.mla_decode_overhead_s,
                          roofline_sharpness=MLA_DECODE_ROOFLINE_SHARPNESS,
                          attention_row_tile=MLA_DECODE_ROW_TILE,
                          attention_kv_mma_from_cc=MLA_DECODE_KV_MMA_FROM_CC)
        if len(_MLA_DECODE) >= 4096:
            _MLA_DECODE.clear()
        _MLA_DECODE[id(self)] = (self, derived)
        return derived

    def for_prompt_attention(self) -> KernelConstants:
        """The constants MLA's prompt-form attention is priced with: its own efficiency and
        ramp where they are set (> 0), the grouped-query kernel's otherwise."""
        if self.prompt_attention_efficiency_max <= 0.0:
            return self
        return replace(self, attention_efficiency_max=self.prompt_attention_efficiency_max,
                       attention_m_half=self.prompt_attention_m_half)


#: Query rows (heads x new tokens of a sequence) one MLA decode work tile holds: FlashMLA
#: runs 64 query heads per thread block (deepseek-ai/FlashMLA, block_size_m = 64; recalled,
#: assumed), and TensorRT-LLM's MLA generation table (AIConfigurator, every Hopper and
#: Blackwell GPU) takes the same time at 1-64 heads per GPU where the kernel streams the
#: cache, and twice it at 128 heads on H100/H200 where it computes.
MLA_DECODE_ROW_TILE = 64.0
#: Compute capability from which MLA decode with an FP8 latent cache runs FP8 MMAs: in
#: that table the 128-head FP8-cache shapes reach 2.8 PFLOP/s on B200 and GB200 (1,024
#: sequences of 16k tokens), above their dense BF16 peak (2.25): FP8 MMAs (10.0); on H100
#: and H200 at most 0.75, below theirs (0.99): BF16 after dequantisation.
MLA_DECODE_KV_MMA_FROM_CC = 10.0
#: The p-norm joining MLA decode's compute and cache-stream times: nearly their maximum.
#: The kernels overlap them (warp-specialised: producer warps load the cache, consumer
#: warps run the MMAs; FlashMLA, trtllm-gen; recalled, assumed). Fitted as a fifth
#: constant it comes out 3.5-4.5 on H100/H200 at the same held-out error (12.3-12.6 % against
#: 12.0-12.5 %) and at its bound on B200.
MLA_DECODE_ROOFLINE_SHARPNESS = 16.0
#: for_mla_decode's results by identity of the constants (kept beside them: a recycled id
#: never returns another object's), so that kernel plans keyed by identity are reused.
_MLA_DECODE: dict[int, tuple[KernelConstants, KernelConstants]] = {}


@dataclass(frozen=True, kw_only=True)
class LinkConstants:
    """Collective constants of one interconnect (all-reduce bus bandwidth convention)."""

    latency_s: float = 10.0e-6  # base latency of one collective
    latency_per_hop_s: float = 1.0e-6  # added per doubling of the group
    bus_bandwidth_fraction: float = 0.80  # max achieved bus bandwidth / link bandwidth
    half_bandwidth_bytes: float = 4.0e6  # message size at which half the max is reached
    bandwidth_group_exponent: float = 0.0  # bus fraction grows as (n/2)^this with group size
    latency_sharpness: float = 1.0  # p-norm joining latency and wire time (1 = their sum)
    p2p_latency_s: float = 8.0e-6  # fixed time of one send/recv
    # fixed time of one all-to-all: one round of exchanges, flat in the group (0 = priced
    # as the all-reduce's latency and per-hop growth)
    all_to_all_latency_s: float = 0.0
    bulk_latency_s: float = 0.0  # second NCCL protocol/algorithm for large messages ...
    bulk_bandwidth_fraction: float = 0.0  # ... its bus bandwidth / link (0 = not used)
    p2p_bandwidth_fraction: float = 0.80  # send/recv achieved bandwidth / link bandwidth
    energy_per_byte_j: float = 40.0e-12  # link + switch energy per byte moved (assumed)
    power_w: float = 40.0  # extra power of a GPU while its communication kernels run
    saturation_sms: float = 16.0  # SMs at which a communication kernel saturates the link
    overlap_sync_s: float = 8.0e-6  # synchronisation cost of one overlapped pair


@dataclass(frozen=True, kw_only=True)
class RuntimeConstants:
    """Constants of one serving runtime (engine) on one GPU (SI units): overheads 0 = none,
    scales 1 = the engine's kernels reach the GPU's kernel constants."""

    step_overhead_s: float = 0.0  # engine time per step the GPUs idle through (scheduling)
    per_sequence_overhead_s: float = 0.0  # per running sequence (sampling, KV bookkeeping)
    # Fixed time per MoE layer under expert parallelism (expert-map and routing bookkeeping
    # outside the CUDA graph; GPUs idle at static power).
    ep_moe_layer_overhead_s: float = 0.0
    # Time per hand-off of a micro-batch between pipeline stages beyond moving its bytes
    # over the link (the runtime's copy and synchronisation; llama.cpp's layer split).
    stage_handoff_s: float = 0.0
    # The runtime's own small all-reduce over the scale-up link (latency 0 = NCCL's):
    # latency + per-hop latency x log2(n) + moved bytes / (link x bus bandwidth fraction).
    allreduce_latency_s: float = 0.0
    allreduce_latency_per_hop_s: float = 0.0
    allreduce_bus_bandwidth_fraction: float = 0.0  # 0 = NCCL's bandwidth curve
    # Time per all-reduce of a real multi-GPU step beyond the kernel an isolated benchmark
    # times (its ranks start together; in a step the last rank to arrive sets the start).
    collective_sync_s: float = 0.0
    # Efficiencies of the engine's kernels relative to the GPU's kernel constants (which were
    # fitted on vLLM-like kernels): GEMMs, fused attention, weight streams, KV reads.
    gemm_efficiency_scale: float = 1.0
    attention_efficiency_scale: float = 1.0
    memory_efficiency_scale: float = 1.0
    kv_bandwidth_scale: float = 1.0
    # KV reads of a model with one query head per KV head (MHA: a decode kernel of its own
    # in some engines; 0 = the grouped-query scale above).
    mha_kv_bandwidth_scale: float = 0.0
    # HBM share of an unsplit decode-attention kernel that reads the cache once per query
    # head (releases with ``paged_attention_v1_above``; 0 = none fitted: never priced).
    v1_kv_bandwidth_share: float = 0.0
    # Fused-MoE kernels' HBM share relative to the GPU's (0 = the weight-stream scale above).
    expert_bandwidth_scale: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (cached objects)
class Calibration:
    """All constants: by GPU name, by ``<gpu>:<link kind>`` and by ``<runtime>/<gpu>``;
    ``source`` names the file."""

    kernels: dict[str, KernelConstants] = field(default_factory=dict)
    links: dict[str, LinkConstants] = field(default_factory=dict)
    runtimes: dict[str, RuntimeConstants] = field(default_factory=dict)
    source: str = "built-in defaults (uncalibrated)"

    def kernel(self, gpu: str) -> KernelConstants:
        """Kernel constants of ``gpu`` (defaults if not calibrated)."""
        return self.kernels.get(gpu, KernelConstants())

    def link(self, *, gpu: str, kind: str) -> LinkConstants:
        """Link constants of ``kind`` on ``gpu`` (defaults if not calibrated)."""
        return self.links.get(f"{gpu}:{kind}", self.links.get(kind, LinkConstants()))

    def runtime(self, *, runtime: str, gpu: str) -> RuntimeConstants:
        """Constants of ``runtime`` on ``gpu`` (defaults, i.e. none, if not calibrated)."""
        return self.runtimes.get(runtime_key(runtime=runtime, gpu=gpu), RuntimeConstants())

    def with_kernel(self, gpu: str, **changes: float) -> Calibration:
        """A copy with some kernel constants of ``gpu`` replaced."""
        kernels = dict(self.kernels)
        kernels[gpu] = replace(self.kernel(gpu), **changes)
        return replace(self, kernels=kernels)

    def with_link(self, key: str, **changes: float) -> Calibration:
        """A copy with some constants of link ``key`` (``<gpu>:<kind>``) replaced."""
        links = dict(self.links)
        links[key] = replace(links.get(key, LinkConstants()), **changes)
        return replace(self, links=links)


    def with_runtime(self, *, runtime: str, gpu: str, **changes: float) -> Calibration:
        """A copy with some constants of ``runtime`` on ``gpu`` replaced."""
        runtimes = dict(self.runtimes)
        runtimes[runtime_key(runtime=runtime, gpu=gpu)] = replace(
            self.runtime(runtime=runtime, gpu=gpu), **changes)
        return replace(self, runtimes=runtimes)


def runtime_key(*, runtime: str, gpu: str) -> str:
    """Key of a (runtime, GPU) section: ``<runtime>/<gpu>``."""
    return f"{runtime}/{gpu}"


KERNEL_FIELDS = tuple(f.name for f in fields(KernelConstants))
LINK_FIELDS = tuple(f.name for f in fields(LinkConstants))
RUNTIME_FIELDS = tuple(f.name for f in fields(RuntimeConstants))
