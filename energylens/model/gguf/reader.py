"""The header of a GGUF file: its metadata and its tensors' names, shapes and types.

The layout (ggml's ``docs/gguf.md``, versions 2 and 3, little-endian; recalled): the magic
``GGUF``, a uint32 version, a uint64 tensor count and a uint64 metadata count; then each
metadata pair (a string key, a uint32 value type, the value); then each tensor's name,
uint32 dimension count, uint64 dimensions, uint32 ggml type and uint64 data offset. A
string is a uint64 length and UTF-8 bytes; an array a uint32 element type, a uint64 count
and the elements. Only the header is read, never the weights; long arrays (the
tokenizer's vocabulary and scores) are skipped and only their length kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from energylens.errors import ModelConfigError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
#: Scalar value types: struct format of each (ggml's gguf_type enum order).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
#: Arrays longer than this keep only their length (a vocabulary of 150,000 tokens).
KEPT_ARRAY_LENGTH = 4096
#: Bounds no real header exceeds: counts and lengths beyond them mean a damaged file.
MAX_COUNT = 1 << 24
MAX_STRING = 1 << 26


@dataclass(frozen=True, kw_only=True)
class GGUFHeader:
    """What a GGUF file says of itself."""

    path: Path
    metadata: dict[str, Any]  # key -> value (a list for a kept array)
    array_lengths: dict[str, int]  # key -> element count, for every array
    tensors: dict[str, tuple[tuple[int, ...], int]]  # name -> (dimensions, ggml type)

    def error(self, message: str) -> ModelConfigError:
        """A ModelConfigError naming the file."""
        return ModelConfigError(f"{self.path}: {message}")


def read_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file ``path``; ModelConfigError (one line naming the file)
    for a file that cannot be read, is not GGUF, or ends inside its header."""
    try:
        with path.open("rb") as stream:
            return _Reader(stream, path).header()
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read the file ({exc.strerror or exc})") from None


class _Reader:
    def __init__(self, stream: BinaryIO, path: Path) -> None:
        self.stream = stream
        self.path = path

    def header(self) -> GGUFHeader:
        if self.stream.read(4) != MAGIC:
            raise self._error("not a GGUF file (no GGUF magic at its start)")
        version = self._scalar("<I")
        if version not in VERSIONS:
            raise self._error(f"GGUF version {version} is not read (versions "
                              f"{', '.join(map(str, VERSIONS))} are)")
        tensor_count, metadata_count = self._count(), self._count()
        metadata: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for _ in range(metadata_count):
            key = self._string()
            kind = self._scalar("<I")
            if kind == ARRAY:
                value, lengths[key] = self._array()
            else:
                value = self._value(kind)
            if value is not None:
                metadata[key] = value
        tensors = {}
        for _ in range(tensor_count):
            name = self._string()
            dims = tuple(self._scalar("<Q") for _ in range(self._scalar("<I")))
            kind = self._scalar("<I")
            self._scalar("<Q")  # offset of its data
            tensors[name] = (dims, kind)
        return GGUFHeader(path=self.path, metadata=metadata, array_lengths=lengths,
                          tensors=tensors)

    def _error(self, message: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {message}")

    def _read(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise self._error("the file ends inside its GGUF header (truncated?)")
        return data

    def _scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self._read(struct.calcsize(fmt)))[0]

    def _count(self) -> int:
        count = int(self._scalar("<Q"))
        if count > MAX_COUNT:
            raise self._error(f"a GGUF header count of {count} (a damaged file?)")
        return count

    def _string(self) -> str:
        size = int(self._scalar("<Q"))
        if size > MAX_STRING:
            raise self._error(f"a GGUF string of {size} bytes (a damaged file?)")
        return self._read(size).decode("utf-8", errors="replace")

    def _value(self, kind: int) -> Any:
        if kind == STRING:
            return self._string()
        if kind not in SCALARS:
            raise self._error(f"unknown GGUF value type {kind}")
        return self._scalar(SCALARS[kind])

    def _array(self) -> tuple[list[Any] | None, int]:
        """The array's elements (None past KEPT_ARRAY_LENGTH: skipped) and its length."""
        kind, count = self._scalar("<I"), self._count()
        keep = count <= KEPT_ARRAY_LENGTH
        if kind in SCALARS and not keep:
            self._read(struct.calcsize(SCALARS[kind]) * count)
            return None, count
        if kind == ARRAY:
            raise self._error("nested GGUF arrays are not read")
        values = [self._value(kind) for _ in range(count)]
        return (values if keep else None), count
