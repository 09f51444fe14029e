"""What the Hugging Face code of a ``model_type`` without a builder fixes, which its
config.json may leave unsaid: the MLP's form, the norm, and the defaults of its config
class. The generic decoder takes these first and guesses (with a note) only for types not
listed. A type with a builder of its own (:mod:`energylens.model.hf.builders`) is not
listed: its builder says what its code fixes; except Qwen3-Next's and Qwen3.5's,
GPT-BigCode's and Llama 3.2 Vision's text model's, whose builders (``qwen3_5.py``,
``gpt_bigcode.py``, ``mllama.py``) read through the generic decoder and so take their facts
here.

Sources: ``transformers`` 5.x ``models/<type>/configuration_<type>.py`` (defaults) and
``modeling_<type>.py`` (layers), read for this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from energylens.model.config import NormType, PositionEncoding


@dataclass(frozen=True, kw_only=True)
class TypeFacts:
    """One family's layers and config defaults."""

    gated_mlp: bool  # gate, up and down projections (SwiGLU, GeGLU), or plain up and down
    tie: bool  # the config class's tie_word_embeddings default
    norm: NormType | None = None  # None: read from the config's norm fields
    qkv_bias: bool = False  # q/k/v biases where the config has no bias field
    multi_query: bool = False  # one KV head where the config has no multi_query field
    ffn_multiple: int | None = None  # FFN width in hiddens where the config gives none
    position: PositionEncoding = "rope"
    attention_output_gate: bool = False  # where the config has no attn_output_gate


KNOWN_TYPES: dict[str, TypeFacts] = {
    # Plain MLPs, a LayerNorm before attention and MLP.
    # GPT2MLP c_fc/c_proj; Conv1D c_attn with a bias; wpe table; n_inner None = 4 x n_embd
    "gpt2": TypeFacts(gated_mlp=False, norm="layernorm", tie=True, qkv_bias=True,
                      ffn_multiple=4, position="learned"),
    # GPTBigCodeMLP c_fc/c_proj; c_attn with a bias; multi_query defaults to True
    "gpt_bigcode": TypeFacts(gated_mlp=False, norm="layernorm", tie=True, qkv_bias=True,
                             multi_query=True, ffn_multiple=4, position="learned"),
    # NemotronMLP up_proj/down_proj (relu2); NemotronLayerNorm1P
    "nemotron": TypeFacts(gated_mlp=False, norm="layernorm", tie=False),
    # Gated MLPs whose activation name need not say so.
    # GlmMLP gate_up_proj; attention_bias defaults to True
    "glm": TypeFacts(gated_mlp=True, tie=False, qkv_bias=True),
    "glm4": TypeFacts(gated_mlp=True, tie=False, qkv_bias=True),
    # Qwen3NextAttention, Qwen3_5MoeAttention: q_proj of 2 x heads x head_dim, the second
    # half a sigmoid gate on the attention output where attn_output_gate is not given
    # (read by builders/qwen3_5.py through the generic decoder)
    **dict.fromkeys(("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"),
                    TypeFacts(gated_mlp=True, tie=False, attention_output_gate=True)),
    # gate/up/down (w1/w3/w2) experts and MLPs, untied by default
    **dict.fromkeys(("olmo", "granitemoe", "mllama_text_model"),
                    TypeFacts(gated_mlp=True, tie=False)),
}
