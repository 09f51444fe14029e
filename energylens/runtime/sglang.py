"""SGLang: a vLLM-like Python scheduler with radix-cache KV pages (no fitted constants of
its own: see ``energylens/data/runtimes/sglang.yaml`` for what is assumed)."""

from __future__ import annotations

from dataclasses import dataclass

from energylens.hardware import GPU
from energylens.runtime.launch import MTP_NOTE, PORT, TORCH_DTYPES, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: SGLang ``--quantization`` methods by the dtype a 16-bit checkpoint is quantised to online.
ONLINE = {"fp8": "fp8"}
#: ``--chunked-prefill-size`` when not given, by the GPU's memory: (below this many bytes,
#: tokens), else :data:`CHUNK_LARGEST`. Source: SGLang ``ServerArgs``
#: ``_handle_gpu_memory_settings`` (python/sglang/srt/server_args.py, 0.4.9-0.5.x; recalled,
#: not re-read here): T4/4080 and A10/4090 2,048, A100-40GB/L40 4,096, H100/A100-80GB and
#: H20/H200 8,192, B200/MI300 16,384 (its GiB thresholds 20, 35, 60, 90, 160 of the memory
#: the device reports).
CHUNK_BY_MEMORY = ((35 * 2**30, 2048), (60 * 2**30, 4096), (160 * 2**30, 8192))
CHUNK_LARGEST = 16384


@dataclass(frozen=True, kw_only=True, eq=False)
class SGLang(RuntimeProfile):
    """``python -m sglang.launch_server``: one server for every replica (``--dp-size``)."""

    def prefill_chunk_on(self, *, gpu: GPU) -> int:
        """SGLang's default ``--chunked-prefill-size`` on ``gpu`` (:data:`CHUNK_BY_MEMORY`)."""
        for below, tokens in CHUNK_BY_MEMORY:
            if gpu.hbm_capacity_bytes < below:
                return tokens
        return CHUNK_LARGEST

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``python -m sglang.launch_server --model-path MODEL --tp-size ...``; data-parallel
        attention is ``--dp-size N --enable-dp-attention`` with ``--tp-size`` all the
        replica's GPUs, one server per replica."""
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
        if d.speculative_tokens:  # SGLang runs an MTP module as its EAGLE draft
            argv += [f("--speculative-algorithm"), "EAGLE",
                     f("--speculative-num-steps"), str(d.speculative_tokens),
                     f("--speculative-eagle-topk"), "1",
                     f("--speculative-num-draft-tokens"), str(d.speculative_tokens + 1)]
            notes.append(MTP_NOTE)
        argv += [f("--context-length"), str(spec.max_model_len),
                 f("--mem-fraction-static"),
                 f"{spec.memory_share or self.memory_utilization:g}",
                 f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=servers,
                             gpus_per_server=d.total_gpus // servers, notes=tuple(notes))


register(SGLang(**load_facts("sglang")))
