"""Hardware database: one YAML file per GPU under ``energylens/data/gpus``.

Every numeric field carries its provenance (source and kind: datasheet, measured,
assumed or derived), keyed by dotted field name (``dense_flops_per_s.bf16``,
``intra_node.bandwidth_bytes_per_s``). Units are SI: FLOP/s, bytes, bytes/s, watts,
seconds, MHz for clocks. Tensor rates are dense (sparse = dense x ``sparsity_speedup``);
link bandwidths are per direction per GPU.

``load_gpu("h100")`` resolves a name case-insensitively, ignoring spaces, dashes and
underscores, a leading vendor and a trailing "GPU"; an unknown name raises
``UnknownGPUError`` with the closest known names.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args

import yaml

from energylens.errors import UnknownGPUError

ProvenanceKind = Literal["datasheet", "measured", "assumed", "derived"]


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a hardware number comes from."""

    source: str
    kind: ProvenanceKind


@dataclass(frozen=True, kw_only=True)
class Link:
    """A scale-up or scale-out interconnect, bandwidth per direction per GPU."""

    kind: str  # "nvswitch", "nvlink-pairwise", "pcie", "xgmi", "infiniband", ...
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (cached objects)
class GPU:
    """One GPU model. Dense tensor rates per dtype; sparse rates are not stored as dense."""

    name: str
    vendor: str
    aliases: tuple[str, ...]
    dense_flops_per_s: dict[str, float]  # keys: "bf16", "fp16", "fp8", "int8", "fp32"
    sparsity_speedup: float  # structured 2:4 sparse / dense (2.0 where supported, else 1.0)
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: float
    sm_count: int
    l2_bytes: float
    tdp_w: float
    idle_power_w: float
    base_clock_mhz: float
    boost_clock_mhz: float
    min_clock_mhz: float
    intra_node: Link
    inter_node: Link
    gpus_per_node: int
    provenance: dict[str, Provenance] = field(default_factory=dict)

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak for ``dtype``; fp8 falls back to bf16 on GPUs without fp8 units."""
        if dtype in self.dense_flops_per_s:
            return self.dense_flops_per_s[dtype]
        if dtype == "fp8":
            return self.dense_flops_per_s["bf16"]
        raise KeyError(f"GPU {self.name} has no rate for dtype {dtype!r}")




_DATA_DIR = Path(__file__).parents[1] / "data" / "gpus"
_KINDS = frozenset(get_args(ProvenanceKind))
_REQUIRED_DTYPES = ("bf16", "fp16", "int8", "fp32")
_FLOAT_SPECS = (
    "sparsity_speedup",
    "hbm_bandwidth_bytes_per_s",
    "hbm_capacity_bytes",
    "l2_bytes",
    "tdp_w",
    "idle_power_w",
    "base_clock_mhz",
    "boost_clock_mhz",
    "min_clock_mhz",
)
_INT_SPECS = ("sm_count", "gpus_per_node")
_SPEC_KEYS = frozenset(("dense_flops_per_s", *_FLOAT_SPECS, *_INT_SPECS))
_TOP_KEYS = frozenset(("name", "vendor", "aliases", "specs", "intra_node", "inter_node"))
_LINK_KEYS = frozenset(("kind", "bandwidth_bytes_per_s", "latency_s"))
_VENDOR_PREFIXES = ("nvidia", "amdinstinct", "amd")
_GENERIC_SUFFIX = "gpu"


def _normalise(name: str) -> str:
    """Lowercase and drop everything but letters and digits (spaces, ``-``, ``_``, ...)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _candidates(key: str) -> list[str]:
    """``key`` plus the forms without a vendor prefix and/or a trailing ``gpu``."""
    forms = [key]
    if key.endswith(_GENERIC_SUFFIX) and len(key) > len(_GENERIC_SUFFIX):
        forms.append(key[: -len(_GENERIC_SUFFIX)])
    for form in list(forms):
        for prefix in _VENDOR_PREFIXES:
            if form.startswith(prefix) and len(form) > len(prefix):
                forms.append(form[len(prefix) :])
                break
    return forms


