"""MPT (MosaicML, 7B/30B): MHA without biases, a plain GELU MLP of ``expansion_ratio`` x
``d_model``, LayerNorm, ALiBi, tied embeddings.

Layers (``transformers`` ``modeling_mpt.py`` and ``MptConfig``; MosaicML's remote
``modeling_mpt.py``, recalled): a fused ``Wqkv`` and ``out_proj``, ``up_proj`` and
``down_proj``, each with a bias unless ``no_bias`` (the released 7B and 30B say true);
``norm_1`` / ``norm_2`` LayerNorms (``low_precision_layernorm``, without biases where
``no_bias``); ALiBi where ``attn_config.alibi`` (the released checkpoints; learned
positions otherwise); the output projection reuses ``wte``. ``attn_config.attn_type``
``multiquery_attention`` has one K/V head, ``grouped_query_attention`` ``kv_n_heads``.
Approximated: the LayerNorms are counted with a bias, as every LayerNorm family's is.
"""

from __future__ import annotations

from typing import Any

from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: attn_config.attn_type values: a KV head per query head, one for all, or ``kv_n_heads``.
_MHA, _MQA, _GQA = "multihead_attention", "multiquery_attention", "grouped_query_attention"


@hf_builder("mpt")
def build_mpt(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """mpt: its own names (``d_model``, ``n_heads``, ``n_layers``, ``expansion_ratio``,
    ``no_bias``, ``attn_config``)."""
    del model_type
    hidden = cfg.integer("d_model")
    heads = cfg.integer("n_heads")
    attn = cfg.section("attn_config")
    kind = (attn.text("attn_type") if attn else None) or _MHA
    if kind not in (_MHA, _MQA, _GQA):
        raise cfg.error(f"field 'attn_config.attn_type' = {kind!r}: expected one of "
                        f"{_MHA}, {_MQA}, {_GQA}")
    kv_heads = heads if kind == _MHA else 1 if kind == _MQA else \
        attn.integer("kv_n_heads") if attn else heads
    if heads % kv_heads:
        raise cfg.error(f"field 'n_heads' = {heads} is not a multiple of the "
                        f"{kv_heads} KV heads")
    alibi = attn.flag("alibi", True) if attn else True
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=kv_heads,
        num_layers=cfg.num_layers("n_layers"),
        ffn_size=cfg.integer("expansion_ratio", default=4) * hidden,
        tie=cfg.flag("tie_word_embeddings", True), qkv_bias=not cfg.flag("no_bias", True),
        hidden_key="d_model", heads_key="n_heads",
        notes="ALiBi" if alibi else "learned positions (the table is not counted)")
    fields["position_encoding"] = "alibi" if alibi else "learned"
    return finish(fields)


@hf_writer("mpt")
def write_mpt(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """MPT's own field names and its ``attn_config``."""
    kind = _MHA if model.num_kv_heads == model.num_heads else \
        _MQA if model.num_kv_heads == 1 else _GQA
    attn: dict[str, Any] = {"attn_type": kind, "alibi": model.position_encoding == "alibi"}
    if kind == _GQA:
        attn["kv_n_heads"] = model.num_kv_heads
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "d_model": model.hidden_size, "n_heads": model.num_heads,
            "n_layers": model.num_layers,
            "expansion_ratio": model.ffn_size // model.hidden_size,
            "max_seq_len": model.max_context_tokens or 2048, "vocab_size": model.vocab_size,
            "no_bias": not model.qkv_bias, "tie_word_embeddings": model.tie_word_embeddings,
            "norm_type": "low_precision_layernorm", "learned_pos_emb":
            model.position_encoding == "learned", "attn_config": attn}
