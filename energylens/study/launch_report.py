"""The launch scripts of a study's Pareto points (``study report``: ``launch/<point>.sh`` and
``pareto.csv``'s ``launch_command``), built from what each point's trial ran
(:meth:`DeploymentProblem.setup`): a colocated deployment's servers, or the two pools of a
disaggregated one, a script each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from energylens.hardware import load_gpu
from energylens.runtime.launch import LaunchCommand, clock_note, launch_command, write_front_launch
from energylens.study.objective import DeploymentProblem, row_params


def point_commands(*, problem: DeploymentProblem,
                   params: Mapping[str, Any]) -> dict[str, LaunchCommand]:
    """The commands that start configuration ``params`` by role: ``{"": command}`` for one
    deployment, ``{"prefill": ..., "decode": ...}`` for a disaggregated one's pools.

    Raises:
        ConfigError, UnknownGPUError: the configuration or its runtime cannot run it.
    """
    gpu, deployment, workload, pools = problem.setup(params)
    if pools is None:
        command = launch_command(model=problem.model, deployment=deployment, workload=workload,
                                 gpu=gpu if "gpu" in params else None)
        if "decode_clock_fraction" in params:
            note = clock_note(freq_mhz=float(params["decode_clock_fraction"])
                              * gpu.boost_clock_mhz, gpu=gpu, what="decode-phase clock",
                              when="once the batch's prompts are prefilled")
            command = replace(command, notes=(*command.notes, *([note] if note else [])))
        return {"": command}
    commands = {}
    for role, other, pool in (("prefill", "decode", pools[0]), ("decode", "prefill", pools[1])):
        pool_gpu = load_gpu(pool.gpu)
        command = launch_command(model=problem.model, deployment=pool.deployment,
                                 workload=workload, gpu=pool_gpu)
        note = (f"{role} pool of a disaggregated deployment: {pool.deployment.total_gpus} x "
                f"{pool_gpu.name}; the {other} pool's servers are the -{other}.sh script "
                "beside this one. The prompts' KV caches cross between the pools through the "
                "engine's prefill/decode connector, which no flag below sets (none is among "
                "the flags documented for the engine): configure it on both pools")
        commands[role] = replace(command, notes=(note, *command.notes))
    return commands


def write_point_launch(*, results: Path, problem: DeploymentProblem, knobs: tuple[str, ...],
                       fixed: Mapping[str, Any]) -> int:
    """:func:`write_front_launch` of ``results/pareto.csv``'s points; the scripts written."""
    return write_front_launch(results=results, commands_of=lambda row: point_commands(
        problem=problem, params=row_params(row, knobs=knobs, fixed=fixed)))
