"""Fields that most HF decoder configs spell the same way (the Llama naming)."""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.reader import HFConfig


def decoder_fields(cfg: HFConfig, name: str, *, derive_head_dim: bool = True) -> dict[str, Any]:
    """ModelConfig fields of a Llama-style config: a dense, full-attention GQA decoder.

    Builders start from these and change what their family does differently.
    ``head_dim`` defaults to ``hidden_size / num_attention_heads``, which must then
    divide; a builder that sets the head width itself passes ``derive_head_dim=False``.
    """
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('num_attention_heads')} = {heads} is not a multiple of "
                        f"{cfg.field('num_key_value_heads')} = {kv_heads}")
    if not derive_head_dim:
        head_dim = 0  # set by the builder
    elif cfg.has("head_dim"):
        head_dim = cfg.integer("head_dim")
    else:
        head_dim = head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key="hidden_size",
                                 heads_key="num_attention_heads")
    return {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": cfg.num_layers("num_hidden_layers"),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "ffn_size": cfg.integer("intermediate_size"),
        "gated_mlp": True,
        "vocab_size": cfg.integer("vocab_size"),
        "tie_word_embeddings": cfg.flag("tie_word_embeddings", False),
        "qkv_bias": cfg.flag("attention_bias", False),
        "norm_type": "rmsnorm",
        "attention": "GQA",
        "sliding_window": None,
        "num_sliding_layers": 0,
        "moe": None,
        "mla": None,
        "params_total_published": None,
        "params_active_published": None,
        "notes": f"loaded from a local HF config.json ({name})",
    }


def head_dim_from(cfg: HFConfig, *, hidden: int, heads: int, hidden_key: str,
                  heads_key: str) -> int:
    """``hidden / heads``, which must divide (no ``head_dim`` field to say otherwise)."""
    if hidden % heads:
        raise cfg.error(f"{cfg.field(hidden_key)} = {hidden} is not divisible by "
                        f"{cfg.field(heads_key)} = {heads} (and no head_dim is given)")
    return hidden // heads


def finish(fields: dict[str, Any]) -> ModelConfig:
    """Set the attention kind (MHA/GQA unless MLA) and the family, then build."""
    if fields["attention"] != "MLA":
        fields["attention"] = "MHA" if fields["num_kv_heads"] == fields["num_heads"] else "GQA"
    fields["family"] = "moe" if fields["moe"] is not None else "dense"
    return ModelConfig(**fields)


def sliding_from_layer_types(cfg: HFConfig, default_count: int) -> int:
    """Count ``sliding_attention`` entries of ``layer_types`` if present, else the default."""
    layer_types = cfg.list_of("layer_types", str)
    if layer_types is None:
        return default_count
    return sum(t == "sliding_attention" for t in layer_types)
