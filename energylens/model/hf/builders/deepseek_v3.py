"""DeepSeek-V2 / V3 / R1, DeepSeek-V3.2, Kimi-K2 / K2.5 and GLM-5 (the same template): MLA
attention, routed and shared experts after the first dense layers. DeepSeek Sparse
Attention (DeepSeek-V3.2's ``deepseek_v32``, GLM-5's ``glm_moe_dsa``): its lightning
indexer (``index_n_heads`` heads of ``index_head_dim`` scoring the context, ``index_topk``
keys kept per query) is priced beside MLA (``families/dsa_indexer.yaml``), and MLA's
context kernels read at most ``index_topk`` keys per query. ``deepseek_v32`` is
DeepseekV3's config with the three ``index_*`` fields (DeepSeek's DeepSeek-V3.2-Exp
``inference/model.py`` Indexer, recalled); a config of either DSA type without them reads
as plain MLA."""

from __future__ import annotations

from typing import Any

from energylens.model.config import MLAConfig, ModelConfig
from energylens.model.hf.common import (
    decoder_fields,
    decoder_json,
    finish,
    routed_moe,
    routed_moe_json,
)
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25",
                  "glm_moe_dsa")


@hf_builder(*DEEPSEEK_TYPES)
def build_deepseek_v3(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """MLA attention (with or without a query latent), ``first_k_dense_replace`` dense
    layers, then MoE layers (every ``moe_layer_freq``) with shared experts."""
    f = decoder_fields(cfg, name, derive_head_dim=False)
    nope, rope = cfg.integer("qk_nope_head_dim"), cfg.integer("qk_rope_head_dim")
    f["mla"] = MLAConfig(
        q_lora_rank=cfg.integer("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=cfg.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=cfg.integer("v_head_dim"),
        **({"index_heads": cfg.integer("index_n_heads"),
            "index_head_dim": cfg.integer("index_head_dim"),
            "index_topk": cfg.integer("index_topk")} if cfg.has("index_topk") else {}),
    )
    f["attention"], f["head_dim"], f["num_kv_heads"] = "MLA", nope + rope, f["num_heads"]
    routed_moe(cfg, f)
    if cfg.has("index_topk"):
        f["notes"] += (f"; sparse-attention indexer priced over the whole context, MLA over "
                       f"the {cfg.integer('index_topk')} keys it keeps per query")
    return finish(f)


@hf_writer(*DEEPSEEK_TYPES)
def write_deepseek_v3(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """Llama fields, the MLA ranks and the experts."""
    fields = decoder_json(model, model_type=model_type)
    del fields["head_dim"]
    mla = model.mla
    if mla is not None:
        fields.update(q_lora_rank=mla.q_lora_rank or None, kv_lora_rank=mla.kv_lora_rank,
                      qk_nope_head_dim=mla.qk_nope_head_dim,
                      qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim)
        if mla.index_topk:
            fields.update(index_n_heads=mla.index_heads, index_head_dim=mla.index_head_dim,
                          index_topk=mla.index_topk)
    fields.update(routed_moe_json(model))
    return fields
