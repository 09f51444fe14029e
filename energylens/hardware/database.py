"""Hardware database: one YAML file per GPU under ``energylens/data/gpus``.

Every numeric field carries its provenance (source and kind: datasheet, measured,
assumed or derived), keyed by dotted field name (``dense_flops_per_s.bf16``,
``intra_node.bandwidth_bytes_per_s``). Units are SI: FLOP/s, bytes, bytes/s, watts,
seconds, MHz for clocks. Tensor rates are dense (sparse = dense x ``sparsity_speedup``);
link bandwidths are per direction per GPU.

A file also declares the GPU's rental price (``price_per_hour``: US dollars per
GPU-hour, with kind and source like every number) and, if the GPU lacks measurements of
its own, the measured relative it borrows calibration constants from
(``borrows: {from: <GPU name>, reason: "..."}``). The database checks borrows across
files: the relative must exist and no chain may loop. See ``README.md`` in this folder.

``load_gpu("h100")`` resolves a name case-insensitively, ignoring spaces, dashes and
underscores, a leading vendor and a trailing "GPU"; an unknown name raises
``UnknownGPUError`` with the closest known names. A file that cannot be read raises
``HardwareFileError`` naming the file and the key.

Tests and tools can read other files without touching the shipped database:
``GPUDatabase.from_dirs(GPU_DIR, extra_dir)`` or ``GPUDatabase.from_files([...])``.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args

import yaml

from energylens.errors import ConfigError, HardwareFileError, UnknownGPUError
from energylens.yamlfile import safe_load

ProvenanceKind = Literal["datasheet", "measured", "assumed", "derived"]


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a hardware number comes from."""

    source: str
    kind: ProvenanceKind


#: How a node's GPUs are wired (``intra_node.topology``): ``switch``, every group of the
#: node gets the link's bandwidth (NVSwitch, a PCIe switch; full meshes such as AMD's xGMI
#: are priced so too, docs/gpus.md); ``pairs``, a bridge joins GPUs two by two and a larger
#: group runs over ``beyond_pair_bandwidth_bytes_per_s`` (``beyond_pair_kind``).
TOPOLOGIES = ("switch", "pairs")


