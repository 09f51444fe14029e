"""GGUF files (llama.cpp's checkpoints): the header reader and the loader that reads one
as the config.json of its family (:mod:`energylens.model.gguf.load`)."""

from energylens.model.gguf.load import load_gguf
from energylens.model.gguf.reader import GGUFHeader, read_gguf_header

__all__ = ["GGUFHeader", "load_gguf", "read_gguf_header"]
