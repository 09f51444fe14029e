"""A serving runtime (engine) profile: the facts of one engine that change a prediction.

Facts are data (``energylens/data/runtimes/<name>.yaml``: value, kind, source); what an
engine does differently in code (how it lays out collectives, how its step overhead is
shaped, which layouts it refuses, how it is launched) are the methods of its module's
:class:`RuntimeProfile` subclass.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

from energylens.cost.comm import own_allreduce_link
from energylens.cost.constants import Calibration, LinkConstants, RuntimeConstants, runtime_key
from energylens.cost.kernels import Collective
from energylens.cost.work import Size
from energylens.errors import ConfigError, EnergyLensError
from energylens.model.spec import Einsum, LayerSpec
from energylens.yamlfile import safe_load

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.hardware import GPU
    from energylens.model.config import ModelConfig
    from energylens.runtime.launch import LaunchCommand, LaunchSpec

#: Kinds of a fact: documented in the engine's docs or code (``datasheet``), measured,
#: fitted on a named file, derived from other facts, or assumed.
FACT_KINDS = ("datasheet", "measured", "fitted", "derived", "assumed")
#: Parallel dimensions a runtime may support (``Deployment`` degrees): ``attention_dp`` is
#: data-parallel attention with the MoE layer over all its ranks, ``moe_tp`` a split of
#: each expert under that explicit layout.
PARALLEL_DIMS = ("tp", "pp", "ep", "attention_dp", "moe_tp")
#: How a runtime's scheduler puts prompts into steps: ``mixed-chunked`` (prompt chunks
#: join the decodes of the same step in the token budget: vLLM V1, SplitFuse),
#: ``mixed-whole`` (whole prompts join the decodes, no chunking: TensorRT-LLM's in-flight
#: batching with chunked context off), ``prefill-first`` (a step with prompts to prefill
#: runs them alone, chunked, and the decodes wait: SGLang without --enable-mixed-chunk).
PREFILL_SCHEDULING = ("mixed-chunked", "mixed-whole", "prefill-first")
#: How the server's scheduler limits apply under data-parallel attention: every attention
#: rank schedules its own requests with the whole token budget and cap (``per-rank``:
#: TensorRT-LLM, vLLM's DP engines), or the server's token budget and a running cap given
#: to it are divided evenly among the ranks (``split``: SGLang; its default cap is each
#: rank's own).
ATTENTION_DP_LIMITS = ("per-rank", "split")
#: When the ranks of data-parallel attention prefill: each rank's scheduler on its own, so
#: that a step the ranks take together lasts as long as a rank's prompt chunk whenever any
#: rank has one (``independent``), or all at once, the ranks waiting for one another's
#: prompts (``balanced``).
ATTENTION_DP_PROMPTS = ("independent", "balanced")


def _strings(value: Any) -> frozenset[str]:
    return frozenset(str(v) for v in value)


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


#: What ``kv_dtype`` auto stores: the checkpoint's declared KV precision where the engine
#: runs it, or the activations' 16 bits whatever the checkpoint declares.
AUTO_KV_DTYPES = ("checkpoint", "activations")


def _one_of(fact: str, allowed: tuple[str, ...]) -> Callable[[Any], str]:
    """A reader of a fact whose value is one of ``allowed`` (else a one-line error)."""
    def read(value: Any) -> str:
        if value not in allowed:
            raise EnergyLensError(f"{fact} must be one of {', '.join(allowed)}, got {value!r}")
        return str(value)
    return read


def _release(value: Any) -> str | None:
    """A release a fact changes at (``0.12.0``), or None (no later release changes it)."""
    if value is None:
        return None
    release_key(str(value))  # a one-line error for a name that is not a release
    return str(value)


def _optional_float(value: Any) -> float | None:
    """A number, or None (the fact does not apply)."""
    return None if value is None else float(value)


def _optional_int(value: Any) -> int | None:
    """A whole number, or None."""
    return None if value is None else int(value)


def _capabilities(value: Any) -> dict[str, float]:
    """A precision -> lowest CUDA compute capability mapping (empty: no gate)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EnergyLensError(f"a compute-capability gate must map precisions to numbers, "
                              f"got {value!r}")
    return {str(dtype): float(cc) for dtype, cc in value.items()}


@cache
def release_key(version: str) -> tuple[int, ...]:
    """``1.3.0rc20`` -> (1, 3, 0): the numeric release, for ordering (pre-release tags
    count as their release). A build named otherwise (``nightly-dev-20260216-d3bae71e``,
    ``glm5-hopper``) has no release number: its digits are a date or a model's name."""
    text = version.lstrip("vV")
    numbers = re.findall(r"\d+", text.split("rc")[0].split("+")[0])
    if not numbers or not text[:1].isdigit():
        raise ConfigError(f"{version!r} is not a release number (e.g. 0.12.0)")
    return tuple(int(n) for n in numbers[:3])


#: What ``memory_utilization`` is a share of: the whole HBM for everything (vLLM), the
#: memory left free after weights, activations and reserve (TensorRT-LLM, LMDeploy), or
#: the whole HBM for weights and the KV pool only, activations and reserve living in the
#: rest (``static``: SGLang's --mem-fraction-static).
MEMORY_SHARES = ("hbm", "free", "static")


