"""Small helpers that validate YAML-loaded data and fail with one-line messages."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_SCALAR_TYPES = (str, int, float, bool, type(None))
MAX_YAML_NODES = 100_000
"""A YAML file expanding to more nodes than this (aliases counted at every use) is refused:
an alias bomb of a few hundred bytes would otherwise expand to billions."""


def _show(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return text.replace("\n", " ")


class Checker:
    """Validates values at key paths of one source file.

    Every failure raises ``error_type`` with a single line
    ``<source>: <key path>: expected <what>, got <value>``.
    """

    def __init__(self, *, source: str, error_type: type[ValueError], prefix: str = "") -> None:
        self.source = source
        self.error_type = error_type
        self.prefix = prefix

    def fail(self, path: str, expected: str, *, got: Any = ...) -> NoReturn:
        """Raise the checker's error for ``path``."""
        where = self.prefix + path if path else (self.prefix.rstrip(".") or "<top level>")
        suffix = "" if got is ... else f", got {_show(got)}"
        raise self.error_type(f"{self.source}: {where}: expected {expected}{suffix}")

    def mapping(
        self,
        value: Any,
        path: str,
        *,
        required: Sequence[str] = (),
        allowed: Sequence[str] | None = None,
    ) -> Mapping[str, Any]:
        """Check that ``value`` is a mapping with string keys, the required keys, no others."""
        if not isinstance(value, Mapping):
            self.fail(path, "a mapping", got=value)
        for key in value:
            if not isinstance(key, str):
                self.fail(path, "string keys", got=key)
            if allowed is not None and key not in allowed:
                self.unknown(_join(path, key), "key", key, allowed)
        for key in required:
            if key not in value:
                self.fail(_join(path, key), "this key to be present")
        return value

    def unknown(self, path: str, what: str, name: str, known: Iterable[str]) -> NoReturn:
        """Raise for an unknown ``name`` at ``path``, suggesting the nearest known one."""
        where = self.prefix + path
        raise self.error_type(f"{self.source}: {where}: unknown {what} {name!r}{suggest(name, known)}")

    def sequence(self, value: Any, path: str, *, non_empty: bool = True) -> list[Any]:
        """Check that ``value`` is a list (non-empty unless told otherwise)."""
        if not isinstance(value, list):
            self.fail(path, "a list", got=value)
        if non_empty and not value:
            self.fail(path, "a non-empty list", got=value)
        return value

    def string(self, value: Any, path: str) -> str:
        """Check that ``value`` is a non-empty string."""
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "a non-empty string", got=value)
        return value

    def choice(self, value: Any, path: str, options: Sequence[str]) -> str:
        """Check that ``value`` is one of ``options``."""
        if value not in options:
            self.fail(path, "one of " + ", ".join(options), got=value)
        return value

    def boolean(self, value: Any, path: str) -> bool:
        """Check that ``value`` is true or false."""
        if not isinstance(value, bool):
            self.fail(path, "true or false", got=value)
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None) -> int:
        """Check that ``value`` is an integer (not a bool), at least ``minimum``."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, "an integer", got=value)
        if minimum is not None and value < minimum:
            self.fail(path, f"an integer >= {minimum}", got=value)
        return value

    def number(self, value: Any, path: str) -> float:
        """Check that ``value`` is a finite number; numeric strings such as '1e-3' are accepted.

        PyYAML reads ``1e-3`` (no dot) as a string, hence the string form.
        """
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, "a number", got=value)
        if not math.isfinite(value):
            self.fail(path, "a finite number", got=value)
        return float(value)

    def scalar(self, value: Any, path: str) -> Any:
        """Check that ``value`` is a string, number, bool or null."""
        if not isinstance(value, _SCALAR_TYPES):
            self.fail(path, "a string, number, bool or null", got=value)
        return value


def suggest(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'? (known: ...)"``: the nearest known names first, then them all."""
    options = list(known)
    keys: dict[str, str] = {}  # case-insensitive, and by the part before a '-' (H100 for H100-SXM)
    for option in options:
        keys.setdefault(option.lower(), option)
    for option in options:
        keys.setdefault(option.lower().split("-")[0], option)
    near = difflib.get_close_matches(name.lower(), keys, n=1, cutoff=0.6)
    hint = f"; did you mean {keys[near[0]]!r}?" if near else ""
    listing = ", ".join(options)
    listing = listing if len(listing) <= 200 else listing[:197] + "..."
    return f"{hint} (known: {listing})"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def read_yaml(path: Path, *, error_type: type[ValueError]) -> Any:
    """Read a YAML file.

    Unreadable files (missing, a folder, no permission), text that is not UTF-8, empty
    files, YAML syntax errors and documents expanding past :data:`MAX_YAML_NODES` nodes
    raise ``error_type`` with one line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error_type(f"{path}: cannot read file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise error_type(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                         f"{exc.start})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            raise error_type(f"{path}: empty file (expected a YAML mapping)")
        if _expanded_size(node, {}) > MAX_YAML_NODES:
            raise error_type(f"{path}: YAML expands to more than {MAX_YAML_NODES:,} nodes "
                             "(aliases used over and over); write the values out")
        repeated = _repeated_key(node, set())
        if repeated is not None:  # PyYAML would keep the last and drop the first silently
            raise error_type(f"{path}: key {repeated.value!r} given twice (line "
                             f"{repeated.start_mark.line + 1}); keep one")
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise error_type(f"{path}: invalid YAML{where}: {problem}") from None


def _repeated_key(node: yaml.Node, seen: set[int]) -> yaml.ScalarNode | None:
    """The first plain key a mapping of the document gives twice (its second node), else
    None; each node is visited once (aliases share theirs)."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in keys:
                    return key
                keys.add(key.value)
            children += [key, value]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    for child in children:
        found = _repeated_key(child, seen)
        if found is not None:
            return found
    return None


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes of the document with every alias expanded (memoised: linear in the file)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a recursive alias counts once instead of looping
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        size = 1
    sizes[id(node)] = min(size, MAX_YAML_NODES + 1)
    return sizes[id(node)]
