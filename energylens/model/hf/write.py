"""Write a ModelConfig as the ``config.json`` of its family (the inverse of loading it)."""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import qk_norm_json
from energylens.model.hf.exclusions import exclude_list
from energylens.model.hf.registry import registered_writers

#: The ``quantization_config`` a checkpoint of each weight dtype declares (what the loader
#: reads back); 16-bit checkpoints declare none.
QUANTIZATION_CONFIGS: dict[str, dict[str, Any]] = {
    "fp8": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    "int4": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
    "mxfp4": {"quant_method": "mxfp4"},
}
#: The key under which each dtype's ``quantization_config`` lists the modules it keeps in
#: 16 bits (ModelOpt's ``ignore``; Hugging Face's FP8, AWQ and MXFP4 configs
#: ``modules_to_not_convert``).
EXCLUDE_KEYS = {"nvfp4": "ignore"}


def write_hf_config(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """``model`` as the ``config.json`` fields of ``model_type``: reading them back with
    :func:`energylens.model.hf.load_hf_config` gives the same shapes, weight dtype and
    context (``max_position_embeddings``, where the model has one).

    Raises:
        ModelConfigError: no writer is registered for ``model_type``.
    """
    writer = registered_writers().get(model_type)
    if writer is None:
        raise ModelConfigError(f"no config.json writer for model_type {model_type!r} "
                               f"(writers: {', '.join(sorted(registered_writers()))})")
    fields = writer(model, model_type=model_type)
    text = fields.get("text_config")  # a vision-language checkpoint: the decoder's section
    decoder = text if isinstance(text, dict) else fields
    decoder.update(qk_norm_json(model, model_type=model_type))
    if model.max_context_tokens is not None:
        decoder["max_position_embeddings"] = model.max_context_tokens
    if model.weight_dtype in QUANTIZATION_CONFIGS:
        quantization = dict(QUANTIZATION_CONFIGS[model.weight_dtype])
        held = exclude_list(model)
        if held:
            quantization[EXCLUDE_KEYS.get(model.weight_dtype, "modules_to_not_convert")] = held
        fields["quantization_config"] = quantization
    return fields
