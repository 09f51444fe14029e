"""TensorRT-LLM (PyTorch backend, ``trtllm-serve``): NVIDIA's engine; its kernel
efficiencies are fitted on AIConfigurator's kernel tables and its overheads on
LLM-Inference-Bench (``energylens.calibration.fit_runtime``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from energylens.errors import ConfigError
from energylens.runtime.launch import MTP_NOTE, PORT, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.model.config import ModelConfig

#: The LLM-API options file ``--extra_llm_api_options`` points to (KV-cache dtype).
EXTRA_OPTIONS = "extra_llm_api_options.yaml"


@dataclass(frozen=True, kw_only=True, eq=False)
class TensorRTLLM(RuntimeProfile):
    """``trtllm-serve``: one server per replica (it has no data-parallel option)."""

    def check(self, *, deployment: Deployment, model: ModelConfig,
              gpu_vendor: str | None = None) -> None:
        """The base checks; and attention DP is one attention rank per GPU here
        (``enable_attention_dp`` over the ``tp_size`` ranks: no attention TP within one)."""
        super().check(deployment=deployment, model=model, gpu_vendor=gpu_vendor)
        if deployment.attention_dp > 1 and deployment.tp > 1:
            raise ConfigError(f"{self.display_name} {self.version} runs data-parallel attention "
                              f"one GPU per attention rank (tp = {deployment.tp} with "
                              f"attention_dp = {deployment.attention_dp})")

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``trtllm-serve MODEL --backend pytorch --tp_size ...``; data-parallel attention
        is ``enable_attention_dp`` in the options file, ``--tp_size`` then every rank."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), spec.model_id, f("--backend"), "pytorch",
                f("--tp_size"), str(d.attention_tp * d.attention_dp), f("--pp_size"), str(d.pp)]
        if d.ep > 1:
            argv += [f("--ep_size"), str(d.ep)]
        notes: list[str] = []
        if spec.quantize:  # TensorRT-LLM reads quantisation from a ModelOpt checkpoint
            notes.append(f"needs a {spec.weight_dtype} (ModelOpt) checkpoint of {spec.model_id}")
        options = ""
        if d.attention_dp > 1:
            options += "enable_attention_dp: true\n"
        if d.kv_dtype == "fp8":
            options += "kv_cache_config:\n  dtype: fp8\n"
        if d.speculative_tokens:
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
                 f("--max_num_tokens"), str(self.prefill_chunk_tokens),
                 f("--kv_cache_free_gpu_memory_fraction"), f"{self.memory_utilization:g}",
                 f("--port"), str(PORT)]
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas,
                             gpus_per_server=d.gpus_per_replica, files=files,
                             notes=tuple(notes))


register(TensorRTLLM(**load_facts("trtllm")))
