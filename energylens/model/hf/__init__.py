"""Local Hugging Face ``config.json`` files: the reader, the builder registry, the builders.

One builder per family lives in :mod:`energylens.model.hf.builders` and registers itself
for its ``model_type`` values with :func:`hf_builder`.
"""

from energylens.model.hf.load import load_hf_config
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import (
    HFBuilder,
    hf_builder,
    registered_builders,
    supported_model_types,
)

__all__ = [
    "HFBuilder",
    "HFConfig",
    "hf_builder",
    "load_hf_config",
    "registered_builders",
    "supported_model_types",
]
