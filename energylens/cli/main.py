"""The ``energylens`` command line. Bad input: one error line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from energylens.cli.argtypes import positive_int, runtime_arg
from energylens.cli.jsonout import print_json
from energylens.cli.paths import check_output
from energylens.cli.tables import console
from energylens.cost.moe import Routing
from energylens.deployment import FUSIONS, KV_DTYPES, WEIGHT_DTYPES, Deployment, Workload
from energylens.errors import ConfigError, EnergyLensError
from energylens.model.hf import ModelApproximationWarning
from energylens.model.zoo import zoo_resolution
from energylens.runtime import DEFAULT_RUNTIME, runtime_names
from energylens.workloads import kind_names
from energylens.workloads.load.cli import (
    add_load_arguments,
    load_fields,
    overload_warning,
    pool_prediction,
    trace_rate_note,
    write_plot,
)

if TYPE_CHECKING:
    from energylens.validation.expected_error import ExpectedError
    from energylens.workloads.result import Prediction


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help texts end with the default value, when there is one and the text does not say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        shown = not any(default is v for v in (None, False, argparse.SUPPRESS))
        if "default" not in (text or "") and shown and action.option_strings:
            return f"{text} (default: %(default)s)" if text else "default: %(default)s"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"energylens: error: {message}\n")


def _release(text: str) -> str:
    """A release number without a leading ``v`` (``v0.17.0`` -> ``0.17.0``)."""
    stripped = text.strip()
    return stripped[1:] if stripped[:1] in ("v", "V") and stripped[1:2].isdigit() else stripped


def _fusions(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = names - set(FUSIONS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fusion {', '.join(sorted(unknown))}; known: {', '.join(FUSIONS)}")
    return names


def _add_predict(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict energy and latency of one deployment")
    p.add_argument("--model", required=True, help="zoo name, HF repo id or a config.json path")
    p.add_argument("--gpu", required=True, help="GPU name (energylens gpus lists them)")
    p.add_argument("--num-gpus", type=positive_int, help="GPUs in all (default: tp*pp*ep*dp)")
    degrees = {"tp": "tensor", "pp": "pipeline", "ep": "expert", "dp": "data"}
    for name, what in degrees.items():
        p.add_argument(f"--{name}", type=positive_int, default=None if name == "dp" else 1,
                       help=f"{what}-parallel degree"
                            + (" (default: num_gpus / (tp*pp*ep))" if name == "dp" else ""))
    p.add_argument("--attention-dp", type=positive_int, default=1,
                   help="data-parallel attention ranks of a replica, the MoE layer over all "
                        "of them (tp is then the attention group: GPUs = tp*attention_dp*pp)")
    p.add_argument("--moe-tp", type=positive_int, default=None,
                   help="ways each expert is split (ep*moe_tp = tp*attention_dp; default: "
                        "the quotient)")
    p.add_argument("--max-num-seqs", type=positive_int, default=None,
                   help="running requests one scheduler admits, per attention rank (vLLM "
                        "--max-num-seqs, TensorRT-LLM --max_batch_size; default: the "
                        "runtime server's)")
    p.add_argument("--prefill-chunk-tokens", type=positive_int, default=None, metavar="N",
                   help="prompt tokens per forward pass (vLLM --max-num-batched-tokens, SGLang "
                        "--chunked-prefill-size, TensorRT-LLM --max_num_tokens, llama.cpp "
                        "--batch-size): a static batch's prompts run in passes of N, a load "
                        "run's scheduler takes N as its token budget (default: the runtime's, "
                        "offline and served alike)")
    p.add_argument("--speculative-tokens", type=int, default=0, metavar="K",
                   help="draft tokens per decode step from a one-layer draft head (MTP, "
                        "EAGLE; TensorRT-LLM num_nextn_predict_layers, vLLM/SGLang "
                        "num_speculative_tokens; default 0: none)")
    p.add_argument("--draft-acceptance", type=float, default=None, metavar="A",
                   help="probability each draft is kept once the ones before it were "
                        "(default 0.85: DeepSeek-V3's published MTP acceptance)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="sequences per batch (default: 1)")
    p.add_argument("--input-tokens", type=positive_int, default=None,
                   help="prompt tokens per request (default: 512; a --trace sets its own)")
    p.add_argument("--output-tokens", type=positive_int, default=None,
                   help="generated tokens per request (default: 128; a --trace sets its own)")
    p.add_argument("--workload", choices=kind_names(), default="batch",
                   help="batch: one static batch; serving: continuous batching; load: "
                        "requests arriving over time, simulated")
    p.add_argument("--runtime", type=runtime_arg, choices=runtime_names(), default=DEFAULT_RUNTIME,
                   help="serving engine (default: %(default)s)")
    p.add_argument("--runtime-version", type=_release, default=None, metavar="RELEASE",
                   help="the engine's release, e.g. 0.17.0 or v0.17.0 (default: the one its "
                        "profile describes); facts that change between releases follow it")
    p.add_argument("--dtype", choices=WEIGHT_DTYPES, default=None,
                   help="weight dtype (default: the checkpoint's; gguf: each tensor as the "
                        "model's .gguf file stores it)")
    p.add_argument("--kv-dtype", choices=("auto", *KV_DTYPES), default="auto",
                   help="KV-cache dtype (default: auto, the runtime's default for the checkpoint)")
    fusion = p.add_mutually_exclusive_group()
    fusion.add_argument("--fusion", type=_fusions, default=None,
                        help=f"comma list of {', '.join(FUSIONS)} (default: the runtime's)")
    fusion.add_argument("--no-fusion", action="store_const", const=frozenset(), dest="fusion",
                        help="no fused kernels")
    p.add_argument("--overlap-sms", type=int, default=0,
                   help="SMs given to communication kernels that overlap compute")
    p.add_argument("--freq-mhz", type=float, help="GPU clock (default: the boost clock)")
    p.add_argument("--moe-skew", type=float, default=0.0,
                   help="Zipf exponent of expert popularity (0 = uniform routing)")
    p.add_argument("--identical-prompts", action="store_true",
                   help="--workload batch: every sequence is the same prompt, decoded greedily "
                        "(a MoE step reads one sequence's experts, as benchmarks that repeat "
                        "one prompt measure)")
    p.add_argument("--calibration", help="calibration file (default: the shipped one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--breakdown", action="store_true",
                   help="also show where a decode step's and a prefill step's time and energy "
                        "go (GEMMs, experts, attention, vector ops, communication, engine, "
                        "static power)")
    p.add_argument("--what-if", action="store_true",
                   help="also predict the deployment with each of a few single changes (no "
                        "fusion, FP8 KV cache, FP8 weights, lower clock, 2x TP, 2x batch, "
                        "overlapped collectives) beside it")
    p.add_argument("--layouts", action="store_true",
                   help="also predict every parallel layout of the same GPUs (TP, PP, EP, "
                        "attention DP, replicas) with the same workload, fastest TPOT first")
    p.add_argument("--launch-command", action="store_true",
                   help="print the script that starts this deployment on its runtime instead "
                        "(with --json: a launch_command field in the object)")
    add_load_arguments(p)
    p.set_defaults(handler=_cmd_predict)


def _cmd_predict(args: argparse.Namespace) -> int:
    from energylens.predict import predict

    # Any value but 0 goes to Routing, which refuses a negative or NaN skew in one line.
    routing = Routing(kind="zipf" if args.moe_skew != 0 else "uniform", skew=args.moe_skew,
                      identical_sequences=args.identical_prompts)
    if args.identical_prompts and args.workload != "batch":
        raise ConfigError("--identical-prompts describes a static batch (--workload batch)")
    _refuse_unread(args)
    deployment = Deployment(num_gpus=args.num_gpus, tp=args.tp, pp=args.pp, ep=args.ep,
                            dp=args.dp, attention_dp=args.attention_dp, moe_tp=args.moe_tp,
                            weight_dtype=args.dtype, fusion=args.fusion,
                            kv_dtype=None if args.kv_dtype == "auto" else args.kv_dtype,
                            overlap_sms=args.overlap_sms, freq_mhz=args.freq_mhz,
                            routing=routing, runtime=args.runtime,
                            runtime_version=args.runtime_version,
                            max_num_seqs=args.max_num_seqs,
                            prefill_chunk_tokens=args.prefill_chunk_tokens,
                            speculative_tokens=args.speculative_tokens,
                            draft_acceptance=args.draft_acceptance)
    _refuse_unread_by(args, deployment=deployment)
    _warn_release(deployment)
    _refuse_load_flags(args)
    workload = Workload(kind=args.workload, batch=1 if args.batch is None else args.batch,
                        input_tokens=512 if args.input_tokens is None else args.input_tokens,
                        output_tokens=128 if args.output_tokens is None else args.output_tokens,
                        **load_fields(args))
    if args.plot:
        _check_plot(args)
    result = pool_prediction(args, workload=workload, deployment=deployment) or predict(
        model=args.model, gpu=args.gpu, deployment=deployment, workload=workload,
        calibration=args.calibration)
    # the prediction reported a config.json's approximations once; what follows reads it again
    warnings.simplefilter("ignore", ModelApproximationWarning)
    write_plot(args, workload=workload, deployment=deployment)
    overload = overload_warning(result, workload=workload)
    if overload is not None:
        print(f"energylens: warning: {overload}", file=sys.stderr)
    bursty = trace_rate_note(result, workload=workload)
    if bursty is not None:
        print(f"energylens: note: {bursty}", file=sys.stderr)
    from energylens.workloads.capacity import kv_cache_limit

    limit = kv_cache_limit(result=result, workload=workload, deployment=deployment)
    expected = _expected_error(args, deployment=deployment, workload=workload,
                               kv_limited=limit is not None,
                               disaggregated=args.prefill_pool is not None)
    if args.launch_command:
        return _print_launch(args, result=result, deployment=deployment, workload=workload,
                             expected=expected)
    breakdown = _breakdown(args, result=result, deployment=deployment, workload=workload) \
        if args.breakdown else None
    variants = _what_if(args, deployment=deployment, workload=workload) if args.what_if \
        else None
    options = _layouts(args, deployment=deployment, workload=workload) if args.layouts \
        else None
    if args.json:
        print_json({**result.as_dict(),
                    "configuration": _configuration(args, deployment=deployment,
                                                    workload=workload),
                    "expected_error": None if expected is None else expected.as_dict(),
                    **({} if breakdown is None else {"breakdown": breakdown}),
                    **({} if variants is None else {"what_if": variants}),
                    **({} if options is None else {"layouts": options})})
        return 0

    from energylens.cli.tables import capacity_note, print_prediction

    found = None if args.dtype is not None else zoo_resolution(args.model)
    if found is not None and found.weight_dtype is not None:
        console().print(f"model: {found.describe()}", highlight=False)
    emulated = None if args.prefill_pool is not None or args.decode_pool is not None \
        else _emulated_precision(args, deployment=deployment)  # pools name their own GPUs
    if emulated is not None:
        console().print(emulated, highlight=False)
    speculation = deployment.speculation
    if speculation is not None:
        console().print(f"speculative decoding: {speculation.draft_tokens} drafts per step, "
                        f"each kept with probability {speculation.acceptance:g}: "
                        f"{speculation.tokens_per_step:.2f} tokens per step (TPOT and energy "
                        "are per token gained)", highlight=False)
    print_prediction(result, console=console(), slos=bool(workload.slo))
    if not result.feasible and args.prefill_pool is None and args.decode_pool is None:
        _print_fitting_split(args, deployment=deployment, workload=workload)
    if limit is not None:
        console().print(capacity_note(limit=limit, deployment=deployment), highlight=False)
    if expected is not None:
        console().print(expected.line(), highlight=False)
    elif args.calibration is not None:
        console().print(f"expected error: not quoted: {args.calibration} holds no held-out "
                        "errors (an overlay, or a file written without them; the shipped "
                        "calibration's are in docs/accuracy.md)", highlight=False)
    if breakdown is not None:
        from energylens.cli.tables import print_breakdown

        print_breakdown(breakdown, console=console())
    if variants is not None:
        from energylens.cli.tables import print_what_if

        print_what_if(variants, console=console())
    if options is not None:
        from energylens.cli.tables import print_layouts

        print_layouts(options, console=console())
    return 0


def _refuse_unread(args: argparse.Namespace) -> None:
    """Refuse, in one line with the reason, a flag this run would take and not read:
    ``--max-num-seqs`` outside a load workload (a static batch or a steady state runs
    ``--batch`` sequences) unless a launch command writes it, lengths beside a ``--trace``
    (it sets every request's), and what ``--launch-command`` replaces by the script."""
    if args.max_num_seqs is not None and args.workload != "load" and not args.launch_command:
        raise ConfigError(f"--max-num-seqs caps a server's running requests: only a 'load' "
                          f"workload reads it (a '{args.workload}' one runs --batch sequences; "
                          "--launch-command writes it)")
    if args.trace and args.workload == "load":
        given = [flag for flag, value in (("--input-tokens", args.input_tokens),
                                          ("--output-tokens", args.output_tokens),
                                          ("--length-cv", args.length_cv or None))
                 if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: the --trace sets every request's lengths")
    if args.launch_command:
        for flag in ("--breakdown", "--what-if", "--layouts"):
            if getattr(args, flag[2:].replace("-", "_")):
                raise ConfigError(f"{flag} reports beside a prediction; --launch-command prints "
                                  f"the script instead (give its flags without {flag})")


def _warn_release(deployment: Deployment) -> None:
    """One stderr line where ``--runtime-version`` lies outside the releases the runtime's
    facts name (``vLLM 99.0.0``), major and minor compared."""
    from energylens.runtime import get_runtime
    from energylens.runtime.profile import release_key

    if deployment.runtime_version is None:
        return
    runtime = get_runtime(deployment.runtime)
    span = runtime.described_releases()
    asked = release_key(deployment.runtime_version)[:2]
    if span is None or span[0] <= asked <= span[1]:
        return
    low, high = (".".join(map(str, key)) for key in span)
    named = low if low == high else f"{low} to {high}"
    where = "earlier" if asked < span[0] else "later"
    print(f"energylens: warning: {runtime.release_name(version=deployment.runtime_version)} "
          f"is {where} than the releases its profile's facts name ({named}): what changed "
          "outside them is not known to energylens", file=sys.stderr)


def _refuse_load_flags(args: argparse.Namespace) -> None:
    """The load options given to another workload, refused by their flags' names (the
    ``Workload`` names its fields)."""
    if args.workload == "load":
        return
    from energylens.workloads.workload import LOAD_FIELDS

    flags = {"capacity_attainment": "--capacity"}
    given = load_fields(args)
    used = [flags.get(name, "--" + name.replace("_", "-")) for name in LOAD_FIELDS
            if given.get(name) not in (None, 0, ())]
    if used:
        raise ConfigError(f"{', '.join(used)}: only a 'load' workload reads "
                          f"{'it' if len(used) == 1 else 'them'} (--workload load; this one is "
                          f"'{args.workload}')")


def _refuse_unread_by(args: argparse.Namespace, *, deployment: Deployment) -> None:
    """Refuse ``--overlap-sms`` where no collective runs (every layer on one GPU) and
    ``--moe-skew`` on a model without experts: the prediction would not read them."""
    from energylens.hardware import load_gpu

    pools = args.prefill_pool is not None or args.decode_pool is not None
    # (SMs leaving none for compute: the prediction refuses them, naming the GPU's count)
    if 0 < deployment.overlap_sms < load_gpu(args.gpu).sm_count and not pools \
            and deployment.attention_tp * deployment.attention_dp == 1:
        raise ConfigError("--overlap-sms keeps SMs for collectives that overlap compute: with "
                          "every layer on one GPU (tp = ep = attention_dp = 1) none runs")
    if args.moe_skew != 0:
        from energylens.model.zoo import get_model

        model = get_model(args.model)
        if model.moe is None:
            raise ConfigError(f"--moe-skew skews the routing over experts: {model.name} is a "
                              "dense model (no experts)")


def _check_plot(args: argparse.Namespace) -> None:
    """``--plot FILE``, refused before predicting: outside a colocated load workload, with
    a suffix matplotlib writes no picture for, or where no file can be written."""
    if args.workload != "load" or args.prefill_pool is not None or args.decode_pool is not None:
        raise ConfigError("--plot draws a colocated load workload (--workload load without "
                          "pools)")
    from matplotlib.backend_bases import FigureCanvasBase

    check_output(Path(args.plot), force=True, flag="--plot")  # a folder, an unwritable place
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(args.plot).suffix.lstrip(".").lower()
    if suffix not in kinds:
        raise ConfigError(f"--plot {args.plot}: {'.' + suffix if suffix else 'no suffix'} is no "
                          f"picture format; end it in .{', .'.join(sorted(kinds))}")


def _print_fitting_split(args: argparse.Namespace, *, deployment: Deployment,
                         workload: Workload) -> None:
    """Under a deployment that does not fit: the smallest doubling of its tensor
    parallelism that does, as the flags to give (nothing when none does)."""
    from energylens.whatif import smallest_fitting_split

    split = smallest_fitting_split(model=args.model, gpu=args.gpu, deployment=deployment,
                                   workload=workload, calibration=args.calibration)
    if split is None:
        return
    replicas = "" if split.num_gpus is None else (
        f", {split.replicas} replica{'s' if split.replicas > 1 else ''} of "
        f"{split.gpus_per_replica} GPUs")
    now = (f"{deployment.replicas} data-parallel replicas of {deployment.gpus_per_replica} "
           "GPU" + ("s" if deployment.gpus_per_replica > 1 else "") + " each"
           if deployment.replicas > 1 else "")
    console().print(f"hint: it fits with --tp {split.tp}{replicas}"
                    + (f" (as given: {now}; --num-gpus alone adds replicas, --tp splits the "
                       "model)" if now else ""), highlight=False)


def _configuration(args: argparse.Namespace, *, deployment: Deployment,
                   workload: Workload) -> dict[str, Any]:
    """What was predicted, with every default resolved (``predict --json``): the model as
    asked and as found, the runtime and its release, the precisions, the layout (``tp`` as
    given, ``attention_tp`` and ``moe_tp`` the splits it makes) and the workload's fields
    (``max_num_seqs`` and ``prefill_chunk_tokens`` None: the runtime's own)."""
    from dataclasses import asdict

    out: dict[str, Any] = {"model_requested": args.model, "gpu_requested": args.gpu}
    if args.prefill_pool is None and args.decode_pool is None:
        from energylens.predict import checked_context

        _, ctx = checked_context(model=args.model, gpu=args.gpu, deployment=deployment,
                                 calibration=args.calibration)
        out.update(runtime=ctx.runtime.name,
                   runtime_version=deployment.runtime_version or ctx.runtime.version,
                   weight_dtype=ctx.weight_dtype, kv_dtype=ctx.kv_dtype, tp=deployment.tp,
                   attention_tp=deployment.attention_tp, pp=deployment.pp, ep=deployment.ep,
                   attention_dp=deployment.attention_dp, moe_tp=deployment.expert_tp,
                   replicas=deployment.replicas, gpus_per_replica=deployment.gpus_per_replica,
                   fusion=sorted(ctx.fusion),
                   freq_mhz=deployment.freq_mhz or ctx.gpu.boost_clock_mhz,
                   overlap_sms=deployment.overlap_sms, moe_skew=deployment.routing.skew,
                   max_num_seqs=deployment.max_num_seqs,
                   prefill_chunk_tokens=deployment.prefill_chunk_tokens,
                   speculative_tokens=deployment.speculative_tokens)
    unread = ("input_tokens", "output_tokens") if workload.trace else ()  # the trace's own
    out["workload"] = {k: v for k, v in asdict(workload).items()
                       if (v not in (None, (), 0) or k in ("kind", "seed")) and k not in unread}
    return out


def _emulated_precision(args: argparse.Namespace, *, deployment: Deployment) -> str | None:
    """A note where the weights' format has no tensor-core rate on the GPU (FP8 on an A100,
    NVFP4 on Hopper): the model prices them read at their width and multiplied in BF16, as
    the engines' weight-only kernels (Marlin) run them."""
    from energylens.cost.work import COMPUTE_DTYPE
    from energylens.hardware import load_gpu
    from energylens.model.zoo import get_model

    weights = deployment.weight_dtype or get_model(args.model).weight_dtype
    compute = COMPUTE_DTYPE.get(weights, weights)
    gpu = load_gpu(args.gpu)
    if compute in ("bf16", "fp16") or compute in gpu.dense_flops_per_s:
        return None
    return (f"note: {gpu.name} has no {compute.upper()} tensor cores: the {weights.upper()} "
            "weights are priced read at their width and multiplied in BF16 (weight-only, as "
            "the engines' Marlin kernels run them)")


def _what_if(args: argparse.Namespace, *, deployment: Deployment,
             workload: Workload) -> list[dict[str, object]]:
    """``--what-if``: the deployment and each single change, predicted (energylens.whatif)."""
    from energylens.whatif import what_if

    if args.prefill_pool is not None or args.decode_pool is not None:
        raise ConfigError("--what-if changes one deployment, not a disaggregated pair")
    return [v.as_dict() for v in what_if(model=args.model, gpu=args.gpu,
                                         deployment=deployment, workload=workload,
                                         calibration=args.calibration)]


def _layouts(args: argparse.Namespace, *, deployment: Deployment,
             workload: Workload) -> list[dict[str, object]]:
    """``--layouts``: every parallel layout of the deployment's GPUs, predicted
    (energylens.layouts)."""
    from energylens.layouts import compare_layouts

    if args.prefill_pool is not None or args.decode_pool is not None:
        raise ConfigError("--layouts lays out one deployment's GPUs, not a disaggregated pair")

    return [o.as_dict() for o in compare_layouts(model=args.model, gpu=args.gpu,
                                                 deployment=deployment, workload=workload,
                                                 calibration=args.calibration)]


def _breakdown(args: argparse.Namespace, *, result: Prediction, deployment: Deployment,
               workload: Workload) -> dict[str, Any]:
    """``--breakdown``: a decode step at the run's batch (a load run's mean running
    sequences) and one prompt's prefill (a trace's mean lengths), per class of work."""
    from energylens.cost.breakdown import representative_breakdown
    from energylens.predict import checked_context

    if args.prefill_pool is not None or args.decode_pool is not None:
        raise ConfigError("--breakdown prices one deployment's steps, not a disaggregated pair")
    running = float(getattr(result, "load", {}).get("mean_running", workload.batch))
    _, ctx = checked_context(model=args.model, gpu=args.gpu, deployment=deployment,
                             calibration=args.calibration)
    prompt, output = workload.input_tokens, workload.output_tokens
    if workload.trace:  # the trace's mean request
        from energylens.workloads.load.arrivals import load_trace

        trace = load_trace(workload.trace)
        prompt, output = float(trace.input_tokens.mean()), float(trace.output_tokens.mean())
    steps = representative_breakdown(ctx=ctx, sequences=running, input_tokens=prompt,
                                     output_tokens=output)
    return {"decode_sequences": max(running, 1.0),
            **{name: step.as_dict() for name, step in steps.items()}}


def _expected_error(args: argparse.Namespace, *, deployment: Deployment, workload: Workload,
                    kv_limited: bool, disaggregated: bool = False) -> ExpectedError | None:
    """The held-out error of predictions like this one (None without regime folds); a load
    run the KV cache decided (``kv_limited``) takes the error of the rows it decided, one
    on prefill and decode pools (``disaggregated``) that of the disaggregated rows."""
    from energylens.calibration.file import resolve_calibration
    from energylens.hardware import load_gpu
    from energylens.model.zoo import get_model
    from energylens.validation.expected_error import expected_error

    model = get_model(args.model)
    return expected_error(model=model, gpu=load_gpu(args.gpu), deployment=deployment,
                          workload=workload, calibration=resolve_calibration(args.calibration),
                          kv_limited=kv_limited, disaggregated=disaggregated)


def _print_launch(args: argparse.Namespace, *, result: Any, deployment: Deployment,
                  workload: Workload, expected: ExpectedError | None) -> int:
    """``predict --launch-command``: the launch script (a warning if it does not fit);
    with ``--json`` beside the prediction, its configuration and expected error."""
    from energylens.hardware import load_gpu
    from energylens.model.zoo import get_model
    from energylens.runtime.launch import launch_command

    defaults = frozenset(name for name in ("batch", "input_tokens", "output_tokens")
                         if getattr(args, name) is None)
    command = launch_command(model=get_model(args.model), deployment=deployment,
                             workload=workload, gpu=load_gpu(args.gpu), defaults=defaults)
    if args.json:
        print_json({**result.as_dict(),
                    "configuration": _configuration(args, deployment=deployment,
                                                    workload=workload),
                    "expected_error": None if expected is None else expected.as_dict(),
                    "launch_command": command.line(), "launch_script": command.script()})
        return 0
    if not result.feasible:
        print(f"energylens: warning: the deployment does not fit: {result.infeasible_reason}",
              file=sys.stderr)
    print(command.script(), end="")
    return 0


Registrar = Callable[[argparse._SubParsersAction], None]


def _registrars() -> list[Registrar]:
    registrars: list[Registrar] = [_add_predict]
    for module_name in ("energylens.cli.catalog", "energylens.cli.validate",
                        "energylens.cli.study", "energylens.cli.measurements"):
        try:
            module = __import__(module_name, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        registrars.append(module.register)
    return registrars


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = _Parser(prog="energylens", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    try:  # building the parser imports every command's module: Ctrl-C may land there
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("energylens: interrupted", file=sys.stderr)
        return 130
    with warnings.catch_warnings():
        warnings.simplefilter("always", ModelApproximationWarning)
        warnings.showwarning = _one_line_warnings(warnings.showwarning)
        return _run(args)


def _one_line_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints a model approximation as one stderr line."""

    def shown(message: Warning | str, category: type[Warning], *rest: object,
              **kwargs: object) -> None:
        if issubclass(category, ModelApproximationWarning):
            print(f"energylens: warning: {message}", file=sys.stderr)
        else:
            show(message, category, *rest, **kwargs)

    return shown


def _run(args: argparse.Namespace) -> int:
    try:
        return args.handler(args)
    except EnergyLensError as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"energylens: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.: the rest goes nowhere
        with contextlib.suppress(OSError, ValueError):  # a stdout without a file (captured)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file the user named that cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"energylens: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("energylens: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
