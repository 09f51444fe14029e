"""Serving runs as many sequences as the runtime's KV space holds instead of refusing."""

from __future__ import annotations

import pytest

from energylens.cost.memory import memory_use
from energylens.deployment import Deployment, Workload
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.predict import predict
from energylens.runtime import get_runtime

# Qwen3-14B: 40 layers, 8 KV heads of 128, bf16 K and V: 40 * 8 * 128 * 2 * 2 B per token.
QWEN3_14B_KV_BYTES_PER_TOKEN = 40 * 8 * 128 * 2 * 2
SERVING = {"kind": "serving", "input_tokens": 600, "output_tokens": 400}


def _serve(batch: float, **deployment: object):
    return predict(model="qwen3-14b", gpu="B200", deployment=Deployment(**deployment),  # type: ignore[arg-type]
                   workload=Workload(batch=batch, **SERVING))  # type: ignore[arg-type]


def test_a_batch_that_fits_runs_as_asked() -> None:
    result = _serve(100)
    assert result.feasible and result.running_batch == 100


def test_a_batch_beyond_the_kv_space_is_capped_at_what_the_space_holds() -> None:
    result = _serve(5000)
    assert result.feasible
    gpu, vllm = load_gpu("B200"), get_runtime("vllm")
    usable = gpu.hbm_capacity_bytes * vllm.memory_utilization
    assert result.memory_per_gpu_gb * 1e9 <= usable * (1 + 1e-12)
    # mean context 600 + 400 / 2 tokens; weights ~29.5 GB: the KV space holds ~1,000 sequences
    context_bytes = (600 + 400 / 2) * QWEN3_14B_KV_BYTES_PER_TOKEN
    bound = (usable - 29e9) / context_bytes
    assert 0.9 * bound <= result.running_batch <= bound
    # the capped deployment is priced at the capped batch: the same as asking for it
    asked = _serve(result.running_batch)
    assert asked.running_batch == result.running_batch
    assert result.tpot_s == pytest.approx(asked.tpot_s, rel=1e-12)


def test_an_fp8_kv_cache_holds_twice_the_sequences() -> None:
    bf16 = _serve(20000)
    fp8 = _serve(20000, kv_dtype="fp8")
    assert fp8.running_batch == pytest.approx(2 * bf16.running_batch, rel=0.01)


def test_a_deployment_without_room_for_one_sequence_is_infeasible_with_the_reason() -> None:
    result = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(),
                     workload=Workload(batch=8, **SERVING))  # type: ignore[arg-type]
    assert not result.feasible
    assert "GB per GPU" in (result.infeasible_reason or "")


def test_no_measured_ml_energy_configuration_is_refused() -> None:
    """Every ML.ENERGY configuration really ran: none is refused, for memory or for its
    layout (data-parallel attention with EP included), but a model the zoo lacks."""
    from pathlib import Path

    from energylens.measurements.formats import load_measurements
    from energylens.measurements.mlenergy import UnsupportedRow, predict_row

    refused = []
    files = sorted((Path(__file__).parents[1] / "data/measurements/mlenergy/models").glob("*.json"))
    assert files
    for path in files:
        for row in load_measurements(format="mlenergy", path=path).rows:
            try:
                predict_row(row.input)
            except UnsupportedRow as exc:
                if "not in the zoo" not in str(exc):
                    refused.append(f"{path.name}: {exc}")
    assert not refused, refused


