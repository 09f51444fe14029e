"""``energylens study init``: a commented starter study that runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from energylens.errors import EnergyLensError
from search.files import ResultsError, write_atomic


class StudyFileError(EnergyLensError):
    """A study file that cannot be written (exists, or the folder is not writable)."""


STARTER = """\
# An EnergyLens study: which deployments to try, what to optimise, under which SLOs.
# Every key, with its default, is in docs/study-files.md. Check this file with
#   energylens study check {path}
# and run it with
#   energylens study run {path}
name: {name}                        # storage and results name (default: the file name)
model: llama-3.1-8b                 # zoo name (energylens models), HF id, or a config.json path
workload:                           # the traffic; not chosen by the deployer
  kind: batch                       # batch: one static batch | serving: continuous batching
  batch: 16                         # sequences at once, unless the space has a batch knob
  input_tokens: 1024                # prompt tokens per request
  output_tokens: 256                # generated tokens per request
  moe_skew: 0                       # MoE routing skew, Zipf exponent (0: uniform; dense models ignore it)
space:                              # what the deployer chooses (or a path to a spaces/*.yaml file)
  knobs:                            # type: categorical | ordinal | int | float | bool
    gpu: {{type: categorical, values: [H100, A100-80GB], baseline: H100}}
    num_gpus: {{type: ordinal, values: [1, 2, 4, 8], baseline: 1}}
    tp: {{type: ordinal, values: [1, 2, 4, 8], baseline: 1}}
    batch: {{type: int, low: 1, high: 128, log: true, baseline: 1}}
    clock_fraction: {{type: float, low: 0.5, high: 1.0, step: 0.1, baseline: 1.0}}
  fixed: {{dtype: bf16}}              # values pinned for every configuration
objectives:                         # metrics to minimise or maximise (docs/study-files.md lists them)
  - minimize energy_per_output_token_j
  - minimize tpot_s
constraints: ["tpot_s <= 0.05", "ttft_s <= 2"]   # SLOs: feasible configurations meet all
engine: optuna                      # optuna | pymoo | grid
sampler: nsga2                      # optuna: nsga2 | tpe | random; pymoo: nsga2 | nsga3
population_size: 50
trials: 300                         # completed trials to run (grid: default the whole grid)
seed: 0
# storage: results/{name}/storage.journal    # default; or sqlite:///x.db, postgresql+psycopg://...
# results: results/{name}                    # default, relative to this file
"""


def write_starter(*, path: Path, force: bool) -> Path:
    """Write :data:`STARTER` to ``path`` (a ``.yaml`` file; its stem names the study).

    Raises:
        StudyFileError: ``path`` exists (without ``force``), is a folder, or cannot be written.
    """
    if path.is_dir():
        raise StudyFileError(f"{path}: is a folder; expected a study file path such as {path / 'study.yaml'}")
    if path.exists() and not force:
        raise StudyFileError(f"{path}: exists; use --force to overwrite it")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-") or "study"
    try:
        write_atomic(path, lambda f: f.write(STARTER.format(name=name, path=path)))
    except ResultsError as exc:
        raise StudyFileError(str(exc)) from None
    return path
