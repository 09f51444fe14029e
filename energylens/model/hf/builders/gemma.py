"""Gemma 2 and Gemma 3: interleaved sliding-window (local) and global layers, GeGLU,
tied embeddings; a Gemma 3 checkpoint's ``text_config`` is read as the text decoder."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish, layer_types
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: Every n-th layer is global where a config gives neither ``layer_types`` nor a
#: pattern: Gemma 2 alternates (Gemma2Config), Gemma 3 has 5 local per global
#: (Gemma3TextConfig ``sliding_window_pattern`` 6).
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}


@hf_builder("gemma2", "gemma3", "gemma3_text")
def build_gemma(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """gemma2 / gemma3_text: the window on the ``sliding_attention`` layers of
    ``layer_types``, else on all but every ``sliding_window_pattern``-th layer (Gemma 2:
    the even layers). GeGLU counts as a gated MLP; pre/post norms and soft-capping are
    left out."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    f["tie_word_embeddings"] = cfg.flag("tie_word_embeddings", True)
    if cfg.has("sliding_window"):
        types = cfg.list_of("layer_types", str)
        if types is not None:
            sliding = sum(t == "sliding_attention" for t in types)
        else:
            every = cfg.integer("sliding_window_pattern", default=_DEFAULT_PATTERN[model_type])
            sliding = sum(1 for i in range(n) if (i + 1) % every != 0)
        if sliding:
            f["sliding_window"], f["num_sliding_layers"] = cfg.integer("sliding_window"), sliding
    f["notes"] += "; pre/post norms and logit soft-capping left out"
    return finish(f)


@hf_writer("gemma2", "gemma3", "gemma3_text")
def write_gemma(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields with ``layer_types``; a gemma3 checkpoint nests them in text_config."""
    text = decoder_json(model, model_type="gemma3_text" if model_type == "gemma3" else model_type)
    text["hidden_activation"] = text.pop("hidden_act")
    text["sliding_window"] = model.sliding_window
    text["layer_types"] = layer_types(model)
    if model_type != "gemma3":
        return text
    return {"model_type": model_type, "text_config": text}
