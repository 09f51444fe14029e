"""A GGUF file (llama.cpp's checkpoint) as a ModelConfig: its metadata read as the
config.json fields of the same family, its weights priced as its tensors' types store them
(weight dtype ``gguf``, storage.py), or by its file type where it lists no tensors.

llama.cpp's converter (``convert_hf_to_gguf.py``, recalled) writes a family's config under
``<architecture>.<key>``: ``block_count`` (layers), ``embedding_length`` (hidden),
``feed_forward_length``, ``attention.head_count`` / ``head_count_kv`` / ``key_length``
(head width), ``context_length``, ``expert_count`` / ``expert_used_count`` /
``expert_feed_forward_length`` / ``expert_shared_feed_forward_length``,
``attention.sliding_window``, and the vocabulary as ``tokenizer.ggml.tokens`` (or
``vocab_size``). A file without an ``output.weight`` tensor ties its output layer to the
token embedding. ``general.file_type`` is llama.cpp's ``llama_ftype`` (``llama.h``,
recalled).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from energylens.cost.gguf import FILE_DTYPE
from energylens.model.config import ModelConfig
from energylens.model.gguf.reader import GGUFHeader, read_gguf_header
from energylens.model.gguf.storage import gguf_storage
from energylens.model.hf.load import model_from_hf_fields

#: ``general.file_type`` values priced, as the weight dtype each is (cost/gguf.py).
FILE_TYPES = {1: "fp16", 32: "bf16", 7: "q8_0", 2: "q4_0", 15: "q4_k_m", 17: "q5_k_m",
              18: "q6_k", 38: "mxfp4"}
#: Names of the file types not priced (for the error), as llama-quantize prints them.
UNPRICED_FILE_TYPES = {
    0: "F32", 3: "Q4_1", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    13: "Q3_K_L", 14: "Q4_K_S", 16: "Q5_K_S", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 36: "TQ1_0", 37: "TQ2_0"}
#: GGUF architecture -> the Hugging Face model_type whose builder reads its fields (an
#: architecture with experts: the MoE type of ``MOE_TYPES``).
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen2moe": "qwen2_moe", "qwen3": "qwen3",
                 "qwen3moe": "qwen3_moe", "gemma": "gemma", "gemma2": "gemma2",
                 "gemma3": "gemma3_text", "phi3": "phi3", "command-r": "cohere",
                 "starcoder2": "starcoder2", "olmo2": "olmo2", "granite": "granite",
                 "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v3", "glm4moe": "glm4_moe"}
#: A Llama-architecture file with experts is a Mixtral.
MOE_TYPES = {"llama": "mixtral"}
#: The config.json field each GGUF key (after ``<architecture>.``) fills.
FIELDS = {"embedding_length": "hidden_size", "block_count": "num_hidden_layers",
          "feed_forward_length": "intermediate_size",
          "attention.head_count": "num_attention_heads",
          "attention.head_count_kv": "num_key_value_heads",
          "attention.key_length": "head_dim", "context_length": "max_position_embeddings",
          "attention.layer_norm_rms_epsilon": "rms_norm_eps",
          "attention.layer_norm_epsilon": "layer_norm_eps",
          "attention.sliding_window": "sliding_window", "vocab_size": "vocab_size",
          "expert_used_count": "num_experts_per_tok",
          "expert_feed_forward_length": "moe_intermediate_size",
          "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}
#: The config.json field of the expert count, per model_type (Mixtral's own name).
EXPERT_COUNT_FIELD = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts",
                      "deepseek_v3": "n_routed_experts", "glm4_moe": "n_routed_experts"}
#: Keys of one architecture alone -> the config.json field each fills: DeepSeek's MLA ranks
#: (``deepseek2``, which DeepSeek-V2, V3 and R1 files share) and the dense first layers and
#: shared experts of the DeepSeek-style MoE of both it and GLM-4.5 (``glm4moe``).
_ROUTED = {"expert_shared_count": "n_shared_experts",
           "leading_dense_block_count": "first_k_dense_replace"}
ARCHITECTURE_FIELDS = {
    "deepseek2": {"attention.q_lora_rank": "q_lora_rank",
                  "attention.kv_lora_rank": "kv_lora_rank",
                  "rope.dimension_count": "qk_rope_head_dim", **_ROUTED},
    "glm4moe": _ROUTED}


def load_gguf(path: str | Path) -> ModelConfig:
    """The ModelConfig of the GGUF file ``path`` (its header only; no weights are read),
    its weights priced from its tensors' types (weight dtype ``gguf``), else from its
    file type. ModelConfigError (one line naming the file) for an architecture, tensor
    type or file type not read, or fields that do not fit together."""
    header = read_gguf_header(Path(path))
    fields = hf_fields(header)
    arch = header.metadata["general.architecture"]
    name = str(header.metadata.get("general.name") or header.path.stem)
    model = model_from_hf_fields(fields, path=header.path, name=name)
    notes = model.notes.replace("a local HF config.json", f"a GGUF file's metadata ({arch} "
                                f"read as the {fields['model_type']} config fields)")
    storage = gguf_storage(header)
    if not storage:  # no tensor list to read: the file type's rule (cost/gguf.py)
        return dataclasses.replace(model, hf_id=str(header.path),
                                   weight_dtype=weight_dtype(header), notes=notes)
    stored = ", ".join(f"{w} {b * 8:.3g}" for w, b in storage)
    notes += (f". Weights priced as the file stores them (dtype gguf; file type "
              f"{file_type_name(header)}), bits per weight from its tensors' types: {stored}.")
    return dataclasses.replace(model, hf_id=str(header.path), weight_dtype=FILE_DTYPE,
                               gguf_storage=storage, notes=notes)


def gguf_model_type(path: str | Path) -> str:
    """The Hugging Face model_type the GGUF file ``path`` is read as."""
    return str(hf_fields(read_gguf_header(Path(path)))["model_type"])


def hf_fields(header: GGUFHeader) -> dict[str, Any]:
    """The config.json fields the file's metadata stands for."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise header.error("no general.architecture in the GGUF metadata")
    if arch not in ARCHITECTURES:
        raise header.error(f"GGUF architecture {arch!r} is not read (read: "
                           f"{', '.join(ARCHITECTURES)}); give the model's config.json instead")
    experts = meta.get(f"{arch}.expert_count") or 0
    model_type = MOE_TYPES.get(arch, ARCHITECTURES[arch]) if experts else ARCHITECTURES[arch]
    fields: dict[str, Any] = {"model_type": model_type,
                              "tie_word_embeddings": "output.weight" not in header.tensors}
    for key, field in {**FIELDS, **ARCHITECTURE_FIELDS.get(arch, {})}.items():
        value = meta.get(f"{arch}.{key}")
        if value is not None:
            fields[field] = value
    if arch == "deepseek2":
        fields.update(_mla_head_widths(header, arch))
    # GLM-4.5's files keep its multi-token-prediction layers as blocks of their own
    # (``nextn_predict_layers`` of them after the decoder's): the model is the rest
    nextn = meta.get(f"{arch}.nextn_predict_layers") or 0
    if nextn and "num_hidden_layers" in fields:
        fields["num_hidden_layers"] -= nextn
    if "blk.0.attn_q.bias" in header.tensors:  # a bias on the projections, as the file has
        fields["attention_bias"] = True
    if "blk.0.attn_q_norm.weight" in header.tensors and model_type == "glm4_moe":
        fields["use_qk_norm"] = True  # GLM-4.5's per-head query/key norm
    if "vocab_size" not in fields and "tokenizer.ggml.tokens" in header.array_lengths:
        fields["vocab_size"] = header.array_lengths["tokenizer.ggml.tokens"]
    if experts:
        fields[EXPERT_COUNT_FIELD.get(model_type, "num_experts")] = experts
    return fields