@dataclass(frozen=True, kw_only=True)
class Link:
    """A scale-up or scale-out interconnect, bandwidth per direction per GPU."""

    kind: str  # "nvswitch", "nvlink-pairwise", "pcie", "xgmi", "infiniband", ...
    bandwidth_bytes_per_s: float
    latency_s: float
    topology: str = "switch"  # a TOPOLOGIES name
    beyond_pair_kind: str | None = None  # ``pairs``: the link of a group larger than two
    beyond_pair_bandwidth_bytes_per_s: float | None = None

    @property
    def between_pairs_kind(self) -> str | None:
        """``pairs``: the kind a group larger than two runs on, the bridged pairs joined over
        ``beyond_pair_kind`` (``nvlink-pairwise/pcie-between-pairs``). It is calibrated apart
        from that link between unbridged cards: the hosts measured differ (docs/gpus.md)."""
        if self.beyond_pair_kind is None:
            return None
        return f"{self.kind}/{self.beyond_pair_kind}-between-pairs"


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
    price_per_hour: float  # rental price, US dollars per GPU-hour
    compute_capability: float | None = None  # CUDA compute capability (NVIDIA GPUs only)
    borrows_from: str | None = None  # canonical name of the measured relative, if any
    borrow_reason: str | None = None  # why that relative (set exactly when borrows_from is)
    engines_from: str | None = None  # same die or software stack: its engine fits come first
    engines_reason: str | None = None  # why (set exactly when engines_from is)
    provenance: dict[str, Provenance] = field(default_factory=dict)

    @property
    def link_kinds(self) -> tuple[str, ...]:
        """Every interconnect kind a deployment on this GPU may use: the scale-up link,
        the one beyond a bridged pair, the scale-out network."""
        kinds = (self.intra_node.kind, self.intra_node.between_pairs_kind, self.inter_node.kind)
        return tuple(dict.fromkeys(k for k in kinds if k is not None))

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak for ``dtype``; fp8 and fp4 fall back to bf16 on GPUs without fp8 or
        fp4 units (the weights are dequantised and the GEMM runs in 16 bits).

        Raises:
            ConfigError: the GPU file gives no rate for ``dtype`` (a checkpoint or
                deployment dtype this GPU cannot be priced for).
        """
        if dtype in self.dense_flops_per_s:
            return self.dense_flops_per_s[dtype]
        if dtype in ("fp8", "fp4"):
            return self.dense_flops_per_s["bf16"]
        known = ", ".join(sorted(self.dense_flops_per_s))
        raise ConfigError(f"GPU {self.name} has no tensor rate for dtype {dtype!r} "
                          f"(its file gives {known})")


#: The shipped GPU files, one per GPU.
GPU_DIR = Path(__file__).parents[1] / "data" / "gpus"
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
#: Specs a GPU file may leave out (None): the CUDA compute capability of an NVIDIA GPU.
_OPTIONAL_SPECS = ("compute_capability",)
_SPEC_KEYS = frozenset(("dense_flops_per_s", *_FLOAT_SPECS, *_INT_SPECS, *_OPTIONAL_SPECS))
_TOP_KEYS = frozenset(("name", "vendor", "aliases", "specs", "intra_node", "inter_node",
                       "price_per_hour", "borrows"))
_LINK_KEYS = frozenset(("kind", "bandwidth_bytes_per_s", "latency_s", "topology",
                        "beyond_pair_kind", "beyond_pair_bandwidth_bytes_per_s"))
_BORROW_KEYS = frozenset(("from", "reason", "engines_from", "engines_reason"))
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
        raise HardwareFileError(f"{self.path}: {key}: {problem}")

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
        kind: Any = entry.get("kind")
        if kind not in _KINDS:
            self.fail(path, f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
        source = self.text(entry, key="source", path=f"{path}.source")
        value: Any = entry.get("value")
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
        topology = node.get("topology", "switch")
        if topology not in TOPOLOGIES:
            self.fail(f"{key}.topology", f"expected one of {', '.join(TOPOLOGIES)}, "
                                         f"got {topology!r}")
        pairs = topology == "pairs"
        for name in ("beyond_pair_kind", "beyond_pair_bandwidth_bytes_per_s"):
            if pairs != (name in node):
                self.fail(f"{key}.{name}", "required with topology pairs, and only with it")
        return Link(
            kind=self.text(node, key="kind", path=f"{key}.kind"),
            bandwidth_bytes_per_s=self.number(
                node, key="bandwidth_bytes_per_s", path=f"{key}.bandwidth_bytes_per_s", prov=prov
            ),
            latency_s=self.number(node, key="latency_s", path=f"{key}.latency_s", prov=prov),
            topology=topology,
            beyond_pair_kind=(self.text(node, key="beyond_pair_kind",
                                        path=f"{key}.beyond_pair_kind") if pairs else None),
            beyond_pair_bandwidth_bytes_per_s=(self.number(
                node, key="beyond_pair_bandwidth_bytes_per_s",
                path=f"{key}.beyond_pair_bandwidth_bytes_per_s", prov=prov) if pairs else None),
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

    def borrows(self, root: dict[str, Any]) -> dict[str, str | None]:
        """The optional ``borrows:`` mapping as GPU fields (``from`` and ``reason``; the
        optional ``engines_from`` and ``engines_reason`` together); names checked later."""
        out: dict[str, str | None] = {"borrows_from": None, "borrow_reason": None,
                                      "engines_from": None, "engines_reason": None}
        if "borrows" not in root:
            return out
        node = self.mapping(root["borrows"], key="borrows", allowed=_BORROW_KEYS)
        out["borrows_from"] = self.text(node, key="from", path="borrows.from").strip()
        out["borrow_reason"] = self.text(node, key="reason", path="borrows.reason").strip()
        if "engines_from" in node or "engines_reason" in node:
            out["engines_from"] = self.text(node, key="engines_from",
                                            path="borrows.engines_from").strip()
            out["engines_reason"] = self.text(node, key="engines_reason",
                                              path="borrows.engines_reason").strip()
        return out

    def gpu(self) -> GPU:
        try:
            loaded = safe_load(self.path.read_text(encoding="utf-8"))
        except OSError as exc:
            self.fail("<file>", f"cannot be read ({exc.strerror or exc.__class__.__name__})")
        except yaml.YAMLError as exc:
            self.fail("<file>", f"not valid YAML ({exc.__class__.__name__})")
        root = self.mapping(loaded, key="<root>", allowed=_TOP_KEYS)
        if "specs" not in root:
            self.fail("specs", "missing")
        specs = self.mapping(root["specs"], key="specs", allowed=_SPEC_KEYS)
        prov: dict[str, Provenance] = {}
        floats: dict[str, Any] = {
            k: self.number(specs, key=k, path=f"specs.{k}", prov=prov) for k in _FLOAT_SPECS}
        ints: dict[str, Any] = {
            k: self.integer(specs, key=k, path=f"specs.{k}", prov=prov) for k in _INT_SPECS}
        optional: dict[str, Any] = {
            k: self.number(specs, key=k, path=f"specs.{k}", prov=prov) if k in specs else None
            for k in _OPTIONAL_SPECS}
        borrows = self.borrows(root)
        return GPU(
            name=self.text(root, key="name", path="name"),
            vendor=self.text(root, key="vendor", path="vendor"),
            aliases=self.aliases(root),
            dense_flops_per_s=self.dense_rates(specs, prov=prov),
            intra_node=self.link(root, key="intra_node", prov=prov),
            inter_node=self.link(root, key="inter_node", prov=prov),
            price_per_hour=self.number(root, key="price_per_hour", path="price_per_hour",
                                       prov=prov),
            borrows_from=borrows["borrows_from"],
            borrow_reason=borrows["borrow_reason"],
            engines_from=borrows["engines_from"],
            engines_reason=borrows["engines_reason"],
            provenance=prov,
            **floats,
            **ints,
            **optional,
        )


def load_gpu_file(path: Path) -> GPU:
    """Parse and validate one GPU file (``borrows.from`` is checked by :class:`GPUDatabase`).

    Raises:
        HardwareFileError: naming the file and the key path.
    """
    return _Spec(Path(path)).gpu()


class GPUDatabase:
    """A set of GPU files: names and aliases resolved, ``borrows:`` checked across files.

    Every ``borrows.from`` must name a GPU of the same database (any accepted spelling;
    stored as its canonical name) and no chain of borrows may come back to where it began.
    """

    def __init__(self, files: Iterable[Path]) -> None:
        """Parse ``files``.

        Raises:
            HardwareFileError: a file that cannot be read, two files with one name, an
                alias claimed twice, a relative that is not in the database, or a cycle.
        """
        self._files: dict[str, Path] = {}
        parsed: dict[str, GPU] = {}
        for path in files:
            gpu = load_gpu_file(path)
            if gpu.name in parsed:
                raise HardwareFileError(
                    f"{path}: name: {gpu.name!r} is also the name in {self._files[gpu.name]}")
            parsed[gpu.name] = gpu
            self._files[gpu.name] = Path(path)
        self._index = self._alias_index(parsed)
        self._gpus = {name: self._with_relative(gpu) for name, gpu in parsed.items()}
        self._check_cycles()

    @classmethod
    def from_files(cls, paths: Iterable[str | Path]) -> GPUDatabase:
        """A database of exactly these files."""
        return cls(Path(p) for p in paths)

    @classmethod
    def from_dirs(cls, *dirs: str | Path) -> GPUDatabase:
        """A database of every ``*.yaml`` in ``dirs`` (e.g. the shipped folder plus a test's)."""
        return cls(path for d in dirs for path in sorted(Path(d).glob("*.yaml")))

    def _alias_index(self, gpus: dict[str, GPU]) -> dict[str, str]:
        """Normalised name or alias -> canonical name; an alias claimed twice is an error."""
        index: dict[str, str] = {}
        for gpu in gpus.values():
            for alias in (gpu.name, *gpu.aliases):
                key = _normalise(alias)
                if index.setdefault(key, gpu.name) != gpu.name:
                    raise HardwareFileError(
                        f"{self._files[gpu.name]}: aliases: {alias!r} also names "
                        f"{index[key]} ({self._files[index[key]]})")
        for gpu in gpus.values():  # "NVIDIA GH200 480GB" also answers to "GH200 480GB"
            for alias in gpu.aliases:
                for key in _candidates(_normalise(alias))[1:]:
                    index.setdefault(key, gpu.name)
        return index

    def _with_relative(self, gpu: GPU) -> GPU:
        """``gpu`` with ``borrows_from`` and ``engines_from`` resolved to canonical names
        of this database."""
        names: dict[str, str] = {}
        for key, value in (("from", gpu.borrows_from), ("engines_from", gpu.engines_from)):
            if value is None:
                continue
            try:
                names[key] = self.resolve(value)
            except UnknownGPUError as exc:
                raise HardwareFileError(f"{self._files[gpu.name]}: borrows.{key}: {exc}") \
                    from None
        if names.get("engines_from") == gpu.name:
            raise HardwareFileError(f"{self._files[gpu.name]}: borrows.engines_from: names "
                                    "the GPU itself")
        return replace(gpu, borrows_from=names.get("from"),
                       engines_from=names.get("engines_from"))

    def _check_cycles(self) -> None:
        for name in self._gpus:
            chain = [name]
            while (relative := self._gpus[chain[-1]].borrows_from) is not None:
                if relative in chain:
                    loop = " -> ".join([*chain[chain.index(relative):], relative])
                    raise HardwareFileError(
                        f"{self._files[name]}: borrows.from: borrowing goes round in a circle "
                        f"({loop}); one of them must have measurements and no borrows")
                chain.append(relative)

    def _unknown(self, name: str) -> UnknownGPUError:
        close = difflib.get_close_matches(_normalise(name), self._index, n=6, cutoff=0.5)
        suggestions = list(dict.fromkeys(self._index[key] for key in close))[:3]
        hint = f"did you mean {', '.join(suggestions)}?" if suggestions else "no close match;"
        known = ", ".join(sorted(self._files))
        return UnknownGPUError(f"unknown GPU {name!r}: {hint} known GPUs: {known}")

    def resolve(self, name: str) -> str:
        """Canonical name for ``name`` (any accepted spelling); see :func:`resolve_gpu_name`."""
        if not isinstance(name, str):
            raise UnknownGPUError(f"GPU name must be a string, got {name!r}")
        for key in _candidates(_normalise(name)):
            if key in self._index:
                return self._index[key]
        raise self._unknown(name)

    def get(self, name: str) -> GPU:
        """The GPU named ``name`` (any accepted spelling)."""
        return self._gpus[self.resolve(name)]

    def gpus(self) -> list[GPU]:
        """Every GPU, sorted by canonical name."""
        return [gpu for _, gpu in sorted(self._gpus.items())]

    def file_of(self, name: str) -> Path:
        """The file that defines GPU ``name``."""
        return self._files[self.resolve(name)]

    def borrow_chain(self, name: str) -> list[GPU]:
        """``name``'s GPU followed by its relative, the relative's relative, ..."""
        chain = [self.get(name)]
        while chain[-1].borrows_from is not None:
            chain.append(self._gpus[chain[-1].borrows_from])
        return chain

    def borrow_order(self) -> list[GPU]:
        """GPUs that borrow, each after its relative (topological order; ties by name)."""
        depth = {gpu.name: len(self.borrow_chain(gpu.name)) - 1 for gpu in self._gpus.values()}
        return sorted((g for g in self._gpus.values() if g.borrows_from is not None),
                      key=lambda g: (depth[g.name], g.name))


@cache
def default_database() -> GPUDatabase:
    """The shipped GPU files (``energylens/data/gpus``), parsed once."""
    return GPUDatabase.from_dirs(GPU_DIR)


def resolve_gpu_name(name: str) -> str:
    """Canonical database name for ``name`` (case-insensitive; ``-``, ``_``, spaces ignored).

    Also accepts a leading vendor (``NVIDIA``, ``AMD``) and a trailing ``GPU``, so
    measurement-file spellings like ``Nvidia H100 GPU`` resolve.
    """
    return default_database().resolve(name)


def load_gpu(name: str) -> GPU:
    """The GPU named ``name`` (any accepted spelling); files are parsed once and cached."""
    return default_database().get(name)


def list_gpus() -> list[GPU]:
    """Every GPU in the database, sorted by canonical name."""
    return default_database().gpus()

