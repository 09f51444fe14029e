"""The load keys of a study's ``workload`` mapping and the knobs of disaggregated pools
(``energylens.study.objective``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from energylens.deployment import Deployment
from energylens.errors import ConfigError
from energylens.workloads.load.arrivals import load_trace
from energylens.workloads.load.disagg import Pool
from energylens.workloads.load.metrics import SLO

#: Workload keys only a ``load`` workload reads (``Workload`` fields of the same name).
LOAD_KEYS = ("request_rate", "concurrency", "num_requests", "seed", "arrival_cv", "length_cv",
             "slo", "capacity_attainment", "warmup_fraction", "shared_prefix_tokens")


def load_values(spec: Mapping[str, Any], *, trace: str | None) -> dict[str, Any]:
    """``Workload`` keyword arguments from the load keys of ``spec`` (and ``trace``, the
    trace's path, read here so that a bad file fails when the study loads); ``slo`` may be
    one string or a list. Values are checked by ``Workload`` itself; a bad SLO, trace or a
    value of the wrong type is a one-line :class:`ConfigError` naming the key."""
    values: dict[str, Any] = {}
    if trace is not None:
        try:
            load_trace(trace)
        except ConfigError as exc:
            raise ConfigError(f"trace: {exc}") from None
        values["trace"] = trace
    for key in LOAD_KEYS:
        if key not in spec:
            continue
        value = spec[key]
        if key == "slo":
            texts = [value] if isinstance(value, str) else value
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ConfigError(f"slo: expected a bound such as 'ttft_p90_s<=1' or a list of "
                                  f"them, got {value!r}")
            for text in texts:
                try:
                    SLO.parse(text)
                except ConfigError as exc:
                    raise ConfigError(f"slo: {exc}") from None
            values[key] = tuple(texts)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        else:
            values[key] = value
    return values


#: A pool's layout knobs (``<pool>_<dim>``): one replica's ``Deployment`` degrees, and
#: ``dp`` its replicas.
POOL_DIMS = ("tp", "dp", "ep", "attention_dp", "moe_tp")
#: Knobs of a disaggregated deployment (``mode: disaggregated``); the pools take the
#: configuration's dtype, runtime and clock.
POOL_KNOBS = ("mode", *(f"{side}_{knob}" for side in ("prefill", "decode")
                        for knob in ("gpu", *POOL_DIMS)))
MODES = ("colocated", "disaggregated")


def pools_from_params(*, params: Mapping[str, Any], base: Deployment) -> tuple[Pool, Pool] | None:
    """The (prefill, decode) pools of a ``mode: disaggregated`` configuration (None when
    colocated); each pool's GPU defaults to the configuration's ``gpu``, TP to its ``tp``,
    replicas to 1, its ``ep`` and ``attention_dp`` to 1 and ``moe_tp`` to the quotient (as
    ``predict --prefill-pool GPU:TP[:REPLICAS][:OPTIONS]``)."""
    if params.get("mode", "colocated") != "disaggregated":
        return None
    pools = []
    for side in ("prefill", "decode"):
        moe_tp = params.get(f"{side}_moe_tp")
        deployment = replace(base, num_gpus=None, pp=1,
                             tp=int(params.get(f"{side}_tp", base.tp)),
                             dp=int(params.get(f"{side}_dp", 1)),
                             ep=int(params.get(f"{side}_ep", 1)),
                             attention_dp=int(params.get(f"{side}_attention_dp", 1)),
                             moe_tp=None if moe_tp is None else int(moe_tp))
        pools.append(Pool(gpu=str(params.get(f"{side}_gpu", params.get("gpu", "H100"))),
                          deployment=deployment))
    return pools[0], pools[1]