def _mla_head_widths(header: GGUFHeader, arch: str) -> dict[str, int]:
    """MLA's per-head widths: the query/key head (``key_length``) less its rotary part, and
    the value head (``value_length``); files converted since llama.cpp stores MLA
    absorbed give the absorbed widths there (the latent plus the rotary part) and the
    per-head ones as ``key_length_mla`` / ``value_length_mla``."""
    meta = header.metadata
    key = meta.get(f"{arch}.attention.key_length_mla", meta.get(f"{arch}.attention.key_length"))
    value = meta.get(f"{arch}.attention.value_length_mla",
                     meta.get(f"{arch}.attention.value_length"))
    rope = meta.get(f"{arch}.rope.dimension_count")
    if not (isinstance(key, int) and isinstance(value, int) and isinstance(rope, int)):
        raise header.error("a deepseek2 file needs attention.key_length, value_length and "
                           "rope.dimension_count (MLA's head widths)")
    return {"qk_nope_head_dim": key - rope, "v_head_dim": value}


def file_type_name(header: GGUFHeader) -> str:
    """The file's ``general.file_type`` as llama-quantize names it (unnamed: its number)."""
    code = header.metadata.get("general.file_type")
    names = {**{c: t.upper() for c, t in FILE_TYPES.items()}, **UNPRICED_FILE_TYPES}
    return names.get(code, f"number {code}") if isinstance(code, int) else "not given"


def weight_dtype(header: GGUFHeader) -> str:
    """The weight dtype of the file's ``general.file_type``."""
    code = header.metadata.get("general.file_type")
    if not isinstance(code, int):
        raise header.error("no general.file_type in the GGUF metadata (the weights' format)")
    if code not in FILE_TYPES:
        shown = UNPRICED_FILE_TYPES.get(code, f"number {code}")
        priced = ", ".join(t.upper() for t in FILE_TYPES.values())
        raise header.error(f"GGUF file type {shown} is not priced (priced: {priced})")
    return FILE_TYPES[code]
