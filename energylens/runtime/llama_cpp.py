"""llama.cpp (``llama-server``): GGUF weights, layer split (pipeline) or row split
(tensor) across GPUs but not both, no expert parallelism, no FP8."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from energylens.cost.gguf import GGUF_DTYPES
from energylens.errors import ConfigError
from energylens.runtime.launch import PORT, LaunchCommand, LaunchSpec
from energylens.runtime.profile import SERVER_MAX_SEQUENCES, RuntimeProfile, load_facts
from energylens.runtime.registry import register

if TYPE_CHECKING:
    from energylens.deployment import Deployment
    from energylens.hardware import GPU
    from energylens.model.config import ModelConfig

#: GGUF file type of each weight dtype (``convert_hf_to_gguf.py`` / ``llama-quantize``).
GGUF_TYPES = {"bf16": "BF16", "fp16": "F16", "mxfp4": "MXFP4",
              **{dtype: dtype.upper() for dtype in GGUF_DTYPES}}
#: ``--cache-type-k/-v`` of a KV dtype.
CACHE_TYPES = {"bf16": "bf16", "fp16": "f16", "q8_0": "q8_0", "q4_0": "q4_0"}
#: What a replica spanning hosts needs: llama.cpp reaches other hosts' GPUs only through its
#: RPC backend (tools/rpc/README.md, recalled), with no flag among those energylens writes.
MULTI_NODE = ("llama.cpp reaches another host's GPUs only through its RPC backend "
              "(`rpc-server` on each other node, `--rpc HOST:PORT,...` here), not among the "
              "flags energylens writes: choose a layout whose replicas fit one node")


@dataclass(frozen=True, kw_only=True, eq=False)
class LlamaCpp(RuntimeProfile):
    """``llama-server``: one server per replica, ``--parallel`` slots for the batch."""

    def check(self, *, deployment: Deployment, model: ModelConfig,
              gpu_vendor: str | None = None) -> None:
        """The base checks, and ``--split-mode`` is layer (pp) or row (tp), not both."""
        super().check(deployment=deployment, model=model, gpu_vendor=gpu_vendor)
        if deployment.tp > 1 and deployment.pp > 1:
            raise ConfigError(f"{self.display_name} splits a model by layer (pp) or by row (tp), "
                              f"not both (tp = {deployment.tp}, pp = {deployment.pp})")

    def running_cap_on(self, *, gpu: GPU, kv_tokens: int, context_tokens: int,
                       attention_dp: int = 1, pp: int = 1, speculative: bool = False) -> int:
        """llama-server's slots: each of the ``--parallel`` N holds ``--ctx-size`` / N tokens
        of cache of its own, the longest request, so a slot never waits for another's
        blocks and nothing is preempted; the slots the KV pool holds whole (as
        :meth:`launch` writes them), at least one, at most the server cap."""
        del gpu, attention_dp, pp, speculative
        return max(1, min(kv_tokens // max(context_tokens, 1), SERVER_MAX_SEQUENCES))

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``llama-server --model MODEL.gguf --n-gpu-layers 999 --parallel N ...``: ``N``
        slots, the running requests the prediction let one replica hold (its cap, else the
        server default it priced), each with ``--ctx-size`` / N tokens of cache, the
        longest request; ``--batch-size`` and ``--ubatch-size`` the priced prompt tokens per
        forward pass (llama.cpp runs min(n_batch, n_ubatch) per pass: common/arg.cpp and
        tools/server/README.md, b6700, recalled)."""
        d, f = spec.deployment, self.flag
        from_file = spec.model_id.lower().endswith(".gguf")  # the model was read from it
        given = from_file and spec.weight_dtype == spec.checkpoint_dtype
        stem = PurePath(spec.model_id).stem if from_file else spec.model_id.rsplit("/", 1)[-1]
        # a type to write where the file is not served as given (never dtype gguf, the
        # file's own tensors: a deployment of it always has the file)
        file_type = "" if given else GGUF_TYPES[spec.weight_dtype]
        gguf = spec.model_id if given else f"{stem}-{file_type}.gguf"
        argv = [*self.launch_program.split(), f("--model"), gguf, f("--n-gpu-layers"), "999"]
        if d.gpus_per_replica > 1:
            argv += [f("--split-mode"), "row" if d.tp > 1 else "layer"]
        if d.kv_dtype is not None:
            argv += [f("--cache-type-k"), CACHE_TYPES[d.kv_dtype],
                     f("--cache-type-v"), CACHE_TYPES[d.kv_dtype]]
        notes: list[str] = []
        slots = spec.max_num_seqs or spec.server_running_cap or SERVER_MAX_SEQUENCES
        pool = spec.kv_pool_tokens
        if pool is not None and slots * spec.max_model_len > pool:
            fit = max(1, pool // spec.max_model_len)
            notes.append(f"{fit} slots, not the {slots} the prediction let run: llama-server "
                         f"gives each slot --ctx-size / --parallel tokens, and {slots} slots of "
                         f"the longest request ({spec.max_model_len} tokens) exceed the "
                         f"{pool}-token cache the memory holds (the prediction shares one pool)")
            slots = fit
        chunk = d.prefill_chunk_tokens or self.prefill_chunk_tokens
        argv += [f("--parallel"), str(slots),
                 f("--ctx-size"), str(slots * spec.max_model_len),
                 f("--batch-size"), str(chunk), f("--ubatch-size"), str(chunk),
                 f("--flash-attn"), "on", f("--port"), str(PORT)]
        if from_file and not given:
            notes.insert(0, f"{gguf}: llama-quantize {spec.model_id} to {file_type} (best "
                         "from the 16-bit GGUF: requantising a quantised file loses accuracy)")
        elif not from_file:
            notes.insert(0, f"{gguf}: convert {spec.model_id} with convert_hf_to_gguf.py"
                         + (f" and llama-quantize to {file_type}"
                            if spec.weight_dtype not in ("bf16", "fp16") else ""))
        return LaunchCommand(argv=tuple(argv), replicas=d.replicas,
                             gpus_per_server=d.gpus_per_replica, notes=tuple(notes),
                             multi_node=MULTI_NODE)


register(LlamaCpp(**load_facts("llama.cpp")))
