"""Parameter counts implied by a model's shapes (to compare with the published counts)."""

from __future__ import annotations

from energylens.model.config import ModelConfig


def _attention_params(m: ModelConfig, *, kv_heads: int | None = None) -> int:
    """Attention weights of one layer (projections, qkv bias, MLA latent norms), with
    ``kv_heads`` KV heads where they vary by layer."""
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
        # sparse-attention indexer: query heads from the latent, one key head with its
        # LayerNorm (weight and bias), a weight per head
        indexer = (a.q_lora_rank * a.index_heads * a.index_head_dim + h * a.index_head_dim
                   + 2 * a.index_head_dim + h * a.index_heads) if a.index_topk else 0
        return q + kv + m.num_heads * a.v_head_dim * h + indexer
    q_width = m.num_heads * m.head_dim
    kv_width = (kv_heads or m.num_kv_heads) * m.head_dim
    params = h * (q_width + 2 * kv_width) + q_width * h
    if m.attention_output_gate:  # the gate's own query-sized projection
        params += h * q_width
    if m.qkv_bias:
        params += q_width + 2 * kv_width
    return params


def _mixer_params(m: ModelConfig) -> int:
    """One recurrent mixer. Mamba-2: in_proj (z, x, B, C, dt), the convolution with its
    bias, A, D and the dt bias per head, the gated norm and out_proj. Gated DeltaNet: the
    q/k/v, z, b and a projections, the convolution over q, k and v (no bias), A and the dt
    bias per value head, the gated norm over one head's width and out_proj. Mamba-1
    (Jamba's JambaMambaMixer): in_proj (x, z; no bias), the convolution with its bias,
    x_proj (dt, B, C), dt_proj with its bias, A_log (channels x state), D, out_proj (no
    bias) and the RMSNorms of dt, B and C."""
    h = m.hybrid
    assert h is not None
    inner = h.ssm_heads * h.ssm_head_dim
    if h.mixer == "mamba1":
        dt_b_c = h.dt_rank + 2 * h.ssm_state_size
        return m.hidden_size * 2 * inner + (h.conv_kernel + 1) * inner + inner * dt_b_c \
            + (h.dt_rank + 1) * inner + inner * h.ssm_state_size + inner \
            + inner * m.hidden_size + dt_b_c
    conv_channels = inner + 2 * h.ssm_groups * h.ssm_state_size
    if h.mixer == "gated_deltanet":
        in_proj = m.hidden_size * (inner + conv_channels + 2 * h.ssm_heads)
        return in_proj + h.conv_kernel * conv_channels + 2 * h.ssm_heads + h.ssm_head_dim \
            + inner * m.hidden_size
    in_proj = m.hidden_size * (inner + conv_channels + h.ssm_heads)
    return in_proj + (h.conv_kernel + 1) * conv_channels + 3 * h.ssm_heads + inner \
        + inner * m.hidden_size


def _hybrid_count(m: ModelConfig, *, embed: int, norm: int) -> tuple[float, float]:
    """Blocks of the pattern, each with its pre-norm."""
    h = m.hybrid
    assert h is not None
    mult = 3 if m.gated_mlp else 2
    blocks = {"M": _mixer_params(m), "*": _attention_params(m),
              "-": mult * m.hidden_size * m.ffn_size}
    total = active = float(embed + norm + m.num_layers * norm)
    for kind in ("M", "*", "-"):
        total += h.count(kind) * blocks[kind]
        active += h.count(kind) * blocks[kind]
    if m.moe is not None:
        e = m.moe
        expert = mult * m.hidden_size * e.expert_ffn
        common = e.num_shared_experts * mult * m.hidden_size * e.shared_expert_ffn \
            + m.hidden_size * e.num_experts
        total += h.count("E") * (e.num_experts * expert + common)
        active += h.count("E") * (e.top_k * expert + common)
    return total, active


def parameter_count(model: ModelConfig) -> tuple[float, float]:
    """(total, active per token) parameters implied by the shapes.

    Counts embeddings, lm_head (unless tied), attention projections, FFN / experts /
    shared experts / routers and the two norms per layer (one in a parallel block) plus
    the final norm (a hybrid model: its blocks, each with one norm, recurrent mixers
    included). Small
    extras (QK-norm, biases other than qkv, MTP heads, vision encoders) are left out.
    Active counts both the embedding and lm_head plus the top-k routed experts.
    """
    m = model
    h = m.hidden_size
    mult = 3 if m.gated_mlp else 2
    norm = h * (2 if m.norm_type == "layernorm" else 1)
    embed = m.vocab_size * h * (1 if m.tie_word_embeddings else 2)
    if m.hybrid is not None:
        return _hybrid_count(m, embed=embed, norm=norm)
    norms = norm if m.parallel_block else 2 * norm  # a parallel block has one pre-norm
    total = embed + norm + m.num_layers * norms
    total += sum(_attention_params(m, kv_heads=g) for g in m.layer_kv_heads() if g)
    # a layer without attention or without FFN (NAS-derived Nemotron) has no pre-norm for it
    total -= norm * sum((not g) + (not f) for g, f in zip(m.layer_kv_heads(),
                                                            m.layer_ffn_sizes(), strict=True))
    active = total
    if m.moe is None:
        ffn = mult * h * sum(m.layer_ffn_sizes())
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
