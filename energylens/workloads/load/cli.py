"""Command-line options of the ``load`` workload (``energylens predict --workload load``)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from energylens.calibration.file import load_calibration
from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.workloads.load.kind import LoadPrediction
from energylens.workloads.load.metrics import SLO
from energylens.workloads.workload import MAX_CONCURRENCY, MAX_REQUESTS, MAX_TOKENS, Workload


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 0.5), got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value < 0.5):
        raise argparse.ArgumentTypeError(f"expected a share in [0, 0.5), got {text}")
    return value


def _integer_in(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        expected = f"expected an integer from {minimum} to {maximum:,}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{expected}, got {value}")
        return value
    return parse


_requests = _integer_in(1, MAX_REQUESTS)
_clients = _integer_in(1, MAX_CONCURRENCY)
_tokens = _integer_in(0, MAX_TOKENS)


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:  # numpy's generators take no negative seed
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _slo(text: str) -> str:
    try:
        SLO.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


#: A pool's layout options beyond its TP and replicas (``--ep``, ``--attention-dp``,
#: ``--moe-tp`` of one replica), as ``Deployment`` fields.
POOL_OPTIONS = {"ep": "ep", "attention-dp": "attention_dp", "attention_dp": "attention_dp",
                "moe-tp": "moe_tp", "moe_tp": "moe_tp"}
POOL_SYNTAX = "GPU:TP[:REPLICAS][:ep=N,attention-dp=N,moe-tp=N]"


@dataclass(frozen=True, kw_only=True)
class PoolSpec:
    """A pool as given on the command line: its GPU, one replica's layout, its replicas."""

    gpu: str
    layout: dict[str, int]  # Deployment fields: tp, and any of ep, attention_dp, moe_tp
    replicas: int


