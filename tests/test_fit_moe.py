"""Fused-MoE kernels: the HBM share fitted per GPU and expert precision, and its use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_moe import (
    L2_MULTIPLE,
    MAX_TOKENS,
    MoeCase,
    MoeTable,
    active_experts,
    case_latency_s,
    fit_moe,
    read_table,
)
from energylens.cost.constants import KernelConstants
from energylens.cost.kernel_plan import expert_bandwidth_efficiency
from energylens.cost.work import DTYPE_BYTES
from energylens.hardware import load_gpu
from energylens.runtime import get_runtime

TABLES = Path(__file__).parents[1] / "data/measurements/aiconfigurator/kernels"
H100 = load_gpu("H100-SXM")


def _case(*, dtype: str, hidden: int, tokens: tuple[float, ...] = (1, 4, 16, 64)) -> MoeCase:
    return MoeCase(hidden=hidden, inter=2048, top_k=8, experts=128, moe_tp=1, ep=4,
                   weight_dtype=dtype, tokens=np.array(tokens, dtype=float),
                   measured_s=np.zeros(len(tokens)))


def _measured_with(constants: KernelConstants, cases: list[MoeCase]) -> list[MoeCase]:
    return [replace(c, measured_s=case_latency_s(case=c, gpu=H100, constants=constants))
            for c in cases]


def test_balanced_routing_reads_a_token_share_of_the_ranks_experts_until_all() -> None:
    case = _case(dtype="bf16", hidden=4096, tokens=(1, 2, 16, 64))
    # 8 picks per token over 4 ranks: 2 experts per token per rank, at most 128 / 4 = 32
    assert active_experts(case).tolist() == [2.0, 4.0, 32.0, 32.0]


def test_the_fit_recovers_the_efficiency_and_ratios_a_table_was_made_with() -> None:
    truth = replace(KernelConstants(), expert_bandwidth_efficiency=0.62,
                    fp8_expert_bandwidth_ratio=0.7, fp4_expert_bandwidth_ratio=0.45)
    cases = _measured_with(truth, [_case(dtype=d, hidden=h) for d in ("bf16", "fp8", "nvfp4")
                                   for h in (2048, 4096, 7168)])
    results = fit_moe(table=MoeTable(path=Path("synthetic"), gpu=H100.name, cases=tuple(cases)),
                      constants=KernelConstants())
    assert results["expert_bandwidth_efficiency"].values[
        "expert_bandwidth_efficiency"] == pytest.approx(0.62, rel=1e-3)
    assert results["fp8_expert_bandwidth_ratio"].values[
        "fp8_expert_bandwidth_ratio"] == pytest.approx(0.7, rel=1e-3)
    assert results["fp4_expert_bandwidth_ratio"].values[
        "fp4_expert_bandwidth_ratio"] == pytest.approx(0.45, rel=1e-3)
    for result in results.values():
        assert result.leave_out["latency"].mape < 1e-3 and not result.at_bound


def test_no_ratio_without_bf16_rows_to_stand_on() -> None:
    cases = _measured_with(KernelConstants(), [_case(dtype="fp8", hidden=4096)])
    table = MoeTable(path=Path("synthetic"), gpu=H100.name, cases=tuple(cases))
    assert fit_moe(table=table, constants=KernelConstants()) == {}


def test_the_expert_dtype_picks_its_ratio() -> None:
    constants = KernelConstants(expert_bandwidth_efficiency=0.8, fp8_expert_bandwidth_ratio=0.5,
                                fp4_expert_bandwidth_ratio=0.25, int4_expert_bandwidth_ratio=0.75)
    share = {d: expert_bandwidth_efficiency(weight_dtype=d, constants=constants)
             for d in ("bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4")}
    assert share == pytest.approx({"bf16": 0.8, "fp16": 0.8, "fp8": 0.4, "nvfp4": 0.2,
                                   "mxfp4": 0.2, "int4": 0.6})


def test_a_lower_fp8_ratio_slows_only_fp8_experts_by_its_stream() -> None:
    """Decode-size MoE ops are weight streams: at half the share of peak an FP8 expert
    layer takes up to twice as long; BF16 experts do not move."""
    fast = KernelConstants()
    slow = replace(fast, fp8_expert_bandwidth_ratio=0.5)
    fp8 = _case(dtype="fp8", hidden=7168, tokens=(8,))
    bf16 = _case(dtype="bf16", hidden=7168, tokens=(8,))
    ratio = (case_latency_s(case=fp8, gpu=H100, constants=slow)
             / case_latency_s(case=fp8, gpu=H100, constants=fast))[0]
    assert 1.5 < ratio <= 2.0
    assert (case_latency_s(case=bf16, gpu=H100, constants=slow)
            == case_latency_s(case=bf16, gpu=H100, constants=fast)).all()


def test_the_table_rows_kept_are_decode_sized_and_larger_than_l2() -> None:
    table = read_table(path=next(TABLES.glob("h100_sxm/moe/vllm/*/moe_perf.parquet")))
    assert table.gpu == "H100-SXM" and len(table.cases) > 50
    assert {c.weight_dtype for c in table.cases} == {"bf16", "fp8", "mxfp4"}
    for case in table.cases:
        assert case.tokens.max() <= MAX_TOKENS
        weights = (active_experts(case) * 3 * case.hidden * case.inter / case.moe_tp
                   * DTYPE_BYTES[case.weight_dtype])
        assert (weights >= L2_MULTIPLE * H100.l2_bytes).all()


def test_the_measured_h100_bf16_experts_stream_at_most_of_hbm_peak() -> None:
    """vLLM 0.24's Triton fused MoE on H100, weights beyond L2: 0.7-1 of HBM peak."""
    table = read_table(path=next(TABLES.glob("h100_sxm/moe/vllm/*/moe_perf.parquet")))
    result = fit_moe(table=table, constants=default_calibration().kernel("H100-SXM"),
                     leave_out=False)["expert_bandwidth_efficiency"]
    assert 0.7 < result.values["expert_bandwidth_efficiency"] < 1.0
    assert result.in_sample["latency"].median_ape < 0.15


