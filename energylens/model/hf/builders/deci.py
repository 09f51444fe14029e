"""DeciLM: a Llama layout whose layers differ. ``deci`` (DeciLM-7B) varies the KV head
count per layer (``num_key_value_heads_per_layer``); ``nemotron-nas`` (NVIDIA's
NAS-derived Llama-3.1-Nemotron-51B, Llama-3.3-Nemotron-Super-49B, -Ultra-253B) gives each
layer a ``block_configs`` entry: its attention (``n_heads_in_group`` query heads per KV
head, or ``no_op``: none) and its FFN (``ffn_mult``, or ``no_op``: none).

The FFN width of a multiplier is DeciLM's ``_ffn_mult_to_intermediate_size``:
``int(2 * ffn_mult * hidden_size / 3)`` rounded up to a multiple of 256 (the remote code's
``modeling_decilm.py``, recalled). A block that replaces its attention or FFN with one
linear layer (``replace_with_linear``) is refused: not modelled.
"""

from __future__ import annotations

from typing import Any

from energylens.errors import ModelConfigError
from energylens.model.config import ModelConfig
from energylens.model.hf.common import decoder_fields, decoder_json, finish
from energylens.model.hf.reader import HFConfig
from energylens.model.hf.registry import hf_builder, hf_writer

#: DeciLM rounds an FFN width up to a multiple of this (``_find_multiple(..., 256)``).
FFN_MULTIPLE = 256


@hf_builder("deci")
def build_deci(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """Per-layer KV heads; ``num_kv_heads`` is their largest value."""
    fields = decoder_fields(cfg, name)
    per_layer = cfg.list_of("num_key_value_heads_per_layer", int)
    if per_layer is not None:
        if len(per_layer) != fields["num_layers"] or min(per_layer) < 1:
            raise cfg.error(f"{cfg.field('num_key_value_heads_per_layer')} must list "
                            f"{fields['num_layers']} positive KV head counts")
        fields["kv_heads_per_layer"] = tuple(per_layer)
        fields["num_kv_heads"] = max(per_layer)
    return finish(fields)


def ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's FFN width of a multiplier (module docstring)."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // FFN_MULTIPLE) * FFN_MULTIPLE


def _block(cfg: HFConfig, index: int, *, heads: int, hidden: int) -> tuple[int, int]:
    """(KV heads, FFN width) of ``block_configs[index]``; 0 where the block has none."""
    block = HFConfig(cfg.raw("block_configs")[index], path=cfg.path,
                     prefix=f"{cfg.field('block_configs')}[{index}].")
    sizes = []
    for part in ("attention", "ffn"):
        section = block.section(part)
        if section is None:
            raise block.error(f"{block.field(part)} is missing")
        if section.flag("replace_with_linear", False):
            raise section.error(f"{section.field('replace_with_linear')}: a block replaced by "
                                f"one linear layer is not modelled")
        if section.flag("no_op", False):
            sizes.append(0)
        elif part == "attention":
            group = section.integer("n_heads_in_group")
            if heads % group:
                raise section.error(f"{section.field('n_heads_in_group')} = {group} does not "
                                    f"divide num_attention_heads = {heads}")
            sizes.append(heads // group)
        else:
            mult = section.raw("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, int | float) or mult <= 0:
                raise section.error(f"{section.field('ffn_mult')} must be a positive number, "
                                    f"got {mult!r}")
            sizes.append(ffn_width(float(mult), hidden))
    return sizes[0], sizes[1]


@hf_builder("nemotron-nas")
def build_nemotron_nas(cfg: HFConfig, *, name: str, model_type: str) -> ModelConfig:
    """Each layer's KV heads and FFN width from its ``block_configs`` entry; ``num_kv_heads``
    and ``ffn_size`` are their largest values."""
    del model_type
    blocks = cfg.list_of("block_configs", dict)
    layers = cfg.num_layers("num_hidden_layers")
    if blocks is None or len(blocks) != layers:
        raise cfg.error(f"{cfg.field('block_configs')} must list one block per layer "
                        f"({layers})")
    heads, hidden = cfg.integer("num_attention_heads"), cfg.integer("hidden_size")
    pairs = [_block(cfg, i, heads=heads, hidden=hidden) for i in range(layers)]
    kv, ffn = (tuple(p[i] for p in pairs) for i in (0, 1))
    if not max(kv) or not max(ffn):
        raise cfg.error(f"{cfg.field('block_configs')}: no layer has attention, or none an FFN")
    # the Llama fields read as every other builder reads them, with the widest layer's
    # KV heads and FFN width in place of the file's uniform ones (absent or not used)
    plain = {k: v for k, v in cfg.data.items()
             if k not in ("num_key_value_heads", "intermediate_size")}
    fields = decoder_fields(HFConfig({**plain, "num_key_value_heads": max(kv),
                                      "intermediate_size": max(ffn)}, path=cfg.path), name)
    fields["kv_heads_per_layer"], fields["ffn_per_layer"] = kv, ffn
    return finish(fields)


@hf_writer("deci")
def write_deci(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields plus the per-layer KV heads."""
    if model.ffn_per_layer is not None or 0 in model.layer_kv_heads():
        raise ModelConfigError(f"{model.name}: a deci config.json gives every layer attention "
                               f"and one FFN width (write it as nemotron-nas)")
    fields = decoder_json(model, model_type=model_type)
    fields["num_key_value_heads_per_layer"] = list(model.layer_kv_heads())
    return fields


@hf_writer("nemotron-nas")
def write_nemotron_nas(model: ModelConfig, *, model_type: str) -> dict[str, Any]:
    """The Llama fields and one ``block_configs`` entry per layer."""
    fields = decoder_json(model, model_type=model_type)
    blocks = []
    for kv, ffn in zip(model.layer_kv_heads(), model.layer_ffn_sizes(), strict=True):
        if ffn % FFN_MULTIPLE:
            raise ModelConfigError(f"{model.name}: FFN width {ffn} is no multiple of "
                                   f"{FFN_MULTIPLE}, which a nemotron-nas block cannot give")
        blocks.append({
            "attention": {"no_op": True} if not kv else
            {"n_heads_in_group": model.num_heads // kv, "no_op": False,
             "replace_with_linear": False},
            "ffn": {"no_op": True} if not ffn else
            {"ffn_mult": 1.5 * ffn / model.hidden_size, "no_op": False,
             "replace_with_linear": False}})
    fields["block_configs"] = blocks
    return fields
