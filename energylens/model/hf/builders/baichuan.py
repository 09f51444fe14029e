"""Baichuan and Baichuan 2 (baichuan-inc's remote-code ``baichuan``: Baichuan-7B/13B,
Baichuan2-7B/13B Base and Chat): the Llama layout under Llama's size names, with RoPE or
ALiBi by the checkpoint.

What the family's code fixes (the checkpoints' ``modeling_baichuan.py``, recalled, not read
here): multi-head attention (no KV-head field: every head has its keys and values) through
a fused ``W_pack`` q/k/v projection and ``o_proj``, none with a bias; a SwiGLU MLP
(gate/up/down); RMSNorm; an ``lm_head`` of its own (Baichuan 2's NormHead normalises its
rows, a vector op per step, not a shape). The 7B models rotate queries and keys (RoPE), the
13B models add ALiBi biases instead; the config says neither, and both Baichuan 2 sizes are
``BaichuanForCausalLM``. The rule is vLLM's (``vllm/model_executor/models/baichuan.py``,
recalled): ``BaiChuanForCausalLM`` (Baichuan-7B) rotates; ``BaichuanForCausalLM`` rotates
where ``hidden_size`` is 4096 (Baichuan2-7B) and uses ALiBi otherwise (the 13B models).
The context is ``max_position_embeddings`` where given (the 7B models), else
``model_max_length`` (the 13B models give only that).

Approximated: NormHead's row normalisation is not priced (vector work on the LM head's
weights, under 1 % of a decode step's bytes).
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: The hidden width of Baichuan2-7B, the one ``BaichuanForCausalLM`` that rotates.
ROPE_WIDTH = 4096


def _rotates(cfg: HFConfig, hidden: int) -> bool:
    """vLLM's rule: RoPE for ``BaiChuanForCausalLM`` and for a 4096-wide model."""
    architectures = cfg.list_of("architectures", str) or []
    return "BaiChuanForCausalLM" in architectures or hidden == ROPE_WIDTH


@hf_builder("baichuan")
def build_baichuan(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """baichuan: Llama's fields, MHA without biases; RoPE or ALiBi by vLLM's rule."""
    del model_type
    fields = decoder_fields(cfg, name)
    fields["qkv_bias"] = False  # W_pack has no bias
    if _rotates(cfg, fields["hidden_size"]):
        fields["notes"] += "; RoPE (a 7B layout)"
    else:
        fields["position_encoding"] = "alibi"
        fields["notes"] += "; ALiBi (a 13B layout: not 4096 wide, not BaiChuanForCausalLM)"
    fields["notes"] += "; NormHead's row normalisation not priced"
    if cfg.has("model_max_length") and not cfg.has("max_position_embeddings"):
        fields["max_context_tokens"] = cfg.integer("model_max_length")
    return finish(fields)


@hf_writer("baichuan")
def write_baichuan(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama's fields and the architecture whose rule gives the model's positions."""
    if (model.moe is not None or model.mla is not None or model.hybrid is not None
            or model.num_kv_heads != model.num_heads or model.qkv_bias or not model.gated_mlp
            or model.sliding_window is not None or model.norm_type != "rmsnorm"
            or model.position_encoding not in ("rope", "alibi")):
        raise ModelConfigError(f"{model.name}: a {model_type} config.json describes dense MHA "
                               f"layers without biases, a SwiGLU MLP and RMSNorm")
    rope = model.position_encoding == "rope"
    if not rope and model.hidden_size == ROPE_WIDTH:
        raise ModelConfigError(f"{model.name}: a {model_type} config.json of hidden_size "
                               f"{ROPE_WIDTH} rotates (vLLM's rule): ALiBi cannot be written")
    fields = decoder_json(model, model_type=model_type)
    del fields["num_key_value_heads"], fields["head_dim"], fields["attention_bias"]
    fields["architectures"] = ["BaiChuanForCausalLM" if rope and model.hidden_size != ROPE_WIDTH
                               else "BaichuanForCausalLM"]
    return fields
