"""Hugging Face Text Generation Inference: tensor-parallel shards behind a Rust router.

No TGI measurement is in the data: its overheads are vLLM's on the same GPU (assumed), its
facts read from TGI's documentation (``energylens/data/runtimes/tgi.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass

from energylens.runtime.launch import PORT, TORCH_DTYPES, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: ``--quantize`` of a checkpoint whose weights are in this dtype (TGI reads AWQ/GPTQ
#: checkpoints' own format; ``fp8`` also quantises a 16-bit checkpoint at load).
QUANTIZE = {"int4": "awq", "fp8": "fp8"}
#: ``--kv-cache-dtype`` of an FP8 cache.
FP8_KV = "fp8_e4m3fn"
#: What a replica spanning hosts needs: TGI shards one host's GPUs only.
MULTI_NODE = ("TGI shards a model over one host's GPUs (--num-shard): choose a layout whose "
              "replicas fit one node")


@dataclass(frozen=True, kw_only=True, eq=False)
class TGI(RuntimeProfile):
    """``text-generation-launcher``: one launcher (router and shards) per replica."""

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``text-generation-launcher --model-id MODEL --num-shard TP ...``."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), f("--model-id"), spec.model_id,
                f("--num-shard"), str(d.tp)]
        notes: list[str] = []
        if spec.weight_dtype in TORCH_DTYPES and spec.weight_dtype != spec.checkpoint_dtype:
            argv += [f("--dtype"), TORCH_DTYPES[spec.weight_dtype]]
        if spec.weight_dtype in QUANTIZE:
            argv += [f("--quantize"), QUANTIZE[spec.weight_dtype]]
            if spec.quantize and spec.weight_dtype == "int4":
                notes.append(f"needs an AWQ (or GPTQ: --quantize gptq) checkpoint of "
                             f"{spec.model_id}")
        if d.kv_dtype == "fp8":
            argv += [f("--kv-cache-dtype"), FP8_KV]
        if spec.max_num_seqs is not None:
            argv += [f("--max-batch-size"), str(spec.max_num_seqs)]
        prompt = spec.max_prompt_len or spec.max_model_len - 1
        argv += [f("--max-input-tokens"), str(min(prompt, spec.max_model_len - 1)),
                 f("--max-total-tokens"), str(spec.max_model_len)]
        if d.prefill_chunk_tokens is not None:
            argv += [f("--max-batch-prefill-tokens"), str(d.prefill_chunk_tokens)]
        argv += [f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas,
                             gpus_per_server=d.gpus_per_replica, notes=tuple(notes),
                             multi_node=MULTI_NODE)


register(TGI(**load_facts("tgi")))
