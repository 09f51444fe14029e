"""DBRX (Databricks): a fine-grained MoE decoder whose config.json nests the attention and
the experts in ``attn_config`` and ``ffn_config`` and names the rest its own way
(``d_model``, ``n_heads``, ``n_layers``, ``max_seq_len``).

Layers (``transformers`` ``modeling_dbrx.py``, read for this builder): a fused ``Wqkv``
without bias (``kv_n_heads`` KV heads of ``d_model / n_heads``), RoPE, LayerNorms without
bias, and in every layer ``moe_num_experts`` gated experts (``w1``, ``v1``, ``w2``; SiLU)
of width ``ffn_hidden_size``, ``moe_top_k`` per token, no shared expert. DBRX's ``clip_qkv``
(a clamp of the fused projection's output) costs nothing the model counts.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig, MoEConfig
from energylens.model.hf.common import finish, head_dim_from
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


def _section(cfg: HFConfig, key: str) -> HFConfig:
    section = cfg.section(key)
    if section is None:
        raise cfg.error(f"{cfg.field(key)} is missing: a DBRX config nests its "
                        f"{'attention' if key == 'attn_config' else 'experts'} there")
    return section


@hf_builder("dbrx")
def build_dbrx(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """DBRX's fields under their own names; ``max_seq_len`` is the context where no
    ``max_position_embeddings`` is given."""
    del model_type
    attn, ffn = _section(cfg, "attn_config"), _section(cfg, "ffn_config")
    hidden, heads = cfg.integer("d_model"), cfg.integer("n_heads")
    kv_heads = attn.integer("kv_n_heads", default=1)  # DbrxAttentionConfig's default
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('n_heads')} = {heads} is not a multiple of "
                        f"{attn.field('kv_n_heads')} = {kv_heads}")
    layers = cfg.num_layers("n_layers")
    expert_ffn = ffn.integer("ffn_hidden_size")
    context = cfg.integer("max_seq_len") if cfg.has("max_seq_len") else None
    fields: dict[str, Any] = {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim_from(cfg, hidden=hidden, heads=heads, hidden_key="d_model",
                                  heads_key="n_heads"),
        "ffn_size": expert_ffn,
        "gated_mlp": True,
        "vocab_size": cfg.integer("vocab_size"),
        "tie_word_embeddings": cfg.flag("tie_word_embeddings", False),
        "qkv_bias": False,
        "norm_type": "layernorm",
        "attention": "GQA",
        "sliding_window": None,
        "num_sliding_layers": 0,
        "moe": MoEConfig(num_experts=ffn.integer("moe_num_experts"),
                         top_k=ffn.integer("moe_top_k"), expert_ffn=expert_ffn,
                         num_shared_experts=0, shared_expert_ffn=0, num_moe_layers=layers,
                         dense_layer_ffn=0),
        "mla": None,
        "params_total_published": None,
        "params_active_published": None,
        "max_context_tokens": context,
        "notes": f"loaded from a local HF config.json ({name}); DBRX: clip_qkv not costed",
    }
    return finish(fields)


@hf_writer("dbrx")
def write_dbrx(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The fields :func:`build_dbrx` reads (its layers are all MoE: a dense model or one
    with dense or shared-expert layers is refused)."""
    moe = model.moe
    if moe is None or moe.num_moe_layers != model.num_layers or moe.num_shared_experts:
        raise ModelConfigError(f"{model.name}: a DBRX config.json describes MoE layers of "
                               "routed experts only")
    return {
        "model_type": model_type,
        "_name_or_path": model.hf_id,
        "d_model": model.hidden_size,
        "n_heads": model.num_heads,
        "n_layers": model.num_layers,
        "vocab_size": model.vocab_size,
        "tie_word_embeddings": model.tie_word_embeddings,
        "attn_config": {"kv_n_heads": model.num_kv_heads},
        "ffn_config": {"ffn_hidden_size": moe.expert_ffn, "moe_num_experts": moe.num_experts,
                       "moe_top_k": moe.top_k},
    }
