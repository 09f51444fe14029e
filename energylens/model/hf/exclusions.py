"""Which weights a low-bit checkpoint keeps in 16 bits: the exclude list of its
quantisation config, read into ``ModelConfig.held_16bit``.

Three spellings carry the list: ModelOpt's ``exclude_modules`` (``hf_quant_config.json``,
``fnmatch`` patterns such as ``model.layers.0.self_attn*``), compressed-tensors' ``ignore``
(module names, or regular expressions after ``re:``) and Hugging Face's
``modules_to_not_convert`` (names matched as a dotted part of a module's name). Each entry
is matched against the module names the checkpoint's layers hold in the Hugging Face
layout (``model.layers.<i>.self_attn.q_proj`` ...; an entry's own prefix before
``layers.``, such as ``model.language_model.``, is read as ``model.``, and a ``re:``
pattern is tried under each of :data:`LAYER_PREFIXES`), each name standing
for the family weights it carries (:data:`ATTENTION`, :data:`MLA` ...). Entries of the
multi-token-prediction or vision modules, which the cost model does not price, are
skipped. A weight is held in 16 bits when the list names it in at least half of the layers
that have it (a held weight is priced 16-bit in every layer); a split list is said in a note.

Not read: routers, b/a gate projections and the output head (16-bit in every checkpoint:
``UNQUANTISED_WEIGHTS`` of :mod:`energylens.cost.work`), causal convolutions (not linear
layers, which is what quantisation configs target), norms and embeddings.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from energylens.model.config import LOW_BIT_DTYPES, ModelConfig
from energylens.model.hf.reader import HFConfig

#: Keys of a quantisation section that list modules left unquantised.
EXCLUDE_KEYS = ("exclude_modules", "ignore", "modules_to_not_convert")
#: Prefixes (before ``layers.``) of modules the cost model does not price.
UNPRICED_PREFIXES = ("mtp", "visual", "vision", "mm_projector")
#: Prefixes checkpoints put before ``layers.`` (a decoder, a vision-language model's text
#: decoder either way round, Nemotron-H): a ``re:`` pattern may be anchored to any of them.
LAYER_PREFIXES = ("model.", "model.language_model.", "language_model.model.", "backbone.")

#: Grouped-query / multi-head attention: module (within a layer) -> weights it holds.
ATTENTION = {"self_attn.q_proj": ("WQ",), "self_attn.k_proj": ("WK",),
             "self_attn.v_proj": ("WV",), "self_attn.qkv_proj": ("WQ", "WK", "WV"),
             "self_attn.o_proj": ("WO",)}
#: DeepSeek's multi-head latent attention, and its queries with a LoRA or without one.
MLA = {"self_attn.kv_a_proj_with_mqa": ("WKVA",), "self_attn.kv_b_proj": ("WUK", "WUV"),
       "self_attn.o_proj": ("WO",)}
MLA_QUERY_LORA = {"self_attn.q_a_proj": ("WQA",), "self_attn.q_b_proj": ("WQB",)}
MLA_DIRECT_Q = {"self_attn.q_proj": ("WQ",)}
#: DeepSeek Sparse Attention's indexer (GLM-5 names its weights projection
#: ``indexers_proj``).
INDEXER = {"self_attn.indexer.wq_b": ("WIQ",), "self_attn.indexer.wk": ("WIK",),
           "self_attn.indexer.weights_proj": ("WIW",), "self_attn.indexers_proj": ("WIW",)}
#: Gated DeltaNet (Qwen3-Next merges q/k/v with z; Qwen3.5 keeps them apart).
GATED_DELTANET = {"linear_attn.in_proj_qkvz": ("WQL", "WKL", "WX", "WZ"),
                  "linear_attn.in_proj_qkv": ("WQL", "WKL", "WX"),
                  "linear_attn.in_proj_z": ("WZ",), "linear_attn.out_proj": ("WOL",)}
#: Mamba-2 (Nemotron-H: one input projection for z, x, B, C and dt).
MAMBA2 = {"mixer.in_proj": ("WZ", "WX", "WB", "WC", "WDT"), "mixer.out_proj": ("WO",)}
#: Mamba-1 (Jamba's JambaMambaMixer: in_proj for x and z, x_proj for dt, B and C).
MAMBA1 = {"mamba.in_proj": ("WX", "WZ"), "mamba.x_proj": ("WXP",), "mamba.dt_proj": ("WDT",),
          "mamba.out_proj": ("WOM",)}
#: The token-mixer modules of each hybrid mixer family.
MIXER_MODULES = {"mamba2": MAMBA2, "gated_deltanet": GATED_DELTANET, "mamba1": MAMBA1}
#: A dense MLP, gated (Llama) or plain, and Nemotron-H's MLP blocks.
DENSE_MLP = {"mlp.gate_proj": ("WG",), "mlp.up_proj": ("WU",), "mlp.down_proj": ("WD",),
             "mlp.gate_up_proj": ("WG", "WU"), "mlp.fc1": ("WU",), "mlp.fc2": ("WD",),
             "mixer.up_proj": ("WU",), "mixer.down_proj": ("WD",)}
#: Routed experts (expert 0 stands for all) and shared experts, in the layouts of
#: DeepSeek/Qwen (``mlp``), Mixtral/MiniMax (``block_sparse_moe``) and gpt-oss (merged).
EXPERTS = {"mlp.experts.0.gate_proj": ("WEG",), "mlp.experts.0.up_proj": ("WEU",),
           "mlp.experts.0.down_proj": ("WED",), "mlp.experts.gate_up_proj": ("WEG", "WEU"),
           "mlp.experts.down_proj": ("WED",), "block_sparse_moe.experts.0.w1": ("WEG",),
           "block_sparse_moe.experts.0.w3": ("WEU",), "block_sparse_moe.experts.0.w2": ("WED",)}
SHARED_EXPERTS = {f"mlp.{shared}.{proj}_proj": (weight,)
                  for shared in ("shared_experts", "shared_expert")
                  for proj, weight in (("gate", "WSG"), ("up", "WSU"), ("down", "WSD"))}


def declared_held_16bit(*, model: ModelConfig, section: HFConfig | None,
                        dtype: str | None, hf_layers: int
                        ) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], list[str]]:
    """(``held_16bit`` for ``model``'s checkpoint dtype ``dtype``, notes) from the exclude
    list of quantisation ``section``; ``hf_layers`` is the checkpoint's
    ``num_hidden_layers`` (a hybrid's blocks pair up when there are twice as many)."""
    entries = _entries(section)
    if dtype not in LOW_BIT_DTYPES or not entries:
        return (), []
    layers = layer_modules(model=model, hf_layers=hf_layers)
    every, by_layer = _by_layer(entries)
    having: dict[str, int] = {}
    named: dict[str, set[int]] = {}
    for index, modules in enumerate(layers):
        for weight in {w for weights in modules.values() for w in weights}:
            having[weight] = having.get(weight, 0) + 1
        candidates = every + by_layer.get(index, [])
        for module, weights in modules.items():
            if any(_matches(entry, f"model.layers.{index}.{module}") for entry in candidates):
                for weight in weights:
                    named.setdefault(weight, set()).add(index)
    held, split = [], []
    for weight, indices in named.items():
        if 2 * len(indices) >= having[weight]:
            held.append(weight)
        if len(indices) < having[weight]:
            split.append(f"{weight} in {len(indices)} of {having[weight]} layers")
    notes = [f"the checkpoint keeps {', '.join(sorted(split))} 16-bit: priced "
             "16-bit in every layer where that is at least half of them, else low-bit"] \
        if split else []
    return ((dtype, tuple(sorted(held))),) if held else (), notes


def layer_modules(*, model: ModelConfig, hf_layers: int) -> list[dict[str, tuple[str, ...]]]:
    """Each checkpoint layer's priced linear modules -> the family weights they hold."""
    if model.hybrid is not None:
        pattern = model.hybrid.layer_pattern
        blocks = [pattern[i:i + 2] for i in range(0, len(pattern), 2)] \
            if len(pattern) == 2 * hf_layers else list(pattern)
        return [_block_modules(model=model, kinds=kinds) for kinds in blocks]
    moe_layers = model.moe.num_moe_layers if model.moe is not None else 0
    dense_layers = model.num_layers - moe_layers  # first, as DeepSeek's first_k_dense_replace
    return [_block_modules(model=model, kinds="*" + ("-" if i < dense_layers else "E"))
            for i in range(model.num_layers)]


def _block_modules(*, model: ModelConfig, kinds: str) -> dict[str, tuple[str, ...]]:
    modules: dict[str, tuple[str, ...]] = {}
    for kind in kinds:
        if kind == "*":
            modules |= _attention(model)
        elif kind == "M":
            assert model.hybrid is not None
            modules |= MIXER_MODULES[model.hybrid.mixer]
        elif kind == "-":
            modules |= DENSE_MLP
        elif kind == "E":
            modules |= EXPERTS
            if model.moe is not None and model.moe.num_shared_experts:
                modules |= SHARED_EXPERTS
    return modules


def _attention(model: ModelConfig) -> dict[str, tuple[str, ...]]:
    if model.mla is None:
        gate = ("WAG",) if model.attention_output_gate else ()
        return {**ATTENTION, "self_attn.q_proj": ("WQ", *gate)}
    query = MLA_QUERY_LORA if model.mla.q_lora_rank else MLA_DIRECT_Q
    return {**MLA, **query, **(INDEXER if model.mla.index_heads else {})}


def _entries(section: HFConfig | None) -> list[str]:
    """The exclude list's entries, each as a module name in the layout of
    :func:`layer_modules` (``re:`` patterns kept as they are); unpriced modules dropped."""
    if section is None:
        return []
    entries = []
    for key in EXCLUDE_KEYS:
        raw = section.raw(key)
        for entry in raw if isinstance(raw, list) else []:
            if not isinstance(entry, str) or not entry:
                continue
            if entry.startswith("re:"):
                entries.append(entry)
                continue
            entry = entry.removesuffix(".weight")
            prefix, found, rest = entry.partition("layers.")
            if found:
                if any(p in prefix for p in UNPRICED_PREFIXES):
                    continue
                entry = "model.layers." + rest
            entries.append(entry)
    return entries


def _by_layer(entries: list[str]) -> tuple[list[str], dict[int, list[str]]]:
    """(entries that may name any layer, entries naming one layer by its index): a list
    writes most entries per layer, and each needs testing against its own layer only."""
    every: list[str] = []
    by_layer: dict[int, list[str]] = {}
    for entry in entries:
        index, dot, _ = entry.removeprefix("model.layers.").partition(".")
        if entry.startswith("model.layers.") and dot and index.isdigit():
            by_layer.setdefault(int(index), []).append(entry)
        else:
            every.append(entry)
    return every, by_layer


def _matches(entry: str, name: str) -> bool:
    """Whether exclude-list ``entry`` names module ``name``: a regular expression (``re:``;
    one that does not compile names nothing), a glob, or a dotted part of the name."""
    if entry.startswith("re:"):
        layer = name.removeprefix("model.")
        try:
            return any(re.match(entry[3:], prefix + layer) for prefix in LAYER_PREFIXES)
        except re.error:
            return False
    if any(c in entry for c in "*?["):  # a module's pattern names its children too
        return fnmatchcase(name, entry) or fnmatchcase(name, entry + ".*")
    return f".{entry}." in f".{name}."


def exclude_list(model: ModelConfig) -> list[str]:
    """The exclude-list entries (``model.layers.*.<module>``) that name exactly the weights
    ``model``'s checkpoint of its own weight dtype keeps in 16 bits: every module all of
    whose weights are held (what :func:`declared_held_16bit` reads back)."""
    held = set(dict(model.held_16bit).get(model.weight_dtype, ()))
    modules = {module: weights for layer in layer_modules(model=model, hf_layers=model.num_layers)
               for module, weights in layer.items()}
    return [f"model.layers.*.{module}" for module, weights in sorted(modules.items())
            if held.issuperset(weights)]
