"""``energylens models``, ``energylens gpus`` and ``energylens runtimes``: browse what the
tool knows, and show one model or GPU with every number's source.

Sizes print in GB (10^9 bytes) everywhere, as in predictions; ``--json`` prints SI units
(parameters, bytes, FLOP/s, W, s).
"""

from __future__ import annotations

import argparse
from typing import Any

from energylens.cli.jsonout import print_json
from energylens.cli.tables import console
from energylens.cost.memory import memory_use
from energylens.hardware import GPU, list_gpus, load_gpu
from energylens.model import ModelConfig, build_graph, get_model, list_models, parameter_count
from energylens.model.config import MIXERS
from energylens.model.gguf.load import gguf_model_type
from energylens.model.hf import read_model_type, supported_model_types
from energylens.model.hf.cache import cached_config
from energylens.model.zoo import (
    ModelInfo,
    is_local_config,
    local_config_path,
    model_info,
    zoo_resolution,
)
from energylens.runtime import DEFAULT_RUNTIME, get_runtime, runtime_names
from energylens.runtime.profile import RuntimeProfile

__all__ = ["FAMILIES", "SHOWN_DTYPES", "family_of", "footprint", "register"]

#: ``--family`` values: the FFN kind, or a hybrid of attention and recurrent mixers.
FAMILIES = ("dense", "moe", "hybrid")
#: Weight formats ``models show`` prices (every format a checkpoint name or config selects).
SHOWN_DTYPES = ("bf16", "fp8", "int4", "nvfp4")