def test_an_engine_expert_scale_replaces_its_weight_stream_scale_for_experts() -> None:
    base = default_calibration()
    plain = base.with_runtime(runtime="sglang", gpu="H100-SXM", memory_efficiency_scale=0.5)
    own = plain.with_runtime(runtime="sglang", gpu="H100-SXM", expert_bandwidth_scale=0.8)
    expert = base.kernel("H100-SXM").expert_bandwidth_efficiency
    for cal, scale in ((plain, 0.5), (own, 0.8)):
        k = get_runtime("sglang").calibration_for(calibration=cal, gpu="H100-SXM").kernel("H100-SXM")
        assert k.expert_bandwidth_efficiency == pytest.approx(min(expert * scale, 0.98))
        assert k.memory_efficiency_max == pytest.approx(
            min(base.kernel("H100-SXM").memory_efficiency_max * 0.5, 0.98))


def test_blackwell_tables_time_no_triton_kernel_so_no_gpu_constant_is_fitted_on_them() -> None:
    """vLLM 0.24's Blackwell rows are FlashInfer kernels only, not the Triton path of the
    release the GPU's constants describe."""
    table = read_table(path=next(TABLES.glob("b200_sxm/moe/vllm/*/moe_perf.parquet")))
    assert table.cases == ()


def test_the_non_gated_shapes_are_those_tensorrt_llm_times_with_its_non_gated_kernel() -> None:
    import pandas as pd

    from energylens.calibration.fit_moe import NON_GATED_SHAPES

    table = pd.read_parquet(next(TABLES.glob("h100_sxm/moe/trtllm/*/moe_perf.parquet")))
    nongated = table[table["kernel_source"].astype(str).str.contains("nongated")]
    shapes = {tuple(int(v) for v in row) for row in nongated[
        ["hidden_size", "inter_size", "topk", "num_experts"]].drop_duplicates().to_numpy()}
    assert shapes == NON_GATED_SHAPES
    vllm = read_table(path=next(TABLES.glob("h100_sxm/moe/vllm/*/moe_perf.parquet")))
    assert not {(c.hidden, c.inter, c.top_k, c.experts) for c in vllm.cases} & NON_GATED_SHAPES


def test_no_kept_row_streams_its_weights_above_the_hbm_peak():
    """Rows whose expert weights, read once by the experts the balanced routing reaches,
    would need more than the HBM peak in the measured time are left out (and counted):
    H200's table has such rows (DeepSeek-V3's shape in FP8 among them)."""
    for gpu_dir in ("h100_sxm", "h200_sxm"):
        table = read_table(path=next(TABLES.glob(f"{gpu_dir}/moe/vllm/*/moe_perf.parquet")))
        gpu = load_gpu(table.gpu)
        assert table.faster_than_hbm > 0
        for case in table.cases:
            weights = (active_experts(case) * 3 * case.hidden * case.inter / case.moe_tp
                       * DTYPE_BYTES[case.weight_dtype])
            assert np.all(weights / case.measured_s <= gpu.hbm_bandwidth_bytes_per_s * (1 + 1e-9))


