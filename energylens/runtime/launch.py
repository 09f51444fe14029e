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

    @property
    def quantize(self) -> bool:
        """Weights run in another dtype than the checkpoint's (fp16/bf16 casts aside)."""
        return self.weight_dtype != self.checkpoint_dtype and not (
            self.weight_dtype in TORCH_DTYPES and self.checkpoint_dtype in TORCH_DTYPES)


@dataclass(frozen=True, kw_only=True)
class LaunchCommand:
    """One server's command line; ``replicas`` servers when the engine has no data-parallel
    option of its own; ``files`` (name, text) written before it starts; ``notes`` say what
    the command needs that it cannot give (a pre-quantised checkpoint)."""

    argv: tuple[str, ...]
    replicas: int = 1
    gpus_per_server: int = 1
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        """The command as one shell line (one server)."""
        return shlex.join(self.argv)

    def script(self) -> str:
        """A bash script that writes the files and starts every server."""
        lines = ["#!/usr/bin/env bash", "# written by energylens", "set -euo pipefail"]
        lines += [f"# {note}" for note in self.notes]
        for name, text in self.files:
            lines += [f"cat > {shlex.quote(name)} <<'EOF'", text.rstrip("\n"), "EOF"]
        if self.replicas == 1:
            lines.append(self.line())
            return "\n".join(lines) + "\n"
        # replica i on the next gpus_per_server GPUs, listening on PORT + i
        words = [shlex.quote(word) for word in self.argv]
        words = [f"$(({PORT} + i))" if word == str(PORT) and "port" in words[n - 1] else word
                 for n, word in enumerate(words)]
        lines += [
            f"# {self.replicas} independent servers of {self.gpus_per_server} GPU(s) each, "
            f"ports {PORT}..{PORT + self.replicas - 1}",
            f"for i in $(seq 0 {self.replicas - 1}); do",
            f"  first=$((i * {self.gpus_per_server}))",
            f"  CUDA_VISIBLE_DEVICES=$(seq -s, $first $((first + {self.gpus_per_server - 1}))) "
            + " ".join(words) + " &",
            "done",
            "wait",
        ]
        return "\n".join(lines) + "\n"


def launch_spec(*, model: ModelConfig, deployment: Deployment, workload: Workload,
                gpu: GPU | None = None) -> LaunchSpec:
    """The launch inputs of ``deployment`` serving ``workload`` (checked by its runtime); on
    ``gpu`` (when given) with the memory share the prediction priced."""
    runtime = get_runtime(deployment.runtime)
    runtime.check(deployment=deployment, model=model)
    weight_dtype = deployment.weight_dtype or model.weight_dtype
    share, default = (None, None) if gpu is None else _start_up_share(
        model=model, deployment=deployment, gpu=gpu, weight_dtype=weight_dtype, runtime=runtime)
    return LaunchSpec(
        model_id=model.hf_id or model.name, checkpoint_dtype=model.weight_dtype,
        deployment=deployment, weight_dtype=weight_dtype,
        max_num_seqs=_running_cap(deployment=deployment, workload=workload),
        max_model_len=_longest_request(workload),
        memory_share=None if share == default else share, default_memory_share=default)


def _start_up_share(*, model: ModelConfig, deployment: Deployment, gpu: GPU,
                    weight_dtype: str, runtime: RuntimeProfile) -> tuple[float, float]:
    """The memory share ``runtime`` starts with on ``gpu`` (``cost.memory.engine_share``),
    its default or the raised one where that cannot hold the weights, and the default."""
    from energylens.cost.memory import engine_share, memory_use, startup_tokens
    from energylens.model.families import build_graph

    kv_dtype = deployment.kv_dtype or runtime.auto_kv(model=model, gpu=gpu,
                                                      version=deployment.runtime_version)
    use = memory_use(graph=build_graph(model), gpu=gpu, runtime=runtime,
                     degrees=deployment.degrees(model), pp=deployment.pp,
                     weight_dtype=weight_dtype, kv_dtype=kv_dtype, sequences=1.0,
                     context_tokens=1.0,
                     token_budget=startup_tokens(runtime=runtime, gpu=gpu,
                                                 attention_ranks=deployment.attention_dp,
                                                 budget=deployment.prefill_chunk_tokens),
                     draft_layers=(0 if deployment.speculation is None
                                   else deployment.speculation.draft_layers))
    return engine_share(runtime=runtime, use=use), use.default_share


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
                   gpu: GPU | None = None) -> LaunchCommand:
    """The command that starts ``deployment`` on its runtime (on ``gpu``, when given: with
    the memory share raised where the engine's default cannot hold the weights).

    Raises:
        ConfigError: the runtime cannot run the deployment (the reason, one line).
    """
    spec = launch_spec(model=model, deployment=deployment, workload=workload, gpu=gpu)
    runtime = get_runtime(deployment.runtime)
    command = runtime.launch(spec=spec)
    if spec.memory_share is not None:
        default = (runtime.memory_utilization if spec.default_memory_share is None
                   else spec.default_memory_share)
        command = replace(command, notes=(*command.notes, (
            f"memory share {spec.memory_share:g}, not the engine's default "
            f"{default:g}: the default "
            "cannot hold the weights on "
            f"{gpu.name if gpu is not None else 'this GPU'} (the prediction priced it raised)")))
    if deployment.prefill_chunk_tokens is not None:
        command = replace(command, notes=(*command.notes, (
            f"{deployment.prefill_chunk_tokens} prompt tokens per forward pass: not written "
            "above; set the engine's own flag (vLLM --max-num-batched-tokens, SGLang "
            "--chunked-prefill-size, TensorRT-LLM --max_num_tokens, llama.cpp --batch-size)")))
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
    joined by ``; ``). A point it cannot launch (a one-line error) gets an empty cell.
    """
    import pandas as pd

    from energylens.errors import EnergyLensError

    path = results / "pareto.csv"
    if not path.is_file():
        return 0
    front = pd.read_csv(path)
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
            script = folder / (f"{name}-{role}.sh" if role else f"{name}.sh")
            script.write_text(command.script(), encoding="utf-8")
            script.chmod(0o755)
            written += 1
        cells.append("; ".join(f"{role}: {c.line()}" if role else c.line()
                               for role, c in commands.items()))
    front[LAUNCH_COLUMN] = cells
    tmp = path.with_suffix(".csv.tmp")
    front.to_csv(tmp, index=False)
    tmp.replace(path)
    return written
