"""Models: einsum spec, architecture configs, families, the zoo, HF config.json builders.

``spec`` (einsum ops) <- ``families`` (layers bound to a model's sizes, ``build_graph``);
``config`` (ModelConfig and its checks) <- ``zoo`` (models.yaml, name lookup) and ``hf``
(local ``config.json``: reader, builder registry, one builder module per family);
``params`` counts parameters from the shapes. See README.md beside this file.
"""

from energylens.model.config import MLAConfig, ModelConfig, MoEConfig
from energylens.model.families import ModelGraph, build_graph
from energylens.model.hf import hf_builder, load_hf_config, supported_model_types
from energylens.model.params import parameter_count
from energylens.model.zoo import get_model, list_models, model_info, resolve_model_name

__all__ = [
    "MLAConfig",
    "ModelConfig",
    "ModelGraph",
    "MoEConfig",
    "build_graph",
    "get_model",
    "hf_builder",
    "list_models",
    "load_hf_config",
    "model_info",
    "parameter_count",
    "resolve_model_name",
    "supported_model_types",
]
