"""Read and write calibration files (versioned YAML: value, data fitted on, residual)."""

from __future__ import annotations

import difflib
import math
from dataclasses import replace
from functools import cache, lru_cache
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
from energylens.errors import CalibrationFileError, EnergyLensError
from energylens.yamlfile import safe_load

#: 2: runtime constants (engine overheads, own all-reduce) keyed by (runtime, GPU); an
#: overlay file (``base`` + ``overlay``: scale factors on a base file) is also version 2.
FORMAT_VERSION = 2
SHIPPED = "calibration.yaml"




TOP_LEVEL_KEYS = ("version", "generated_by", "regenerate", "data", "kernels", "links", "runtimes", "fits",
                  "base", "overlay")
ENTRY_KEYS = ("value", "kind", "note", "fit", "fitted_on", "residual")
#: An overlay file holds these only; ``base`` is ``shipped`` or a path from the file's folder.
OVERLAY_FILE_KEYS = ("version", "generated_by", "base", "overlay")
OVERLAY_KEYS = ("gpus", "factors", "fitted_on", "note")


def _nearest(name: str, known: tuple[str, ...]) -> str:
    near = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(known)})"


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CalibrationFileError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _values(*, section: Any, allowed: tuple[str, ...], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, entry in _mapping(section, where).items():
        if key not in allowed:
            raise CalibrationFileError(f"{where}.{key}: unknown constant{_nearest(str(key), allowed)}")
        if isinstance(entry, dict):
            for field in entry:
                if field not in ENTRY_KEYS:
                    raise CalibrationFileError(
                        f"{where}.{key}.{field}: unknown key{_nearest(str(field), ENTRY_KEYS)}")
            if "value" not in entry:
                raise CalibrationFileError(f"{where}.{key}: expected a 'value'")
        value = entry["value"] if isinstance(entry, dict) else entry
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalibrationFileError(f"{where}.{key}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise CalibrationFileError(f"{where}.{key}: expected a finite number, got {value}")
        out[key] = float(value)
    return out


def _overlay_file(*, data: dict[str, Any], source: str, folder: Path | None) -> Calibration:
    """An overlay file: its base calibration with the overlay's scale factors applied."""
    from energylens.calibration.overlay import FACTOR_NAMES, Overlay, apply_overlay
    from energylens.hardware import load_gpu

    for key in data:
        if key not in OVERLAY_FILE_KEYS:
            raise CalibrationFileError(f"{source}: {key}: not allowed in an overlay file (it holds "
                                       f"{', '.join(OVERLAY_FILE_KEYS)})")
    for key in ("base", "overlay"):
        if key not in data:
            raise CalibrationFileError(f"{source}: an overlay file needs '{key}'")
    base = data["base"]
    if not isinstance(base, str) or not base.strip():
        raise CalibrationFileError(f"{source}: base: expected 'shipped' or a calibration file path")
    if base == "shipped":
        calibration = default_calibration()
    else:
        path = Path(base) if folder is None else folder / base
        calibration = load_calibration(path, overlay=False)
    section = _mapping(data["overlay"], f"{source}: overlay")
    for key in section:
        if key not in OVERLAY_KEYS:
            raise CalibrationFileError(
                f"{source}: overlay.{key}: unknown key{_nearest(str(key), OVERLAY_KEYS)}")
    names = section.get("gpus")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise CalibrationFileError(f"{source}: overlay.gpus: expected a list of GPU names")
    try:
        gpus = tuple(load_gpu(n).name for n in names)
    except EnergyLensError as exc:
        raise CalibrationFileError(f"{source}: overlay.gpus: {exc}") from None
    factors = _values(section=section.get("factors") or {}, allowed=FACTOR_NAMES,
                      where=f"{source}: overlay.factors")
    for name, value in factors.items():
        if value <= 0:
            raise CalibrationFileError(f"{source}: overlay.factors.{name}: expected a positive "
                                       f"factor, got {value:g}")
    applied = apply_overlay(calibration, Overlay(factors=factors, gpus=gpus))
    return replace(applied, source=f"{source} (overlay on {calibration.source})")


def parse_calibration(*, data: dict[str, Any], source: str, folder: Path | None = None,
                      overlay: bool = True) -> Calibration:
    """Build a :class:`Calibration` from the parsed YAML of a calibration file (or of an
    overlay file, whose ``base`` path starts from ``folder``, unless ``overlay`` is False).

    Raises:
        CalibrationFileError: a wrong version, an unknown key or constant (with the nearest
            known one), a section that is not a mapping, a value that is not a finite number.
    """
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise CalibrationFileError(f"{source}: expected 'version: {FORMAT_VERSION}'")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise CalibrationFileError(f"{source}: {key}: unknown key{_nearest(str(key), TOP_LEVEL_KEYS)}")
    if "overlay" in data or "base" in data:
        if not overlay:
            raise CalibrationFileError(f"{source}: is an overlay file; an overlay's base must be "
                                       "a full calibration file")
        return _overlay_file(data=data, source=source, folder=folder)
    kernels = {
        gpu: KernelConstants(**_values(section=section, allowed=KERNEL_FIELDS,
                                       where=f"{source}: kernels.{gpu}"))
        for gpu, section in _mapping(data.get("kernels") or {}, f"{source}: kernels").items()
    }
    links = {
        key: LinkConstants(**_values(section=section, allowed=LINK_FIELDS,
                                     where=f"{source}: links.{key}"))
        for key, section in _mapping(data.get("links") or {}, f"{source}: links").items()
    }
    runtimes: dict[str, RuntimeConstants] = {}
    for runtime, by_gpu in _mapping(data.get("runtimes") or {}, f"{source}: runtimes").items():
        if not isinstance(by_gpu, dict):
            raise CalibrationFileError(f"{source}: runtimes.{runtime}: expected a mapping by GPU")
        for gpu, section in by_gpu.items():
            runtimes[runtime_key(runtime=runtime, gpu=gpu)] = RuntimeConstants(**_values(
                section=section, allowed=RUNTIME_FIELDS, where=f"{source}: runtimes.{runtime}.{gpu}"))
    return Calibration(kernels=kernels, links=links, runtimes=runtimes, source=source)


def load_calibration(path: str | Path, *, overlay: bool = True) -> Calibration:
    """Load a calibration file written by ``energylens calibrate`` (or, unless ``overlay``
    is False, an overlay file written by ``energylens calibrate --from``).

    Raises:
        CalibrationFileError: a missing or unreadable file, text that is not UTF-8 YAML, or
            a schema violation (one line naming the file and the key).
    """
    path = Path(path)
    if not path.is_file():
        raise CalibrationFileError(f"{path}: no such calibration file")
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CalibrationFileError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise CalibrationFileError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return parse_calibration(data=data, source=str(path), folder=path.parent, overlay=overlay)


#: ``Calibration.source`` of the shipped file.
SHIPPED_SOURCE = f"energylens/data/{SHIPPED}"


@cache
def _shipped_document() -> dict[str, Any] | None:
    """The shipped calibration file's YAML document, read once (None if there is none)."""
    shipped = resources.files("energylens.data").joinpath(SHIPPED)
    if not shipped.is_file():
        return None
    data = safe_load(shipped.read_text())
    return data if isinstance(data, dict) else None


@cache
def default_calibration() -> Calibration:
    """The calibration shipped with the package (built-in defaults if there is none)."""
    data = _shipped_document()
    if data is None:
        return Calibration()
    return parse_calibration(data=data, source=SHIPPED_SOURCE)


def calibration_document(calibration: Calibration) -> dict[str, Any]:
    """The YAML document ``calibration`` was read from, provenance and all: the shipped
    file's, or that of a file ``energylens calibrate`` wrote; empty for built-in defaults,
    overlays and unreadable files."""
    if calibration.source == SHIPPED_SOURCE:
        return _shipped_document() or {}
    path = Path(calibration.source)
    try:
        stamp = path.stat().st_mtime_ns if path.is_file() else None
    except OSError:
        stamp = None
    return {} if stamp is None else _file_document(str(path.resolve()), stamp)


def calibration_fits(calibration: Calibration) -> dict[str, Any]:
    """The ``fits`` section (what each fit saw, its errors, the regime folds) of the file
    ``calibration`` was read from (:func:`calibration_document`)."""
    return _fits_of(calibration_document(calibration))


@lru_cache(maxsize=8)
def _file_document(path: str, stamp: int) -> dict[str, Any]:
    """A calibration file's document, read once per path and modification."""
    try:
        document = safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return document if isinstance(document, dict) else {}


def _fits_of(document: Any) -> dict[str, Any]:
    """A calibration document's ``fits`` section ({} when it has none)."""
    fits = document.get("fits") if isinstance(document, dict) else None
    return fits if isinstance(fits, dict) else {}


def resolve_calibration(calibration: Calibration | str | Path | None) -> Calibration:
    """``calibration`` as given, loaded from its path, or the shipped one (None)."""
    if calibration is None:
        return default_calibration()
    if isinstance(calibration, Calibration):
        return calibration
    return load_calibration(calibration)