def test_an_expert_gemm_pays_the_extra_floor_and_a_dense_gemm_does_not() -> None:
    from energylens.cost.kernel_plan import launch_floor_s
    from energylens.cost.kernels import compile_layer
    from energylens.model.families import family_part, parse_layer

    constants = replace(KernelConstants(), kernel_overhead_s=5e-6, expert_extra_overhead_s=9e-6,
                        fp8_expert_extra_overhead_s=3e-6)
    layer = parse_layer(name="moe", parts=[family_part("moe")], norm="rmsnorm")
    kernels = compile_layer(layer=layer, sizes={"d": 4096, "f": 2048, "x": 64},
                            degrees={"etp": 1, "ep": 1}, fusion=frozenset({"gate_up"})).kernels
    floors = {k.name: launch_floor_s(kernel=k, constants=constants) for k in kernels}
    experts = [k.name for k in kernels
               if k.is_expert and any(op.kind == "contraction" for op in k.ops)]
    assert sorted(experts) == ["edown", "egate+eup"]
    for name in experts:
        assert floors[name] == pytest.approx(14e-6)
        fp8 = next(k for k in kernels if k.name == name)
        assert launch_floor_s(kernel=fp8, constants=constants,
                              weight_dtype="fp8") == pytest.approx(17e-6)
        assert launch_floor_s(kernel=fp8, constants=constants,
                              weight_dtype="nvfp4") == pytest.approx(14e-6)
    assert floors["router"] == pytest.approx(5e-6)  # the router's GEMM is a dense one
    router = next(k for k in kernels if k.name == "router")
    assert launch_floor_s(kernel=router, constants=constants,
                          weight_dtype="fp8") == pytest.approx(5e-6)


def test_the_floor_fit_recovers_the_extra_time_a_table_was_made_with() -> None:
    from energylens.calibration.fit_moe import FLOOR_FIELD, fit_expert_floor, floor_helps

    truth = replace(KernelConstants(), expert_extra_overhead_s=8e-6)
    cases = _measured_with(truth, [_case(dtype=d, hidden=h, tokens=(1, 2, 4, 8))
                                   for d in ("bf16", "fp8") for h in (2048, 4096, 7168)])
    table = MoeTable(path=Path("synthetic"), gpu=H100.name, cases=tuple(cases))
    result = fit_expert_floor(table=table, constants=KernelConstants())
    assert result is not None
    assert result.values[FLOOR_FIELD] == pytest.approx(8e-6, rel=1e-3)
    assert floor_helps(result)  # no floor at all misses every row by the 16 us per op
    # the FP8 experts' own extra, fitted on top of the general one on FP8 rows alone
    fp8_truth = replace(truth, fp8_expert_extra_overhead_s=5e-6)
    fp8_cases = _measured_with(fp8_truth, [_case(dtype="fp8", hidden=h, tokens=(1, 2, 4, 8))
                                           for h in (2048, 4096, 7168)])
    fp8 = fit_expert_floor(table=MoeTable(path=Path("synthetic"), gpu=H100.name,
                                          cases=tuple(fp8_cases)),
                           constants=truth, field="fp8_expert_extra_overhead_s")
    assert fp8 is not None and floor_helps(fp8)
    assert fp8.values["fp8_expert_extra_overhead_s"] == pytest.approx(5e-6, rel=1e-3)
    mxfp4_only = MoeTable(path=Path("synthetic"), gpu=H100.name,
                          cases=tuple(_measured_with(truth, [_case(dtype="mxfp4", hidden=4096)])))
    assert fit_expert_floor(table=mxfp4_only, constants=KernelConstants()) is None


