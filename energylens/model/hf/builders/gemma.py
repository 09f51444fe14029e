"""Gemma 1, 2 and 3: GeGLU, tied embeddings; Gemma 2 and 3 interleave sliding-window
(local) and global layers; a Gemma 3 checkpoint's ``text_config`` is read as the text
decoder."""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish, layer_types
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: Every n-th layer is global where a config gives neither ``layer_types`` nor a
#: pattern: Gemma 2 alternates (Gemma2Config), Gemma 3 has 5 local per global
#: (Gemma3TextConfig ``sliding_window_pattern`` 6).
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}


@hf_builder("gemma", "gemma2", "gemma3", "gemma3_text")
def build_gemma(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """gemma: full attention in every layer. gemma2 / gemma3_text: the window on the
    ``sliding_attention`` layers of ``layer_types``, else on all but every
    ``sliding_window_pattern``-th layer (Gemma 2: the even layers). GeGLU (whatever its
    ``hidden_act`` says: GemmaMLP has gate, up and down projections) counts as a gated
    MLP; Gemma 2 and 3's pre/post norms and soft-capping are left out."""
    f = decoder_fields(cfg, name)
    n = f["num_layers"]
    f["tie_word_embeddings"] = cfg.flag("tie_word_embeddings", True)
    if model_type == "gemma":
        return finish(f)
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


@hf_writer("gemma", "gemma2", "gemma3", "gemma3_text")
def write_gemma(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields with ``layer_types`` (Gemma 1: none, and no window); a gemma3
    checkpoint nests them in text_config."""
    text = decoder_json(model, model_type="gemma3_text" if model_type == "gemma3" else model_type)
    text["hidden_activation"] = text.pop("hidden_act")
    if model_type == "gemma":
        if model.sliding_window is not None:
            raise ModelConfigError(f"{model.name}: gemma (Gemma 1) has no sliding window")
        return text
    text["sliding_window"] = model.sliding_window
    text["layer_types"] = layer_types(model)
    if model_type != "gemma3":
        return text
    return {"model_type": model_type, "text_config": text}
