"""SGLang: a vLLM-like Python scheduler with radix-cache KV pages (no fitted constants of
its own: see ``energylens/data/runtimes/sglang.yaml`` for what is assumed)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from energylens.errors import ConfigError
from energylens.hardware import GPU
from energylens.runtime.launch import MTP_NOTE, PORT, TORCH_DTYPES, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: SGLang ``--quantization`` methods by the dtype a 16-bit checkpoint is quantised to online.
ONLINE = {"fp8": "fp8"}
#: ``--chunked-prefill-size`` when not given, by the GPU's memory: (below this many bytes,
#: tokens), else :data:`CHUNK_LARGEST`. Source: SGLang ``ServerArgs``
#: ``_handle_gpu_memory_settings`` (python/sglang/srt/server_args.py, read in the 0.5.3 and
#: 0.5.9 sdists on PyPI): T4/4080 and A10/4090 2,048, A100-40GB/L40 4,096, H100/A100-80GB
#: and H20/H200 8,192, B200/MI300 16,384 (its GiB thresholds 20, 35, 60, 90, 160 of the
#: memory nvidia-smi reports).
CHUNK_BY_MEMORY = ((35 * 2**30, 2048), (60 * 2**30, 4096), (160 * 2**30, 8192))
CHUNK_LARGEST = 16384
#: ``--cuda-graph-max-bs`` when not given (same function): (below this many bytes, with
#: ``--tp-size`` below 4, from 4), else :data:`GRAPH_BS_LARGEST`. 0.5.3's; 0.5.9 raised the
#: 20-35 GiB class's small-TP value from 16 to 24.
GRAPH_BS_BY_MEMORY = ((20 * 2**30, 8, 8), (35 * 2**30, 16, 80), (60 * 2**30, 32, 160),
                      (160 * 2**30, 256, 512))
GRAPH_BS_LARGEST = 512
_MIB = 2**20
#: The default running cap of one scheduler (a DP-attention rank's, every pipeline
#: micro-batch's together): min(its KV pool's tokens // 2, its request pool), the request
#: pool clamp(int(pool tokens / context length x 512), 2,048, 4,096). Source: SGLang
#: 0.5.3 managers/tp_worker.py (``max_running_requests = min(max_total_num_tokens // 2 if
#: server_args.max_running_requests is None else ... // dp_size, req_to_token_pool.size)``)
#: and model_executor/model_runner.py ``init_memory_pool`` (``max_num_reqs``), the same in
#: 0.5.9's model_runner.py and model_runner_kv_cache_mixin.py (sdists on PyPI, read): kind
#: datasheet (engine code). The scheduler admits ``max_running_requests // pp_size`` per
#: micro-batch (managers/scheduler.py ``max_micro_batch_size``, both releases).
REQUEST_POOL_PER_CONTEXT = 512
REQUEST_POOL_MIN, REQUEST_POOL_MAX = 2048, 4096
#: --max-running-requests an EAGLE draft sets where none is given ("Max running requests is
#: reset to 48 for speculative decoding"; server_args.py ``_handle_speculative_decoding``,
#: 0.5.3 and 0.5.9, read), divided among DP-attention ranks like a given one.
EAGLE_RUNNING_REQUESTS = 48
#: Checkpoints SGLang drafts from themselves under ``--speculative-algorithm EAGLE``: the
#: architectures whose MTP module it loads from ``--model-path`` when no draft path is
#: given (server_args.py, 0.5.3: DeepseekV3/V32ForCausalLM, Glm4MoeForCausalLM,
#: BailingMoe(V2)ForCausalLM; read) narrowed to the checkpoints known to ship that module
#: (DeepSeek-V3/V3.1/V3.2/R1, GLM-4.5/4.6; not Kimi-K2's DeepseekV3 checkpoints without
#: one, nor DeepSeek's distilled Llama/Qwen).
SELF_DRAFTING = re.compile(r"(^|/)(deepseek-(v3|r1)(?!-distill)|glm-4\.[56](?!v))",
                           re.IGNORECASE)
#: Checkpoints whose MTP module SGLang 0.5.3 runs as the draft once
#: ``--speculative-draft-model-path`` names the checkpoint itself (configs/model_config.py
#: ``_config_draft_model``: Qwen3NextForCausalLM -> Qwen3NextForCausalLMMTP, MiMoForCausalLM
#: -> MiMoMTP; server_args.py does not default their path; read). Any other model needs an
#: EAGLE head of its own as that path.
OWN_DRAFT_PATH = re.compile(r"(^|/)(qwen3-next|mimo)", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True, eq=False)
class SGLang(RuntimeProfile):
    """``python -m sglang.launch_server``: one server for every replica (``--dp-size``)."""

    def memory_share_on(self, *, gpu: GPU, tp: int, pp: int, attention_dp: int,
                        speculative: bool) -> float:
        """SGLang's default ``--mem-fraction-static`` (``_handle_gpu_memory_settings``, 0.5.3
        and 0.5.9): the board less a reserve for activations and CUDA graphs, in MiB: 512 +
        1.5 x the chunked-prefill size + 2 x ``--cuda-graph-max-bs`` + 1,024 x tp x pp / 8,
        under DP attention 3 x (4.5 x above 300) graph batch x DP size more, at least 10
        GiB on boards over 60 GiB, 2 GiB more for an EAGLE/MTP draft; rounded to a
        thousandth, and 0 where that reserve exceeds the board (many DP-attention ranks: the
        server cannot start until its user sets the flag). ``--tp-size`` is every GPU of a
        stage (``tp`` x ``attention_dp``)."""
        board = gpu.hbm_capacity_bytes / _MIB
        server_tp = tp * attention_dp
        graph_bs = next((small if server_tp < 4 else large
                         for below, small, large in GRAPH_BS_BY_MEMORY
                         if gpu.hbm_capacity_bytes < below), GRAPH_BS_LARGEST)
        reserved = (512 + max(self.prefill_chunk_on(gpu=gpu), 2048) * 1.5 + graph_bs * 2
                    + server_tp * pp / 8 * 1024)
        if attention_dp > 1:
            reserved += graph_bs * attention_dp * 3
            if graph_bs > 300:
                reserved += graph_bs * attention_dp * 1.5
        if board > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if speculative:
            reserved += 2 * 1024
        return max(round((board - reserved) / board, 3), 0.0)

    def _share(self, spec: LaunchSpec) -> float:
        """The --mem-fraction-static to write: the priced one where raised, else the
        server's default on the GPU, else its value where the GPU is unknown."""
        for share in (spec.memory_share, spec.default_memory_share):
            if share is not None:
                return share
        return self.memory_utilization

    def prefill_chunk_on(self, *, gpu: GPU) -> int:
        """SGLang's default ``--chunked-prefill-size`` on ``gpu`` (:data:`CHUNK_BY_MEMORY`)."""
        for below, tokens in CHUNK_BY_MEMORY:
            if gpu.hbm_capacity_bytes < below:
                return tokens
        return CHUNK_LARGEST

    def server_limits_on(self, *, gpu: GPU) -> tuple[int, int]:
        """The chunked-prefill size on ``gpu`` and the most its default running cap can be
        (:data:`REQUEST_POOL_MAX`, the largest request pool); the cap itself follows the KV
        pool (:meth:`running_cap_on`)."""
        return self.prefill_chunk_on(gpu=gpu), REQUEST_POOL_MAX

    def running_cap_on(self, *, gpu: GPU, kv_tokens: int, context_tokens: int,
                       attention_dp: int = 1, pp: int = 1, speculative: bool = False) -> int:
        """SGLang's default ``max_running_requests`` of one scheduler (one DP-attention
        rank; :data:`REQUEST_POOL_PER_CONTEXT`): min(``kv_tokens`` // 2, clamp(int(
        ``kv_tokens`` / ``context_tokens`` x 512), 2,048, 4,096)); with an EAGLE draft 48 for
        the server, // ``attention_dp`` per rank; then // ``pp`` per micro-batch (at least
        one)."""
        del gpu
        if speculative:
            cap = EAGLE_RUNNING_REQUESTS // attention_dp
        else:
            pool = min(max(int(kv_tokens / max(context_tokens, 1) * REQUEST_POOL_PER_CONTEXT),
                           REQUEST_POOL_MIN), REQUEST_POOL_MAX)
            cap = min(kv_tokens // 2, pool)
        return max(cap // pp, 1)

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``python -m sglang.launch_server --model-path MODEL --tp-size ...``; data-parallel
        attention is ``--dp-size N --enable-dp-attention`` with ``--tp-size`` all the
        replica's GPUs, one server per replica. A deployment's ``prefill_chunk_tokens`` is
        ``--chunked-prefill-size``. Drafts are EAGLE over the checkpoint's own MTP module
        (:data:`SELF_DRAFTING`; :data:`OWN_DRAFT_PATH` with the checkpoint as the draft
        path); another model raises :class:`ConfigError` (it needs an EAGLE head, which
        energylens does not know)."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), f("--model-path"), spec.model_id,
                f("--tp-size"), str(d.attention_tp * d.attention_dp)]
        if d.ep > 1:
            argv += [f("--ep-size"), str(d.ep)]
        if d.pp > 1:
            argv += [f("--pp-size"), str(d.pp)]
        servers = 1
        max_running = spec.max_num_seqs
        if d.attention_dp > 1:
            argv += [f("--dp-size"), str(d.attention_dp), f("--enable-dp-attention")]
            servers = d.replicas
            if max_running is not None:  # the server's limit, shared by its DP ranks
                max_running *= d.attention_dp
        elif d.replicas > 1:
            argv += [f("--dp-size"), str(d.replicas)]
        notes: list[str] = []
        if spec.weight_dtype in TORCH_DTYPES and spec.weight_dtype != spec.checkpoint_dtype:
            argv += [f("--dtype"), TORCH_DTYPES[spec.weight_dtype]]
        elif spec.quantize and spec.weight_dtype in ONLINE:
            argv += [f("--quantization"), ONLINE[spec.weight_dtype]]
        elif spec.quantize:
            notes.append(f"needs a {spec.weight_dtype} checkpoint of {spec.model_id}")
        if d.kv_dtype == "fp8":
            argv += [f("--kv-cache-dtype"), "fp8_e4m3"]
        if max_running is not None:
            argv += [f("--max-running-requests"), str(max_running)]
        if d.prefill_chunk_tokens is not None:  # the server's; // --dp-size per DP rank
            argv += [f("--chunked-prefill-size"), str(d.prefill_chunk_tokens)]
            notes.append(
                f"--mem-fraction-static {self._share(spec):g} is the share priced; SGLang's own "
                "default follows --chunked-prefill-size (1.5 MiB kept per token, server_args.py "
                "_handle_gpu_memory_settings), so left unset it would differ with a "
                f"{d.prefill_chunk_tokens}-token chunk")
        if d.speculative_tokens:  # SGLang runs an MTP module as its EAGLE draft
            if OWN_DRAFT_PATH.search(spec.model_id):
                argv += [f("--speculative-draft-model-path"), spec.model_id]
            elif not SELF_DRAFTING.search(spec.model_id):
                raise ConfigError(
                    f"{self.release_name(version=d.runtime_version)} drafts from the "
                    "checkpoint's own MTP "
                    "module only for DeepSeek-V3/R1, GLM-4.5/4.6, Qwen3-Next and MiMo; "
                    f"{spec.model_id} needs an EAGLE head: --speculative-draft-model-path HEAD "
                    "(none known to energylens)")
            argv += [f("--speculative-algorithm"), "EAGLE",
                     f("--speculative-num-steps"), str(d.speculative_tokens),
                     f("--speculative-eagle-topk"), "1",
                     f("--speculative-num-draft-tokens"), str(d.speculative_tokens + 1)]
            notes.append(MTP_NOTE)
        argv += [f("--context-length"), str(spec.max_model_len),
                 f("--mem-fraction-static"),
                 f"{self._share(spec):g}",
                 f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=servers,
                             gpus_per_server=d.total_gpus // servers, notes=tuple(notes))


register(SGLang(**load_facts("sglang")))
