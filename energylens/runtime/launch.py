"""The command that starts a deployment on its serving engine (``predict --launch-command``,
``study report``'s ``launch_command`` column and ``launch/<point>.sh``).

Each runtime module builds its engine's command from a :class:`LaunchSpec` using only the
flags its facts file documents (``launch_flags``, with the doc they were read from), so a
generated command parses with the engine version the profile describes.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from energylens.runtime.registry import get_runtime

if TYPE_CHECKING:  # runtime modules import this one while energylens.deployment imports them
    from energylens.cost.memory import MemoryUse
    from energylens.deployment import Deployment
    from energylens.hardware import GPU
    from energylens.model.config import ModelConfig
    from energylens.runtime.profile import RuntimeProfile
    from energylens.workloads.workload import Workload

#: First port of the servers a script starts (replica i listens on PORT + i).
PORT = 8000
#: What a command with speculative decoding assumes of the checkpoint (every engine's
#: flags here run the model's own multi-token-prediction module as the draft head).
MTP_NOTE = ("drafts from the checkpoint's multi-token-prediction module (DeepSeek-V3/R1 "
            "style); a model without one needs an EAGLE draft head")
#: Torch dtype names the engines' ``--dtype`` flags take.
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
#: Checkpoints that ship a multi-token-prediction module, by the lower-cased prefix of their
#: Hugging Face repo id, and the family an engine's MTP drafting knows them by. Source: the
#: architectures vLLM 0.11.0 drafts from with ``--speculative-config`` method ``mtp``
#: (``SpeculativeConfig.hf_config_override``, vllm/config/speculative.py of the 0.11.0
#: sdist: deepseek_v3/v32, Glm4MoeForCausalLM, qwen3_next, MiMoForCausalLM); which
#: checkpoints carry the module: models.yaml's notes (DeepSeek-V3's 14B MTP module,
#: GLM-4.5-Air's MTP layer) and the model cards (GLM-4.6, Qwen3-Next, MiMo-7B: recalled). A
#: distilled checkpoint (``-Distill-``) has none.
MTP_CHECKPOINTS = {"deepseek-ai/deepseek-v3": "deepseek", "deepseek-ai/deepseek-r1": "deepseek",
                   "zai-org/glm-4.5": "glm4_moe", "zai-org/glm-4.6": "glm4_moe",
                   "qwen/qwen3-next": "qwen3_next", "xiaomimimo/mimo": "mimo"}
#: The variable that restricts a server to some devices of its host, by GPU vendor. Source:
#: vLLM 0.11.0's platforms (vllm/platforms/rocm.py copies HIP_VISIBLE_DEVICES to
#: CUDA_VISIBLE_DEVICES; vllm/platforms/xpu.py's device_control_env_var ZE_AFFINITY_MASK)
#: and Intel Gaudi's docs (HABANA_VISIBLE_MODULES, module ids; recalled); CUDA's otherwise.
DEVICE_ENV = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES",
              "intel": "ZE_AFFINITY_MASK", "habana": "HABANA_VISIBLE_MODULES"}
#: GPUs one host (one operating system) holds where the GPU file's ``gpus_per_node`` is a
#: scale-up domain of several hosts: a GB200/GB300 NVL72 compute tray holds 4 of the 72
#: GPUs (energylens/data/gpus/gb200.yaml's header; recalled).
HOST_GPUS = {"GB200": 4, "GB300": 4}
#: Prompt-token budget flag of each engine (where the deployment's ``prefill_chunk_tokens``
#: goes), for the note on a command that does not write it.
CHUNK_FLAGS = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size",
               "trtllm": "--max_num_tokens", "llama.cpp": "--ubatch-size",
               "lmdeploy": "--max-prefill-token-num"}
#: What a server spanning several hosts needs beyond its command, for an engine whose
#: module does not say (``LaunchCommand.multi_node``). SGLang: --nnodes, --node-rank and
#: --dist-init-addr (python/sglang/srt/server_args.py of the 0.5.3 sdist), not among the
#: flags its profile documents.
MULTI_NODE = {
    "sglang": ("SGLang spans nodes with --nnodes N --node-rank R --dist-init-addr HEAD:PORT "
               "on every node (the same command, R = 0..N-1); add them: they are not among "
               "the flags energylens writes"),
}
#: The same where neither the module nor :data:`MULTI_NODE` says.
MULTI_NODE_UNKNOWN = ("this engine's multi-node arguments are not among the flags energylens "
                      "writes: add them, or choose a layout whose servers fit one node")


def mtp_family(model_id: str) -> str | None:
    """The :data:`MTP_CHECKPOINTS` family of checkpoint ``model_id``, or None where it ships
    no multi-token-prediction module that energylens knows of."""
    key = model_id.lower()
    if "distill" in key:
        return None
    return next((family for prefix, family in MTP_CHECKPOINTS.items()
                 if key.startswith(prefix)), None)


def host_gpus(gpu: GPU) -> int:
    """GPUs of one host of ``gpu`` (:data:`HOST_GPUS`, else its ``gpus_per_node``)."""
    return HOST_GPUS.get(gpu.name, gpu.gpus_per_node)


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """What a launch command needs: the checkpoint and the deployment, resolved."""

    model_id: str  # Hugging Face repo id (or path) of the checkpoint
    checkpoint_dtype: str  # the checkpoint's weight dtype
    deployment: Deployment
    weight_dtype: str  # the dtype the weights run in
    max_num_seqs: int | None  # sequences one scheduler runs at once (a replica's attention
    # rank); None: the engine's own default (an open loop of the load kind)
    max_model_len: int  # prompt + output tokens of one sequence
    #: the memory share to set where the runtime's default cannot hold the weights at
    #: start-up (None: the default), and that default on the GPU
    memory_share: float | None = None
    default_memory_share: float | None = None
    moe: bool = False  # the model has experts (an MoE layer)
    #: prompt and output tokens of every request where they are all alike (None: they vary)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    max_prompt_len: int | None = None  # the longest prompt (None: max_model_len)
    #: on the priced GPU (None: no GPU given): GPUs of one host; the running requests one
    #: scheduler admits by default (the prediction's cap where ``max_num_seqs`` is None);
    #: tokens one replica's KV pool (all its attention ranks') holds as priced at start-up
    host_gpus: int | None = None
    server_running_cap: int | None = None
    kv_pool_tokens: int | None = None

    @property
    def quantize(self) -> bool:
        """Weights run in another dtype than the checkpoint's (fp16/bf16 casts aside)."""
        return self.weight_dtype != self.checkpoint_dtype and not (
            self.weight_dtype in TORCH_DTYPES and self.checkpoint_dtype in TORCH_DTYPES)


