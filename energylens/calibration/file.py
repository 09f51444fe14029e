"""Read and write calibration files (versioned YAML: value, data fitted on, residual)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from energylens.cost.constants import (
    KERNEL_FIELDS,
    LINK_FIELDS,
    RUNTIME_FIELDS,
    Calibration,
    KernelConstants,
    LinkConstants,
    RuntimeConstants,
    runtime_key,
)
from energylens.errors import CalibrationFileError

#: 2: runtime constants (engine overheads, own all-reduce) keyed by (runtime, GPU).
FORMAT_VERSION = 2
SHIPPED = "calibration.yaml"




def _values(*, section: dict[str, Any], allowed: tuple[str, ...], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, entry in section.items():
        if key not in allowed:
            raise CalibrationFileError(f"{where}.{key}: unknown constant")
        value = entry["value"] if isinstance(entry, dict) else entry
        if not isinstance(value, (int, float)):
            raise CalibrationFileError(f"{where}.{key}: expected a number, got {value!r}")
        out[key] = float(value)
    return out


def parse_calibration(*, data: dict[str, Any], source: str) -> Calibration:
    """Build a :class:`Calibration` from the parsed YAML of a calibration file."""
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise CalibrationFileError(f"{source}: expected 'version: {FORMAT_VERSION}'")
    kernels = {
        gpu: KernelConstants(**_values(section=section, allowed=KERNEL_FIELDS,
                                       where=f"{source}: kernels.{gpu}"))
        for gpu, section in (data.get("kernels") or {}).items()
    }
    links = {
        key: LinkConstants(**_values(section=section, allowed=LINK_FIELDS,
                                     where=f"{source}: links.{key}"))
        for key, section in (data.get("links") or {}).items()
    }
    runtimes: dict[str, RuntimeConstants] = {}
    for runtime, by_gpu in (data.get("runtimes") or {}).items():
        if not isinstance(by_gpu, dict):
            raise CalibrationFileError(f"{source}: runtimes.{runtime}: expected a mapping by GPU")
        for gpu, section in by_gpu.items():
            runtimes[runtime_key(runtime=runtime, gpu=gpu)] = RuntimeConstants(**_values(
                section=section, allowed=RUNTIME_FIELDS, where=f"{source}: runtimes.{runtime}.{gpu}"))
    return Calibration(kernels=kernels, links=links, runtimes=runtimes, source=source)


def load_calibration(path: str | Path) -> Calibration:
    """Load a calibration file written by ``energylens calibrate``."""
    path = Path(path)
    if not path.is_file():
        raise CalibrationFileError(f"{path}: no such calibration file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CalibrationFileError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return parse_calibration(data=data, source=str(path))


@cache
def default_calibration() -> Calibration:
    """The calibration shipped with the package (built-in defaults if there is none)."""
    shipped = resources.files("energylens.data").joinpath(SHIPPED)
    if not shipped.is_file():
        return Calibration()
    return parse_calibration(data=yaml.safe_load(shipped.read_text()),
                             source=f"energylens/data/{SHIPPED}")
