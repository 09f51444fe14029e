"""A calibration that never saw a data file's rows of one (runtime, GPU): a blind base.

K-shot validation asks how well a user's rig is predicted from K of its own rows. Where
the shipped calibration fitted that runtime's constants on that GPU from the very file the
rows come from (LLM-Inference-Bench: TensorRT-LLM, DeepSpeed-MII, llama.cpp, Habana's
DeepSpeed, SambaFlow), K = 0 is in-sample and every K > 0 starts from constants that saw
the rows it is scored on. :func:`forget_fits` replaces each runtime constant of
(runtime, GPU) whose provenance says it was fitted on the file with what ``calibrate``
gives a (runtime, GPU) no data identifies: the value a relative GPU (``engines_from``,
then ``borrows_from``, followed down the chain) has fitted from data of its own, else the
runtime profile's prior for the two overheads (its ``prior_overheads_from`` runtime's on the
GPU where it names one), else the field's default (no overhead,
scale 1). A runtime's ``@legacy`` sections (the overheads of its earlier releases) are
forgotten with it; without a relative's fit they stand in with the runtime's own section,
as a GPU without a legacy fit is priced. Kernel and link constants are left alone:
LLM-Inference-Bench fits none of them (a file that does, such as ML.ENERGY's, needs a
refit without it, not this).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from energylens.calibration.transfer import lending_relatives
from energylens.cost.constants import Calibration, RuntimeConstants
from energylens.runtime import get_runtime
from energylens.runtime.profile import LEGACY_SUFFIX, legacy_runtime

#: The repository root, which a calibration's ``fitted_on`` paths are relative to.
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Runtime constants a profile gives a prior for (``prior_<name>`` in its YAML).
_PRIORS = ("step_overhead_s", "per_sequence_overhead_s")


def _section(document: dict[str, Any], *, runtime: str, gpu: str) -> dict[str, Any]:
    by_gpu = (document.get("runtimes") or {}).get(runtime) or {}
    section = by_gpu.get(gpu) or {}
    return section if isinstance(section, dict) else {}


def repository_path(path: str) -> str:
    """``path`` as a calibration's ``fitted_on`` names it: relative to the repository root
    where it lies inside it (an absolute path, ``./data/...`` from the root), else as
    given, normalised."""
    given = Path(path).expanduser()
    absolute = given if given.is_absolute() else Path.cwd() / given
    try:
        return absolute.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return Path(os.path.normpath(path)).as_posix()


def _fitted_on(entry: Any, data_file: str) -> bool:
    return (isinstance(entry, dict) and entry.get("kind") == "fitted"
            and repository_path(data_file) in {repository_path(str(f))
                                               for f in entry.get("fitted_on") or []})


def _stand_in(document: dict[str, Any], *, runtime: str, gpu: str, field: str) -> float:
    """What ``calibrate`` would give ``field`` of (runtime, gpu) without a fit of its own."""
    for relative in lending_relatives(gpu):
        entry = _section(document, runtime=runtime, gpu=relative).get(field)
        if isinstance(entry, dict) and entry.get("kind") == "fitted":
            return float(entry["value"])
    if runtime.endswith(LEGACY_SUFFIX):  # no legacy section: the runtime's own constants
        entry = _section(document, runtime=runtime[:-len(LEGACY_SUFFIX)], gpu=gpu).get(field)
        if isinstance(entry, dict):
            return float(entry["value"])
    elif field in _PRIORS and runtime != "vllm":  # vLLM, the reference, has no prior
        profile = get_runtime(runtime)
        lender = profile.prior_overheads_from  # as calibrate's fill_priors: its values
        entry = _section(document, runtime=lender, gpu=gpu).get(field) if lender else None
        if isinstance(entry, dict):
            return float(entry["value"])
        return float(getattr(profile, f"prior_{field}"))
    return float(getattr(RuntimeConstants(), field))


def forgotten_fields(*, document: dict[str, Any], data_file: str, runtime: str,
                     gpu: str) -> dict[str, float]:
    """The runtime constants of (runtime, gpu) fitted on ``data_file`` (as the calibration
    file records it, e.g. ``data/measurements/llm-inference-bench/All_results.csv``) and
    their blind stand-ins."""
    section = _section(document, runtime=runtime, gpu=gpu)
    return {field: _stand_in(document, runtime=runtime, gpu=gpu, field=field)
            for field, entry in section.items() if _fitted_on(entry, data_file)}


def forget_fits(*, calibration: Calibration, document: dict[str, Any], data_file: str,
                pairs: set[tuple[str, str]]) -> Calibration:
    """``calibration`` with the constants of each (runtime, canonical GPU name) in ``pairs``
    that were fitted on ``data_file`` replaced by their blind stand-ins."""
    out = calibration
    pairs = pairs | {(legacy_runtime(runtime), gpu) for runtime, gpu in pairs}
    for runtime, gpu in sorted(pairs):
        values = forgotten_fields(document=document, data_file=data_file, runtime=runtime,
                                  gpu=gpu)
        if values:
            out = out.with_runtime(runtime=runtime, gpu=gpu, **values)
    return out
