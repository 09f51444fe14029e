"""Turn a study's problem section into an objective for the generic search engine.

Study keys read here (everything else belongs to ``search``; ``docs/study-files.md``
documents them all)::

    model: llama-3.1-70b          # zoo name, HF id, or a config.json (relative to the study file)
    workload: {kind: batch, batch: 16, input_tokens: 1024, output_tokens: 256, moe_skew: 0.5}
    # or a request-length trace summarised into a workload:
    workload: {kind: serving, trace: ../data/measurements/traces/splitwise_conv.csv, batch: 64}
    gpu_cost_per_hour: {H100: 2.5, H200: 3.2}   # $/GPU-hour; else each GPU file's price_per_hour
    calibration: path/to/calibration.yaml        # optional, relative to the study file

Knobs (or fixed values) a space may use, all chosen by whoever deploys: :data:`PARAMS`.
``moe_skew`` (the Zipf exponent of expert popularity) is a property of the traffic, so it is
a workload key, not a knob. A configuration that cannot run comes back with its reason,
never as an exception.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from energylens.calibration.file import CalibrationFileError, load_calibration
from energylens.cost.constants import Calibration
from energylens.cost.moe import MAX_SKEW, Routing
from energylens.deployment import FUSIONS, KV_DTYPES, WEIGHT_DTYPES, Deployment, Workload
from energylens.errors import ConfigError, EnergyLensError, ProblemError
from energylens.hardware import GPU, UnknownGPUError, list_gpus, load_gpu
from energylens.model import ModelConfig
from energylens.model.zoo import get_model
from energylens.predict import Prediction, predict
from energylens.runtime import DEFAULT_RUNTIME, get_runtime, runtime_names
from energylens.runtime.registry import FRONT_ENDS, runtime_name
from energylens.workloads import kind_names
from energylens.workloads.load import LoadPrediction
from energylens.workloads.load.disagg import Pool, predict_disaggregated
from energylens.workloads.load.metrics import STUDY_METRICS as LOAD_METRICS
from energylens.workloads.load.metrics import study_metrics
from energylens.workloads.load.study import (
    LOAD_KEYS,
    MODES,
    POOL_DIMS,
    POOL_KNOBS,
    load_values,
    pools_from_params,
)
from search._schema import suggest
from search.problem import Evaluation, ProblemSchema, ValueCheck

if TYPE_CHECKING:
    from search.config import StudyConfig

WORKLOAD_KEYS = ("kind", "batch", "input_tokens", "output_tokens", "trace", "moe_skew",
                 *LOAD_KEYS)
PROBLEM_KEYS = {
    "model": "zoo name, Hugging Face id or config.json path (relative to the study file)",
    "workload": f"mapping of {', '.join(WORKLOAD_KEYS)}",
    "gpu_cost_per_hour": "mapping GPU name -> $ per GPU-hour (default: each GPU file's price)",
    "calibration": "calibration file (relative to the study file; default: the shipped one)",
}
METRICS = {
    "energy_per_output_token_j": "energy per generated token [J]",
    "energy_per_request_j": "energy per request [J]",
    "tpot_s": "time per output token (serving: inter-token latency) [s]",
    "ttft_s": "time to first token [s]",
    "output_tokens_per_s": "output throughput of the whole deployment [tokens/s]",
    "output_tokens_per_s_per_gpu": "output throughput per GPU [tokens/s]",
    "num_gpus": "GPUs the deployment occupies",
    "cost_per_million_tokens": "$ per million output tokens at the GPU-hour price",
    "avg_power_w": "average power of all GPUs [W]",
    "memory_per_gpu_gb": "memory used per GPU [GB]",
    "batch_per_replica": "effective batch: sequences each replica runs at once (fewer than "
                         "asked where the KV cache caps them; a load workload's time average)",
    "prefill_energy_j": "energy of the prefill phase [J]",
    "decode_energy_j": "energy of the decode phase [J]",
}
#: Metrics only a ``load`` workload reports (a study may name them too).
LOAD_ONLY_METRICS = {name: f"{what} (load workloads)" for name, what in LOAD_METRICS.items()}
#: Load metrics reported only where the workload sets ``capacity_attainment``.
CAPACITY_METRICS = ("capacity_requests_per_s", "capacity_per_gpu")


def _positive_int(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "an integer >= 1"


def _non_negative_int(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else "an integer >= 0"


def _positive_number(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return None if ok else "a finite number > 0"


def _fraction(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
    return None if ok else "a fraction of the boost clock in (0, 1]"


def _probability(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    return None if ok else "a probability in [0, 1]"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def _one_of(options: Collection[str], what: str) -> ValueCheck:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in options:
            return None
        return f"{what}{suggest(str(value), options)}"

    return check


def _gpu(value: Any) -> str | None:
    try:
        load_gpu(str(value))
    except UnknownGPUError:
        return f"a GPU of the database{suggest(str(value), [g.name for g in list_gpus()])}"
    return None


def _runtime(value: Any) -> str | None:
    """A runtime of the registry, by its name or another spelling (``TensorRT-LLM``)."""
    if isinstance(value, str):
        if runtime_name(value) in FRONT_ENDS:  # a server of another engine: say which
            return f"a serving runtime ({FRONT_ENDS[runtime_name(value)]})"
        try:
            get_runtime(value)
            return None
        except EnergyLensError:
            pass
    return f"a serving runtime{suggest(str(value), runtime_names())}"


def _fusion(value: Any) -> str | None:
    names = set(str(value).split(",")) - {"", "none"} if isinstance(value, str) else {None}
    return None if names <= set(FUSIONS) else f"'none' or a comma list of {', '.join(FUSIONS)}"


PARAMS: dict[str, ValueCheck] = {
    "gpu": _gpu,
    "num_gpus": _positive_int,
    "tp": _positive_int,
    "pp": _positive_int,
    "ep": _positive_int,
    "dp": _positive_int,
    "attention_dp": _positive_int,  # data-parallel attention ranks (MoE over all of them)
    "moe_tp": _positive_int,  # ways each expert is split under that layout
    "max_num_seqs": _positive_int,  # running requests one scheduler admits (per rank)
    "speculative_tokens": _non_negative_int,  # drafts per decode step (MTP / EAGLE head)
    "draft_acceptance": _probability,  # each draft's acceptance (default: the published one)
    "batch": _positive_int,  # sequences: a whole number, as ``predict --batch``
    "input_tokens": _positive_number,
    "output_tokens": _positive_number,
    "fusion": _fusion,
    **{f"fuse_{name}": _boolean for name in FUSIONS},
    "overlap_sms": _non_negative_int,
    "runtime": _runtime,
    "freq_mhz": _positive_number,
    "clock_fraction": _fraction,
    "decode_clock_fraction": _fraction,
    "dtype": _one_of(WEIGHT_DTYPES, "a weight dtype"),
    "kv_dtype": _one_of(("auto", *KV_DTYPES), "auto or a KV-cache dtype"),
    "request_rate": _positive_number,  # load workloads: open-loop requests/s
    "concurrency": _positive_int,  # load workloads: closed-loop clients
    # load workloads: disaggregated prefill and decode pools (POOL_KNOBS)
    "mode": _one_of(MODES, "colocated or disaggregated"),
    **{f"{side}_gpu": _gpu for side in ("prefill", "decode")},
    **{f"{side}_{dim}": _positive_int for side in ("prefill", "decode") for dim in POOL_DIMS},
}
"""Every knob a deployment space may use, with the check of one value."""

#: What a disaggregated configuration takes from its pools instead (POOL_KNOBS).
_COLOCATED_LAYOUT = ("num_gpus", "pp", "ep", "dp", "attention_dp", "moe_tp")


def inactive_params(params: Mapping[str, Any], *, problem: Mapping[str, Any] | None = None) -> set[str]:
    """The parameters ``params`` sets that its configuration does not read: a disaggregated
    one's colocated layout (and ``tp``, ``gpu`` where both pools set their own), a
    colocated one's pool knobs, a draft acceptance without drafts, and ``batch`` under a
    ``load`` workload (the study's ``problem`` section) whose loop is not the default closed
    loop of ``batch`` clients: a request rate or a concurrency, in the workload or in
    ``params`` (``ProblemSchema.inactive``)."""
    unread: set[str] = set()
    workload = (problem or {}).get("workload")
    if isinstance(workload, Mapping) and workload.get("kind") == "load" and any(
            params.get(k) is not None or workload.get(k) is not None
            for k in ("request_rate", "concurrency")):
        unread.add("batch")
    if params.get("mode", "colocated") == "disaggregated":
        unread.update(_COLOCATED_LAYOUT)
        for knob in ("tp", "gpu"):
            if all(f"{side}_{knob}" in params for side in ("prefill", "decode")):
                unread.add(knob)
    else:
        unread.update(k for k in POOL_KNOBS if k != "mode")
    if not int(params.get("speculative_tokens", 0)):
        unread.add("draft_acceptance")
    return unread & set(params)


SCHEMA = ProblemSchema(keys=PROBLEM_KEYS, params=PARAMS, metrics={**METRICS, **LOAD_ONLY_METRICS},
                       color_by=("mode", "gpu"), inactive=inactive_params)
"""What study files of deployment studies may contain (``search.config.load_study``)."""


#: Evaluations a problem keeps for configurations proposed again.
MEMO_SIZE = 65_536


@dataclass(frozen=True, kw_only=True)
class DeploymentProblem:
    """Predict one deployment per configuration and report every metric.

    ``model`` is resolved once (a ``config.json`` is read, and any approximation it needs
    reported, when the study is loaded, not at every trial)."""

    model: ModelConfig
    workload: Workload
    routing: Routing = field(default_factory=Routing)
    gpu_cost_per_hour: dict[str, float] = field(default_factory=dict)
    calibration: Calibration | None = None
    #: Configurations already evaluated (a sampler proposes many twice: a third of the
    #: quickstart study's 2,000 trials repeat one), oldest first; at most ``MEMO_SIZE``.
    _evaluated: dict[tuple[tuple[str, Any], ...], Evaluation] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def setup(self, params: Mapping[str, Any]) -> tuple[GPU, Deployment, Workload,
                                                         tuple[Pool, Pool] | None]:
        """What one configuration runs: its GPU (a disaggregated one's decode pool's), its
        deployment, workload and pools (None when colocated). Raises ConfigError /
        UnknownGPUError for one that cannot run."""
        gpu = load_gpu(str(params.get("gpu", "H100")))
        deployment = deployment_from_params(params=params, boost_mhz=gpu.boost_clock_mhz,
                                            routing=self.routing)
        workload = workload_from_params(params=params, base=self.workload)
        pools = pools_from_params(params=params, base=deployment)
        if pools is not None:  # each pool's clock fraction of its own GPU's boost clock
            pools = pools_at_clock(pools, params=params)
            return load_gpu(pools[1].gpu), deployment, workload, pools
        if deployment.overlap_sms >= gpu.sm_count:
            raise ConfigError(f"overlap_sms = {deployment.overlap_sms} leaves no SM for compute "
                              f"on {gpu.name} ({gpu.sm_count} SMs)")
        return gpu, deployment, workload, pools

    def evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        """Metrics of one configuration, or the reason it cannot run (a configuration seen
        before gets its first evaluation again: the model is deterministic)."""
        try:
            key: tuple[tuple[str, Any], ...] | None = tuple(sorted(params.items()))
            hash(key)
        except TypeError:  # a value that cannot be a key: evaluate it every time
            key = None
        if key is not None and (seen := self._evaluated.get(key)) is not None:
            return replace(seen, metrics=dict(seen.metrics))
        evaluation = self._evaluate(params)
        if key is not None:
            if len(self._evaluated) >= MEMO_SIZE:
                del self._evaluated[next(iter(self._evaluated))]
            self._evaluated[key] = replace(evaluation, metrics=dict(evaluation.metrics))
        return evaluation

    def _evaluate(self, params: Mapping[str, Any]) -> Evaluation:
        try:
            gpu, deployment, workload, pools = self.setup(params)
            result = predict(model=self.model, gpu=gpu, deployment=deployment, workload=workload,
                             calibration=self.calibration) if pools is None else \
                predict_disaggregated(model=self.model, workload=workload, prefill=pools[0],
                                      decode=pools[1], calibration=self.calibration)
            if "decode_clock_fraction" in params:
                decode_at = replace(deployment, freq_mhz=float(params["decode_clock_fraction"])
                                    * gpu.boost_clock_mhz)
                result = with_decode_from(
                    prefill_run=result, workload=workload,
                    decode_run=predict(model=self.model, gpu=gpu, deployment=decode_at,
                                       workload=workload, calibration=self.calibration))
        except (ConfigError, UnknownGPUError) as exc:
            return Evaluation(metrics={}, infeasible_reason=str(exc))
        running = result.running_batch  # what runs: a KV-capped batch, a load's mean
        dollars_per_hour = self.price_per_hour(gpu.name) * result.num_gpus if pools is None \
            else sum(self.price_per_hour(load_gpu(p.gpu).name) * p.deployment.total_gpus
                     for p in pools)
        return Evaluation(metrics=self._metrics(result, dollars_per_hour,
                                                workload.batch / deployment.replicas
                                                if running is None else running),
                          infeasible_reason=result.infeasible_reason)

    def price_per_hour(self, gpu: str) -> float:
        """$ per hour of one GPU (canonical name): the study's price, else the GPU file's."""
        return self.gpu_cost_per_hour.get(gpu, load_gpu(gpu).price_per_hour)

    def evaluate_many(self, batch: Sequence[Mapping[str, Any]]) -> list[Evaluation]:
        """:meth:`evaluate` of each configuration, priced together (``predict_many``)."""
        from energylens.study.batch_objective import evaluate_many

        return evaluate_many(self, batch)

    def evaluate_table(self, table: pd.DataFrame) -> pd.DataFrame:
        """:meth:`evaluate` over a table of configurations (search's columnar hook)."""
        from energylens.study.batch_objective import evaluate_table

        return evaluate_table(self, table)

    def _metrics(self, result: Prediction, dollars_per_hour: float,
                 batch_per_replica: float) -> dict[str, float]:
        dollars_per_s = dollars_per_hour / 3600.0
        return {
            "energy_per_output_token_j": result.energy_per_output_token_j,
            "energy_per_request_j": result.energy_per_request_j,
            "tpot_s": result.tpot_s,
            "ttft_s": result.ttft_s,
            "output_tokens_per_s": result.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": result.output_tokens_per_s / result.num_gpus,
            "num_gpus": float(result.num_gpus),
            "cost_per_million_tokens": dollars_per_s / result.output_tokens_per_s * 1e6,
            "avg_power_w": result.avg_power_w,
            "memory_per_gpu_gb": result.memory_per_gpu_gb,
            "batch_per_replica": batch_per_replica,
            "prefill_energy_j": result.prefill.energy_j,
            "decode_energy_j": result.decode.energy_j,
            **(study_metrics(result.load) if isinstance(result, LoadPrediction) else {}),
        }


def with_decode_from(*, prefill_run: Prediction, decode_run: Prediction,
                     workload: Workload) -> Prediction:
    """Per-phase DVFS of a static batch: prefill from one prediction, decode from another
    (same workload; the phases run one after the other)."""
    energy = prefill_run.prefill.energy_j + decode_run.decode.energy_j
    wall = prefill_run.prefill.latency_s + decode_run.decode.latency_s
    tokens = workload.batch * workload.output_tokens
    return replace(prefill_run, decode=decode_run.decode, tpot_s=decode_run.tpot_s,
                   energy_per_output_token_j=energy / tokens,
                   energy_per_request_j=energy / workload.batch,
                   avg_power_w=energy / wall, output_tokens_per_s=tokens / wall)


def deployment_from_params(*, params: Mapping[str, Any], boost_mhz: float,
                           routing: Routing | None = None) -> Deployment:
    """A :class:`Deployment` from knob values (missing knobs take their defaults)."""
    runtime = str(params.get("runtime", DEFAULT_RUNTIME))
    fusion: frozenset[str] | None = None  # the runtime's defaults
    if "fusion" in params:
        text = str(params["fusion"])
        fusion = frozenset() if text in ("", "none") else frozenset(text.split(","))
    flags = {name: params[f"fuse_{name}"] for name in FUSIONS if f"fuse_{name}" in params}
    if flags:
        base = get_runtime(runtime).default_fusions if fusion is None else fusion
        fusion = frozenset(n for n in base if flags.get(n, True)) | {
            n for n, on in flags.items() if on}
    freq = params.get("freq_mhz")
    if freq is None and "clock_fraction" in params:
        freq = float(params["clock_fraction"]) * boost_mhz
    return Deployment(
        num_gpus=_int_or_none(params.get("num_gpus")),
        tp=int(params.get("tp", 1)), pp=int(params.get("pp", 1)), ep=int(params.get("ep", 1)),
        dp=_int_or_none(params.get("dp")),
        attention_dp=int(params.get("attention_dp", 1)), moe_tp=_int_or_none(params.get("moe_tp")),
        max_num_seqs=_int_or_none(params.get("max_num_seqs")),
        speculative_tokens=int(params.get("speculative_tokens", 0)),
        draft_acceptance=(None if params.get("draft_acceptance") is None
                          or not int(params.get("speculative_tokens", 0))
                          else float(params["draft_acceptance"])),
        weight_dtype=params.get("dtype"),
        kv_dtype=kv_dtype_param(params.get("kv_dtype")),
        fusion=fusion,
        overlap_sms=int(params.get("overlap_sms", 0)),
        freq_mhz=None if freq is None else float(freq),
        routing=routing or Routing(),
        runtime=runtime,
    )


def kv_dtype_param(value: Any) -> str | None:
    """The deployment's ``kv_dtype`` for a ``kv_dtype`` knob value (``auto`` or none: None)."""
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return None if missing or value == "auto" else str(value)


def pools_at_clock(pools: tuple[Pool, Pool], *, params: Mapping[str, Any]) -> tuple[Pool, Pool]:
    """``pools`` with a ``clock_fraction`` (no ``freq_mhz``) of each pool's own GPU."""
    if "clock_fraction" not in params or params.get("freq_mhz") is not None:
        return pools
    fraction = float(params["clock_fraction"])
    prefill, decode = (replace(pool, deployment=replace(
        pool.deployment, freq_mhz=fraction * load_gpu(pool.gpu).boost_clock_mhz))
        for pool in pools)
    return prefill, decode


def row_params(row: Mapping[Any, Any], *, knobs: Sequence[str],
               fixed: Mapping[str, Any]) -> dict[str, Any]:
    """A report row's configuration: the fixed values and its knob cells (an empty cell, a
    knob the configuration does not read, is left out; numpy scalars become Python's)."""
    params = dict(fixed)
    for knob in knobs:
        value = row.get(knob)
        if value is not None and not pd.isna(value):
            params[knob] = value.item() if isinstance(value, np.generic) else value
    return params


def workload_from_params(*, params: Mapping[str, Any], base: Workload) -> Workload:
    """The study's workload with any workload knobs of this configuration applied."""
    loop = {key: params[key] for key in ("request_rate", "concurrency") if key in params}
    if loop:  # a knob picks the loop: the other one is cleared
        loop = {"request_rate": None, "concurrency": None, **loop}
    return replace(base, batch=float(params.get("batch", base.batch)),
                   input_tokens=float(params.get("input_tokens", base.input_tokens)),
                   output_tokens=float(params.get("output_tokens", base.output_tokens)), **loop)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def summarise_trace(path: Path) -> tuple[float, float]:
    """Mean prompt and output lengths of a request trace (``num_prefill_tokens``,
    ``num_decode_tokens`` columns, as in the Splitwise/Azure traces).

    Raises:
        ProblemError: unreadable file, missing columns, no requests, or lengths that are not
            finite positive numbers.
    """
    try:
        frame = pd.read_csv(path, usecols=["num_prefill_tokens", "num_decode_tokens"])
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read trace ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ProblemError(f"{path}: {str(exc).splitlines()[0]}") from None
    if frame.empty:
        raise ProblemError(f"{path}: trace has no requests")
    means = []
    for column in ("num_prefill_tokens", "num_decode_tokens"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any() or not (values > 0).all() or not values.map(math.isfinite).all():
            raise ProblemError(f"{path}: {column}: expected finite numbers > 0 on every row")
        means.append(float(values.mean()))
    return means[0], means[1]


def _relative(source: Path, value: str) -> Path:
    return (source.parent / value).resolve()


def _model(value: Any, source: Path) -> ModelConfig:
    if not isinstance(value, str) or not value.strip():
        raise ProblemError(f"{source}: model: expected a zoo name, HF id or config.json path, "
                           f"got {value!r}")
    beside = _relative(source, value)  # a local checkpoint is named from the study file
    name = str(beside) if value.lower().endswith(".json") or beside.is_dir() else value
    try:
        return get_model(name)
    except ValueError as exc:  # every EnergyLensError is a ValueError
        raise ProblemError(f"{source}: model: {str(exc).splitlines()[0]}") from None


def _workload(spec: Any, source: Path) -> tuple[Workload, Routing]:
    if not isinstance(spec, Mapping):
        raise ProblemError(f"{source}: workload: expected a mapping of {', '.join(WORKLOAD_KEYS)}")
    for key in spec:
        if key not in WORKLOAD_KEYS:
            raise ProblemError(f"{source}: workload.{key}: unknown key{suggest(str(key), WORKLOAD_KEYS)}")
    values: dict[str, Any] = {}
    for key in ("batch", "input_tokens", "output_tokens"):
        if key in spec:
            expected = _positive_number(spec[key])
            if expected is not None:
                raise ProblemError(f"{source}: workload.{key}: expected {expected}, got {spec[key]!r}")
            values[key] = spec[key]
    if "kind" in spec:
        values["kind"] = spec["kind"]
        if spec["kind"] not in kind_names():
            raise ProblemError(f"{source}: workload.kind: unknown kind {spec['kind']!r}"
                               f"{suggest(str(spec['kind']), kind_names())}")
    load = spec.get("kind") == "load"  # a trace is replayed request by request
    if "trace" in spec and not load:
        if "input_tokens" in spec or "output_tokens" in spec:
            raise ProblemError(f"{source}: workload.trace: expected either a trace or "
                               "input_tokens/output_tokens, not both")
        try:
            values["input_tokens"], values["output_tokens"] = summarise_trace(
                _relative(source, str(spec["trace"])))
        except ProblemError as exc:
            raise ProblemError(f"{source}: workload.trace: {exc}") from None
    try:
        values.update(load_values(spec, trace=str(_relative(source, str(spec["trace"])))
                                  if load and "trace" in spec else None))
    except ConfigError as exc:
        raise ProblemError(f"{source}: workload.{exc}") from None
    skew = spec.get("moe_skew", 0.0)
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not math.isfinite(skew) \
            or not 0 <= skew <= MAX_SKEW:
        raise ProblemError(f"{source}: workload.moe_skew: expected a number in [0, "
                           f"{MAX_SKEW:g}] (Zipf exponent; 0 = uniform routing), got {skew!r}")
    try:
        workload = Workload(**values)
    except ConfigError as exc:
        raise ProblemError(f"{source}: workload: {exc}") from None
    return workload, Routing(kind="zipf", skew=float(skew)) if skew > 0 else Routing()


def _costs(costs: Any, source: Path) -> dict[str, float]:
    if not isinstance(costs, Mapping):
        raise ProblemError(f"{source}: gpu_cost_per_hour: expected a mapping GPU -> $/hour")
    resolved = {}
    for name, price in costs.items():
        expected = _gpu(name)
        if expected is not None:
            raise ProblemError(f"{source}: gpu_cost_per_hour.{name}: expected {expected}")
        if _positive_number(price) is not None:
            raise ProblemError(f"{source}: gpu_cost_per_hour.{name}: expected a finite price > 0, "
                               f"got {price!r}")
        resolved[load_gpu(str(name)).name] = float(price)
    return resolved


def _calibration(source: Path, name: Any) -> Calibration:
    try:
        return load_calibration(_relative(source, str(name)))
    except CalibrationFileError as exc:
        raise ProblemError(f"{source}: calibration: {exc}") from None


def problem_from_study(*, problem: Mapping[str, Any], source: Path,
                       params: Collection[str] = (),
                       metrics: Mapping[str, str] | None = None) -> DeploymentProblem:
    """Build the objective from a study's problem keys; errors name the study file and key.

    Args:
        problem: The study's problem section (``StudyConfig.problem``).
        source: The study file: relative paths (model, trace, calibration) start from its folder.
        params: The knob and fixed names of the study's space, for checks across sections.
        metrics: The metrics the study's objectives and constraints name, by where they are
            named (``"objectives[0]"``), checked against what the workload reports.

    Raises:
        ProblemError: a key that cannot be used (one line).
    """
    if "model" not in problem:
        raise ProblemError(f"{source}: model: required (a zoo name, HF id or config.json path)")
    model = _model(problem["model"], source)
    workload, routing = _workload(problem.get("workload", {}), source)
    if "decode_clock_fraction" in params and workload.kind != "batch":
        raise ProblemError(f"{source}: decode_clock_fraction: expected workload kind 'batch' (a "
                           f"{workload.kind} workload runs prefill and decode in the same steps, "
                           "at one clock)")
    loop_knobs = sorted({"request_rate", "concurrency", "mode"} & set(params))
    if loop_knobs and workload.kind != "load":
        raise ProblemError(f"{source}: {loop_knobs[0]}: expected workload kind 'load' (only "
                           f"a load workload has arrivals)")
    _check_reported(metrics or {}, workload=workload, source=source)
    calibration = problem.get("calibration")
    return DeploymentProblem(
        model=model, workload=workload, routing=routing,
        gpu_cost_per_hour=_costs(problem.get("gpu_cost_per_hour", {}), source),
        calibration=None if calibration is None else _calibration(source, calibration),
    )


def _check_reported(metrics: Mapping[str, str], *, workload: Workload, source: Path) -> None:
    """Refuse a metric the workload never reports (a load metric of another kind, a
    capacity without ``capacity_attainment``): every trial would lack it."""
    for where, metric in metrics.items():
        if metric in LOAD_ONLY_METRICS and workload.kind != "load":
            raise ProblemError(f"{source}: {where}: {metric}: expected workload kind 'load' "
                               f"(a {workload.kind} workload does not report it)")
        if metric in CAPACITY_METRICS and workload.capacity_attainment is None:
            raise ProblemError(f"{source}: {where}: {metric}: expected "
                               "workload.capacity_attainment (the share of requests within "
                               "the SLOs that the capacity is the rate of)")


def study_problem(config: StudyConfig) -> DeploymentProblem:
    """The objective of a loaded study file (its model, workload, routing and cost table)."""
    named = {**{f"objectives[{i}]": o.metric for i, o in enumerate(config.objectives)},
             **{f"constraints[{i}]": c.metric for i, c in enumerate(config.constraints)}}
    return problem_from_study(problem=config.problem, source=config.source,
                              params=(*config.space.names, *config.space.fixed), metrics=named)
