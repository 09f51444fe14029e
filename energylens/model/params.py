"""Parameter counts implied by a model's shapes (to compare with the published counts)."""

from __future__ import annotations

from energylens.model.config import ModelConfig


def _attention_params(m: ModelConfig) -> int:
    """Attention weights of one layer (projections, qkv bias, MLA latent norms)."""
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk
        else:
            q = h * m.num_heads * qk
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + m.num_heads * a.v_head_dim * h
    q_width = m.num_heads * m.head_dim
    kv_width = m.num_kv_heads * m.head_dim
    params = h * (q_width + 2 * kv_width) + q_width * h
    if m.qkv_bias:
        params += q_width + 2 * kv_width
    return params


def parameter_count(model: ModelConfig) -> tuple[float, float]:
    """(total, active per token) parameters implied by the shapes.

    Counts embeddings, lm_head (unless tied), attention projections, FFN / experts /
    shared experts / routers and the two norms per layer plus the final norm. Small
    extras (QK-norm, biases other than qkv, MTP heads, vision encoders) are left out.
    Active counts both the embedding and lm_head plus the top-k routed experts.
    """
    m = model
    h = m.hidden_size
    mult = 3 if m.gated_mlp else 2
    norm = h * (2 if m.norm_type == "layernorm" else 1)
    embed = m.vocab_size * h * (1 if m.tie_word_embeddings else 2)
    per_layer = _attention_params(m) + 2 * norm
    total = embed + norm + m.num_layers * per_layer
    active = total
    if m.moe is None:
        ffn = m.num_layers * mult * h * m.ffn_size
        return float(total + ffn), float(active + ffn)
    e = m.moe
    dense_layers = m.num_layers - e.num_moe_layers
    dense = dense_layers * mult * h * e.dense_layer_ffn
    expert = mult * h * e.expert_ffn
    shared = e.num_shared_experts * mult * h * e.shared_expert_ffn
    router = h * e.num_experts
    total += dense + e.num_moe_layers * (e.num_experts * expert + shared + router)
    active += dense + e.num_moe_layers * (e.top_k * expert + shared + router)
    return float(total), float(active)