#: Suffix of the calibration sections holding a runtime's overheads before its
#: ``legacy_overheads_until`` release.
LEGACY_SUFFIX = "@legacy"

#: The constants a ``@legacy`` section holds for its runtime's earlier releases: the CPU
#: work per step and per sequence, the all-reduce arrival time of a real step, and the HBM
#: share of its unsplit decode-attention kernel (``paged_attention_v1_above``).
LEGACY_FIELDS = ("step_overhead_s", "per_sequence_overhead_s", "collective_sync_s",
                 "v1_kv_bandwidth_share")

#: The runtime whose (fitted) sections lend a runtime without measurements its own
#: all-reduce constants (vLLM), and whose GPUs every other runtime gets priors on.
REFERENCE_RUNTIME = "vllm"
#: A runtime's own small all-reduce: the constants of its measured kernel table.
ALLREDUCE_CONSTANTS = ("allreduce_latency_s", "allreduce_latency_per_hop_s",
                       "allreduce_bus_bandwidth_fraction")


#: Every fact of a profile and how its YAML value is read.
_FACTS: dict[str, Callable[[Any], Any]] = {
    "version": str,
    "default_fusions": _strings,
    "attention_kernel": str,
    "cuda_graph_batch_sizes": _ints,
    "memory_utilization": float,
    "memory_share_of": _one_of("memory_share_of", MEMORY_SHARES),
    "reserve_bytes": float,
    "prefill_chunk_tokens": int,
    "prefill_scheduling": _one_of("prefill_scheduling", PREFILL_SCHEDULING),
    "attention_dp_limits": _one_of("attention_dp_limits", ATTENTION_DP_LIMITS),
    "attention_dp_prompts": _one_of("attention_dp_prompts", ATTENTION_DP_PROMPTS),
    "decode_reserve_tokens": _optional_int,
    "kv_block_tokens": int,
    "weight_dtypes": _strings,
    "kv_dtypes": _strings,
    "weight_min_compute_capability": _capabilities,
    "kv_min_compute_capability": _capabilities,
    "auto_kv_dtype": _one_of("auto_kv_dtype", AUTO_KV_DTYPES),
    "checkpoint_kv_since": _release,
    "sparse_attention_fp8_kv_from": _optional_float,
    "ep_layer_overhead_until": _release,
    "deltanet_projections_merged_since": _release,
    "overlap_scheduler_since": _release,
    "overlap_scheduler_with_pp": bool,
    "legacy_overheads_until": _release,
    "paged_attention_v1_above": _optional_float,
    "flash_decode_vendors": _strings,
    "parallelism": _strings,
    "gpu_vendors": _strings,
    "expert_parallel_layout": str,
    "fused_into_combine": lambda v: tuple(str(x) for x in v),
    "custom_allreduce_max_bytes": float,
    "prior_step_overhead_s": float,
    "prior_per_sequence_overhead_s": float,
    "prior_overheads_from": lambda v: None if v is None else str(v),
    "uneven_head_sharding": bool,
    "redundant_expert_slots": bool,
    "speculative_decoding": bool,
    "pipelines_prompt_passes": bool,
    "static_batch_chunked": bool,
    "launch_program": str,
    "launch_flags": lambda v: tuple(str(x) for x in v),
}


@dataclass(frozen=True, kw_only=True)
class Fact:
    """Where a runtime fact comes from."""

    source: str
    kind: str


