"""vLLM: the runtime every shipped serving constant was fitted on (ML.ENERGY, vLLM 0.11).

Its expert-parallel layout (``tensor-parallel-attention``) and custom all-reduce are the
base class's; what is its own is the launch command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from energylens.errors import ConfigError
from energylens.runtime.launch import (
    MTP_NOTE,
    PORT,
    TORCH_DTYPES,
    LaunchCommand,
    LaunchSpec,
    mtp_family,
)
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.hardware import GPU
    from energylens.model.config import ModelConfig


#: ``vllm serve`` scheduler defaults (V1 engine, OpenAI server): on GPUs with >= 70 GiB
#: other than the A100, ``--max-num-batched-tokens`` 8,192 and ``--max-num-seqs`` 1,024;
#: otherwise 2,048 and 256; the offline ``LLM`` class's token budget is 16,384 on those
#: GPUs (the profile's ``prefill_chunk_tokens``), else 8,192. Source: vLLM's ``EngineArgs``
#: batch defaults by usage context (vllm/engine/arg_utils.py), read in the 0.11.0, 0.14.0
#: and 0.19.0 sdists on PyPI (the same values in all three): kind datasheet (engine code).
SERVE_LARGE = (8192, 1024)
SERVE_SMALL = (2048, 256)
OFFLINE_SMALL_TOKENS = 8192
LARGE_GPU_BYTES = 70 * 2**30


def _large(gpu: GPU) -> bool:
    """Whether vLLM takes ``gpu`` for a large one (>= 70 GiB, not an A100)."""
    return gpu.hbm_capacity_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower()


@dataclass(frozen=True, kw_only=True, eq=False)
class VLLM(RuntimeProfile):
    """``vllm serve``: one server for every replica (``--data-parallel-size``)."""

    #: vLLM V1 pads each DP rank's batch to the largest rank's token count before the
    #: forward pass (``GPUModelRunner`` DP padding, ``num_tokens_across_dp``, 0.11), and a
    #: rank without requests runs a dummy batch: datasheet (the engine's code).
    pads_attention_ranks = True

    def server_limits_on(self, *, gpu: GPU) -> tuple[int, int]:
        """``vllm serve``'s defaults on ``gpu`` (:data:`SERVE_LARGE`, :data:`SERVE_SMALL`)."""
        return SERVE_LARGE if _large(gpu) else SERVE_SMALL

    def prefill_chunk_on(self, *, gpu: GPU) -> int:
        """The offline ``LLM`` class's token budget on ``gpu``: ``prefill_chunk_tokens`` on
        a large GPU, :data:`OFFLINE_SMALL_TOKENS` on another."""
        return self.prefill_chunk_tokens if _large(gpu) else OFFLINE_SMALL_TOKENS

    def check(self, *, deployment: Deployment, model: ModelConfig,
              gpu_vendor: str | None = None) -> None:
        """The base checks; and expert parallelism spreads whole experts over every
        tensor- and data-parallel rank (``--enable-expert-parallel``: the EP size is TP x
        DP, vLLM's expert-parallel documentation), so ``ep`` is 1 or all of those ranks:
        a part of them, each expert split over the rest, is a layout it has no flag for.
        Under data-parallel attention with ``ep`` = 1 each expert is split over all DP x TP
        ranks ("the expert layers will by default form a (DP x TP) sized tensor parallel
        group": docs/serving/data_parallel_deployment.md of the 0.11.0 sdist), a layout it
        runs though its profile has no ``moe_tp`` (an explicit split of each expert)."""
        ranks = deployment.attention_tp * deployment.attention_dp
        checked = deployment
        if deployment.attention_dp > 1 and deployment.ep == 1:  # experts over every rank
            checked = replace(deployment, ep=ranks, moe_tp=None)
        super().check(deployment=checked, model=model, gpu_vendor=gpu_vendor)
        if 1 < deployment.ep != ranks:
            raise ConfigError(
                f"{self.release_name(version=deployment.runtime_version)} spreads whole "
                f"experts over all {ranks} "
                f"tensor x data-parallel ranks (--enable-expert-parallel: ep = {ranks}); ep = "
                f"{deployment.ep} with each expert split {deployment.expert_tp} ways is a layout "
                "it cannot run (SGLang and TensorRT-LLM can)")

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``vllm serve MODEL --tensor-parallel-size ... --max-num-seqs ...``; data-parallel
        attention is ``--data-parallel-size`` (with ``--enable-expert-parallel`` where ``ep``
        > 1), one server per replica (``--max-num-seqs`` is per data-parallel rank).
        Replicas of a dense model are the ``--data-parallel-size`` of one server where they
        fit one host; of an MoE model, or over several hosts, one server each: vLLM runs an
        MoE model's data-parallel ranks in lockstep with its experts over all of them
        (docs/serving/data_parallel_deployment.md, 0.11.0), not as independent replicas."""
        d, f = spec.deployment, self.flag
        argv = [*self.launch_program.split(), spec.model_id,
                f("--tensor-parallel-size"), str(d.attention_tp)]
        if d.pp > 1:
            argv += [f("--pipeline-parallel-size"), str(d.pp)]
        if d.ep > 1:
            argv.append(f("--enable-expert-parallel"))
        servers = d.replicas
        if d.attention_dp > 1:
            argv += [f("--data-parallel-size"), str(d.attention_dp)]
        elif d.replicas > 1 and not spec.moe and (spec.host_gpus is None
                                                  or d.total_gpus <= spec.host_gpus):
            argv += [f("--data-parallel-size"), str(d.replicas)]
            servers = 1
        notes: list[str] = []
        if spec.weight_dtype in TORCH_DTYPES and spec.weight_dtype != spec.checkpoint_dtype:
            argv += [f("--dtype"), TORCH_DTYPES[spec.weight_dtype]]
        elif spec.quantize and spec.weight_dtype == "fp8":
            argv += [f("--quantization"), "fp8"]  # online dynamic FP8 of a 16-bit checkpoint
        elif spec.quantize:
            notes.append(f"needs a {spec.weight_dtype} checkpoint of {spec.model_id} "
                         "(vLLM reads its quantization from the checkpoint)")
        if d.kv_dtype == "fp8":
            argv += [f("--kv-cache-dtype"), "fp8"]
        if spec.max_num_seqs is not None:
            argv += [f("--max-num-seqs"), str(spec.max_num_seqs)]
        if d.prefill_chunk_tokens is not None:
            if spec.max_num_seqs is not None and d.prefill_chunk_tokens < spec.max_num_seqs:
                raise ConfigError(  # SchedulerConfig's check (vllm/config/scheduler.py, 0.11.0)
                    f"{self.release_name(version=d.runtime_version)} refuses "
                    "--max-num-batched-tokens "
                    f"{d.prefill_chunk_tokens} below --max-num-seqs {spec.max_num_seqs}")
            argv += [f("--max-num-batched-tokens"), str(d.prefill_chunk_tokens)]
        if d.speculative_tokens:
            if mtp_family(spec.model_id) is None:
                raise ConfigError(
                    f"{spec.model_id} ships no multi-token-prediction module that "
                    f"{self.release_name(version=d.runtime_version)} drafts from "
                    "(DeepSeek-V3/R1, "
                    "GLM-4.5/4.6, Qwen3-Next, MiMo); an EAGLE head is a draft model of its "
                    "own, which energylens does not name")
            # method mtp: the 0.11.0 name of every MTP drafter (deepseek_mtp and the others
            # are deprecated aliases of it: vllm/config/speculative.py)
            argv += [f("--speculative-config"), json.dumps(
                {"method": "mtp", "num_speculative_tokens": d.speculative_tokens})]
            notes.append(MTP_NOTE)
        argv += [f("--max-model-len"), str(spec.max_model_len),
                 f("--gpu-memory-utilization"),
                 f"{spec.memory_share or self.memory_utilization:g}",
                 f("--port"), str(PORT)]
        # a server over several hosts: its data-parallel ranks placed per host, or its
        # tensor/pipeline group over a Ray cluster (0.11.0 picks Ray's executor where a host
        # has fewer GPUs than the group: ParallelConfig, vllm/config/parallel.py; the DP
        # flags: docs/serving/data_parallel_deployment.md)
        multi_node = (
            "vLLM places data-parallel ranks per node: on each node `vllm serve` with "
            "--data-parallel-size-local (its ranks), --data-parallel-address HEAD and "
            "--data-parallel-rpc-port, the other nodes also --headless and "
            "--data-parallel-start-rank; add them (not among the flags energylens writes)"
            if d.attention_dp > 1 else
            "vLLM runs a tensor/pipeline group over a Ray cluster: `ray start --head` on the "
            "first node, `ray start --address=HEAD:6379` on the others, then this command on "
            "the first (it picks Ray where one node has too few GPUs)")
        return LaunchCommand(argv=tuple(argv), replicas=servers,
                             gpus_per_server=d.total_gpus // servers, notes=tuple(notes),
                             multi_node=multi_node)


register(VLLM(**load_facts("vllm")))