def test_a_share_of_free_memory_leaves_the_kv_that_share_of_what_the_weights_leave() -> None:
    """TensorRT-LLM's free_gpu_memory_fraction (0.9) is a share of the memory the weights
    leave, vLLM's gpu_memory_utilization (0.9) one of the whole HBM: with 35.3 GB of weights
    (Llama-3.1-70B at TP4) on an 85.52 GB H100 the KV space is about 0.9 x 50.2 = 45 GB
    against 0.9 x 85.52 - 35.3 = 41.7 GB (activations and reserve aside). (At TP2 vLLM's
    default share would not hold the weights and its start-up pass: raised, below.)"""
    model, gpu = get_model("llama-3.1-70b"), load_gpu("H100")
    free_kv = {}
    for name in ("vllm", "trtllm"):
        runtime = get_runtime(name)
        use = memory_use(graph=build_graph(model), gpu=gpu, runtime=runtime,
                         degrees=Deployment(tp=4).degrees(model), pp=1, weight_dtype="bf16",
                         kv_dtype="bf16", sequences=1, context_tokens=1)
        fixed = use.weights_bytes + use.activation_bytes + use.reserve_bytes
        free_kv[name] = float(use.usable_bytes - fixed)
        share = runtime.memory_utilization
        expected = (share * (gpu.hbm_capacity_bytes - fixed) if runtime.memory_share_of == "free"
                    else share * gpu.hbm_capacity_bytes - fixed)
        assert free_kv[name] == pytest.approx(expected)
    assert get_runtime("trtllm").memory_share_of == "free"
    assert free_kv["trtllm"] > free_kv["vllm"]


def test_sglangs_static_share_holds_the_weights_and_the_kv_pool_only() -> None:
    """SGLang's --mem-fraction-static is the share of the HBM for the weights and the KV
    pool; activations and workspaces use the rest. Its default on an 85.52 GB (81,559 MiB)
    H100 at TP2 (server_args.py): a reserve of 512 + 1.5 x 8,192 (the chunked-prefill size)
    + 2 x 256 (--cuda-graph-max-bs below TP4) + 1,024 x 2 / 8 = 13,568 MiB, so a share of
    round(1 - 13,568 / 81,559, 3) = 0.834. Llama-3.1-70B bf16: 70.6 GB of weights per GPU
    leave 0.834 x 85.52 - 70.6 = 0.77 GB of KV; counting activations and reserve inside the
    share would leave none."""
    model, gpu = get_model("llama-3.1-70b"), load_gpu("H100")
    runtime = get_runtime("sglang")
    assert runtime.memory_share_of == "static"
    use = memory_use(graph=build_graph(model), gpu=gpu, runtime=runtime,
                     degrees=Deployment(tp=2).degrees(model), pp=1, weight_dtype="bf16",
                     kv_dtype="bf16", sequences=1, context_tokens=1, token_budget=8192)
    board_mib = 85.5208e9 / 2**20
    share = round(1 - (512 + 1.5 * 8192 + 2 * 256 + 1024 * 2 / 8) / board_mib, 3)
    assert use.default_share == share == 0.834
    kv_space = float(use.usable_bytes - use.weights_bytes - use.activation_bytes
                     - use.reserve_bytes)
    assert kv_space == pytest.approx(share * 85.5208e9 - float(use.weights_bytes))
    assert 0.5e9 < kv_space < 1.0e9
    assert use.activation_bytes + use.reserve_bytes > 2.0e9  # they would have left none


@pytest.mark.parametrize(("gpu", "tp", "adp", "speculative", "reserved_mib"), [
    # 16,384-token chunk and 512 graphs on a B200 (> 160 GiB); 10 GiB floor not reached
    ("B200", 8, 1, False, 512 + 1.5 * 16384 + 2 * 512 + 1024 * 8 / 8),
    # DP attention over 8 H100s: --tp-size 8, graphs 512, 3 x and 1.5 x 512 x 8 more
    ("H100", 1, 8, False, 512 + 1.5 * 8192 + 2 * 512 + 1024 + 512 * 8 * 4.5),
    # an A100-40GB (under 60 GiB: 4,096-token chunk, 32 graphs below TP4, no floor), MTP draft
    ("A100-40GB-SXM", 2, 1, True, 512 + 1.5 * 4096 + 2 * 32 + 1024 * 2 / 8 + 2048),
    # the 10 GiB floor: an H200 at TP1 (13,440 MiB) is above it; an L40S (48 GB) is not over
    # 60 GiB, so no floor
    ("L40S", 1, 1, False, 512 + 1.5 * 4096 + 2 * 32 + 1024 / 8)])