@dataclass(frozen=True, kw_only=True)
class LaunchCommand:
    """One server's command line; ``replicas`` servers when the engine has no data-parallel
    option of its own; ``files`` (name, text) written before it starts; ``notes`` say what
    the command needs that it cannot give (a pre-quantised checkpoint). ``device_env``
    restricts a server to its devices; ``host_gpus`` (None: unknown, every server on one
    host) places the servers on hosts; ``multi_node`` says what a server spanning hosts
    needs beyond the command."""

    argv: tuple[str, ...]
    replicas: int = 1
    gpus_per_server: int = 1
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    device_env: str = DEVICE_ENV["nvidia"]
    host_gpus: int | None = None
    multi_node: str = ""

    def line(self) -> str:
        """The command as one shell line (one server)."""
        return shlex.join(self.argv)

    def script(self) -> str:
        """A bash script that writes the files and starts every server: on one host, or,
        where the servers need several, on the host it runs on (``NODE``, its number)."""
        lines = ["#!/usr/bin/env bash", "# written by energylens", "set -euo pipefail"]
        lines += [f"# {note}" for note in self.notes]
        for name, text in self.files:
            lines += [f"cat > {shlex.quote(name)} <<'EOF'", text.rstrip("\n"), "EOF"]
        size, host = self.gpus_per_server, self.host_gpus
        spans = host is not None and size > host  # one server over several hosts
        if spans:
            assert host is not None
            lines.append(f"# each server spans {-(-size // host)} nodes of {host} GPUs "
                         f"({size} GPUs): {self.multi_node or MULTI_NODE_UNKNOWN}")
        if self.replicas == 1:
            if spans:
                lines.append("# run on the server's first node (the others join it as above)")
            lines.append(self.line())
            return "\n".join(lines) + "\n"
        # replica i listens on PORT + i
        words = [shlex.quote(word) for word in self.argv]
        words = [f"$(({PORT} + i))" if word == str(PORT) and "port" in words[n - 1] else word
                 for n, word in enumerate(words)]
        command = " ".join(words)
        servers = f"{self.replicas} independent servers of {size} GPU(s) each" + (
            f", ports {PORT}..{PORT + self.replicas - 1}" if f"$(({PORT} + i))" in words else "")
        if host is None or self.replicas * size <= host:  # one host
            return "\n".join([*lines, f"# {servers}", f"for i in $(seq 0 {self.replicas - 1}); do",
                              *self._on_devices(command, first=f"$((i * {size}))"),
                              "done", "wait"]) + "\n"
        if spans:  # replica i from node i * nodes on
            nodes = -(-size // host)
            where, last = f"$((i * {nodes}))", self.replicas * nodes - 1
            lines.append(f"# {servers}: server i on nodes {nodes} x i..{nodes} x i + "
                         f"{nodes - 1}, started on the first")
            start = [f"  {command} &"]
        else:  # whole servers per node
            per_node = host // size
            where, last = f"$((i / {per_node}))", -(-self.replicas // per_node) - 1
            idle = host - per_node * size
            lines.append(f"# {servers}: {per_node} per node of {host} GPUs, server i on node "
                         + (f"i / {per_node}" if per_node > 1 else "i")
                         + (f" ({idle} GPU(s) of each node idle: {size} does not divide "
                            f"{host})" if idle else ""))
            start = self._on_devices(command, first=f"$(((i % {per_node}) * {size}))")
        lines += [f"# {last + 1} nodes: run this script on each with NODE=0..{last}",
                  f'NODE="${{NODE:?set NODE to the number of this node, 0..{last}}}"',
                  f"for i in $(seq 0 {self.replicas - 1}); do",
                  f'  [ {where} -eq "$NODE" ] || continue', *start, "done", "wait"]
        return "\n".join(lines) + "\n"

    def _on_devices(self, command: str, *, first: str) -> list[str]:
        """Loop-body lines starting ``command`` on ``gpus_per_server`` devices from
        ``first`` (a shell expression) on, by :attr:`device_env`."""
        return [f"  first={first}",
                f"  {self.device_env}=$(seq -s, $first $((first + {self.gpus_per_server - 1}))) "
                f"{command} &"]


def launch_spec(*, model: ModelConfig, deployment: Deployment, workload: Workload,
                gpu: GPU | None = None, defaults: frozenset[str] = frozenset()) -> LaunchSpec:
    """The launch inputs of ``deployment`` serving ``workload`` (checked by its runtime, on
    ``gpu`` where given: its vendor and the precisions it runs there); on ``gpu`` with the
    memory share the prediction priced. ``defaults``: the workload's fields nobody gave
    (``batch``: no running cap is written, the engine keeps its own, unless the deployment
    or a concurrency sets one)."""
    runtime = get_runtime(deployment.runtime)
    runtime.check_on(deployment=deployment, model=model, gpu=gpu)
    weight_dtype = deployment.weight_dtype or model.weight_dtype
    fixed = _fixed_lengths(workload)
    unset = "batch" in defaults and workload.concurrency is None \
        and deployment.max_num_seqs is None
    spec = LaunchSpec(
        model_id=model.hf_id or model.name, checkpoint_dtype=model.weight_dtype,
        deployment=deployment, weight_dtype=weight_dtype,
        max_num_seqs=None if unset else _running_cap(deployment=deployment, workload=workload),
        max_model_len=_longest_request(workload), moe=model.moe is not None,
        prompt_tokens=None if fixed is None else fixed[0],
        output_tokens=None if fixed is None else fixed[1],
        max_prompt_len=_longest_prompt(workload))
    if gpu is None:
        return spec
    use = start_up_memory(model=model, deployment=deployment, gpu=gpu)
    from energylens.cost.memory import engine_share

    share = engine_share(runtime=runtime, use=use)
    free = float(use.usable_bytes) - float(use.total_bytes - use.kv_cache_bytes)
    per_token = float(use.kv_cache_bytes)  # one sequence of one token
    pool = int(max(free, 0.0) // per_token) if per_token > 0 else None
    # the default cap as the load kind's rank_limits asks for it: per attention rank and
    # micro-batch's share of the pool (2**40 tokens: no attention cache, as kv_pool_tokens)
    ranks = deployment.pp * deployment.attention_dp
    cap = runtime.running_cap_on(gpu=gpu, kv_tokens=(2**40 if pool is None else pool // ranks),
                                 context_tokens=spec.max_model_len,
                                 attention_dp=deployment.attention_dp, pp=deployment.pp,
                                 speculative=deployment.speculation is not None)
    running = spec.max_num_seqs
    if workload.kind == "load" and deployment.max_num_seqs is None and running is not None:
        running = min(running, cap)  # clients past the engine's own cap wait, as simulated
    return replace(spec, memory_share=None if share == use.default_share else share,
                   default_memory_share=use.default_share, host_gpus=host_gpus(gpu),
                   server_running_cap=cap, kv_pool_tokens=pool, max_num_seqs=running)


def start_up_memory(*, model: ModelConfig, deployment: Deployment, gpu: GPU) -> MemoryUse:
    """Memory of one GPU of ``deployment`` on ``gpu`` as its engine starts: the weights of
    the model as the prediction shards it (``RuntimeProfile.sharded_model``: padded heads
    or expert slots, so every layout ``predict`` accepts builds), the start-up pass's
    activations and reserve, and one sequence of one token (its cache bytes per token);
    ``usable_bytes`` and ``default_share`` as ``cost.memory.memory_use`` priced them."""
    from energylens.cost.memory import memory_use, startup_tokens
    from energylens.model.families import build_graph

    runtime = get_runtime(deployment.runtime)
    sharded = runtime.sharded_model(model=model, attention_tp=deployment.attention_tp,
                                    ep=deployment.ep)
    kv_dtype = deployment.kv_dtype or runtime.auto_kv(model=sharded, gpu=gpu,
                                                      version=deployment.runtime_version)
    return memory_use(graph=build_graph(sharded), gpu=gpu, runtime=runtime,
                      degrees=deployment.degrees(sharded), pp=deployment.pp,
                      weight_dtype=deployment.weight_dtype or sharded.weight_dtype,
                      kv_dtype=kv_dtype, sequences=1.0, context_tokens=1.0,
                      token_budget=startup_tokens(runtime=runtime, gpu=gpu,
                                                  attention_ranks=deployment.attention_dp,
                                                  budget=deployment.prefill_chunk_tokens),
                      draft_layers=(0 if deployment.speculation is None
                                    else deployment.speculation.draft_layers))


def _fixed_lengths(workload: Workload) -> tuple[int, int] | None:
    """(prompt, output) tokens of every request, where they are all alike: a static kind's,
    or a load workload's without a trace or a length spread; else None."""
    if workload.kind == "load" and (workload.trace or workload.length_cv > 0):
        return None
    return int(math.ceil(workload.input_tokens)), int(math.ceil(workload.output_tokens))


def _longest_prompt(workload: Workload) -> int:
    """Prompt tokens of the longest prompt: a load workload's trace's longest, or its
    spread's tail (4 CVs above the mean, as :func:`_longest_request`), else the fixed one."""
    if workload.kind == "load" and workload.trace:
        from energylens.workloads.load.arrivals import load_trace

        return int(math.ceil(float(max(load_trace(workload.trace).input_tokens))))
    spread = 1 + 4 * workload.length_cv if workload.kind == "load" else 1.0
    return int(math.ceil(workload.input_tokens * spread))


def _longest_request(workload: Workload) -> int:
    """Prompt + output tokens of the longest request: a load workload's longest (its
    trace's, or its spread's tail), else the fixed lengths."""
    if workload.kind == "load":
        from energylens.workloads.load.arrivals import request_lengths

        return int(math.ceil(request_lengths(workload)[2]))
    return int(math.ceil(workload.input_tokens + workload.output_tokens))


def _running_cap(*, deployment: Deployment, workload: Workload) -> int | None:
    """Sequences one scheduler runs (per attention rank) as the prediction priced them: the
    deployment's cap; under the load kind a closed loop's clients per rank, or None in an
    open loop (the engine's own default, as the simulator assumes); else the batch per
    rank."""
    if deployment.max_num_seqs is not None:
        return deployment.max_num_seqs
    ranks = deployment.replicas * deployment.attention_dp
    if workload.kind == "load":
        from energylens.workloads.load.arrivals import closed_loop_clients

        clients = closed_loop_clients(workload)
        return max(1, math.ceil(clients / ranks)) if clients > 0 else None
    return max(1, math.ceil(workload.batch / ranks))


def launch_command(*, model: ModelConfig, deployment: Deployment, workload: Workload,
                   gpu: GPU | None = None,
                   defaults: frozenset[str] = frozenset()) -> LaunchCommand:
    """The command that starts ``deployment`` on its runtime (on ``gpu``, when given: with
    the memory share raised where the engine's default cannot hold the weights, its
    devices numbered per host and its servers placed on hosts). ``defaults``: the
    workload's fields nobody gave (``batch``, ``input_tokens``, ``output_tokens``): no
    running cap from a default batch, and a note on a context length from default lengths.

    Raises:
        ConfigError: the runtime cannot run the deployment (the reason, one line).
    """
    spec = launch_spec(model=model, deployment=deployment, workload=workload, gpu=gpu,
                       defaults=defaults)
    runtime = get_runtime(deployment.runtime)
    command = runtime.launch(spec=spec)
    lengths = [f"--{name.replace('_', '-')} {getattr(workload, name):g}"
               for name in ("input_tokens", "output_tokens") if name in defaults]
    if lengths and not workload.trace:
        command = replace(command, notes=(*command.notes, (
            f"context length {spec.max_model_len} tokens: the predicted request's "
            f"({' and '.join(lengths)}, the defaults); give your longest request's lengths")))
    if gpu is not None:
        command = replace(command, device_env=DEVICE_ENV.get(gpu.vendor, command.device_env),
                          host_gpus=spec.host_gpus)
    if not command.multi_node:
        command = replace(command, multi_node=MULTI_NODE.get(runtime.name, ""))
    if (spec.memory_share is not None and gpu is not None
            and f"{spec.memory_share:g}" in command.argv):  # the share the command writes
        command = replace(command, notes=(*command.notes, *_share_notes(
            model=model, deployment=deployment, gpu=gpu, spec=spec, runtime=runtime)))
    chunk_flag = CHUNK_FLAGS.get(runtime.name)
    if deployment.prefill_chunk_tokens is not None and chunk_flag not in command.argv:
        command = replace(command, notes=(*command.notes, (
            f"{deployment.prefill_chunk_tokens} prompt tokens per forward pass, as predicted: "
            "not written above; set the engine's own flag"
            + (f" ({chunk_flag})" if chunk_flag else ""))))
    command = replace(command, notes=(*command.notes, *_unflagged(deployment=deployment,
                                                                  runtime=runtime, gpu=gpu)))
    moe = model.moe
    priced = runtime.sharded_model(model=model, attention_tp=deployment.attention_tp,
                                   ep=deployment.ep).moe
    if moe is not None and priced is not None and priced.num_experts != moe.num_experts:
        slots = priced.num_experts  # the slots the prediction priced (sharded_model)
        command = replace(command, notes=(*command.notes, (
            f"{moe.num_experts} experts over ep = {deployment.ep} ranks: predicted with "
            f"{slots} expert slots ({slots // deployment.ep} per rank), as vLLM places them by "
            "itself; TensorRT-LLM and SGLang need their expert load balancer (redundant "
            "experts), which this command does not set")))
    return command


def _share_notes(*, model: ModelConfig, deployment: Deployment, gpu: GPU, spec: LaunchSpec,
                 runtime: RuntimeProfile) -> list[str]:
    """Why the command's memory share is not the engine's default, and, where even the
    raised share cannot hold what the engine loads at start-up, that it will not start."""
    assert spec.memory_share is not None
    default = (runtime.memory_utilization if spec.default_memory_share is None
               else spec.default_memory_share)
    notes = [f"memory share {spec.memory_share:g}, not the engine's default {default:g}: the "
             f"default cannot hold the weights on {gpu.name} (the prediction priced it raised)"]
    if runtime.memory_share_of != "hbm":
        return notes
    notes[0] += (f"; {spec.memory_share:g} is the most it starts with (it refuses a share above "
                 "the memory free at start-up: the board less the CUDA context, the driver's "
                 "reservation and the communicators' buffers, ~1.5 GiB assumed), while the "
                 "prediction priced the whole board")
    use = start_up_memory(model=model, deployment=deployment, gpu=gpu)
    need = float(use.weights_bytes + use.activation_bytes) + use.reserve_bytes
    if need > spec.memory_share * use.capacity_bytes:
        notes.append(f"even that share ({spec.memory_share * use.capacity_bytes / 2**30:.1f} "
                     f"GiB) cannot hold the weights, the start-up pass and the reserve "
                     f"({need / 2**30:.1f} GiB per GPU): the engine will not start")
    return notes


def clock_note(*, freq_mhz: float, gpu: GPU | None, what: str = "GPU clock",
               when: str = "before starting the servers") -> str | None:
    """What a priced clock needs of whoever runs the command (energylens never changes
    clocks): the ``nvidia-smi`` lock to run ``when``; None at the GPU's boost clock."""
    if gpu is not None and abs(freq_mhz - gpu.boost_clock_mhz) < 0.5:
        return None
    mhz = round(freq_mhz)
    of = "" if gpu is None else (f" ({freq_mhz / gpu.boost_clock_mhz:.2f} of {gpu.name}'s "
                                 f"{gpu.boost_clock_mhz:g} MHz boost)")
    return (f"{what} {mhz} MHz{of}, as predicted: no engine flag sets it; lock it {when} "
            f"with `sudo nvidia-smi -lgc {mhz},{mhz}` (reset: `sudo nvidia-smi -rgc`)")


def _unflagged(*, deployment: Deployment, runtime: RuntimeProfile,
               gpu: GPU | None) -> list[str]:
    """Notes on what the prediction priced that no flag of the command gives: a clock,
    SMs kept for communication, fusions other than the engine's defaults."""
    notes = []
    if deployment.freq_mhz is not None:
        note = clock_note(freq_mhz=deployment.freq_mhz, gpu=gpu)
        if note is not None:
            notes.append(note)
    if deployment.overlap_sms:
        notes.append(f"{deployment.overlap_sms} SMs per GPU kept for communication kernels "
                     "(overlap_sms), as predicted: no flag above sets it; cap the "
                     "collectives' SMs to match (NCCL: NCCL_MIN_CTAS / NCCL_MAX_CTAS)")
    if deployment.fusion is not None:
        default = runtime.fusions_at(version=deployment.runtime_version)
        on, off = sorted(deployment.fusion - default), sorted(default - deployment.fusion)
        if on or off:
            change = "; ".join(f"{word}: {', '.join(names)}" for word, names in
                               (("on", on), ("off", off)) if names)
            notes.append(f"kernel fusions other than {runtime.name}'s defaults, as predicted "
                         f"({change}): no flag above sets them; configure the engine's "
                         "fusion passes to match")
    return notes


#: Column of ``pareto.csv`` holding each point's launch command (one server's line).
LAUNCH_COLUMN = "launch_command"


def point_name(row: dict[str, Any], index: int) -> str:
    """File stem of a Pareto point's script: its trial number, else its row."""
    number = row.get("number")
    if isinstance(number, int | float) and not isinstance(number, bool) and number == number:
        return f"trial-{int(number)}"
    return f"point-{index}"


def write_front_launch(*, results: Path,
                       commands_of: Callable[[dict[str, Any]], Mapping[str, LaunchCommand]]) -> int:
    """Add a ``launch_command`` column to ``results/pareto.csv`` and write a script per
    command of each of its points; the number of scripts written.

    ``commands_of`` gives a point's commands (from its row) by role: ``""`` for one
    deployment (``launch/<point>.sh``, the cell its line), or one per pool of a
    disaggregated point (``launch/<point>-<role>.sh``, the cell ``<role>: <line>`` per pool,
    joined by ``; ``). A point it cannot launch (a one-line error) gets an empty cell. The
    other cells are rewritten as they were (an integer knob with empty cells stays ``8``,
    not ``8.0``); every file is written atomically.
    """
    import pandas as pd

    from energylens.errors import EnergyLensError
    from search.files import atomic_path, write_atomic

    path = results / "pareto.csv"
    if not path.is_file():
        return 0
    front = pd.read_csv(path)
    cells_as_written = pd.read_csv(path, dtype=str, keep_default_na=False)
    folder = results / "launch"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.sh"):  # a rewritten front replaces the old scripts
        old.unlink()
    cells, written = [], 0
    rows: list[dict[str, Any]] = [{str(k): v for k, v in r.items()}
                                  for r in front.to_dict("records")]
    for index, row in enumerate(rows):
        try:
            commands = commands_of(row)
        except EnergyLensError:
            cells.append("")
            continue
        name = point_name(row, index)
        for role, command in commands.items():
            with atomic_path(folder / (f"{name}-{role}.sh" if role else f"{name}.sh")) as script:
                script.write_text(command.script(), encoding="utf-8")
                script.chmod(0o755)
            written += 1
        cells.append("; ".join(f"{role}: {c.line()}" if role else c.line()
                               for role, c in commands.items()))
    cells_as_written[LAUNCH_COLUMN] = cells
    write_atomic(path, lambda f: cells_as_written.to_csv(f, index=False))
    return written
