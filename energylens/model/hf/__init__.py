"""Local Hugging Face ``config.json`` files: the reader, the builder registry, the builders.

One builder per family lives in :mod:`energylens.model.hf.builders` and registers itself
for its ``model_type`` values with :func:`hf_builder` (and its inverse with
:func:`hf_writer`); a type without a builder is read as a generic decoder
(:mod:`energylens.model.hf.generic`).
"""

from energylens.model.hf.load import ModelApproximationWarning, load_hf_config, read_model_type
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import (
    HFBuilder,
    HFWriter,
    hf_builder,
    hf_writer,
    registered_builders,
    registered_writers,
    supported_model_types,
)
from energylens.model.hf.write import write_hf_config

__all__ = [
    "HFBuilder",
    "HFConfig",
    "HFWriter",
    "ModelApproximationWarning",
    "hf_builder",
    "hf_writer",
    "load_hf_config",
    "read_model_type",
    "registered_builders",
    "registered_writers",
    "supported_model_types",
    "write_hf_config",
]