def test_sglangs_default_memory_share_follows_its_server_args(
        gpu: str, tp: int, adp: int, speculative: bool, reserved_mib: float) -> None:
    """SGLang 0.5.3 / 0.5.9 ``_handle_gpu_memory_settings``, computed by hand."""
    spec = load_gpu(gpu)
    board = spec.hbm_capacity_bytes / 2**20
    expected = round((board - max(reserved_mib, 10 * 1024 if board > 60 * 1024 else 0))
                     / board, 3)
    share = get_runtime("sglang").memory_share_on(gpu=spec, tp=tp, pp=1, attention_dp=adp,
                                                  speculative=speculative)
    assert share == expected
    assert get_runtime("vllm").memory_share_on(gpu=spec, tp=tp, pp=1, attention_dp=adp,
                                               speculative=speculative) == 0.9


def test_sglangs_default_share_is_zero_where_its_reserve_exceeds_the_board() -> None:
    """DP-attention ranks on a GB200 (186 GiB, 190,464 MiB): 512 + 1.5 x 16,384 (chunk) +
    2 x 512 (graphs) + ranks / 8 x 1,024, and (3 + 1.5) x 512 graphs x ranks more. At 72
    ranks (a whole NVL72) that is 201,216 MiB, past the board: the server cannot start on
    its default, and a prediction raises the share as a user must (the launch note names
    the default 0); at 64, 181,760 MiB leave a share of 0.046."""
    def share(ranks: int) -> float:
        return get_runtime("sglang").memory_share_on(gpu=load_gpu("GB200"), tp=1, pp=1,
                                                     attention_dp=ranks, speculative=False)
    assert share(72) == 0.0
    assert share(64) == round((186 * 1024 - 181_760) / (186 * 1024), 3) == 0.046


def _use(runtime: str, model: str, gpu: str, tp: int):
    spec = get_model(model)
    return memory_use(graph=build_graph(spec), gpu=load_gpu(gpu), runtime=get_runtime(runtime),
                      degrees=Deployment(tp=tp, runtime=runtime).degrees(spec), pp=1,
                      weight_dtype=spec.weight_dtype, kv_dtype="bf16", sequences=1.0,
                      context_tokens=1024.0)


def test_a_share_that_cannot_hold_the_weights_is_raised_as_far_as_the_board_allows() -> None:
    """SGLang's default --mem-fraction-static (0.88 assumed) of a 192 GB B200 is 169 GB;
    DeepSeek-R1's FP8 weights over 4 GPUs are a little more (AIConfigurator measured the
    run): the engine only starts with the share raised, so the share is the whole board
    less what lives outside it, and the deployment predicts. Over 2 GPUs the weights alone
    pass the board: infeasible, naming them."""
    sglang = get_runtime("sglang")
    four = _use("sglang", "deepseek-r1", "B200", 4)
    share = four.capacity_bytes * sglang.memory_utilization
    assert four.weights_bytes > share and four.usable_bytes == four.capacity_bytes
    assert four.fits
    two = _use("sglang", "deepseek-r1", "B200", 2)
    assert two.weights_bytes > two.capacity_bytes and not two.fits
    assert "weights" in (two.shortfall(gpu_name="B200") or "")


def test_vllm_raises_its_share_only_when_start_up_needs_more() -> None:
    """vLLM's 0.9 of an 85.5 GB H100 (77.0 GB) holds Llama-3.1-8B with room and Llama-3.1-70B's
    70.6 GB per GPU at TP2 with its profiling pass (8,192 tokens: 1.2 GB) and reserve (3.5
    GB) (the default stands), not Qwen2.5-72B's 72.7 GB with its 1.3 GB pass and the
    reserve (raised to the most vLLM starts with, 0.981 of the board, the board less 1.5
    GiB: a small KV pool), and nothing holds the 70B's 141 GB on one GPU."""
    vllm = get_runtime("vllm")
    share = vllm.memory_utilization
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 2)):
        room = _use("vllm", model, "H100", tp)
        assert room.usable_bytes == pytest.approx(room.capacity_bytes * share)
        assert room.fits
    tight = _use("vllm", "qwen2.5-72b", "H100", 2)
    assert tight.weights_bytes < tight.capacity_bytes * share
    assert (tight.weights_bytes + tight.activation_bytes + tight.reserve_bytes
            > tight.capacity_bytes * share)
    assert tight.usable_bytes == pytest.approx(0.981 * tight.capacity_bytes) and tight.fits
    assert not _use("vllm", "llama-3.1-70b", "H100", 1).fits