def _pool(text: str) -> PoolSpec:
    """``GPU:TP[:REPLICAS][:OPTION=N,...]`` -> a :class:`PoolSpec` (the options those of
    ``--ep``, ``--attention-dp`` and ``--moe-tp``, for one replica)."""
    parts = text.split(":")
    options = parts.pop() if len(parts) > 2 and "=" in parts[-1] else ""
    try:
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        layout = {"tp": int(parts[1])}
        replicas = int(parts[2]) if len(parts) == 3 else 1
        for item in filter(None, options.split(",")):
            key, _, value = item.partition("=")
            if key.strip() not in POOL_OPTIONS or POOL_OPTIONS[key.strip()] in layout:
                raise ValueError
            layout[POOL_OPTIONS[key.strip()]] = int(value)
        if min(layout.values()) < 1 or replicas < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {POOL_SYNTAX} (e.g. H100:4:2 or B200:1:2:ep=8,attention-dp=8), "
            f"got {text!r}") from None
    return PoolSpec(gpu=parts[0], layout=layout, replicas=replicas)


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a load workload, in their own group."""
    group = parser.add_argument_group("load workload (--workload load)")
    loop = group.add_mutually_exclusive_group()
    loop.add_argument("--request-rate", type=_positive_float,
                      help="open loop: requests/s of the whole deployment")
    loop.add_argument("--concurrency", type=_clients,
                      help="closed loop: clients, each sending its next request when the last "
                           "ends (default: --batch clients)")
    group.add_argument("--trace", help="CSV of request lengths (num_prefill_tokens, "
                                       "num_decode_tokens) and optionally arrived_at seconds")
    group.add_argument("--arrival-cv", type=_positive_float,
                       help="gamma inter-arrival CV (1 = Poisson, the default; with a trace: "
                            "its own timestamps)")
    group.add_argument("--length-cv", type=float, default=0.0,
                       help="gamma CV of request lengths around --input/--output-tokens")
    group.add_argument("--shared-prefix-tokens", type=_tokens, default=0, metavar="N",
                       help="prompt tokens every request shares (a system prompt), held once "
                            "in the engine's prefix cache and never recomputed (default 0)")
    group.add_argument("--num-requests", type=_requests,
                       help="requests to simulate (default: enough for a steady state)")
    group.add_argument("--warmup-fraction", type=_share,
                       help="share of the requests (by arrival) left out of the statistics "
                            "at each end of the run (default 0.1; 0 to average over every "
                            "request, as a benchmark of --num-requests requests reports)")
    group.add_argument("--seed", type=_seed, default=0, help="random seed")
    group.add_argument("--slo", type=_slo, action="append", default=[],
                       help="latency bound such as 'ttft_p90_s<=1' (repeatable)")
    group.add_argument("--plot", metavar="FILE.png",
                       help="also write TTFT/TPOT against the request rate and this run's "
                            "power and queue over time (one replica)")
    group.add_argument("--prefill-pool", type=_pool, metavar="GPU:TP[:REPLICAS][:OPTIONS]",
                       help="disaggregated: the prefill pool (with --decode-pool): REPLICAS "
                            "of TP GPUs, OPTIONS ep=N,attention-dp=N,moe-tp=N as the flags "
                            "of one replica (e.g. B200:1:2:ep=8,attention-dp=8); --gpu is "
                            "then not used, and the layout flags --tp, --pp, --ep, --dp, "
                            "--num-gpus, --attention-dp, --moe-tp are refused")
    group.add_argument("--decode-pool", type=_pool, metavar="GPU:TP[:REPLICAS][:OPTIONS]",
                       help="disaggregated: the decode pool")
    group.add_argument("--capacity", type=_positive_float, dest="capacity_attainment",
                       help="also find the highest request rate at which this share of "
                            "requests (e.g. 0.9) meets every --slo (bisection)")


def load_fields(args: argparse.Namespace) -> dict[str, Any]:
    """``Workload`` keyword arguments from the parsed options (a workload of another kind
    refuses any that is set)."""
    return {"request_rate": args.request_rate, "concurrency": args.concurrency,
            "trace": args.trace, "arrival_cv": args.arrival_cv, "length_cv": args.length_cv,
            "num_requests": args.num_requests, "seed": args.seed, "slo": tuple(args.slo),
            "capacity_attainment": args.capacity_attainment,
            "warmup_fraction": args.warmup_fraction,
            "shared_prefix_tokens": args.shared_prefix_tokens}


def pool_prediction(args: argparse.Namespace, *, workload: Workload,
                    deployment: Deployment) -> LoadPrediction | None:
    """The disaggregated prediction when ``--prefill-pool``/``--decode-pool`` are given
    (both or neither; each pool takes ``deployment``'s dtype, runtime and clock), else
    None."""
    if args.prefill_pool is None and args.decode_pool is None:
        return None
    if args.prefill_pool is None or args.decode_pool is None:
        raise ConfigError("a disaggregated deployment needs both --prefill-pool and "
                          "--decode-pool")
    layout = {"--tp": args.tp != 1, "--pp": args.pp != 1, "--ep": args.ep != 1,
              "--dp": args.dp is not None, "--num-gpus": args.num_gpus is not None,
              "--attention-dp": args.attention_dp != 1, "--moe-tp": args.moe_tp is not None}
    given = [flag for flag, set_ in layout.items() if set_]
    if given:
        raise ConfigError(f"{', '.join(given)}: a disaggregated deployment's layout is its "
                          f"pools' ({POOL_SYNTAX} each)")
    from energylens.workloads.load.disagg import Pool, predict_disaggregated

    one_gpu = {"ep": 1, "attention_dp": 1, "moe_tp": None}  # what a pool's options leave
    pools = [Pool(gpu=spec.gpu, deployment=replace(
        deployment, num_gpus=None, pp=1, dp=spec.replicas, **(one_gpu | spec.layout)))
        for spec in (args.prefill_pool, args.decode_pool)]
    return predict_disaggregated(model=args.model, workload=workload, prefill=pools[0],
                                 decode=pools[1], calibration=None if args.calibration is None
                                 else load_calibration(args.calibration))


def write_plot(args: argparse.Namespace, *, workload: Workload, deployment: Deployment) -> None:
    """``--plot FILE``: the load pictures of the colocated deployment (one line on stderr
    says where)."""
    if not args.plot:
        return
    if workload.kind != "load" or args.prefill_pool is not None:
        raise ConfigError("--plot draws a colocated load workload (--workload load without "
                          "pools)")
    from energylens.calibration.coverage import require_constants
    from energylens.calibration.file import default_calibration
    from energylens.hardware import load_gpu
    from energylens.model.zoo import get_model
    from energylens.predict import step_context
    from energylens.workloads.load.plots import write_load_plot
    from energylens.workloads.registry import Placement

    gpu, model = load_gpu(args.gpu), get_model(args.model)
    base = default_calibration() if args.calibration is None else load_calibration(args.calibration)
    ctx = step_context(model=model, gpu=gpu, deployment=deployment,
                       calibration=require_constants(calibration=base, gpu=gpu))
    placement = Placement(ctx=ctx, model=model, replicas=deployment.replicas,
                          gpus=deployment.total_gpus, sequences=1.0)
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    write_load_plot(placement=placement, workload=workload, path=Path(args.plot))
    print(f"energylens: wrote {args.plot}", file=sys.stderr)


#: Relative gap between a rescaled trace's rate in the measured window and the rate asked
#: for beyond which the run says so (assumed: a Poisson run of 1,000 requests strays ~5 %).
TRACE_RATE_NOTE = 0.15


def trace_rate_note(result: Any, *, workload: Workload) -> str | None:
    """One line where a trace's clock, rescaled to ``--request-rate`` over all the rows it
    replays, brings the measured requests at another rate (idle gaps or bursts of the trace
    fall in the warm-up or the drain); None otherwise."""
    if not isinstance(result, LoadPrediction) or not result.feasible \
            or workload.trace is None or workload.request_rate is None \
            or workload.arrival_cv is not None or workload.concurrency is not None:
        return None
    offered = float(result.load.get("offered_requests_per_s", math.nan))
    if not math.isfinite(offered) or \
            abs(offered - workload.request_rate) <= TRACE_RATE_NOTE * workload.request_rate:
        return None
    return (f"the trace's clock is bursty: rescaled to {workload.request_rate:g} requests/s "
            f"over its {workload.num_requests or 'replayed'} rows, it brings the measured "
            f"requests at {offered:.3g} requests/s, and the figures are that window's "
            "(--num-requests spans more of the trace; --arrival-cv replaces its clock)")


def overload_warning(result: Any, *, workload: Workload) -> str | None:
    """One line where an open-loop run did not keep up with its arrivals (the requests in
    flight still growing when they stopped: its TTFT and queue depend on the run's length),
    with the rate it served; None otherwise (closed loops keep up by construction)."""
    if not isinstance(result, LoadPrediction) or workload.concurrency is not None \
            or not result.feasible:
        return None
    capacity = result.load.get("capacity_requests_per_s")
    if bool(result.load.get("keeps_up", True)):
        if capacity is None or workload.request_rate is None \
                or workload.request_rate <= float(capacity):
            return None
        return (f"the offered {workload.request_rate:g} requests/s exceed the capacity found, "
                f"{float(capacity):.3g} requests/s: this run ended before its queue showed it, "
                "so its TTFT, TPOT and queue grow with --num-requests")
    share = float(result.load["completed_share"])
    return (f"the deployment does not keep up: it completed {share:.0%} of the requests "
            f"offered and serves {float(result.load['requests_per_s']):.3g} requests/s; "
            "past that rate the queue grows without bound, so TTFT, TPOT and the queue "
            "depend on --num-requests (--capacity finds the highest rate it sustains)")
