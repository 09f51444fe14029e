"""How a model is deployed: GPUs, parallel degrees, precision, fusions, clock, runtime.

``Workload`` lives in :mod:`energylens.workloads` and is re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from energylens.cost.gguf import FILE_DTYPE, GGUF_DTYPES
from energylens.cost.moe import Routing
from energylens.cost.speculative import DEFAULT_ACCEPTANCE, Speculation
from energylens.errors import ConfigError, SpecError, UnknownGPUError
from energylens.hardware import GPU, load_gpu
from energylens.model.config import ModelConfig
from energylens.model.spec import split_sizes
from energylens.runtime import DEFAULT_RUNTIME, get_runtime
from energylens.runtime.profile import release_key
from energylens.workloads.workload import Workload

__all__ = ["FUSIONS", "KV_DTYPES", "WEIGHT_DTYPES", "Deployment", "Workload", "check_deployment",
           "sharded_model"]

#: Fusion groups the families declare (a runtime's defaults are a subset), and where a
#: W8A8/W4A4 checkpoint's activation quantisation runs: ``quant`` in the norm or
#: activation kernel that made the input, ``epilogue_quant`` in the epilogue of the
#: attention kernel or plain GEMM that made it (without them, a quantisation kernel of its
#: own before the linear layer); ``qk_norm_rope``: a query/key norm inside the rotary kernel;
#: ``conv``: a recurrent mixer's causal convolution over all its channels, state update
#: included, in one kernel; ``mixer_in``: a recurrent mixer's input projection (Mamba's
#: ``in_proj``, Gated DeltaNet's ``in_proj_qkv``: one tensor in the checkpoint) in one GEMM;
#: ``mixer_proj`` / ``mixer_gates``: a Gated DeltaNet mixer's z projection merged into its
#: q/k/v GEMM, its b and a projections into one GEMM.
FUSIONS = ("attention", "qkv", "gate_up", "act", "norm_residual", "quant", "epilogue_quant",
           "qk_norm_rope", "conv", "mixer_in", "mixer_proj", "mixer_gates")
#: Weight dtypes a deployment may choose (``energylens.cost.work.DTYPE_BYTES`` has their
#: storage; ``COMPUTE_DTYPE`` the tensor-core dtype each computes in).
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4",
                 *GGUF_DTYPES,  # GGUF file types
                 FILE_DTYPE)  # each tensor as the model's GGUF file stores it (cost/gguf.py)
#: KV-cache dtypes (None = ``auto``: the runtime's default for the checkpoint); the last two
#: are ggml's block formats (llama.cpp's ``--cache-type-k/-v``, ``cost/gguf.py`` their bytes).
KV_DTYPES = ("bf16", "fp16", "fp8", "q8_0", "q4_0")




@dataclass(frozen=True, kw_only=True)
class Deployment:
    """How a model is placed on GPUs and run.

    A replica spans ``tp x ep x pp`` GPUs; ``dp`` replicas serve independent requests.
    For MoE models under EP, attention and dense layers are tensor-parallel over the
    whole ``tp x ep`` group and each expert is split ``tp`` ways (``tp = 1``: vLLM's
    ``--enable-expert-parallel``, EP size = TP size; ``tp > 1`` splits each expert too, a
    layout SGLang and TensorRT-LLM run and vLLM has no flag for).

    Data-parallel attention (``attention_dp > 1``, or ``moe_tp`` given: vLLM
    ``--data-parallel-size --enable-expert-parallel``, SGLang ``--enable-dp-attention``,
    TensorRT-LLM ``enable_attention_dp``): ``tp`` is then the attention group only; a
    replica spans ``tp x attention_dp x pp`` GPUs, each of the ``attention_dp`` attention
    ranks with its own share of the batch and its own KV cache, and the MoE layer spans all
    of them: experts split ``ep`` ways, each expert ``moe_tp`` ways, ``ep x moe_tp`` =
    ``tp x attention_dp`` (``moe_tp`` defaults to the quotient).
    """

    num_gpus: int | None = None
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int | None = None
    weight_dtype: str | None = None  # None: the checkpoint's dtype
    kv_dtype: str | None = None  # None: auto, the runtime's default for the checkpoint
    fusion: frozenset[str] | None = None  # None: the runtime's default fusions
    overlap_sms: int = 0
    freq_mhz: float | None = None
    routing: Routing = field(default_factory=Routing)
    runtime: str = DEFAULT_RUNTIME  # the serving engine (energylens.runtime)
    runtime_version: str | None = None  # its release (None: the one its profile describes)
    attention_dp: int = 1  # data-parallel attention ranks of one replica
    moe_tp: int | None = None  # tensor-parallel split of each expert (explicit layout)
    max_num_seqs: int | None = None  # running requests one scheduler admits, per attention
    # rank (vLLM --max-num-seqs, TensorRT-LLM --max_batch_size; None: the server's default)
    prefill_chunk_tokens: int | None = None  # prompt tokens per forward pass (vLLM
    # --max-num-batched-tokens, SGLang --chunked-prefill-size, TensorRT-LLM --max_num_tokens,
    # llama.cpp --batch-size): a static batch's prompts run in passes of it, a load run's
    # scheduler takes it as its token budget (None: the runtime's default, which a static
    # batch's prompts also run in passes of where the engine splits them)
    speculative_tokens: int = 0  # draft tokens per decode step (MTP / EAGLE head; 0: none)
    draft_acceptance: float | None = None  # each draft's acceptance (None: the default)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "attention_dp"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.moe_tp is not None and self.moe_tp < 1:
            raise ConfigError(f"moe_tp must be >= 1, got {self.moe_tp}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.prefill_chunk_tokens is not None and self.prefill_chunk_tokens < 1:
            raise ConfigError(f"prefill_chunk_tokens must be >= 1, got "
                              f"{self.prefill_chunk_tokens}")
        if self.explicit_moe_layout:
            moe_gpus = self.tp * self.attention_dp
            if self.moe_tp is None and moe_gpus % self.ep:
                raise ConfigError(f"ep = {self.ep} does not divide tp x attention_dp = "
                                  f"{moe_gpus} (the MoE layer spans the attention ranks' GPUs)")
            if self.moe_tp is not None and self.ep * self.moe_tp != moe_gpus:
                raise ConfigError(f"ep x moe_tp = {self.ep * self.moe_tp} != tp x attention_dp "
                                  f"= {moe_gpus} (the MoE layer spans the attention ranks' GPUs)")
        if self.draft_acceptance is not None and self.speculative_tokens == 0:
            raise ConfigError("draft_acceptance needs speculative_tokens >= 1")
        _ = self.speculation  # one-line error: a negative count, an acceptance outside [0, 1]
        if self.dp is not None and self.dp < 1:
            raise ConfigError(f"dp must be >= 1, got {self.dp}")
        if self.num_gpus is not None and self.num_gpus < 1:
            raise ConfigError(f"num_gpus must be >= 1, got {self.num_gpus}")
        if self.overlap_sms < 0:
            raise ConfigError(f"overlap_sms must be >= 0, got {self.overlap_sms}")
        if self.freq_mhz is not None and self.freq_mhz <= 0:
            raise ConfigError(f"freq_mhz must be > 0, got {self.freq_mhz}")
        # one-line error for an unknown runtime; another spelling becomes the registry name
        object.__setattr__(self, "runtime", get_runtime(self.runtime).name)
        if self.runtime_version is not None:
            release_key(self.runtime_version)  # one-line error for a name that is no release
        unknown = set(self.fusion or ()) - set(FUSIONS)
        if unknown:
            raise ConfigError(f"unknown fusion {sorted(unknown)}; known: {', '.join(FUSIONS)}")
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise ConfigError(f"KV-cache dtype must be auto or one of {', '.join(KV_DTYPES)}, "
                              f"got {self.kv_dtype}")
        if self.weight_dtype is not None and self.weight_dtype not in WEIGHT_DTYPES:
            raise ConfigError(f"weight dtype must be one of {', '.join(WEIGHT_DTYPES)}, "
                              f"got {self.weight_dtype}")

    @property
    def speculation(self) -> Speculation | None:
        """Speculative decoding, or None where each step decodes one token."""
        if self.speculative_tokens == 0:
            return None
        return Speculation(draft_tokens=self.speculative_tokens,
                           acceptance=(DEFAULT_ACCEPTANCE if self.draft_acceptance is None
                                       else self.draft_acceptance))

    @property
    def explicit_moe_layout(self) -> bool:
        """Whether ``tp`` is the attention group alone (``attention_dp`` or ``moe_tp`` set)
        rather than the per-expert split of vLLM's ``tp x ep`` layout."""
        return self.attention_dp > 1 or self.moe_tp is not None

    @property
    def attention_tp(self) -> int:
        """GPUs one attention rank's heads are split over."""
        return self.tp if self.explicit_moe_layout else self.tp * self.ep

    @property
    def expert_tp(self) -> int:
        """Ways each expert is split (``moe_tp``)."""
        if self.moe_tp is not None:
            return self.moe_tp
        return self.tp * self.attention_dp // self.ep if self.explicit_moe_layout else self.tp

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one model replica occupies."""
        return self.attention_tp * self.attention_dp * self.pp

    @property
    def replicas(self) -> int:
        """Data-parallel replicas (inferred from ``num_gpus`` when ``dp`` is not given)."""
        if self.dp is not None:
            return self.dp
        if self.num_gpus is None:
            return 1
        return max(1, self.num_gpus // self.gpus_per_replica)

    @property
    def total_gpus(self) -> int:
        """All GPUs of the deployment."""
        return self.gpus_per_replica * self.replicas

    def degrees(self, model: ModelConfig) -> dict[str, int]:
        """Split degree per sharding dimension of the family specs, and ``adp`` (the
        data-parallel attention ranks) where there are several."""
        degrees = {"tp": self.attention_tp, "etp": self.expert_tp, "ep": self.ep}
        if self.attention_dp > 1:
            degrees["adp"] = self.attention_dp
        return degrees


def sharded_model(*, deployment: Deployment, model: ModelConfig) -> ModelConfig:
    """``model`` as the slowest rank of ``deployment`` holds it: itself, or padded to the
    largest share of heads where the runtime splits them unevenly (DeepSpeed AutoTP) and of
    experts where it runs redundant expert slots (a load balancer)."""
    return get_runtime(deployment.runtime).sharded_model(
        model=model, attention_tp=deployment.attention_tp, ep=deployment.ep)


def _expert_layout_hint(d: Deployment) -> str:
    """Where ``tp x ep`` ranks exceed the GPUs but ``ep`` divides ``tp``: the flags that
    put the experts over the ``tp`` ranks instead ("" otherwise)."""
    if d.explicit_moe_layout or d.ep == 1 or d.tp == 1 or d.tp % d.ep \
            or d.tp * d.pp * (d.dp or 1) > (d.num_gpus or 0):
        return ""
    moe_tp = d.tp // d.ep
    engines = (f": vLLM --tensor-parallel-size {d.tp} --enable-expert-parallel, SGLang and "
               f"TensorRT-LLM --tp {d.tp} --ep {d.ep}" if moe_tp == 1 else "")
    return (f" (--tp {d.tp} --ep {d.ep} alone is {d.tp * d.ep} GPUs a replica: attention "
            f"over all of them, each expert split {d.tp} ways; to spread the experts over the "
            f"{d.tp} TP ranks give --tp {d.tp} --ep {d.ep} --moe-tp {moe_tp}{engines})")


def check_deployment(*, deployment: Deployment, model: ModelConfig, gpu_name: str,
                     gpu_clock_range: tuple[float, float], gpu_sm_count: int) -> None:
    """Raise :class:`ConfigError` if the deployment cannot run ``model`` at all."""
    d = deployment
    if d.overlap_sms >= gpu_sm_count:
        raise ConfigError(f"overlap_sms = {d.overlap_sms} leaves no SM for compute: "
                          f"{gpu_name} has {gpu_sm_count} SMs")
    if d.num_gpus is not None:
        ranks = "tp*attention_dp*pp" if d.explicit_moe_layout else "tp*ep*pp"
        if d.gpus_per_replica * (d.dp or 1) > d.num_gpus:
            raise ConfigError(
                f"{ranks}*dp = {d.gpus_per_replica * (d.dp or 1)} parallel ranks "
                f"exceed num_gpus = {d.num_gpus}{_expert_layout_hint(d)}"
            )
        if d.num_gpus % d.gpus_per_replica:
            raise ConfigError(
                f"num_gpus = {d.num_gpus} is not a multiple of {ranks} = {d.gpus_per_replica}"
            )
        if d.dp is not None and d.gpus_per_replica * d.dp != d.num_gpus:
            raise ConfigError(f"{ranks}*dp = {d.gpus_per_replica * d.dp} != num_gpus = "
                              f"{d.num_gpus}")
    if d.weight_dtype == FILE_DTYPE and not model.gguf_storage:
        raise ConfigError(f"weight dtype {FILE_DTYPE} prices each tensor as a GGUF file stores it, and "
                          f"{model.name} was not read from one: give the .gguf file as the "
                          f"model, or a GGUF file type ({', '.join(GGUF_DTYPES)})")
    if d.explicit_moe_layout and model.moe is None:
        raise ConfigError(f"attention_dp / moe_tp lay out a MoE layer but {model.name} is a "
                          "dense model (use dp for replicas)")
    if d.ep > 1:
        if model.moe is None:
            raise ConfigError(f"ep = {d.ep} but {model.name} is a dense model (no experts)")
        if model.moe.num_experts % d.ep:
            raise ConfigError(
                f"ep = {d.ep} does not divide the {model.moe.num_experts} experts of {model.name}"
            )
    attention_tp = d.attention_tp
    if model.num_heads % attention_tp:
        raise ConfigError(
            f"tp{'*ep' if attention_tp != d.tp else ''} = {attention_tp} does not divide the "
            f"{model.num_heads} attention heads of {model.name}"
        )
    try:
        split_sizes(composite="g*r", sizes={"g": model.num_kv_heads,
                    "r": model.num_heads // model.num_kv_heads}, degree=attention_tp)
    except SpecError:
        raise ConfigError(
            f"tp = {attention_tp} does not divide the {model.num_kv_heads} KV heads of "
            f"{model.name} (nor a multiple of them)"
        ) from None
    if d.pp > model.num_layers:
        raise ConfigError(f"pp = {d.pp} exceeds the {model.num_layers} layers of {model.name}")
    if d.freq_mhz is not None:
        low, high = gpu_clock_range
        if not low <= d.freq_mhz <= high:
            raise ConfigError(
                f"freq_mhz = {d.freq_mhz:g} is outside {gpu_name}'s range {low:g}-{high:g} MHz"
            )
    try:  # the runtime refuses a GPU vendor or generation, precision or layout it lacks
        gpu: GPU | None = load_gpu(gpu_name)
    except UnknownGPUError:
        gpu = None
    get_runtime(d.runtime).check_on(deployment=d, model=model, gpu=gpu)