class _Spec:
    """Reads one YAML file, reporting errors as ``file: key.path: problem``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ValueError(f"{self.path}: {key}: {problem}")

    def mapping(self, node: Any, *, key: str, allowed: frozenset[str]) -> dict[str, Any]:
        if not isinstance(node, dict):
            self.fail(key, "expected a mapping")
        extra = sorted(set(node) - allowed)
        if extra:
            self.fail(key, f"unknown key(s) {extra}")
        return node

    def text(self, node: dict[str, Any], *, key: str, path: str) -> str:
        value = node.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "missing or empty string")
        return value

    def number(
        self, parent: dict[str, Any], *, key: str, path: str, prov: dict[str, Provenance]
    ) -> float:
        """A ``{value, kind, source}`` entry at YAML ``path``; provenance keyed without "specs."."""
        if key not in parent:
            self.fail(path, "missing")
        entry = self.mapping(parent[key], key=path, allowed=frozenset(("value", "kind", "source")))
        kind = entry.get("kind")
        if kind not in _KINDS:
            self.fail(path, f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
        source = self.text(entry, key="source", path=f"{path}.source")
        value = entry.get("value")
        try:  # PyYAML reads 989.4e12 (no exponent sign) as a string
            number = float(value) if not isinstance(value, bool) else float("nan")
        except (TypeError, ValueError):
            self.fail(path, f"value {value!r} is not a number")
        if not math.isfinite(number) or number <= 0:
            self.fail(path, f"value {value!r} must be a positive finite number")
        prov[path.removeprefix("specs.")] = Provenance(source=source.strip(), kind=kind)
        return number

    def integer(
        self, parent: dict[str, Any], *, key: str, path: str, prov: dict[str, Provenance]
    ) -> int:
        number = self.number(parent, key=key, path=path, prov=prov)
        if not number.is_integer():
            self.fail(path, f"value {number} must be an integer")
        return int(number)

    def link(self, root: dict[str, Any], *, key: str, prov: dict[str, Provenance]) -> Link:
        if key not in root:
            self.fail(key, "missing")
        node = self.mapping(root[key], key=key, allowed=_LINK_KEYS)
        return Link(
            kind=self.text(node, key="kind", path=f"{key}.kind"),
            bandwidth_bytes_per_s=self.number(
                node, key="bandwidth_bytes_per_s", path=f"{key}.bandwidth_bytes_per_s", prov=prov
            ),
            latency_s=self.number(node, key="latency_s", path=f"{key}.latency_s", prov=prov),
        )

    def dense_rates(
        self, specs: dict[str, Any], *, prov: dict[str, Provenance]
    ) -> dict[str, float]:
        key = "specs.dense_flops_per_s"
        if "dense_flops_per_s" not in specs:
            self.fail(key, "missing")
        rates = specs["dense_flops_per_s"]
        if not isinstance(rates, dict):
            self.fail(key, "expected a mapping of dtype to {value, kind, source}")
        for dtype in _REQUIRED_DTYPES:
            if dtype not in rates:
                self.fail(f"{key}.{dtype}", "missing")
        return {
            str(dtype): self.number(rates, key=dtype, path=f"{key}.{dtype}", prov=prov)
            for dtype in rates
        }

    def aliases(self, root: dict[str, Any]) -> tuple[str, ...]:
        aliases = root.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            self.fail("aliases", "expected a list of strings")
        return tuple(aliases)

    def gpu(self) -> GPU:
        with self.path.open(encoding="utf-8") as fh:
            root = self.mapping(yaml.safe_load(fh), key="<root>", allowed=_TOP_KEYS)
        if "specs" not in root:
            self.fail("specs", "missing")
        specs = self.mapping(root["specs"], key="specs", allowed=_SPEC_KEYS)
        prov: dict[str, Provenance] = {}
        floats = {k: self.number(specs, key=k, path=f"specs.{k}", prov=prov) for k in _FLOAT_SPECS}
        ints = {k: self.integer(specs, key=k, path=f"specs.{k}", prov=prov) for k in _INT_SPECS}
        return GPU(
            name=self.text(root, key="name", path="name"),
            vendor=self.text(root, key="vendor", path="vendor"),
            aliases=self.aliases(root),
            dense_flops_per_s=self.dense_rates(specs, prov=prov),
            intra_node=self.link(root, key="intra_node", prov=prov),
            inter_node=self.link(root, key="inter_node", prov=prov),
            provenance=prov,
            **floats,
            **ints,
        )


def load_gpu_file(path: Path) -> GPU:
    """Parse and validate one GPU file; raises ValueError naming the file and key path."""
    return _Spec(path).gpu()


@cache
def _database() -> dict[str, GPU]:
    """All GPUs keyed by canonical name."""
    gpus = [load_gpu_file(path) for path in sorted(_DATA_DIR.glob("*.yaml"))]
    by_name = {gpu.name: gpu for gpu in gpus}
    if len(by_name) != len(gpus):
        raise ValueError(f"{_DATA_DIR}: two GPU files share a name")
    return by_name


@cache
def _alias_index() -> dict[str, str]:
    """Normalised name or alias -> canonical name; an alias claimed twice is an error."""
    index: dict[str, str] = {}
    for gpu in _database().values():
        for alias in (gpu.name, *gpu.aliases):
            key = _normalise(alias)
            if index.setdefault(key, gpu.name) != gpu.name:
                raise ValueError(f"alias {alias!r} of {gpu.name} also names {index[key]}")
    return index


def _unknown(name: str) -> UnknownGPUError:
    index = _alias_index()
    close = difflib.get_close_matches(_normalise(name), index, n=6, cutoff=0.5)
    suggestions = list(dict.fromkeys(index[key] for key in close))[:3]
    hint = f"did you mean {', '.join(suggestions)}?" if suggestions else "no close match;"
    known = ", ".join(sorted(_database()))
    return UnknownGPUError(f"unknown GPU {name!r}: {hint} known GPUs: {known}")


def resolve_gpu_name(name: str) -> str:
    """Canonical database name for ``name`` (case-insensitive; ``-``, ``_``, spaces ignored).

    Also accepts a leading vendor (``NVIDIA``, ``AMD``) and a trailing ``GPU``, so
    measurement-file spellings like ``Nvidia H100 GPU`` resolve.
    """
    if not isinstance(name, str):
        raise UnknownGPUError(f"GPU name must be a string, got {name!r}")
    index = _alias_index()
    for key in _candidates(_normalise(name)):
        if key in index:
            return index[key]
    raise _unknown(name)


def load_gpu(name: str) -> GPU:
    """The GPU named ``name`` (any accepted spelling); files are parsed once and cached."""
    return _database()[resolve_gpu_name(name)]


def list_gpus() -> list[GPU]:
    """Every GPU in the database, sorted by canonical name."""
    return [gpu for _, gpu in sorted(_database().items())]
