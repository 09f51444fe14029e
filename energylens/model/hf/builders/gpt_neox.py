"""GPT-NeoX (EleutherAI GPT-NeoX-20B, the Pythia suite): MHA with biases, a plain GELU MLP
(``dense_h_to_4h`` / ``dense_4h_to_h``), LayerNorm, untied embeddings, rotary positions on
the first ``rotary_pct`` of each head.

Layers (``transformers`` ``modeling_gpt_neox.py`` and ``GPTNeoXConfig``, recalled): a fused
``query_key_value`` projection with a bias where ``attention_bias`` says (default true),
``dense`` back to the hidden width, and with ``use_parallel_residual`` (default true) the
residual ``x + attn(input_layernorm(x)) + mlp(post_attention_layernorm(x))``: attention and
MLP read the same input through two LayerNorms of their own. That parallel residual is
priced as two sequential blocks: the same two norms, GEMMs and bytes, one more dependency
(as Falcon's). The config has no KV-head field: every head has its own keys and values.
Approximations: the rope op counts the whole head though ``rotary_pct`` (0.25 in
GPT-NeoX-20B and Pythia) rotates part of it; the biases of ``dense`` and of the MLP are not
counted (only the q/k/v ones are, as for every family).
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import finish, plain_decoder_fields
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer


@hf_builder("gpt_neox")
def build_gpt_neox(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """gpt_neox: the Llama size names (``hidden_size``, ``num_attention_heads``,
    ``num_hidden_layers``, ``intermediate_size``), MHA, ``attention_bias`` default true,
    embeddings untied unless ``tie_word_embeddings`` says so."""
    del model_type
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    parallel = cfg.flag("use_parallel_residual", True)
    rotary = cfg.raw("rotary_pct") if cfg.has("rotary_pct") else cfg.raw("partial_rotary_factor")
    notes = ["parallel residual (two LayerNorms) priced as sequential" if parallel
             else "sequential residual"]
    if rotary is not None and rotary != 1:
        notes.append(f"the rope op counts the whole head though rotary_pct {rotary} rotates "
                     f"part of it")
    fields = plain_decoder_fields(
        cfg, name, hidden=hidden, heads=heads, kv_heads=heads,
        num_layers=cfg.num_layers("num_hidden_layers"),
        ffn_size=cfg.integer("intermediate_size"),
        tie=cfg.flag("tie_word_embeddings", False), qkv_bias=cfg.flag("attention_bias", True),
        hidden_key="hidden_size", heads_key="num_attention_heads", notes="; ".join(notes))
    return finish(fields)


@hf_writer("gpt_neox")
def write_gpt_neox(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """GPT-NeoX's fields (MHA with a plain MLP only: anything else is refused)."""
    if model.num_kv_heads != model.num_heads or model.gated_mlp or model.moe is not None:
        raise ModelConfigError(f"{model.name}: a gpt_neox config.json describes dense MHA "
                               f"layers with a plain MLP")
    return {"model_type": model_type, "_name_or_path": model.hf_id,
            "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_heads, "intermediate_size": model.ffn_size,
            "vocab_size": model.vocab_size, "tie_word_embeddings": model.tie_word_embeddings,
            "attention_bias": model.qkv_bias, "use_parallel_residual": True,
            "rotary_pct": 0.25, "hidden_act": "gelu_fast", "layer_norm_eps": 1e-5}
