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
                 f"{self._share(spec):g}",
                 f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=servers,
                             gpus_per_server=d.total_gpus // servers, notes=tuple(notes))


register(SGLang(**load_facts("sglang")))
