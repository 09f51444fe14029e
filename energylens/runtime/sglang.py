"""SGLang: a vLLM-like Python scheduler with radix-cache KV pages (no fitted constants of
its own: see ``energylens/data/runtimes/sglang.yaml`` for what is assumed)."""

from __future__ import annotations

from dataclasses import dataclass

from energylens.runtime.launch import MTP_NOTE, PORT, TORCH_DTYPES, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: SGLang ``--quantization`` methods by the dtype a 16-bit checkpoint is quantised to online.
ONLINE = {"fp8": "fp8"}


@dataclass(frozen=True, kw_only=True, eq=False)
class SGLang(RuntimeProfile):
    """``python -m sglang.launch_server``: one server for every replica (``--dp-size``)."""

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
