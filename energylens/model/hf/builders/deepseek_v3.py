"""DeepSeek-V3 / R1 (and configs that reuse its model_type): MLA attention, MoE."""

from __future__ import annotations

from energylens.model.config import MLAConfig, ModelConfig, MoEConfig
from energylens.model.hf.common import decoder_fields, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder


@hf_builder("deepseek_v3")
def build_deepseek_v3(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """deepseek_v3: MLA attention, ``first_k_dense_replace`` dense layers, then MoE layers
    (every ``moe_layer_freq``) with shared experts; an fp8 ``quantization_config`` sets
    fp8 weights."""
    f = decoder_fields(cfg, name, derive_head_dim=False)
    n = f["num_layers"]
    nope, rope = cfg.integer("qk_nope_head_dim"), cfg.integer("qk_rope_head_dim")
    f["mla"] = MLAConfig(
        q_lora_rank=cfg.integer("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=cfg.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=cfg.integer("v_head_dim"),
    )
    f["attention"], f["head_dim"], f["num_kv_heads"] = "MLA", nope + rope, f["num_heads"]
    first_dense = cfg.integer("first_k_dense_replace", default=0, minimum=0)
    freq = cfg.integer("moe_layer_freq", default=1)
    moe_layers = sum(1 for i in range(n) if i >= first_dense and i % freq == 0)
    expert_ffn = cfg.integer("moe_intermediate_size")
    shared = cfg.integer("n_shared_experts", default=0, minimum=0)
    f["moe"] = MoEConfig(
        num_experts=cfg.integer("n_routed_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_ffn=expert_ffn,
        num_shared_experts=shared,
        shared_expert_ffn=expert_ffn if shared else 0,
        num_moe_layers=moe_layers,
        dense_layer_ffn=f["ffn_size"] if moe_layers < n else 0,
    )
    if moe_layers == n:
        f["ffn_size"] = expert_ffn
    quantization = cfg.section("quantization_config")
    if quantization is not None and quantization.raw("quant_method") == "fp8":
        f["weight_dtype"] = "fp8"
    return finish(f)
