"""What every serving runtime (engine) must satisfy, parametrised over ``runtime_names()``.

Adding a runtime is one module in ``energylens/runtime/`` plus its facts file
(``runtime/README.md``); this suite then holds it to the same facts and behaviour checks
without being edited. The checks are properties (provenance, bounds, monotonicity, what
its collective layout may and may not do), not snapshots of today's numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.cli.main import main
from energylens.cost.comm import collective_cost
from energylens.cost.constants import LinkConstants, RuntimeConstants
from energylens.cost.kernels import Collective, compile_layer
from energylens.cost.memory import MemoryUse, memory_use
from energylens.cost.work import ACTIVATION_BYTES, Size, tensor_bytes
from energylens.deployment import FUSIONS, KV_DTYPES, WEIGHT_DTYPES, Deployment, Workload, check_deployment
from energylens.errors import ConfigError, EnergyLensError
from energylens.hardware import GPU, list_gpus, load_gpu
from energylens.model import ModelConfig, build_graph, list_models
from energylens.model.families import LayerGroup
from energylens.predict import Prediction, predict
from energylens.runtime import DEFAULT_RUNTIME, RuntimeProfile, get_runtime, runtime_names
from energylens.runtime.profile import (
    AUTO_KV_DTYPES,
    FACT_KINDS,
    PARALLEL_DIMS,
    PREFILL_SCHEDULING,
    load_facts,
)
from energylens.runtime.registry import register

NAMES = runtime_names()
KNOWN_KINDS = frozenset(FACT_KINDS)
#: Every constructor field of a profile that is a fact (carries value, kind and source).
FACTS = tuple(f.name for f in dataclasses.fields(RuntimeProfile)
              if f.name not in ("name", "display_name", "provenance"))
#: Layouts ``RuntimeProfile.expert_parallel_layout`` documents.
EP_LAYOUTS = ("tensor-parallel-attention", "all-to-all")
DENSE, GPU_NAME = "llama-3.1-8b", "h100"

every_runtime = pytest.mark.parametrize("name", NAMES)


def _facts_dir() -> Traversable:
    return resources.files("energylens.data").joinpath("runtimes")


def test_registry_is_not_empty_and_the_default_is_registered() -> None:
    assert NAMES and DEFAULT_RUNTIME in NAMES
    assert len(set(NAMES)) == len(NAMES)


def test_every_facts_file_is_a_registered_runtime() -> None:
    files = sorted(p.name.removesuffix(".yaml") for p in _facts_dir().iterdir()
                   if p.name.endswith(".yaml"))
    assert files == sorted(NAMES)


# --- facts -------------------------------------------------------------------------------

@every_runtime
def test_name_is_canonical_and_resolves_in_any_case(name: str) -> None:
    profile = get_runtime(name)
    assert profile.name == name
    # get_runtime looks names up stripped and lower-cased: another spelling is unreachable
    assert name == name.strip().lower() and " " not in name
    assert get_runtime(f" {name.upper()} ") is profile
    assert profile.display_name.strip()


@every_runtime
def test_registered_once(name: str) -> None:
    with pytest.raises(ValueError, match="twice"):
        register(get_runtime(name))
    assert runtime_names() == NAMES


@every_runtime
def test_every_fact_has_a_source_and_a_known_kind(name: str) -> None:
    profile = get_runtime(name)
    assert set(profile.provenance) == set(FACTS)
    for fact, prov in profile.provenance.items():
        assert prov.source.strip(), f"{name}.{fact}: empty source"
        assert prov.kind in KNOWN_KINDS, f"{name}.{fact}: kind {prov.kind!r}"


@every_runtime
def test_profile_holds_the_facts_of_its_file(name: str) -> None:
    """Facts are data: the registered profile carries its file's values, not code's."""
    profile, values = get_runtime(name), load_facts(name)
    for fact in FACTS:
        assert getattr(profile, fact) == values[fact], fact


@every_runtime
def test_fact_values_are_in_range(name: str) -> None:
    p = get_runtime(name)
    assert p.default_fusions <= frozenset(FUSIONS)
    assert 0.0 < p.memory_utilization <= 1.0
    assert math.isfinite(p.reserve_bytes) and p.reserve_bytes > 0
    assert isinstance(p.prefill_chunk_tokens, int) and p.prefill_chunk_tokens > 0
    assert p.prefill_scheduling in PREFILL_SCHEDULING
    assert p.auto_kv_dtype in AUTO_KV_DTYPES
    assert p.expert_parallel_layout in EP_LAYOUTS
    assert math.isfinite(p.custom_allreduce_max_bytes) and p.custom_allreduce_max_bytes >= 0
    assert len(set(p.fused_into_combine)) == len(p.fused_into_combine)
    assert p.version.strip()
    assert list(p.cuda_graph_batch_sizes) == sorted(set(p.cuda_graph_batch_sizes))
    assert all(size >= 1 for size in p.cuda_graph_batch_sizes)
    assert isinstance(p.kv_block_tokens, int) and p.kv_block_tokens >= 1
    assert p.weight_dtypes and p.weight_dtypes <= frozenset(WEIGHT_DTYPES)
    assert p.kv_dtypes and p.kv_dtypes <= frozenset(KV_DTYPES)
    # a precision gate names precisions the engine runs, at a CUDA compute capability
    assert set(p.weight_min_compute_capability) <= p.weight_dtypes
    assert set(p.kv_min_compute_capability) <= p.kv_dtypes
    for cc in (*p.weight_min_compute_capability.values(), *p.kv_min_compute_capability.values()):
        assert math.isfinite(cc) and 1.0 <= cc < 20.0
    assert p.parallelism <= frozenset(PARALLEL_DIMS)
    assert p.gpu_vendors and p.gpu_vendors <= {gpu.vendor for gpu in list_gpus()}
    if "ep" in p.parallelism:  # an engine with EP states which layout it uses
        assert p.expert_parallel_layout in EP_LAYOUTS
    for prior in (p.prior_step_overhead_s, p.prior_per_sequence_overhead_s):
        assert math.isfinite(prior) and 0 <= prior < 0.1
    assert bool(p.launch_program.strip()) == bool(p.launch_flags)  # both or neither
    assert len(set(p.launch_flags)) == len(p.launch_flags)


# --- collective layout -------------------------------------------------------------------

def _moe_models() -> list[ModelConfig]:
    return [m for m in list_models() if m.moe is not None]


def _valid(deployment: Deployment, model: ModelConfig) -> bool:
    try:
        check_deployment(deployment=deployment, model=model, gpu_name="any",
                         gpu_clock_range=(0.0, math.inf), gpu_sm_count=1024)
    except ConfigError:
        return False
    return True


def _layouts(name: str, model: ModelConfig, deployment: Deployment
             ) -> Iterator[tuple[LayerGroup, tuple[Collective, ...], list[Collective], dict[str, int]]]:
    """(layer group, spec collectives, runtime layout, degrees) of every layer group."""
    profile = get_runtime(name)
    degrees = deployment.degrees(model)
    for group in build_graph(model).groups:
        spec = compile_layer(layer=group.layer, sizes=group.sizes, degrees=degrees,
                             fusion=profile.default_fusions).collectives
        out = profile.collective_layout(spec, layer=group.layer, degrees=dict(degrees))
        yield group, spec, out, degrees


def _expert_rows(c: Collective) -> bool:
    """An all-reduce of the experts' output rows (partial sums of an expert split ``etp``
    ways), which every engine does once on the combined output instead."""
    return c.kind == "all_reduce" and c.dim == "etp" and "x" in c.tensor.ranks


def _moved(collectives: list[Collective], phase: dict[str, float]) -> float:
    return float(sum(tensor_bytes(tensor=c.tensor, sizes={**c.sizes, **phase},
                                  weight_dtype="bf16", window=None) for c in collectives))


@every_runtime
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_without_expert_parallelism_moe_output_is_reduced_once_after_the_combine(
        name: str, tp: int) -> None:
    """Dense layers keep the spec's collectives. A tensor-parallel MoE layer reduces the
    combined output (tokens x hidden) once over the group instead of every expert row
    (top_k x tokens x hidden) and the folded partial sums: fewer bytes, same group."""
    profile = get_runtime(name)
    tokens = 64.0
    checked = 0
    for model in list_models():
        deployment = Deployment(tp=tp)
        if not _valid(deployment, model):
            continue
        for group, spec, out, degrees in _layouts(name, model, deployment):
            where = f"{model.name}/{group.name}"
            checked += 1
            if not any(_expert_rows(c) for c in spec):
                assert out == list(spec), where
                continue
            added = [c for c in out if c not in spec]
            assert len(added) == 1 and added[0].kind == "all_reduce", where
            assert added[0].after_op == "combine" and degrees[added[0].dim] == tp, where
            assert not any(_expert_rows(c) for c in out), where
            dropped = [c for c in spec if c not in out]
            assert all(_expert_rows(c) or c.after_op in profile.fused_into_combine
                       for c in dropped), where

            assert model.moe is not None
            # t: mean tokens per expert, tokens x top_k over the experts
            phase = {**_tokens_phase(tokens),
                     "t": tokens * model.moe.top_k / model.moe.num_experts}

            now, before = (_moved(added, phase), _moved(dropped, phase))
            assert now == pytest.approx(tokens * model.hidden_size * ACTIVATION_BYTES)
            assert now <= before, where
            if model.moe.top_k > 1:  # top-k rows per token were reduced before
                assert now < before, where
    assert checked


EP_CASES = [(m, tp, ep) for m in _moe_models() for tp, ep in [(1, 2), (1, 4), (1, 8), (2, 2), (2, 4)]
            if _valid(Deployment(tp=tp, ep=ep), m)]


def _ep_id(case: tuple[ModelConfig, int, int]) -> str:
    return f"{case[0].name}-tp{case[1]}-ep{case[2]}"


def _tokens_phase(tokens: float) -> dict[str, float]:
    return {"b": tokens, "m": 1.0, "n": 1.0, "p": 1.0, "t": 1.0}


def _replacements(spec: tuple[Collective, ...], out: list[Collective]) -> list[Collective]:
    return [c for c in out if c not in spec]


@every_runtime
@pytest.mark.parametrize("case", EP_CASES, ids=_ep_id)
def test_expert_parallel_layout_only_trades_all_to_alls_for_one_hidden_state_all_reduce(
        name: str, case: tuple[ModelConfig, int, int]) -> None:
    """Under EP a runtime may drop the spec's all-to-alls or turn one into an all-reduce
    (vLLM: with tensor-parallel attention every rank already holds every token). It must
    not invent other collectives, and what it adds is the MoE output (tokens x hidden).

    It may move MORE bytes than the all-to-alls it replaces, by design: an all-to-all
    carries the routed tokens of a rank (tokens x top_k / ep), the all-reduce every token.
    """
    model, tp, ep = case
    profile = get_runtime(name)
    tokens = 64.0
    for group, spec, out, degrees in _layouts(name, model, Deployment(tp=tp, ep=ep)):
        where = f"{model.name}/{group.name}"
        spec_a2a = [c for c in spec if c.kind == "all_to_all"]
        added = _replacements(spec, out)
        assert len(out) <= len(spec), where
        assert all(c.kind != "all_to_all" or c in spec for c in out), where
        for c in added:  # stands in for the spec's combine all-to-all, over the whole group
            assert c.kind == "all_reduce", where
            assert any(a.after_op == c.after_op for a in spec_a2a), where
            assert degrees[c.dim] == tp * ep, where
            nbytes = tensor_bytes(tensor=c.tensor, sizes={**c.sizes, **_tokens_phase(tokens)},
                                  weight_dtype="bf16", window=None)
            assert nbytes == pytest.approx(tokens * model.hidden_size * ACTIVATION_BYTES), where
        assert len(added) <= len(spec_a2a), where
        dropped = [c for c in spec if c not in out and c.kind != "all_to_all"]
        # only reductions folded into a combine may vanish, and only if there is a combine
        assert all(_expert_rows(c) or (c.kind == "all_reduce"
                                       and c.after_op in profile.fused_into_combine)
                   for c in dropped), where
        if dropped:
            assert added, where
        if not spec_a2a or profile.expert_parallel_layout == "all-to-all":
            assert out == list(spec), where
        else:  # tensor-parallel attention: no all-to-all left, the output reduced once
            assert not any(c.kind == "all_to_all" for c in out), where
            assert len(added) == 1, where
            assert not any(c.kind == "all_reduce" and c.after_op in profile.fused_into_combine
                           for c in out), where
        assert set(degrees) >= {c.dim for c in out}


@pytest.mark.parametrize(("name", "case"), [
    pytest.param(name, case, id=f"{name}-{_ep_id(case)}") for name in NAMES for case in EP_CASES])
def test_a_folded_reduction_is_covered_by_the_combine_group(
        name: str, case: tuple[ModelConfig, int, int]) -> None:
    """Partial sums over group G may only be folded into an all-reduce over a group that
    contains G: otherwise part of the reduction is never priced (nor done)."""
    model, tp, ep = case
    for group, spec, out, degrees in _layouts(name, model, Deployment(tp=tp, ep=ep)):
        dropped = [c for c in spec if c not in out and c.kind != "all_to_all"]
        for fold in dropped:
            for combine in _replacements(spec, out):
                assert degrees[fold.dim] <= degrees[combine.dim], (
                    f"{model.name}/{group.name}: {fold.after_op} over {fold.dim}="
                    f"{degrees[fold.dim]} folded into {combine.dim}={degrees[combine.dim]}")


@every_runtime
def test_ops_folded_into_the_combine_exist(name: str) -> None:
    """Each name in ``fused_into_combine`` is an op after which some zoo MoE layer issues
    an all-reduce under EP (a typo would silently fold nothing)."""
    after = {c.after_op for m, tp, ep in EP_CASES
             for _, spec, _, _ in _layouts(name, m, Deployment(tp=tp, ep=ep))
             for c in spec if c.kind == "all_reduce"}
    assert set(get_runtime(name).fused_into_combine) <= after


# --- all-reduce link and step overhead ---------------------------------------------------

MESSAGES = np.geomspace(256.0, 4.0e9, 41)
DECODE_MESSAGE_BYTES = 1.0e6  # 70B at batch 64: 64 x 8,192 x 2 B = 1 MiB per all-reduce


def _allreduce_s(link: LinkConstants, message: Size, n: int, bandwidth: float) -> np.ndarray:
    return np.asarray(collective_cost(kind="all_reduce", message_bytes=message, group_size=n,
                                      bandwidth=bandwidth, constants=link).latency_s)


def _runtime_constants(name: str) -> list[RuntimeConstants]:
    """The shipped constants of runtime ``name`` on every GPU, and the uncalibrated ones."""
    cal = default_calibration()
    return [RuntimeConstants(), *(cal.runtime(runtime=name, gpu=gpu.name) for gpu in list_gpus())]


@every_runtime
@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda gpu: gpu.name)
def test_own_allreduce_replaces_nccl_below_its_limit_and_wins_on_small_messages(
        name: str, gpu: GPU) -> None:
    """On every shipped GPU, as ``step.py`` asks it: a runtime's own all-reduce replaces
    NCCL's on the scale-up link only and only below its size limit (engines choose it by
    size, not by speed: vLLM's measured one-shot/two-shot kernel is slower than NCCL at
    4-8 MB), and where calibrated it beats NCCL on the small messages of decode (<= 1 MB)
    at every group size of a node."""
    profile, cal = get_runtime(name), default_calibration()
    constants = cal.runtime(runtime=name, gpu=gpu.name)
    limit = profile.custom_allreduce_max_bytes
    for node, scale_up in ((gpu.intra_node, True), (gpu.inter_node, False)):
        link = cal.link(gpu=gpu.name, kind=node.kind)
        for group in sorted({2, 4, gpu.gpus_per_node}):
            nccl = _allreduce_s(link, MESSAGES, group, node.bandwidth_bytes_per_s)
            for i, message in enumerate(MESSAGES):  # one message at a time, as step.py does
                own = profile.allreduce_link(link=link, constants=constants, scale_up=scale_up,
                                             message_bytes=float(message))
                if not scale_up or message > limit or constants.allreduce_latency_s == 0:
                    assert own == link  # NCCL's across nodes, above the limit, uncalibrated
                took = _allreduce_s(own, float(message), group, node.bandwidth_bytes_per_s)
                if message <= DECODE_MESSAGE_BYTES:
                    assert took <= nccl[i] * (1 + 1e-12), (node.kind, group, message)
            small = MESSAGES[MESSAGES <= DECODE_MESSAGE_BYTES]
            own = profile.allreduce_link(link=link, constants=constants, scale_up=scale_up,
                                         message_bytes=small)  # a vector of messages
            took = _allreduce_s(own, small, group, node.bandwidth_bytes_per_s)
            assert np.all(took <= nccl[: small.size] * (1 + 1e-12))


@every_runtime
def test_without_own_allreduce_latency_or_size_it_is_nccl(name: str) -> None:
    profile = get_runtime(name)
    assert math.isfinite(profile.custom_allreduce_max_bytes)
    assert profile.custom_allreduce_max_bytes >= 0
    links = [LinkConstants(), *default_calibration().links.values()]
    for link in links:
        for message in (1e3, 1e6, 1e9):
            for scale_up in (True, False):
                assert profile.allreduce_link(link=link, constants=RuntimeConstants(),
                                              scale_up=scale_up, message_bytes=message) == link
            if profile.custom_allreduce_max_bytes == 0:
                fast = RuntimeConstants(allreduce_latency_s=1e-9)
                assert profile.allreduce_link(link=link, constants=fast, scale_up=True,
                                              message_bytes=message) == link


@every_runtime
def test_step_overhead_is_non_negative_and_grows_with_sequences(name: str) -> None:
    profile = get_runtime(name)
    sequences = [0.0, 0.5, 1.0, 2.0, 7.0, 64.0, 256.0, 1024.0]
    for c in _runtime_constants(name):
        parts = [profile.step_overhead_s(constants=c, sequences=s) for s in sequences]
        for idle, busy in parts:
            assert math.isfinite(idle) and math.isfinite(busy)
            assert idle >= 0 and busy >= 0
        totals = [idle + busy for idle, busy in parts]
        busies = [busy for _, busy in parts]
        assert totals == sorted(totals) and busies == sorted(busies)
    # uncalibrated: no overhead at all
    assert profile.step_overhead_s(constants=RuntimeConstants(), sequences=64.0) == (0.0, 0.0)


# --- memory facts ------------------------------------------------------------------------

@every_runtime
def test_memory_use_honours_the_runtime_facts(name: str) -> None:
    profile = get_runtime(name)
    model, gpu = next(m for m in list_models() if m.name == DENSE), load_gpu(GPU_NAME)
    degrees = Deployment().degrees(model)

    def use(token_budget: float | None) -> MemoryUse:
        return memory_use(graph=build_graph(model), gpu=gpu, runtime=profile, degrees=degrees,
                          pp=1, weight_dtype=model.weight_dtype, kv_dtype="bf16", sequences=4,
                          context_tokens=1024, token_budget=token_budget)

    chunk = float(profile.prefill_chunk_tokens)
    at_chunk = use(chunk)
    assert at_chunk.reserve_bytes == profile.reserve_bytes
    share = profile.memory_share_on(gpu=gpu, tp=1, pp=1, attention_dp=1, speculative=False)
    assert at_chunk.default_share == share
    if profile.memory_share_of == "hbm":
        assert at_chunk.usable_bytes == pytest.approx(gpu.hbm_capacity_bytes * share)
    elif profile.memory_share_of == "static":  # weights + KV in the share, the rest outside
        outside = at_chunk.activation_bytes + at_chunk.reserve_bytes
        assert at_chunk.usable_bytes - outside == pytest.approx(gpu.hbm_capacity_bytes * share)
    else:  # the share of what weights, activations and reserve leave: KV = share x free
        fixed = at_chunk.weights_bytes + at_chunk.activation_bytes + at_chunk.reserve_bytes
        assert at_chunk.usable_bytes - fixed == pytest.approx(
            share * (gpu.hbm_capacity_bytes - fixed))
    # by default the start-up workspace of the runtime's server, whatever the batch holds
    served = use(float(profile.server_limits_on(gpu=gpu)[0]))
    assert use(None).activation_bytes == served.activation_bytes
    assert use(chunk / 2).activation_bytes == pytest.approx(at_chunk.activation_bytes / 2)


# --- predictions -------------------------------------------------------------------------

def _gpu_for(runtime: str) -> str:
    """A GPU the runtime runs on: H100 where it can."""
    vendors = get_runtime(runtime).gpu_vendors
    return GPU_NAME if "nvidia" in vendors else min(g.name for g in list_gpus()
                                                     if g.vendor in vendors)


def _finite_positive(p: Prediction) -> None:
    for key in ("ttft_s", "tpot_s", "energy_per_output_token_j", "energy_per_request_j",
                "avg_power_w", "output_tokens_per_s", "memory_per_gpu_gb"):
        value = getattr(p, key)
        assert math.isfinite(value) and value > 0, key


@every_runtime
@pytest.mark.parametrize("kind", ["batch", "serving"])
@pytest.mark.parametrize(("model", "deployment"), [
    (DENSE, Deployment()), (DENSE, Deployment(tp=2)), ("qwen3-30b-a3b", Deployment(ep=2, num_gpus=2))],
    ids=["dense", "dense-tp2", "moe-ep2"])
def test_predicts_with_finite_positive_metrics(name: str, kind: str, model: str,
                                               deployment: Deployment) -> None:
    deployment = dataclasses.replace(deployment, runtime=name)
    gpu = _gpu_for(name)
    if deployment.ep > 1 and "ep" not in get_runtime(name).parallelism:
        with pytest.raises(ConfigError, match="expert parallelism"):
            predict(model=model, gpu=gpu, deployment=deployment)
        return
    p = predict(model=model, gpu=gpu, deployment=deployment,
                workload=Workload(kind=kind, batch=8))
    assert p.feasible, p.infeasible_reason
    _finite_positive(p)


@every_runtime
def test_unset_fusion_means_the_runtime_defaults(name: str) -> None:
    profile = get_runtime(name)
    workload = Workload(batch=4)

    def run(fusion: frozenset[str] | None) -> dict[str, object]:
        return predict(model=DENSE, gpu=_gpu_for(name), workload=workload,
                       deployment=Deployment(runtime=name, tp=2, fusion=fusion)).as_dict()

    default = run(None)
    assert default == run(frozenset(profile.default_fusions))
    if profile.default_fusions:  # the fusion set does reach the prediction
        assert default != run(frozenset())


# --- unknown runtime ---------------------------------------------------------------------

def test_unknown_runtime_is_a_one_line_error() -> None:
    for call in (lambda: get_runtime("nope"), lambda: Deployment(runtime="nope")):
        with pytest.raises(EnergyLensError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message.strip() and "nope" in message
        assert all(n in message for n in NAMES)  # lists what is known
    with pytest.raises(EnergyLensError, match="did you mean"):
        get_runtime(NAMES[0] + "x")


def test_unknown_runtime_on_the_cli_exits_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code: int | str | None
    try:
        code = main(["predict", "--model", DENSE, "--gpu", GPU_NAME, "--runtime", "nope"])
    except SystemExit as exc:  # argparse's own refusal of a choice
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope" in lines[0], err
    assert "Traceback" not in err
