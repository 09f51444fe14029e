"""ChatGLM2, ChatGLM3 and GLM-4 (THUDM/Zhipu's remote-code ``chatglm``: chatglm2-6b,
chatglm3-6b, glm-4-9b and glm-4-9b-chat): a Llama-like decoder under Megatron-style names.

What the family's code fixes (the checkpoints' ``modeling_chatglm.py`` and
``configuration_chatglm.py``, recalled, not read here): ``num_layers`` layers of
``hidden_size``; ``num_attention_heads`` query heads of ``kv_channels`` (default 128);
grouped keys and values where ``multi_query_attention`` is set, ``multi_query_group_num``
KV heads (default 1), else one per head; a fused ``query_key_value`` projection with a bias
where ``add_qkv_bias`` says (default false); the MLP ``dense_h_to_4h`` of 2 x
``ffn_hidden_size`` split into gate and up (SwiGLU) and ``dense_4h_to_h``; biases on
``dense`` and the MLP only where ``add_bias_linear`` (default false); RMSNorm where
``rmsnorm`` (default true), else LayerNorm; an ``output_layer`` of its own (untied unless
``tie_word_embeddings`` says so); the vocabulary ``padded_vocab_size``; the context
``seq_length``. The GLM-4 and ChatGLM2/3 checkpoints give every size field, so none is
defaulted here.

Approximated: the rotary embedding turns half of each head's dims (``rotary_dim`` =
``kv_channels`` / 2) but the rope op counts the whole head; ``add_bias_linear`` biases are
neither counted nor priced (noted); ``apply_residual_connection_post_layernorm`` moves the
residual's source, not a cost. The first ChatGLM-6B (``inner_hidden_size``, a GELU MLP, 2D
positions) is a different layout under the same model_type: refused by name.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import PLAIN_DECODER_DEFAULTS, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("chatglm")
def build_chatglm(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """chatglm: ChatGLM2/3 and GLM-4's fields (a gated MLP, GQA by multi_query_group_num)."""
    if cfg.has("inner_hidden_size") or cfg.has("position_encoding_2d"):
        raise cfg.error(f"model_type {model_type!r} with inner_hidden_size / "
                        f"position_encoding_2d is the first ChatGLM-6B (a GELU MLP, 2D "
                        f"positions), a layout not modelled: refused")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("multi_query_group_num", default=1) \
        if cfg.flag("multi_query_attention", False) else heads
    if heads % kv_heads:
        raise cfg.error(f"{cfg.field('num_attention_heads')} = {heads} is not a multiple of "
                        f"{cfg.field('multi_query_group_num')} = {kv_heads}")
    notes = [f"loaded from a local HF config.json ({name})",
             "the rope op counts the whole head though ChatGLM's rotary embedding turns half "
             "of it"]
    if cfg.flag("add_bias_linear", False):
        notes.append("dense and MLP biases (add_bias_linear) not counted nor priced")
    fields: dict[str, Any] = {
        "name": name,
        "hf_id": cfg.text("_name_or_path") or "",
        "num_layers": cfg.num_layers("num_layers"),
        "hidden_size": cfg.integer("hidden_size"),
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": cfg.integer("kv_channels", default=128),
        "ffn_size": cfg.integer("ffn_hidden_size"),
        "gated_mlp": True,
        "vocab_size": cfg.integer("padded_vocab_size"),
        "tie_word_embeddings": cfg.flag("tie_word_embeddings", False),
        "qkv_bias": cfg.flag("add_qkv_bias", False),
        "norm_type": "rmsnorm" if cfg.flag("rmsnorm", True) else "layernorm",
        "attention": "GQA",
        **PLAIN_DECODER_DEFAULTS,
        "notes": "; ".join(notes),
        "max_context_tokens": cfg.integer("seq_length") if cfg.has("seq_length") else None,
    }
    return finish(fields)


@hf_writer("chatglm")
def write_chatglm(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """ChatGLM's fields (a dense decoder with a gated MLP and full attention only)."""
    if (model.moe is not None or model.mla is not None or model.hybrid is not None
            or not model.gated_mlp or model.sliding_window is not None or model.parallel_block
            or model.kv_heads_per_layer is not None or model.position_encoding != "rope"
            or model.attention_output_gate or model.cross_attention_layers):
        raise ModelConfigError(f"{model.name}: a {model_type} config.json describes dense "
                               f"full-attention layers with a gated MLP and rotary positions")
    grouped = model.num_kv_heads != model.num_heads
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "architectures": ["ChatGLMModel"], "num_layers": model.num_layers,
            "hidden_size": model.hidden_size, "num_attention_heads": model.num_heads,
            "kv_channels": model.head_dim, "multi_query_attention": grouped,
            "multi_query_group_num": model.num_kv_heads if grouped else 1,
            "ffn_hidden_size": model.ffn_size, "padded_vocab_size": model.vocab_size,
            "add_qkv_bias": model.qkv_bias, "add_bias_linear": False,
            "rmsnorm": model.norm_type == "rmsnorm", "layernorm_epsilon": 1.5625e-07,
            "post_layer_norm": True, "apply_residual_connection_post_layernorm": False,
            "tie_word_embeddings": model.tie_word_embeddings}