def test_the_measured_hopper_moe_ops_at_decode_sizes_carry_an_extra_floor() -> None:
    """vLLM 0.24's fused MoE on H100 at 1-8 tokens: the op takes ~1.3x the dense-GEMM floors
    the model gave it; the fitted extra time per expert GEMM predicts each half of the hidden
    sizes from the other better than none."""
    from energylens.calibration.fit_moe import (
        FLOOR_FIELD,
        FLOOR_TOKENS,
        fit_expert_floor,
        floor_helps,
    )

    table = read_table(path=next(TABLES.glob("h100_sxm/moe/vllm/*/moe_perf.parquet")),
                       max_tokens=FLOOR_TOKENS, family=None, l2_multiple=0.0)
    constants = replace(default_calibration().kernel("H100-SXM"), expert_extra_overhead_s=0.0)
    result = fit_expert_floor(table=table, constants=constants)
    assert result is not None and floor_helps(result)
    assert 4e-6 < result.values[FLOOR_FIELD] < 20e-6 and not result.at_bound


def test_a_gpu_whose_floor_was_not_applied_borrows_none_from_its_relative() -> None:
    """B200 borrows its other constants from H100, but its own table's general floor was
    not applied: its expert GEMMs keep a dense GEMM's floor, plus its own FP8 experts'
    extra; B300 takes B200's FP8 extra (same tensor-core generation); H100's FP8 experts pay
    what its BF16 ones do."""
    import yaml

    shipped = yaml.safe_load((Path(__file__).parents[1]
                              / "energylens/data/calibration.yaml").read_text())["kernels"]
    general, fp8 = "expert_extra_overhead_s", "fp8_expert_extra_overhead_s"
    assert shipped["H100-SXM"][general]["kind"] == "fitted"
    assert shipped["H100-SXM"][general]["value"] > 0
    assert shipped["H100-SXM"][fp8]["value"] == 0.0
    assert shipped["B200"][general]["value"] == 0.0
    assert "worse than no floor" in shipped["B200"][general]["note"]
    assert shipped["B200"][fp8]["kind"] == "fitted" and shipped["B200"][fp8]["value"] > 0
    assert shipped["B300"][fp8]["value"] == shipped["B200"][fp8]["value"]
    assert default_calibration().kernel("B200").expert_extra_overhead_s == 0.0


def test_the_int4_ratio_is_recovered_each_split_from_the_other_and_applied_where_it_helps():
    """Rows the model made with INT4 experts at 0.5 of the BF16 share, one shape split over
    tensor- or expert-parallel ranks (as AIConfigurator's Marlin rows are): the ratio comes
    back, each kind of split predicted from the other, and beats ratio 1; rows made at
    ratio 1 are not helped by it."""
    from energylens.calibration.fit_moe import (
        INT4_FIELD,
        fit_int4_ratio,
        int4_ratio_helps,
    )

    def table(ratio: float) -> MoeTable:
        truth = replace(KernelConstants(), int4_expert_bandwidth_ratio=ratio)
        cases = [MoeCase(hidden=7168, inter=2048, top_k=8, experts=384, moe_tp=tp, ep=ep,
                         weight_dtype="int4", tokens=np.array([16.0, 64.0, 128.0]),
                         measured_s=np.zeros(3))
                 for tp, ep in ((1, 1), (1, 4), (1, 8), (2, 1), (4, 1), (8, 1))]
        return MoeTable(path=Path("synthetic"), gpu=H100.name,
                        cases=tuple(_measured_with(truth, cases)))

    slow = fit_int4_ratio(table=table(0.5), constants=KernelConstants())
    assert slow is not None
    assert slow.values[INT4_FIELD] == pytest.approx(0.5, rel=1e-3)
    assert slow.leave_out["latency"].mape < 1e-3 and int4_ratio_helps(slow)
    same = fit_int4_ratio(table=table(1.0), constants=KernelConstants())
    assert same is not None and not int4_ratio_helps(same)
    bf16_only = MoeTable(path=Path("synthetic"), gpu=H100.name,
                         cases=tuple(_measured_with(KernelConstants(),
                                                    [_case(dtype="bf16", hidden=4096)])))
    assert fit_int4_ratio(table=bf16_only, constants=KernelConstants()) is None


def test_the_measured_blackwell_int4_experts_stream_at_about_half_the_bf16_share():
    """Marlin's fused MoE, written for Ampere and Hopper, on B200 (AIConfigurator's vLLM
    0.24 table, Kimi-K2's experts): its shipped calibration prices them at the fitted ratio,
    H100 at 1 (the ratio did not predict Hopper's held-out splits better)."""
    calibration = default_calibration()
    assert 0.3 < calibration.kernel("B200").int4_expert_bandwidth_ratio < 0.7
    assert calibration.kernel("H100-SXM").int4_expert_bandwidth_ratio == 1.0
