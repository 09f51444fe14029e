"""Model families written once as einsums (YAML parts) and bound to a model's sizes.

A layer is assembled from parts in ``energylens/data/families``: attention, then a dense
MLP (gated or plain) or routed experts (plus optional shared experts). A model is a set
of layer groups (dense/MoE x full/sliding attention) with layer counts, and a head. A
hybrid model (``ModelConfig.hybrid``) is a set of single-purpose blocks instead: recurrent
mixers (Mamba-2, Gated DeltaNet or Mamba-1), attention, dense MLPs and MoE, counted from
its layer pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from importlib import resources
from typing import Any

from energylens.errors import SpecError
from energylens.model.config import ModelConfig
from energylens.model.spec import (
    HELD_MARK,
    STATE_ELEMENT_BYTES,
    Einsum,
    FusionGroups,
    LayerSpec,
    Overlap,
    parse_einsum,
    stored_weight_name,
    validate_layer,
)
from energylens.yamlfile import safe_load

#: Ranks whose sizes depend on the phase (batch, new tokens, context, tokens per expert).
PHASE_RANKS = ("b", "m", "p", "t", "n")


@dataclass(frozen=True, kw_only=True, eq=False)  # hashed by identity (cached objects)
class LayerGroup:
    """``count`` identical layers sharing one spec, attention window and model sizes."""

    name: str
    layer: LayerSpec
    count: float
    window: int | None
    sizes: dict[str, int]
    is_moe: bool
    #: The context ops prompt tokens take instead of ``layer``'s (MLA: decompressed keys
    #: and values, not the absorbed latent), or None where both phases run the same ones.
    prompt_attention: LayerSpec | None = None
    #: Keys each query attends to where an indexer picks them (DSA's index_topk: MLA reads
    #: at most that many; the indexer itself and the KV cache keep every key), else None.
    sparse_keys: int | None = None


@dataclass(frozen=True, kw_only=True)
class ModelGraph:
    """A model as einsum layer groups plus its head (embedding, final norm, LM head)."""

    model: ModelConfig
    groups: tuple[LayerGroup, ...]
    head: LayerSpec
    head_sizes: dict[str, int]

    @cached_property
    def head_group(self) -> LayerGroup:
        """The head as a one-layer group, built once per graph (compiled kernels are
        cached by group identity, so a fresh group per step would recompile the head)."""
        return LayerGroup(name="head", layer=self.head, count=1.0, window=None,
                          sizes=self.head_sizes, is_moe=False)

    @cached_property
    def draft_group(self) -> LayerGroup:
        """One decoder layer: the draft head of speculative decoding (a multi-token-prediction
        module or an EAGLE head; the LM head is ``head``'s). A transformer's is like its last
        layer; a hybrid's is its attention with the FFN its attention blocks feed
        (:func:`hybrid_decoder_layer`), not its last block kind."""
        if self.model.hybrid is not None and self.model.hybrid.count("*"):
            return hybrid_decoder_layer(self.model)
        return replace(self.groups[-1], name="draft", count=1.0)


@cache
def family_part(name: str) -> dict[str, Any]:
    """The family part ``energylens/data/families/<name>.yaml`` (ops, fusion, sharding...)."""
    text = resources.files("energylens.data.families").joinpath(f"{name}.yaml").read_text("utf-8")
    part = safe_load(text)
    if not isinstance(part, dict):
        raise SpecError(f"family part {name!r}: expected a mapping of ops, fusion, sharding")
    return part


@dataclass(frozen=True, kw_only=True)
class Bypass:
    """Ops a model variant leaves out, the tensor that stands for each one's output, and
    the ``{placeholders}`` of the ops it keeps, filled."""

    ops: dict[str, tuple[str, str]]  # op name -> (its output tensor, the tensor read instead)
    fill: dict[str, str] = field(default_factory=dict)  # placeholder -> text
    held: dict[str, str] = field(default_factory=dict)  # weight -> its name with HELD_MARK


#: Ranks the query/key norm reduces over: each head's width, or every head of the rank.
QK_NORM_RANKS = {"head": "e", "all_heads": "gre"}


def model_bypass(model: ModelConfig) -> Bypass:
    """What a model leaves out of the shared parts: the ``rope`` op without rotary
    positions (ALiBi, learned), the ``qk_norm`` op without a query/key norm, the output
    gate's projection and product (``agate``, ``aout``) without one, the FFN
    pre-norm ``norm2`` in a parallel block (the MLP reads the attention's pre-norm
    output); and the ranks its query/key norm reduces over."""
    ops: dict[str, tuple[str, str]] = {}
    if not model.attention_output_gate:
        ops |= {"agate": ("AG", "Q"), "aout": ("OG", "O")}
    if model.qk_norm is None:
        ops["qk_norm"] = ("QN", "Q")
    if model.position_encoding != "rope":
        ops["rope"] = ("QR", "Q" if model.qk_norm is None else "QN")
    if model.parallel_block:
        ops["norm2"] = ("N2", "N")
    fill = {} if model.qk_norm is None else {"qk_norm": QK_NORM_RANKS[model.qk_norm]}
    return Bypass(ops=ops, fill=fill, held=held_weights(model))


def held_weights(model: ModelConfig) -> dict[str, str]:
    """Each weight ``model``'s low-bit checkpoints keep in 16 bits -> its name marked with
    the dtypes of those checkpoints (:data:`HELD_MARK`); each weight of a GGUF file ->
    its name marked with the bytes the file stores it in (:func:`stored_weight_name`)."""
    dtypes: dict[str, list[str]] = {}
    for dtype, weights in model.held_16bit:
        for weight in weights:
            dtypes.setdefault(weight, []).append(dtype)
    stored = {w: stored_weight_name(w, b) for w, b in model.gguf_storage if w.startswith("W")}
    return {**{w: w + HELD_MARK + "_".join(sorted(d)) for w, d in dtypes.items()}, **stored}


#: The shared parts as a model without optional ops reads them (no query/key norm, no
#: output gate): what a layer parsed without a model's own bypass gets.
PLAIN = Bypass(ops={"qk_norm": ("QN", "Q"), "agate": ("AG", "Q"), "aout": ("OG", "O")})


def parse_layer(*, name: str, parts: list[dict[str, Any]], norm: str,
                bypass: Bypass = PLAIN) -> LayerSpec:
    """Assemble a layer from YAML parts (ops, fusion, sharding, overlap), in order,
    without the ops ``bypass`` leaves out (their readers read the stand-in tensor). A
    fusion name two parts use (``gate_up`` of the routed and of the shared experts) names
    a group of each part's ops: two kernels, each part's own, switched on together."""
    ops: list[Einsum] = []
    fusion: list[tuple[str, tuple[str, ...]]] = []
    sharding: dict[str, dict[str, list[str]]] = {}
    overlap: list[Overlap] = []
    kept = {op for part in parts for op in part.get("ops", {}) if op not in bypass.ops}
    for part in parts:
        for op_name, body in part.get("ops", {}).items():
            if op_name in kept:
                ops.append(_parse_op(op_name=op_name, body=body, norm=norm, bypass=bypass))
        for group, members in part.get("fusion", {}).items():
            left = [m for m in members if m in kept]
            if len(left) < min(2, len(members)):  # bypass left one op: nothing to fuse
                continue
            fusion.append((group, tuple(left)))
        for dim, ranks in part.get("sharding", {}).items():
            for rank, members in ranks.items():
                sharding.setdefault(dim, {}).setdefault(rank, []).extend(
                    m for m in members if m in kept)
        for item in part.get("overlap", []):
            overlap.append(Overlap(comm_of=item["comm"], with_ops=tuple(item["with"])))
    names = [op_name for part in parts for op_name in part.get("ops", {})]  # bypassed too
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise SpecError(f"layer {name!r}: op names used twice: {sorted(duplicates)}")
    return LayerSpec(
        name=name,
        ops=tuple(ops),
        fusion=FusionGroups(groups=tuple(fusion)),
        sharding={d: {r: tuple(m) for r, m in rs.items()} for d, rs in sharding.items()},
        overlap=tuple(overlap),
    )


def _parse_op(*, op_name: str, body: Any, norm: str, bypass: Bypass) -> Einsum:
    if isinstance(body, str):
        body = {"einsum": body}
    if not isinstance(body, dict) or "einsum" not in body:
        raise SpecError(f"op {op_name!r}: expected a string or a mapping with 'einsum'")
    text = body["einsum"].replace("{norm}", norm)
    for placeholder, value in bypass.fill.items():
        text = text.replace(f"{{{placeholder}}}", value)
    for output, stand_in in bypass.ops.values():
        text = re.sub(rf"\b{output}\[", f"{stand_in}[", text)
    for weight, marked in bypass.held.items():
        text = re.sub(rf"\b{weight}\[", f"{marked}[", text)
    return parse_einsum(
        name=op_name,
        text=text,
        persistent_output=bool(body.get("persistent", False)),
        causal=body.get("causal"),
        all_keys=bool(body.get("all_keys", False)),
        decode_form=bool(body.get("decode_form", False)),
    )


def _norm(model: ModelConfig) -> str:
    return "rmsnorm" if model.norm_type == "rmsnorm" else "layernorm"


def _attention_parts(model: ModelConfig) -> list[dict[str, Any]]:
    """The attention part: GQA/MHA, or MLA with or without a query latent (and the
    sparse-attention indexer beside it where the model has one)."""
    if model.mla is None:
        return [family_part("attention")]
    if not model.mla.q_lora_rank:
        return [family_part("attention_mla_direct_q")]
    indexer = [family_part("dsa_indexer")] if model.mla.index_topk else []
    return [family_part("attention_mla"), *indexer]


def prompt_attention(model: ModelConfig) -> LayerSpec | None:
    """The context ops of prompt tokens where they differ from decode's (MLA), else None."""
    if model.mla is None:
        return None
    return parse_layer(name="attention-prompt", parts=[family_part("attention_mla_prompt")],
                       bypass=Bypass(ops={}, held=held_weights(model)),
                       norm=_norm(model))


def attention_sizes(model: ModelConfig, *, kv_heads: int | None = None) -> dict[str, int]:
    """Sizes of the attention ranks (GQA/MHA, or MLA's heads and latent widths); a
    layer's own ``kv_heads`` where they vary by layer."""
    if model.mla is not None:
        mla = model.mla
        sizes = {"d": model.hidden_size, "h": model.num_heads, "c": mla.q_lora_rank,
                 "k": mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                 "l": mla.kv_lora_rank + mla.qk_rope_head_dim, "v": mla.v_head_dim}
        if mla.index_topk:
            sizes.update(j=mla.index_heads, i=mla.index_head_dim)
        return sizes
    g = kv_heads or model.num_kv_heads
    return {"d": model.hidden_size, "g": g, "r": model.num_heads // g, "e": model.head_dim}


def _moe_parts(model: ModelConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Routed experts (and shared ones) with their sizes."""
    moe = model.moe
    assert moe is not None
    parts = [family_part("moe")]
    sizes = {"d": model.hidden_size, "f": moe.expert_ffn, "x": moe.num_experts}
    if moe.num_shared_experts:
        parts.append(family_part("shared_expert"))
        sizes["s"] = moe.num_shared_experts * moe.shared_expert_ffn
    return parts, sizes


def mixer_sizes(model: ModelConfig) -> dict[str, int]:
    """Sizes of a hybrid's recurrent-mixer ranks: heads as groups x heads per group x head
    width (Mamba-2, Gated DeltaNet), or Mamba-1's channels ``i`` (heads one wide), its dt
    rank ``k`` and x_proj's output width ``q`` = k + 2 x state; state width ``s``,
    convolution width ``w`` and ``u`` = w - 1 inputs of convolution state."""
    hybrid = model.hybrid
    assert hybrid is not None
    if hybrid.mixer == "mamba1":
        heads = {"i": hybrid.ssm_heads * hybrid.ssm_head_dim, "k": hybrid.dt_rank,
                 "q": hybrid.dt_rank + 2 * hybrid.ssm_state_size}
    else:
        heads = {"g": hybrid.ssm_groups, "r": hybrid.ssm_heads // hybrid.ssm_groups,
                 "e": hybrid.ssm_head_dim}
    return {"d": model.hidden_size, **heads, "s": hybrid.ssm_state_size,
            "w": hybrid.conv_kernel, "u": hybrid.conv_kernel - 1,
            STATE_ELEMENT_BYTES: hybrid.ssm_state_bytes}


def _hybrid_groups(model: ModelConfig) -> list[LayerGroup]:
    """One group per block kind of the pattern: recurrent mixer (its ``mixer`` family:
    Mamba-2, Gated DeltaNet or Mamba-1), attention, dense MLP, MoE. Each block has one
    pre-norm, its own: the attention part's pre-FFN norm ``norm2`` is left out (an FFN
    block has its own, ``ffn_norm``), so an attention block ends with its residual add."""
    hybrid = model.hybrid
    assert hybrid is not None
    norm = _norm(model)
    bypass = model_bypass(model)
    ffn_norm = family_part("ffn_norm")
    mlp, mlp_sizes = _ffn_parts(model, "-")
    kinds: dict[str, tuple[list[dict[str, Any]], dict[str, int]]] = {
        "M": ([family_part(hybrid.mixer)], mixer_sizes(model)),
        "*": (_attention_parts(model), attention_sizes(model)),
        "-": ([ffn_norm, *mlp], mlp_sizes),
    }
    if model.moe is not None:
        parts, sizes = _ffn_parts(model, "E")
        kinds["E"] = ([ffn_norm, *parts], sizes)
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    without_norm2 = replace(bypass, ops={**bypass.ops, "norm2": ("N2", "H")})
    groups = []
    for kind, (parts, sizes) in kinds.items():
        if hybrid.count(kind):
            layer = parse_layer(name=names[kind], parts=parts, norm=norm,
                                bypass=without_norm2 if kind == "*" else bypass)
            groups.append(LayerGroup(name=names[kind], layer=layer,
                                     count=float(hybrid.count(kind)), window=None, sizes=sizes,
                                     is_moe=kind == "E"))
    return groups


def _ffn_parts(model: ModelConfig, kind: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The parts and sizes of a hybrid's FFN block of ``kind`` ("-": dense MLP, "E": MoE),
    without its pre-norm."""
    if kind == "E":
        return _moe_parts(model)
    mlp = family_part("mlp_gated" if model.gated_mlp else "mlp_plain")
    return [mlp], {"d": model.hidden_size, "f": model.ffn_size}


def hybrid_decoder_layer(model: ModelConfig) -> LayerGroup:
    """One decoder layer of a hybrid with attention, as its MTP module is (Qwen3.5's
    ``mtp`` layer: full attention and the MoE): its attention part, ``norm2`` kept, and
    the FFN that most of its attention blocks feed (the commonest where none does), or
    attention alone in a model without FFN blocks. The draft head of speculative decoding."""
    hybrid = model.hybrid
    assert hybrid is not None and hybrid.count("*")
    pattern = hybrid.layer_pattern
    fed = [pattern[i + 1] for i, kind in enumerate(pattern[:-1])
           if kind == "*" and pattern[i + 1] in "-E"]
    ffns = fed or [kind for kind in pattern if kind in "-E"]
    parts = _attention_parts(model)
    sizes = attention_sizes(model)
    bypass = model_bypass(model)
    ffn = max("-E", key=ffns.count) if ffns else None
    if ffn is None:
        bypass = replace(bypass, ops={**bypass.ops, "norm2": ("N2", "H")})
    else:
        ffn_parts, ffn_sizes = _ffn_parts(model, ffn)
        parts = [*parts, *ffn_parts]
        sizes = {**sizes, **ffn_sizes}
    layer = parse_layer(name="draft", parts=parts, norm=_norm(model), bypass=bypass)
    validate_layer(layer=layer, sizes={**sizes, **dict.fromkeys(PHASE_RANKS, 1)})
    return LayerGroup(name="draft", layer=layer, count=1.0, window=None, sizes=sizes,
                      is_moe=ffn == "E")


@cache
def build_graph(model: ModelConfig) -> ModelGraph:
    """Bind the family einsums to ``model``'s sizes; validates every layer."""
    norm = _norm(model)
    bound = _hybrid_groups(model) if model.hybrid is not None else _layer_groups(model)
    for group in bound:
        for layer in (group.layer, group.prompt_attention):
            if layer is not None:
                validate_layer(layer=layer,
                               sizes={**group.sizes, **dict.fromkeys(PHASE_RANKS, 1)})
    head = parse_layer(name="head", parts=[family_part("head")], norm=norm,
                       bypass=replace(PLAIN, held=held_weights(model)))
    head_sizes = {"d": model.hidden_size, "v": model.vocab_size}
    validate_layer(layer=head, sizes={**head_sizes, **dict.fromkeys(PHASE_RANKS, 1)})
    return ModelGraph(model=model, groups=tuple(bound), head=head, head_sizes=head_sizes)


def _layer_groups(model: ModelConfig) -> list[LayerGroup]:
    """Transformer layers: dense (cross-attention ones apart) and MoE, each split into
    sliding and full attention."""
    norm = _norm(model)
    bypass = model_bypass(model)
    attention = _attention_parts(model)
    mlp = family_part("mlp_gated" if model.gated_mlp else "mlp_plain")
    base = attention_sizes(model)
    groups: list[tuple[str, LayerSpec, float, dict[str, int], bool]] = []
    moe = model.moe
    num_dense = model.num_layers - (moe.num_moe_layers if moe else 0)
    if num_dense > 0:
        ffn = moe.dense_layer_ffn if moe and moe.dense_layer_ffn else model.ffn_size
        layer = parse_layer(name="dense", parts=[*attention, mlp], norm=norm, bypass=bypass)
        if model.kv_heads_per_layer is None and model.ffn_per_layer is None:
            # cross-attention layers first: the draft head copies the last group's layer
            cross = model.cross_attention_layers  # dense GQA only: checked by the config
            if cross:
                groups.append(("dense-cross", _without_kv_cache(layer), float(cross),
                               {**base, "f": ffn}, False))
            if num_dense > cross:
                groups.append(("dense", layer, float(num_dense - cross), {**base, "f": ffn},
                               False))
        else:  # one group per (KV heads, FFN width) (dense GQA only: checked by the config)
            groups += _varied_layers(model, layer=layer, norm=norm, bypass=bypass, mlp=mlp)
    if moe:
        parts, sizes = _moe_parts(model)
        layer = parse_layer(name="moe", parts=[*attention, *parts], norm=norm, bypass=bypass)
        groups.append(("moe", layer, float(moe.num_moe_layers), {**base, **sizes}, True))
    return _split_by_window(model=model, groups=groups)


def _varied_layers(model: ModelConfig, *, layer: LayerSpec, norm: str, bypass: Bypass,
                   mlp: dict[str, Any]) -> list[tuple[str, LayerSpec, float, dict[str, int], bool]]:
    """The dense layers of a model whose KV heads or FFN width vary by layer, one group per
    (KV heads, FFN width); the commonest whole layer last (the draft head copies the last
    group's layer). A layer without FFN is its attention part ending at the residual add
    (no pre-FFN norm); one without attention, a pre-norm and the MLP (a hybrid's FFN
    block); one without either adds nothing."""
    pairs = list(zip(model.layer_kv_heads(), model.layer_ffn_sizes(), strict=True))
    attention = parse_layer(name="attention", parts=_attention_parts(model), norm=norm,
                            bypass=replace(bypass, ops={**bypass.ops, "norm2": ("N2", "H")}))
    block = parse_layer(name="mlp", parts=[family_part("ffn_norm"), mlp], norm=norm,
                        bypass=bypass)
    groups: list[tuple[str, LayerSpec, float, dict[str, int], bool]] = []
    for kv, ffn in sorted(set(pairs), key=lambda p: (bool(p[0] and p[1]), pairs.count(p), p)):
        count = float(pairs.count((kv, ffn)))
        if kv and ffn:
            groups.append((f"dense-kv{kv}-f{ffn}", layer, count,
                           {**attention_sizes(model, kv_heads=kv), "f": ffn}, False))
        elif kv:
            groups.append((f"attention-kv{kv}", attention, count,
                           attention_sizes(model, kv_heads=kv), False))
        elif ffn:
            groups.append((f"mlp-f{ffn}", block, count, {"d": model.hidden_size, "f": ffn},
                           False))
    return groups


def _without_kv_cache(layer: LayerSpec) -> LayerSpec:
    """``layer`` with its keys and values kept out of the KV cache (a cross-attention
    layer: the image's keys and values are computed once per request, not per token)."""
    ops = tuple(replace(op, persistent_output=False) if op.name in ("k", "v") else op
                for op in layer.ops)
    return replace(layer, name=f"{layer.name}-cross", ops=ops)


def _split_by_window(
    *, model: ModelConfig, groups: list[tuple[str, LayerSpec, float, dict[str, int], bool]]
) -> list[LayerGroup]:
    """Split each group into sliding-window and full-attention layers, pro rata."""
    window = model.sliding_window
    share = model.num_sliding_layers / model.num_layers if window else 0.0
    prompt = prompt_attention(model)
    sparse = model.mla.index_topk if model.mla is not None and model.mla.index_topk else None
    bound: list[LayerGroup] = []
    for name, layer, count, sizes, is_moe in groups:
        sliding = count * share
        if sliding > 0:
            bound.append(LayerGroup(name=f"{name}-sliding", layer=layer, count=sliding,
                                    window=window, sizes=sizes, is_moe=is_moe,
                                    prompt_attention=prompt, sparse_keys=sparse))
        if count - sliding > 0:
            bound.append(LayerGroup(name=name, layer=layer, count=count - sliding,
                                    window=None, sizes=sizes, is_moe=is_moe,
                                    prompt_attention=prompt, sparse_keys=sparse))
    return bound
