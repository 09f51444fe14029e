"""TensorRT-LLM (PyTorch backend, ``trtllm-serve``): NVIDIA's engine; its kernel
efficiencies are fitted on AIConfigurator's kernel tables and its overheads on
LLM-Inference-Bench (``energylens.calibration.fit_runtime``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from energylens.errors import ConfigError
from energylens.runtime.launch import MTP_NOTE, PORT, LaunchCommand, LaunchSpec, mtp_family
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.model.config import ModelConfig

#: The LLM-API options file ``--extra_llm_api_options`` points to (KV-cache dtype, data-
#: parallel attention, chunked prefill, MTP: fields of the LLM API's ``LlmArgs``, 1.0).
EXTRA_OPTIONS = "extra_llm_api_options.yaml"
#: What a server spanning hosts needs: its ranks started by MPI on every host (recalled from
#: TensorRT-LLM's trtllm-serve docs: ``mpirun`` or ``srun`` with ``trtllm-llmapi-launch``).
MULTI_NODE = ("TensorRT-LLM starts a server's ranks on every node through MPI: prefix the "
              "command with `mpirun -H NODE0:GPUS,NODE1:GPUS... -n RANKS trtllm-llmapi-launch` "
              "(or srun under Slurm) and run it once, from the first node")


@dataclass(frozen=True, kw_only=True, eq=False)
class TensorRTLLM(RuntimeProfile):
    """``trtllm-serve``: one server per replica (it has no data-parallel option)."""

    def check(self, *, deployment: Deployment, model: ModelConfig,
              gpu_vendor: str | None = None) -> None:
        """The base checks; and attention DP is one attention rank per GPU here
        (``enable_attention_dp`` over the ``tp_size`` ranks: no attention TP within one)."""
        super().check(deployment=deployment, model=model, gpu_vendor=gpu_vendor)
        if deployment.attention_dp > 1 and deployment.tp > 1:
            raise ConfigError(f"{self.release_name(version=deployment.runtime_version)} runs "
                              "data-parallel attention "
                              f"one GPU per attention rank (tp = {deployment.tp} with "
                              f"attention_dp = {deployment.attention_dp})")

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``trtllm-serve MODEL --backend pytorch --tp_size ...``; data-parallel attention
        is ``enable_attention_dp`` in the options file, ``--tp_size`` then every rank. The
        prompt-token budget is ``--max_num_tokens`` (the deployment's, else the profile's),
        and a prompt longer than it runs in chunks (``enable_chunked_prefill``, off by
        default in the LLM API, trtllm.yaml's prefill_chunk_tokens source; the field name
        recalled from llm_args.py): the prediction chunks such prompts."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), spec.model_id, f("--backend"), "pytorch",
                f("--tp_size"), str(d.attention_tp * d.attention_dp), f("--pp_size"), str(d.pp)]
        if d.ep > 1:
            argv += [f("--ep_size"), str(d.ep)]
        notes: list[str] = []
        if spec.quantize:  # TensorRT-LLM reads quantisation from a ModelOpt checkpoint
            notes.append(f"needs a {spec.weight_dtype} (ModelOpt) checkpoint of {spec.model_id}")
        budget = d.prefill_chunk_tokens or self.prefill_chunk_tokens
        options = ""
        if d.attention_dp > 1:
            options += "enable_attention_dp: true\n"
        if (spec.max_prompt_len or spec.max_model_len) > budget:
            options += "enable_chunked_prefill: true\n"
        if d.kv_dtype == "fp8":
            options += "kv_cache_config:\n  dtype: fp8\n"
        if d.speculative_tokens:
            if mtp_family(spec.model_id) != "deepseek":
                raise ConfigError(
                    f"{spec.model_id} ships no multi-token-prediction module that "
                    f"{self.release_name(version=d.runtime_version)} drafts from "
                    "(decoding_type MTP: "
                    "DeepSeek-V3/R1); an EAGLE head is a draft model of its own, which "
                    "energylens does not name")
            options += ("speculative_config:\n  decoding_type: MTP\n"
                        f"  num_nextn_predict_layers: {d.speculative_tokens}\n")
            notes.append(MTP_NOTE)
        files: tuple[tuple[str, str], ...] = ()
        if options:
            files = ((EXTRA_OPTIONS, options),)
            argv += [f("--extra_llm_api_options"), EXTRA_OPTIONS]
        if spec.max_num_seqs is not None:  # per attention rank
            argv += [f("--max_batch_size"), str(spec.max_num_seqs)]
        argv += [f("--max_seq_len"), str(spec.max_model_len),
                 f("--max_num_tokens"), str(budget),
                 f("--kv_cache_free_gpu_memory_fraction"), f"{self.memory_utilization:g}",
                 f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas,
                             gpus_per_server=d.gpus_per_replica, files=files,
                             notes=tuple(notes), multi_node=MULTI_NODE)


register(TensorRTLLM(**load_facts("trtllm")))
