"""LMDeploy with its TurboMind engine: tensor parallelism only, no FP8 KV cache."""

from __future__ import annotations

from dataclasses import dataclass

from energylens.runtime.launch import PORT, TORCH_DTYPES, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

#: ``--model-format`` of a checkpoint whose weights are in this dtype.
MODEL_FORMATS = {"int4": "awq", "fp8": "fp8"}
#: ``--cache-max-entry-count`` (KV share of the memory left after weights; its default).
CACHE_SHARE = 0.8
#: What a replica spanning hosts needs: no TurboMind flag among those the profile documents
#: (its multi-node serving is the PyTorch engine's, not modelled).
MULTI_NODE = ("no multi-node option of the TurboMind server is among the flags energylens "
              "writes: choose a layout whose replicas fit one node")


@dataclass(frozen=True, kw_only=True, eq=False)
class LMDeploy(RuntimeProfile):
    """``lmdeploy serve api_server``: one server per replica."""

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``lmdeploy serve api_server MODEL --backend turbomind --tp ...``."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), spec.model_id, f("--backend"), "turbomind",
                f("--tp"), str(d.tp)]
        notes: list[str] = []
        if spec.weight_dtype in TORCH_DTYPES and spec.weight_dtype != spec.checkpoint_dtype:
            argv += [f("--dtype"), TORCH_DTYPES[spec.weight_dtype]]
        if spec.weight_dtype in MODEL_FORMATS:
            argv += [f("--model-format"), MODEL_FORMATS[spec.weight_dtype]]
            if spec.quantize:
                notes.append(f"needs a {spec.weight_dtype} checkpoint of {spec.model_id} "
                             "(lmdeploy lite auto_awq writes an int4 one)")
        if spec.max_num_seqs is not None:
            argv += [f("--max-batch-size"), str(spec.max_num_seqs)]
        if d.prefill_chunk_tokens is not None:  # TurboMind's prompt tokens per pass
            argv += [f("--max-prefill-token-num"), str(d.prefill_chunk_tokens)]
        argv += [f("--session-len"), str(spec.max_model_len),
                 f("--cache-max-entry-count"), f"{CACHE_SHARE:g}",
                 f("--server-port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas,
                             gpus_per_server=d.gpus_per_replica, notes=tuple(notes),
                             multi_node=MULTI_NODE)


register(LMDeploy(**load_facts("lmdeploy")))