#: Running requests one server scheduler holds at most where its profile gives no cap
#: (vLLM's default on large GPUs; assumed for the others).
SERVER_MAX_SEQUENCES = 1024


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (one per runtime)
class RuntimeProfile:
    """The facts of one serving runtime; subclasses override the behaviour hooks."""

    name: str
    display_name: str
    version: str  # the engine release the facts describe
    default_fusions: frozenset[str]
    attention_kernel: str  # attention kernel family (informational)
    cuda_graph_batch_sizes: tuple[int, ...]  # decode batch sizes captured as CUDA graphs
    memory_utilization: float  # share of HBM (or of what weights leave) the engine may use
    memory_share_of: str  # "hbm", "free" or "static" (MEMORY_SHARES)
    reserve_bytes: float  # CUDA context, workspaces, allocator slack
    prefill_chunk_tokens: int  # prefill tokens per forward pass (activation sizing)
    prefill_scheduling: str  # how prompts share steps with decodes (PREFILL_SCHEDULING)
    attention_dp_limits: str  # scheduler limits under attention DP (ATTENTION_DP_LIMITS)
    attention_dp_prompts: str  # when attention-DP ranks prefill (ATTENTION_DP_PROMPTS)
    decode_reserve_tokens: int | None  # a disaggregated decode worker admits a request whose
    # cache arrives only where its cache also holds this many more tokens for it and for
    # each running request (0: its prompt's cache fits; None: every request's whole output)
    kv_block_tokens: int  # tokens per KV-cache block (page)
    weight_dtypes: frozenset[str]  # weight precisions it runs
    kv_dtypes: frozenset[str]  # KV-cache precisions it stores
    weight_min_compute_capability: dict[str, float]  # the lowest CUDA compute capability
    # on which it runs weights of a precision (a precision not named: every NVIDIA GPU)
    kv_min_compute_capability: dict[str, float]  # the same for a KV-cache precision
    auto_kv_dtype: str  # what kv_dtype auto stores (AUTO_KV_DTYPES)
    checkpoint_kv_since: str | None  # the release from which auto follows the checkpoint
    sparse_attention_fp8_kv_from: float | None  # the compute capability from which auto
    # stores FP8 for a model with DeepSeek Sparse Attention (an indexer; None: never)
    ep_layer_overhead_until: str | None  # the release from which an EP MoE layer has no
    # fixed time of its own (None: the calibrated one holds for every release)
    deltanet_projections_merged_since: str | None  # the release from which a Gated
    # DeltaNet mixer's z projection runs in its q/k/v GEMM and b with a in one GEMM (the
    # ``mixer_proj`` and ``mixer_gates`` fusions; None: never)
    overlap_scheduler_since: str | None  # the release from which the CPU's step preparation
    # overlaps the GPU's step by default: its step and per-sequence work runs beside the
    # GPUs' step and sets it only where it outlasts it (None: never)
    overlap_scheduler_with_pp: bool  # whether it stays on under pipeline parallelism
    legacy_overheads_until: str | None  # releases before it take the LEGACY_FIELDS of the
    # calibration's ``<name>@legacy`` sections (None: one set for all releases)
    paged_attention_v1_above: float | None  # before ``legacy_overheads_until``, decode
    # attention above this many sequences x query heads per GPU runs an unsplit kernel that
    # reads the cache once per query head, at the @legacy section's ``v1_kv_bandwidth_share``
    flash_decode_vendors: frozenset[str]  # GPU vendors on which those releases decode with
    # FlashAttention instead (no switch), except for a model with a sliding window
    parallelism: frozenset[str]  # parallel dimensions it supports (PARALLEL_DIMS)
    gpu_vendors: frozenset[str]  # GPU vendors it runs on (the GPU files' ``vendor``)
    expert_parallel_layout: str  # "tensor-parallel-attention" or "all-to-all"
    fused_into_combine: tuple[str, ...]  # reductions folded into the MoE combine
    custom_allreduce_max_bytes: float  # own all-reduce up to this size (0 = always NCCL)
    # Priors of the (runtime, GPU) overheads, written by ``energylens calibrate`` where no
    # measurement identifies them (the cost model reads the calibration file, not these).
    prior_step_overhead_s: float
    prior_per_sequence_overhead_s: float
    prior_overheads_from: str | None  # a runtime whose (fitted or borrowed) overheads on
    # the same GPU are the priors instead of the two above (None: those two)
    uneven_head_sharding: bool  # splits attention in whole KV groups, unevenly where tp
    # does not divide them (DeepSpeed AutoTP) instead of refusing the layout
    redundant_expert_slots: bool  # an EP degree that does not divide the experts runs
    # ceil(E / ep) expert slots per rank (a load balancer's redundant experts)
    speculative_decoding: bool  # drafts from a one-layer head (MTP / EAGLE) at ``version``
    pipelines_prompt_passes: bool  # over pipeline stages, a prompt's next pass enters the
    # first stage while the last runs (passes + pp - 1 stage times), not after it
    static_batch_chunked: bool  # a static batch's prompts run in passes of the token
    # budget (``prefill_chunk_on``) as its server's do, not all in one pass
    launch_program: str  # the command that starts a server (``vllm serve``)
    launch_flags: tuple[str, ...]  # its documented flags at ``version``
    provenance: dict[str, Fact]

    # --- what it can run ------------------------------------------------------------------

    def described_releases(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(earliest, latest) release, as (major, minor), that the facts name: the
        profile's own and those a fact changes at; None where its release has no number
        (``b6700``)."""
        named = (self.version, self.checkpoint_kv_since, self.ep_layer_overhead_until,
                 self.deltanet_projections_merged_since, self.overlap_scheduler_since,
                 self.legacy_overheads_until)
        try:
            keys = [release_key(name)[:2] for name in named if name is not None]
        except ConfigError:
            return None
        return min(keys), max(keys)

    def release_name(self, *, version: str | None = None) -> str:
        """``vLLM 0.17.0``: the engine and release ``version`` (None: the profile's), as
        its messages name it."""
        return f"{self.display_name} {version or self.version}"

    def check(self, *, deployment: Deployment, model: ModelConfig,
              gpu_vendor: str | None = None) -> None:
        """Raise :class:`ConfigError` (with the reason) if this engine cannot run the
        deployment: a GPU vendor (when given), a weight or KV-cache precision, or a
        parallel layout it lacks."""
        name = self.release_name(version=deployment.runtime_version)
        if gpu_vendor is not None and gpu_vendor not in self.gpu_vendors:
            from energylens.runtime.registry import runtime_names_on

            others = runtime_names_on(vendor=gpu_vendor)
            raise ConfigError(f"{name} does not run on {gpu_vendor} GPUs (it runs on "
                              f"{', '.join(sorted(self.gpu_vendors))}; on {gpu_vendor}: "
                              f"--runtime {' or '.join(others) if others else 'none known'})")
        from energylens.runtime.registry import runtimes_storing

        weight = deployment.weight_dtype or model.weight_dtype
        if weight not in self.weight_dtypes:
            others = runtimes_storing(weight_dtype=weight)
            raise ConfigError(f"{name} cannot run {weight} weights "
                              f"(it runs {', '.join(sorted(self.weight_dtypes))}"
                              + (f"; {weight} weights: --runtime {' or '.join(others)})"
                                 if others else ")"))
        kv = deployment.kv_dtype
        if kv is not None and kv not in self.kv_dtypes:
            others = runtimes_storing(kv_dtype=kv)
            raise ConfigError(f"{name} has no {kv} KV cache "
                              f"(it stores {', '.join(sorted(self.kv_dtypes))}"
                              + (f"; a {kv} KV cache: --runtime {' or '.join(others)})"
                                 if others else ")"))
        if deployment.speculative_tokens and not self.speculative_decoding:
            raise ConfigError(f"{name} has no speculative decoding "
                              "from a draft head (speculative_tokens = "
                              f"{deployment.speculative_tokens})")
        degrees = {"tp": deployment.tp, "pp": deployment.pp, "ep": deployment.ep,
                   "attention_dp": deployment.attention_dp,
                   # with one attention rank an expert split is the tp x ep layout's own
                   "moe_tp": deployment.expert_tp if deployment.attention_dp > 1 else 1}
        for dim in PARALLEL_DIMS:
            if degrees[dim] > 1 and dim not in self.parallelism:
                raise ConfigError(
                    f"{name} has no {_DIM_NAMES[dim]} parallelism "
                    f"({dim} = {degrees[dim]}; it supports "
                    f"{', '.join(sorted(self.parallelism)) or 'one GPU per replica'})")

    def check_on(self, *, deployment: Deployment, model: ModelConfig, gpu: GPU | None) -> None:
        """:meth:`check` for ``gpu`` (its vendor), then :meth:`check_precision_on` (None:
        an unknown GPU, :meth:`check` alone). Raises :class:`ConfigError` with the reason."""
        self.check(deployment=deployment, model=model,
                   gpu_vendor=None if gpu is None else gpu.vendor)
        if gpu is not None:
            self.check_precision_on(deployment=deployment, model=model, gpu=gpu)

    def check_precision_on(self, *, deployment: Deployment, model: ModelConfig,
                           gpu: GPU) -> None:
        """Raise :class:`ConfigError` if ``gpu``'s CUDA compute capability is below what
        this engine needs for the deployment's weight precision
        (``weight_min_compute_capability``) or the KV precision it stores
        (``kv_min_compute_capability``; ``kv_dtype`` auto: :meth:`auto_kv` on ``gpu``). A
        GPU without a compute capability (not NVIDIA) passes."""
        cc = gpu.compute_capability
        if cc is None:
            return
        name = self.release_name(version=deployment.runtime_version)
        weight = deployment.weight_dtype or model.weight_dtype
        need = self.weight_min_compute_capability.get(weight)
        if need is not None and cc < need:
            raise ConfigError(f"{name} runs no {weight} weights on "
                              f"{gpu.name} (compute capability {cc:.1f}; it needs {need:.1f} or "
                              "more)")
        kv = deployment.kv_dtype or self.auto_kv(model=model, gpu=gpu,
                                                 version=deployment.runtime_version)
        need = self.kv_min_compute_capability.get(kv)
        if need is not None and cc < need:
            auto = "" if deployment.kv_dtype else ", kv_dtype auto: the checkpoint's"
            raise ConfigError(f"{name} stores no {kv} KV cache on "
                              f"{gpu.name} (compute capability {cc:.1f}; it needs {need:.1f} or "
                              f"more{auto})")

    def sharded_model(self, *, model: ModelConfig, attention_tp: int, ep: int) -> ModelConfig:
        """``model`` as its slowest rank holds it. An engine that splits attention unevenly
        in whole KV groups (``uneven_head_sharding``) gives the first ``num_kv_heads % tp``
        ranks one group more: priced as the model padded to ``ceil(num_kv_heads / tp)``
        groups per rank, each group keeping its query heads. An engine with redundant
        expert slots (``redundant_expert_slots``) runs ``ceil(num_experts / ep)`` experts
        per rank, the routed tokens spread evenly over all slots: priced as the model padded
        to that many experts per rank. Any other case gets ``model`` itself."""
        groups = model.num_kv_heads
        if (self.uneven_head_sharding and model.kv_heads_per_layer is None
                and groups % attention_tp):
            padded = -(-groups // attention_tp) * attention_tp
            model = replace(model, num_kv_heads=padded,
                            num_heads=padded * (model.num_heads // groups))
        moe = model.moe
        if self.redundant_expert_slots and moe is not None and ep > 1 and moe.num_experts % ep:
            model = replace(model, moe=replace(moe, num_experts=-(-moe.num_experts // ep) * ep))
        return model

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """The command that starts ``spec`` on this engine, with documented flags only
        (``launch_flags``). Every runtime module overrides it."""
        raise NotImplementedError(f"runtime {self.name} has no launch command")

    def flag(self, name: str) -> str:
        """``name`` if it is one of this engine's documented flags (a typo fails here)."""
        if name not in self.launch_flags:
            raise ValueError(f"{self.name}: {name} is not a documented flag of {self.version}")
        return name

    # --- how it runs ----------------------------------------------------------------------

    def memory_share_on(self, *, gpu: GPU, tp: int, pp: int, attention_dp: int,
                        speculative: bool) -> float:
        """The memory share (``memory_utilization``) the server picks by default on ``gpu``
        for a replica of ``tp`` x ``attention_dp`` GPUs per stage and ``pp`` stages
        (``speculative``: with a draft head): ``memory_utilization`` unless the engine
        derives it from the GPU and the layout."""
        del gpu, tp, pp, attention_dp, speculative
        return self.memory_utilization

    def prefill_chunk_on(self, *, gpu: GPU) -> int:
        """Prefill tokens per forward pass of the engine on ``gpu`` (its chunked-prefill
        token budget; activation sizing): ``prefill_chunk_tokens`` unless the engine sets it
        from the GPU."""
        del gpu
        return self.prefill_chunk_tokens

    def static_chunk_on(self, *, gpu: GPU) -> int | None:
        """Prompt tokens per forward pass of a static batch on ``gpu`` by default: the
        token budget where the engine splits a batch's prompts by it
        (``static_batch_chunked``), else None (all in one pass)."""
        return self.prefill_chunk_on(gpu=gpu) if self.static_batch_chunked else None

    def server_limits_on(self, *, gpu: GPU) -> tuple[int, int]:
        """(token budget, max running requests) of the engine's server on ``gpu`` by
        default: its prefill chunk and :data:`SERVER_MAX_SEQUENCES` (assumed: the server's
        own cap is not in the profile yet) unless the engine's server has its own. An engine
        whose default cap follows its KV pool gives the most it can be here and the cap
        itself in :meth:`running_cap_on`."""
        return self.prefill_chunk_on(gpu=gpu), SERVER_MAX_SEQUENCES

    def running_cap_on(self, *, gpu: GPU, kv_tokens: int, context_tokens: int,
                       attention_dp: int = 1, pp: int = 1, speculative: bool = False) -> int:
        """Running requests one attention rank's scheduler admits by default (in one
        pipeline micro-batch, where the engine divides its cap among ``pp`` micro-batches),
        on ``gpu``, its KV pool holding ``kv_tokens`` tokens per attention rank (all its
        micro-batches' together), the server started for sequences of up to
        ``context_tokens`` (its context-length flag), with ``attention_dp`` data-parallel
        attention ranks and a draft head where ``speculative``: the cap of
        :meth:`server_limits_on` unless the engine derives its own (SGLang)."""
        del kv_tokens, context_tokens, attention_dp, pp, speculative
        return self.server_limits_on(gpu=gpu)[1]

    def follows_checkpoint_kv(self, *, version: str | None = None) -> bool:
        """Whether ``kv_dtype`` auto stores the KV precision the checkpoint declares, in
        release ``version`` (None: the release the profile describes)."""
        if version is None or self.checkpoint_kv_since is None:
            return self.auto_kv_dtype == "checkpoint"
        return release_key(version) >= release_key(self.checkpoint_kv_since)

    def auto_kv(self, *, model: ModelConfig, gpu: GPU, version: str | None = None) -> str:
        """The KV-cache precision of ``kv_dtype`` auto on ``gpu`` in release ``version``
        (None: the profile's): FP8 for a sparse-attention model on a GPU of at least
        ``sparse_attention_fp8_kv_from``, the checkpoint's where this engine follows it and
        stores it, else the activations' bf16."""
        if (self.sparse_attention_fp8_kv_from is not None and model.mla is not None
                and model.mla.index_heads and gpu.compute_capability is not None
                and gpu.compute_capability >= self.sparse_attention_fp8_kv_from
                and "fp8" in self.kv_dtypes):
            return "fp8"
        if (self.follows_checkpoint_kv(version=version) and model.kv_dtype is not None
                and model.kv_dtype in self.kv_dtypes):
            return model.kv_dtype
        return "bf16"

    def collective_layout(self, collectives: tuple[Collective, ...], *, layer: LayerSpec,
                          degrees: dict[str, int]) -> list[Collective]:
        """The collectives this runtime issues for a layer.

        The spec derives one all-reduce per split contraction: for experts split ``etp``
        ways that is a reduction of every expert's output rows (``ED[x,t,d]``, top-k
        times the tokens) before the combine. The combine is a weighted sum, so every
        engine reduces once after it, on the layer's output (``D[b,m,d]``), and folds the
        ``fused_into_combine`` partial sums (the shared expert's) into that one reduction;
        without expert parallelism (``ep`` = 1) that is all there is, in every layout.

        With ``ep`` > 1: ``all-to-all``: as the spec derives, the expert shards' partial
        sums reduced over ``etp`` once after the combine. ``tensor-parallel-attention``
        (vLLM's ``--enable-expert-parallel``, TensorRT-LLM and SGLang without attention
        DP): attention and dense layers are tensor-parallel over the whole group, so every
        rank already holds every token; dispatch is a local selection (no communication)
        and the expert ranks' and expert shards' partial sums are one all-reduce of the
        MoE output over the group (``ep`` x ``etp`` = ``tp``). Under data-parallel
        attention (``adp``) the ranks hold different tokens: all-to-all, as derived, the
        expert shards' partial sums reduced over ``etp`` after the combine (one rank's
        ``D[b,m,d]``, not top-k times its tokens' rows).
        """
        ep = degrees.get("ep", 1)
        partial = [c for c in collectives
                   if c.kind == "all_reduce" and c.dim == "etp" and "x" in c.tensor.ranks]
        if ep <= 1:
            if not partial:
                return list(collectives)
            return self._reduced_once(collectives, layer=layer, dim="tp", drop=partial)
        if (self.expert_parallel_layout != "tensor-parallel-attention"
                or degrees.get("tp", 1) % ep or degrees.get("adp", 1) > 1):
            return self._shards_reduced_after_combine(collectives, layer=layer, drop=partial)
        routed = [c for c in collectives if c.kind == "all_to_all" and c.dim == "ep"]
        if not routed:
            return list(collectives)
        return self._reduced_once(collectives, layer=layer, dim="tp", drop=partial + routed)

    @staticmethod
    def _shards_reduced_after_combine(collectives: tuple[Collective, ...], *,
                                      layer: LayerSpec,
                                      drop: list[Collective]) -> list[Collective]:
        """``collectives`` with the expert shards' all-reduces ``drop`` (over ``etp``, of
        every expert's rows) moved after the last collective, onto the combine's output."""
        if not drop:
            return list(collectives)
        combine = _combine_op(layer)
        reduce = replace(drop[-1], tensor=combine.output, after_op=combine.name,
                         overlap_kernel=None)
        return [c for c in collectives if c not in drop] + [reduce]

    def _reduced_once(self, collectives: tuple[Collective, ...], *, layer: LayerSpec, dim: str,
                      drop: list[Collective]) -> list[Collective]:
        """``collectives`` without ``drop`` and the ``fused_into_combine`` all-reduces, plus
        one all-reduce over ``dim`` of the combine's output, where the dropped ones were."""
        combine = _combine_op(layer)
        anchor = drop[-1]  # the last one dropped (the combine, where there is one)
        reduce = replace(anchor, kind="all_reduce", dim=dim, tensor=combine.output,
                         after_op=combine.name)
        out: list[Collective] = []
        for c in collectives:
            if c in drop or (c.kind == "all_reduce" and c.after_op in self.fused_into_combine):
                if c is anchor:
                    out.append(reduce)
                continue
            out.append(c)
        return out

    #: Whether every data-parallel attention rank runs the largest rank's token count
    #: (padding), so that the MoE layer's collectives see equal shares: the padded tokens
    #: pass through the linear layers and the experts, not attention. Off by default.
    pads_attention_ranks = False

    def allreduce_link(self, *, link: LinkConstants, constants: RuntimeConstants, scale_up: bool,
                       message_bytes: Any) -> LinkConstants:
        """Link constants of an all-reduce of ``message_bytes``: the runtime's own all-reduce
        over the scale-up link (``scale_up``) where it is calibrated (a latency > 0) and
        the message is within its size limit, else NCCL's ``link``."""
        if (scale_up and constants.allreduce_latency_s > 0
                and np.all(np.asarray(message_bytes) <= self.custom_allreduce_max_bytes)):
            return own_allreduce_link(constants=constants, link=link)
        return link

    def step_overhead_s(self, *, constants: RuntimeConstants,
                      sequences: Size) -> tuple[float, Size]:
        """(idle, busy) seconds of engine work per step: CPU work the GPUs idle through
        (static power only), and per-sequence work during which they draw busy power."""
        return constants.step_overhead_s, constants.per_sequence_overhead_s * sequences

    def decodes_paged(self, *, gpu_vendor: str, sliding_window: bool) -> bool:
        """Whether the releases with ``paged_attention_v1_above`` decode ``gpu_vendor``'s
        GPUs with their paged-attention kernel: everywhere but ``flash_decode_vendors``,
        and there too for a model with a sliding window (V0's backend selector falls back
        from FlashAttention for it)."""
        return gpu_vendor not in self.flash_decode_vendors or sliding_window

    def calibration_for(self, *, calibration: Calibration, gpu: str,
                        version: str | None = None,
                        mha: bool = False, paged_decode: bool = True) -> Calibration:
        """``calibration`` with the kernel constants of ``gpu`` as this engine's kernels
        reach them: efficiencies times its (runtime, GPU) scales (all 1: ``calibration``
        itself, so an engine without scales predicts exactly as before; KV reads of an
        ``mha`` model, one query head per KV head, at ``mha_kv_bandwidth_scale`` where the
        engine has one), in release
        ``version`` (None: the profile's): from ``ep_layer_overhead_until`` on, an
        expert-parallel MoE layer carries no fixed time of its own (the engine's CPU work
        per step is kept: whether it runs beside the GPU's step is :meth:`overlaps_cpu`);
        before ``legacy_overheads_until``, the
        :data:`LEGACY_FIELDS` are those of the ``<name>@legacy`` section where the GPU has
        one (an earlier engine generation, fitted on its own measurements), and its unsplit
        decode attention (``paged_attention_v1_above``) where ``paged_decode`` (see
        :meth:`decodes_paged`)."""
        calibration = self.with_priors(calibration=calibration, gpu=gpu)
        c = calibration.runtime(runtime=self.name, gpu=gpu)
        out = _scaled(calibration, gpu, c.gemm_efficiency_scale,
                      c.attention_efficiency_scale, c.memory_efficiency_scale,
                      (c.mha_kv_bandwidth_scale if mha else 0.0) or c.kv_bandwidth_scale,
                      c.expert_bandwidth_scale or c.memory_efficiency_scale)

        def since(release: str | None) -> bool:  # is ``version`` that release or later?
            return release is not None and (
                release_key(version or self.version) >= release_key(release))

        legacy = calibration.runtimes.get(runtime_key(runtime=legacy_runtime(self.name),
                                                      gpu=gpu))
        if legacy is not None and self.legacy_overheads_until is not None \
                and not since(self.legacy_overheads_until):
            out = _with_values(out, self.name, gpu,
                               tuple((name, getattr(legacy, name)) for name in LEGACY_FIELDS))
            c = out.runtime(runtime=self.name, gpu=gpu)
            if c.v1_kv_bandwidth_share > 0.0 and self.paged_attention_v1_above is not None \
                    and paged_decode:
                out = _with_v1(out, gpu, c.v1_kv_bandwidth_share, self.paged_attention_v1_above)
        if c.ep_moe_layer_overhead_s != 0.0 and since(self.ep_layer_overhead_until):
            out = _without(out, self.name, gpu, ("ep_moe_layer_overhead_s",))
        return out

    def prior_overheads(self, *, gpu: str, runtimes: dict[str, RuntimeConstants],
                        known: frozenset[str] = frozenset()) -> dict[str, tuple[float, str]]:
        """What this runtime takes on ``gpu`` where nothing identified it (constants in
        ``known`` are left out): constant -> (value, note). Its step and per-sequence
        overheads are those of its ``prior_overheads_from`` runtime on the GPU where
        ``runtimes`` has that section, else its profile's priors; with its own all-reduce
        and no measured table of it, :data:`REFERENCE_RUNTIME`'s (one-/two-shot NVLink
        peer-memory kernels alike). All assumed."""
        out: dict[str, tuple[float, str]] = {}
        for name in ("step_overhead_s", "per_sequence_overhead_s"):
            if name not in known:
                fact = f"prior_{name}"
                out[name] = (getattr(self, fact), f"prior of runtimes/{self.name}.yaml: "
                                                   f"{self.provenance[fact].source}")
        lender = self.prior_overheads_from
        lent = runtimes.get(runtime_key(runtime=lender, gpu=gpu)) if lender else None
        if lent is not None:
            why = self.provenance["prior_overheads_from"].source
            for name in out:
                out[name] = (getattr(lent, name), f"{lender}'s on {gpu} (prior_overheads_from "
                                                  f"of runtimes/{self.name}.yaml: {why})")
        reference = runtimes.get(runtime_key(runtime=REFERENCE_RUNTIME, gpu=gpu))
        if (reference is not None and self.custom_allreduce_max_bytes > 0
                and reference.allreduce_latency_s > 0
                and not any(name in known for name in ALLREDUCE_CONSTANTS)):
            for name in ALLREDUCE_CONSTANTS:
                out[name] = (getattr(reference, name),
                             f"no measured table of {self.name}'s own all-reduce on {gpu}: "
                             "vLLM's on that GPU (assumed alike)")
        return out

    def with_priors(self, *, calibration: Calibration, gpu: str) -> Calibration:
        """``calibration`` itself where it has this runtime's section for ``gpu`` (or no
        runtime section at all: the built-in defaults, chosen on purpose); else a copy with
        the section ``energylens calibrate`` would write for it (:meth:`prior_overheads`),
        so that a runtime added after the shipped calibration never runs with no overheads."""
        if (self.name == REFERENCE_RUNTIME or not calibration.runtimes
                or runtime_key(runtime=self.name, gpu=gpu) in calibration.runtimes):
            return calibration
        priors = self.prior_overheads(gpu=gpu, runtimes=dict(calibration.runtimes))
        return _with_values(calibration, self.name, gpu,  # one copy per calibration
                            tuple(sorted((name, value) for name, (value, _) in priors.items())))

    def fusions_at(self, *, version: str | None = None) -> frozenset[str]:
        """The fusions release ``version`` (None: the profile's) runs by default: the
        profile's, with a Gated DeltaNet mixer's merged projections from
        ``deltanet_projections_merged_since`` on."""
        since = self.deltanet_projections_merged_since
        if since is not None and release_key(version or self.version) >= release_key(since):
            return self.default_fusions | {"mixer_proj", "mixer_gates"}
        return self.default_fusions

    def overlaps_cpu(self, *, version: str | None = None, pp: int = 1) -> bool:
        """Whether release ``version`` (None: the profile's) prepares step n + 1 on the CPU
        while the GPUs run step n (from ``overlap_scheduler_since`` on, unless the
        deployment has ``pp`` > 1 stages and the engine turns its overlap scheduler off for
        them, ``overlap_scheduler_with_pp``): its per-step and per-sequence CPU work
        (fitted on earlier releases) then sets a step only where it outlasts the GPUs'."""
        since = self.overlap_scheduler_since
        return since is not None \
            and release_key(version or self.version) >= release_key(since) \
            and (pp == 1 or self.overlap_scheduler_with_pp)


_DIM_NAMES = {"tp": "tensor", "pp": "pipeline", "ep": "expert",
              "attention_dp": "data-parallel attention", "moe_tp": "expert tensor"}
#: An efficiency times a scale stays below this (a kernel never reaches 100 % of peak).
MAX_EFFICIENCY = 0.98


@lru_cache(maxsize=64)  # Calibration hashes by identity: one copy per (file, GPU, scales)
def _combine_op(layer: LayerSpec) -> Einsum:
    """The MoE layer's combine: the gather from the experts' rows back to the tokens."""
    return next(op for op in layer.ops if op.kind == "gather"
                and "x" not in op.output.ranks and any("x" in t.ranks for t in op.inputs))


def _scaled(calibration: Calibration, gpu: str, gemm: float, attention: float, memory: float,
            kv: float, expert: float) -> Calibration:
    if gemm == attention == memory == kv == expert == 1.0:
        return calibration
    base = calibration.kernel(gpu)

    def cap(value: float, scale: float) -> float:
        return min(value * scale, MAX_EFFICIENCY)

    return calibration.with_kernel(
        gpu,
        gemm_efficiency_max=cap(base.gemm_efficiency_max, gemm),
        attention_efficiency_max=cap(base.attention_efficiency_max, attention),
        memory_efficiency_max=cap(base.memory_efficiency_max, memory),
        expert_bandwidth_efficiency=cap(base.expert_bandwidth_efficiency, expert),
        kv_bandwidth_efficiency=cap(base.kv_bandwidth_efficiency, kv))


def legacy_runtime(name: str) -> str:
    """Name of the calibration sections holding ``name``'s overheads before its
    ``legacy_overheads_until`` release (``vllm@legacy``)."""
    return f"{name}{LEGACY_SUFFIX}"


@lru_cache(maxsize=64)
def _with_values(calibration: Calibration, runtime: str, gpu: str,
                 values: tuple[tuple[str, float], ...]) -> Calibration:
    """``calibration`` with these (runtime, GPU) constants (one copy per calibration)."""
    return calibration.with_runtime(runtime=runtime, gpu=gpu, **dict(values))


@lru_cache(maxsize=64)
def _with_v1(calibration: Calibration, gpu: str, share: float, above: float) -> Calibration:
    """``calibration`` with ``gpu``'s decode attention above ``above`` sequences x query
    heads run as an unsplit kernel reading the cache once per query head at ``share`` of
    HBM peak."""
    return calibration.with_kernel(gpu, v1_kv_bandwidth_share=share, v1_query_tiles_above=above)


@lru_cache(maxsize=64)
def _without(calibration: Calibration, runtime: str, gpu: str,
             overheads: tuple[str, ...]) -> Calibration:
    """``calibration`` with the named (runtime, GPU) overheads at zero."""
    return calibration.with_runtime(runtime=runtime, gpu=gpu,
                                    **{name: 0.0 for name in overheads})


@cache
def load_facts(name: str) -> dict[str, Any]:
    """Constructor arguments of runtime ``name`` from its data file."""
    path = resources.files("energylens.data").joinpath(f"runtimes/{name}.yaml")
    data = safe_load(path.read_text("utf-8"))
    unknown = set(data) - {"name", "display_name", *_FACTS}
    missing = set(_FACTS) - set(data)
    if unknown or missing:
        raise EnergyLensError(f"runtimes/{name}.yaml: unknown {sorted(unknown)} / missing "
                              f"{sorted(missing)} facts")
    values: dict[str, Any] = {"name": data["name"], "display_name": data["display_name"]}
    provenance: dict[str, Fact] = {}
    for key, read in _FACTS.items():
        entry = data[key]
        if entry.get("kind") not in FACT_KINDS:
            raise EnergyLensError(f"runtimes/{name}.yaml: {key}: kind must be one of "
                                  f"{', '.join(FACT_KINDS)}, got {entry.get('kind')!r}")
        values[key] = read(entry["value"])
        provenance[key] = Fact(source=entry["source"], kind=entry["kind"])
    for gate, runs in (("weight_min_compute_capability", "weight_dtypes"),
                       ("kv_min_compute_capability", "kv_dtypes")):
        stray = set(values[gate]) - set(values[runs])
        if stray:
            raise EnergyLensError(f"runtimes/{name}.yaml: {gate} names {sorted(stray)}, "
                                  f"which {runs} lacks")
    values["provenance"] = provenance
    return values