#: How ``models show`` names a query/key norm (ModelConfig.qk_norm).
_QK_NORM_TEXT = {"head": ", QK norm per head",
                 "all_heads": ", QK norm over all heads (all-reduced under TP)"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models``, ``gpus`` and ``runtimes`` commands."""
    m = sub.add_parser("models", help="list the model zoo (filter it), or show one model",
                       description="List the zoo's architectures and aliases. 'models show "
                                   "NAME|PATH' prints one model's sizes and sources.")
    m.add_argument("--search", metavar="TEXT",
                   help="only models whose name, HF id, aliases or model_type contain TEXT")
    m.add_argument("--family", choices=FAMILIES, help="only dense, MoE or hybrid models")
    m.add_argument("--json", action="store_true", help="print one JSON object")
    m.set_defaults(handler=_cmd_models)
    shows = m.add_subparsers(dest="models_command", parser_class=type(m))
    show = shows.add_parser("show", help="one model: parameters, bytes, family, sources")
    show.add_argument("name", metavar="NAME|PATH",
                      help="zoo name, alias, HF repo id (release and precision words allowed) "
                           "or a config.json path")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_cmd_models_show)

    g = sub.add_parser("gpus", help="list the hardware database, or show one GPU")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(handler=_cmd_gpus)
    gshows = g.add_subparsers(dest="gpus_command", parser_class=type(g))
    gshow = gshows.add_parser("show", help="one GPU: every number with its kind and source")
    gshow.add_argument("name", help="GPU name or alias")
    gshow.add_argument("--json", action="store_true", help="print one JSON object")
    gshow.set_defaults(handler=_cmd_gpus_show)

    r = sub.add_parser("runtimes", help="list the serving runtimes")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(handler=_cmd_runtimes)


# --------------------------------------------------------------------------- models


def family_of(model: ModelConfig) -> str:
    """``hybrid`` for a model with recurrent mixers, else its FFN family."""
    return "hybrid" if model.hybrid is not None else model.family


def _matches(model: ModelConfig, info: ModelInfo, text: str) -> bool:
    names = [model.name, model.hf_id, info.model_type]
    for alias in info.aliases:
        names += [alias.name, alias.hf_id or ""]
    return any(text.lower() in n.lower() for n in names)


def _selected(args: argparse.Namespace) -> list[tuple[ModelConfig, ModelInfo]]:
    chosen = []
    for model in list_models():
        info = model_info(model.name)
        if args.family and family_of(model) != args.family:
            continue
        if args.search and not _matches(model, info, args.search):
            continue
        chosen.append((model, info))
    return chosen


def _kv_heads(model: ModelConfig) -> str:
    """KV heads: one number, or the range where layers differ (DeciLM; layers without
    attention apart)."""
    per_layer = set(model.layer_kv_heads()) - {0}
    text = f"{min(per_layer)}-{max(per_layer)}" if len(per_layer) > 1 else str(model.num_kv_heads)
    skipped = model.layer_kv_heads().count(0)
    return f"{text} (no attention in {skipped} layers)" if skipped else text


def _attention(model: ModelConfig) -> str:
    text: str = model.attention
    if model.sliding_window is not None:
        text += f", {model.num_sliding_layers}/{model.num_layers} sliding {model.sliding_window}"
    if model.hybrid is not None:
        text += (f" in {model.hybrid.count('*')} of {model.num_layers} blocks, "
                 f"{model.hybrid.count('M')} {MIXERS[model.hybrid.mixer]}")
    if model.ffn_per_layer is not None:
        widths = set(model.ffn_per_layer) - {0}
        text += (f"; FFN {min(widths)}-{max(widths)} wide, none in "
                 f"{model.ffn_per_layer.count(0)} layers")
    return text


def _cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table  # on use: other commands never load rich

    chosen = _selected(args)
    if args.json:
        print_json({"models": [_summary(m, i) for m, i in chosen],
                    "aliases": [{"name": a.name, "hf_id": a.hf_id, "model": m.name,
                                 "note": a.note}
                                for m, i in chosen for a in i.aliases]})
        return 0
    table = Table(title=f"Model zoo: {len(chosen)} architectures")
    for column in ("name", "family", "verified", "total params", "active params", "layers",
                   "attention", "experts", "HF id"):
        table.add_column(column)
    for model, info in chosen:
        total, active = parameter_count(model)
        experts = f"{model.moe.num_experts} (top-{model.moe.top_k})" if model.moe else "-"
        level = f"[yellow]{info.level}[/]" if info.level == "secondary" else info.level
        table.add_row(model.name, family_of(model), level, f"{total / 1e9:.1f}B",
                      f"{active / 1e9:.1f}B", str(model.num_layers), _attention(model),
                      experts, model.hf_id)
    table.caption = ("verified: real_config = a verbatim config.json was read; "
                     "real_config_variant = a sibling's; secondary = presets and tables only")
    out = console()
    out.print(table)
    aliases = Table(title="Aliases (checkpoints with the shapes of a zoo entry)")
    for column in ("alias", "HF id", "zoo model", "rests on"):
        aliases.add_column(column)
    for model, info in chosen:
        for alias in info.aliases:
            aliases.add_row(alias.name, alias.hf_id or "-", model.name, alias.note or "-")
    if aliases.row_count:
        out.print(aliases)
    out.print("Names may carry release words (-Instruct, -Chat, -it, -2507 ...) and precision "
              "words (-FP8, -FP8-Dynamic, -AWQ, -GPTQ, -NVFP4, which set the weights). --model "
              "also reads a local config.json: model_type "
              + ", ".join(supported_model_types())
              + " by their families, any other from the standard fields (with a warning).",
              highlight=False)
    return 0


def _summary(model: ModelConfig, info: ModelInfo | None) -> dict[str, Any]:
    total, active = parameter_count(model)
    return {"name": model.name, "hf_id": model.hf_id, "family": family_of(model),
            "verification": info.level if info else "local config.json",
            "total_params": total, "active_params": active, "layers": model.num_layers,
            "weight_dtype": model.weight_dtype}


def footprint(model: ModelConfig) -> dict[str, Any]:
    """Weight bytes per format, KV bytes per token and state bytes per sequence, as the
    memory model counts them on one GPU (no parallelism, a 16-bit KV cache)."""
    graph = build_graph(model)

    def use(weight_dtype: str) -> Any:
        return memory_use(graph=graph, gpu=load_gpu("H100-SXM"),
                          runtime=get_runtime(DEFAULT_RUNTIME),
                          degrees={"tp": 1, "etp": 1, "ep": 1}, pp=1, weight_dtype=weight_dtype,
                          kv_dtype="bf16", sequences=1, context_tokens=1)

    one = use(model.weight_dtype)
    shown = dict.fromkeys((*SHOWN_DTYPES, model.weight_dtype))  # the checkpoint's too
    return {"weight_bytes": {d: use(d).weights_bytes for d in shown},
            "kv_bytes_per_token": one.kv_cache_bytes,
            "state_bytes_per_sequence": one.state_bytes}


def _cmd_models_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    model = get_model(args.name)
    local = is_local_config(args.name)
    found = zoo_resolution(args.name)
    info = None if found is None else model_info(found.name)
    # a repo id the zoo does not know was read from the Hugging Face hub cache
    cached = None if local or found is not None else cached_config(args.name)
    total, active = parameter_count(model)
    sizes = footprint(model)
    record: dict[str, Any] = {
        **_summary(model, info), **sizes,
        "requested": args.name,
        "model_type": info.model_type if info else (
            gguf_model_type(args.name) if args.name.lower().endswith(".gguf")
            else read_model_type(cached or local_config_path(args.name))),
        "attention": _attention(model), "verification_text": info.verification if info else None,
        "sources": list(info.sources) if info else [str(cached or args.name)],
        "disagreements": list(info.disagreements) if info else [],
        "aliases": [a.name for a in info.aliases] if info else [],
        "params_total_published": model.params_total_published,
        "params_active_published": model.params_active_published, "notes": model.notes,
        "held_16bit": {dtype: list(weights) for dtype, weights in model.held_16bit},
    }
    if args.json:
        print_json(record)
        return 0
    out = console()
    title = model.name if found is None or found.weight_dtype is None else found.describe()
    out.print(f"[bold]{title}[/]", highlight=False)
    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("value")
    published = (f" (published {model.params_total_published / 1e9:.4g}B)"
                 if model.params_total_published else "")
    rows = [
        ("HF id", model.hf_id or "-"),
        ("family", f"{family_of(model)} ({record['model_type']}), "
                   f"{model.num_layers} layers, hidden {model.hidden_size}"),
        ("attention", f"{_attention(model)}, {model.num_heads} heads / {_kv_heads(model)} KV "
                      f"of {model.head_dim}" + _QK_NORM_TEXT.get(model.qk_norm or "", "")),
        ("total parameters", f"{total / 1e9:.2f}B{published}"),
        ("active parameters", f"{active / 1e9:.2f}B per token"),
        ("weights", ", ".join(f"{d} {b / 1e9:.1f} GB" for d, b in sizes["weight_bytes"].items())
         + f" (the checkpoint: {model.weight_dtype})"),
        *((f"kept 16-bit in {dtype}", f"{', '.join(weights)} (the {dtype} checkpoint's "
           "exclude list; weights in the model's family spec)")
          for dtype, weights in model.held_16bit),
        ("KV cache", f"{sizes['kv_bytes_per_token'] / 1e3:.1f} kB per token (16-bit)"),
        ("recurrent state", f"{sizes['state_bytes_per_sequence'] / 1e6:.2f} MB per sequence"),
        ("verification", info.verification if info else
         "a config.json in the local Hugging Face cache" if cached else "a local config.json"),
        ("notes", model.notes),
    ]
    for name, value in rows:
        table.add_row(name, value)
    for source in record["sources"]:
        table.add_row("source", source)
    for text in record["disagreements"]:
        table.add_row("[yellow]disagreement[/]", text)
    if info:
        for alias in info.aliases:
            table.add_row("alias", f"{alias.name}" + (f" ({alias.note})" if alias.note else ""))
    out.print(table)
    return 0


# --------------------------------------------------------------------------- GPUs

#: How ``gpus show`` prints a field: scale to the unit and the unit, by field name ending.
_UNITS: tuple[tuple[str, float, str], ...] = (
    ("bandwidth_bytes_per_s", 1e9, "GB/s"),
    ("capacity_bytes", 1e9, "GB"), ("l2_bytes", 2**20, "MiB"), ("_w", 1.0, "W"),
    ("_mhz", 1.0, "MHz"), ("latency_s", 1e-6, "us"), ("price_per_hour", 1.0, "$/GPU-h"),
)


def _value(gpu: GPU, key: str) -> float:
    """The number of provenance key ``key`` (``dense_flops_per_s.bf16``, ``intra_node.latency_s``)."""
    head, _, rest = key.partition(".")
    if head == "dense_flops_per_s":
        return gpu.dense_flops_per_s[rest]
    if head in ("intra_node", "inter_node"):
        return float(getattr(getattr(gpu, head), rest))
    return float(getattr(gpu, key))


def _shown(key: str, value: float) -> str:
    if key == "hbm_bandwidth_bytes_per_s":
        return f"{value / 1e12:.2f} TB/s"
    if key.startswith("dense_flops_per_s."):
        return f"{value / 1e12:,.4g} TFLOP/s"
    for ending, scale, unit in _UNITS:
        if key.endswith(ending):
            return f"{value / scale:,.4g} {unit}"
    return f"{value:g}"


def constant_origins(document: dict[str, Any], *, gpu: str) -> dict[str, int]:
    """How many of ``gpu``'s constants in a calibration ``document`` (kernels, links,
    every runtime's section) are its own (``fitted`` or ``measured`` on its data),
    ``borrowed`` (``assumed``: a relative's value or a profile's prior) or built-in
    ``default``."""
    sections = [(document.get("kernels") or {}).get(gpu) or {}]
    sections += [v for k, v in (document.get("links") or {}).items()
                 if k.split(":")[0] == gpu and isinstance(v, dict)]
    sections += [(by_gpu or {}).get(gpu) or {} for by_gpu in (document.get("runtimes") or {}).values()]
    counts = {"own": 0, "borrowed": 0, "default": 0}
    for section in sections:
        for entry in section.values():
            if isinstance(entry, dict) and "kind" in entry:
                kind = entry["kind"]
                key = "own" if kind in ("fitted", "measured") else (
                    "borrowed" if kind == "assumed" else "default")
                counts[key] += 1
    return counts


def _origins_cell(gpu: GPU, document: dict[str, Any]) -> str:
    counts = constant_origins(document, gpu=gpu.name)
    if gpu.borrows_from and not any(counts.values()):  # a GPU file newer than the file
        return f"none in the file: borrowed when predicting ({gpu.borrows_from})"
    relative = f" ({gpu.borrows_from})" if gpu.borrows_from and counts["borrowed"] else ""
    return f"{counts['own']} own, {counts['borrowed']} borrowed{relative}"


def _cmd_gpus(args: argparse.Namespace) -> int:
    from rich.table import Table

    from energylens.calibration.file import calibration_document, default_calibration

    gpus = list_gpus()
    document = calibration_document(default_calibration())
    if args.json:
        print_json({"gpus": [{**_gpu_record(g),
                              "constants": constant_origins(document, gpu=g.name)}
                             for g in gpus]})
        return 0
    table = Table(title="GPUs (dense rates; link bandwidth per direction; GB = 10^9 bytes)")
    for column in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GB", "HBM TB/s",
                   "TDP W", "scale-up", "GPUs", "GB/s", "scale-out GB/s", "$/GPU-h",
                   "constants"):
        table.add_column(column)
    for gpu in gpus:
        rates = gpu.dense_flops_per_s
        table.add_row(gpu.name, f"{rates['bf16'] / 1e12:.0f}",
                      f"{rates['fp8'] / 1e12:.0f}" if "fp8" in rates else "-",
                      f"{rates['fp4'] / 1e12:.0f}" if "fp4" in rates else "-",
                      f"{gpu.hbm_capacity_bytes / 1e9:.0f}",
                      f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}", f"{gpu.tdp_w:.0f}",
                      gpu.intra_node.kind, str(gpu.gpus_per_node),
                      f"{gpu.intra_node.bandwidth_bytes_per_s / 1e9:.0f}",
                      f"{gpu.inter_node.bandwidth_bytes_per_s / 1e9:.0f}",
                      f"{gpu.price_per_hour:.2f}", _origins_cell(gpu, document))
    table.caption = ("GPUs: the scale-up domain (NVLink/xGMI); groups larger than it use the "
                     "scale-out network. constants: the shipped calibration's for the GPU, "
                     "fitted or measured on its own data, or borrowed (its declared relative's "
                     "value, a profile's prior). 'energylens gpus show NAME' gives every source.")
    console().print(table)
    return 0


def _gpu_record(gpu: GPU) -> dict[str, Any]:
    return {"name": gpu.name, "vendor": gpu.vendor, "aliases": list(gpu.aliases),
            "intra_node_kind": gpu.intra_node.kind, "inter_node_kind": gpu.inter_node.kind,
            "borrows_from": gpu.borrows_from, "borrow_reason": gpu.borrow_reason,
            "engines_from": gpu.engines_from, "engines_reason": gpu.engines_reason,
            "fields": {key: {"value": _value(gpu, key), "kind": prov.kind, "source": prov.source}
                       for key, prov in gpu.provenance.items()}}


def _cmd_gpus_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    gpu = load_gpu(args.name)
    record = _gpu_record(gpu)
    if args.json:
        print_json(record)
        return 0
    out = console()
    out.print(f"[bold]{gpu.name}[/] ({gpu.vendor}); aliases: {', '.join(gpu.aliases) or '-'}",
              highlight=False)
    table = Table()
    for column in ("field", "value", "kind", "source"):
        table.add_column(column)
    for key, field in record["fields"].items():
        table.add_row(key, _shown(key, field["value"]), field["kind"], field["source"])
    out.print(table)
    out.print(f"links: scale-up {gpu.intra_node.kind}, scale-out {gpu.inter_node.kind}; "
              + (f"calibration constants borrowed from {gpu.borrows_from}: {gpu.borrow_reason}"
                 if gpu.borrows_from else "calibration constants of its own")
              + (f"; serving-engine constants first from {gpu.engines_from}: "
                 f"{gpu.engines_reason}" if gpu.engines_from else ""), highlight=False)
    return 0


# --------------------------------------------------------------------------- runtimes


#: What a runtime's memory share is a share of (``RuntimeProfile.memory_share_of``), in words.
SHARE_OF = {"hbm": "HBM", "free": "free after weights", "static": "HBM, weights + KV"}


def _runtime_row(r: RuntimeProfile) -> dict[str, Any]:
    """One runtime's facts as the ``runtimes`` listing shows them (a value the engine
    derives from the GPU and layout is the profile's, flagged ``..._by_gpu``)."""
    by_gpu = {hook: getattr(type(r), hook) is not getattr(RuntimeProfile, hook)
              for hook in ("memory_share_on", "prefill_chunk_on")}
    return {"name": r.name, "display_name": r.display_name, "version": r.version,
            "default_fusions": sorted(r.default_fusions),
            "memory_share": r.memory_utilization, "memory_share_of": r.memory_share_of,
            "memory_share_by_gpu": by_gpu["memory_share_on"], "reserve_bytes": r.reserve_bytes,
            "prefill_chunk_tokens": r.prefill_chunk_tokens,
            "prefill_chunk_by_gpu": by_gpu["prefill_chunk_on"],
            "prefill_scheduling": r.prefill_scheduling,
            "attention_dp_prompts": (r.attention_dp_prompts if "attention_dp" in r.parallelism
                                     else None),
            "kv_auto": r.auto_kv_dtype,
            "sparse_attention_fp8_kv_from": r.sparse_attention_fp8_kv_from,
            "expert_parallel_layout": r.expert_parallel_layout,
            "custom_allreduce_max_bytes": r.custom_allreduce_max_bytes,
            "speculative_decoding": r.speculative_decoding}


def _cmd_runtimes(args: argparse.Namespace) -> int:
    from rich.table import Table

    rows = [_runtime_row(get_runtime(name)) for name in runtime_names()]
    if args.json:
        print_json({"runtimes": rows})
        return 0
    table = Table(title="Serving runtimes (--runtime)")
    for column in ("name", "default fusions", "memory share", "reserve GB", "prefill chunk",
                   "prompts scheduled", "KV auto", "EP layout", "own all-reduce up to",
                   "draft heads"):
        table.add_column(column)
    for row in rows:
        share = f"{row['memory_share']:.0%}" + (" (by GPU)" if row["memory_share_by_gpu"] else "")
        kv_auto = row["kv_auto"] + (f"; fp8 for sparse attention on CC >= "
                                    f"{row['sparse_attention_fp8_kv_from']:g}"
                                    if row["sparse_attention_fp8_kv_from"] is not None else "")
        table.add_row(f"{row['name']} ({row['display_name']})", ",".join(row["default_fusions"]),
                      f"{share} of {SHARE_OF[row['memory_share_of']]}",
                      f"{row['reserve_bytes'] / 1e9:.1f}",
                      str(row["prefill_chunk_tokens"])
                      + (" (by GPU)" if row["prefill_chunk_by_gpu"] else ""),
                      row["prefill_scheduling"]
                      + (f"; attention-DP ranks {row['attention_dp_prompts']}"
                         if row["attention_dp_prompts"] else ""),
                      kv_auto, row["expert_parallel_layout"],
                      f"{row['custom_allreduce_max_bytes'] / 2**20:.0f} MiB"
                      if row["custom_allreduce_max_bytes"] else "-",
                      "yes" if row["speculative_decoding"] else "-")
    console().print(table)
    return 0

