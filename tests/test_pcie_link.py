"""The PCIe link: fitted on AIConfigurator's measured NCCL table of an 8 x L40S host."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_links import fit_nccl_table, nccl_table_cases, predict_case
from energylens.calibration.run import discover
from energylens.cost.comm import collective_cost
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "measurements"
L40S_NCCL = DATA / "aiconfigurator/kernels/l40s/comm/nccl/2.27.3/nccl_perf.parquet"


def test_the_table_is_read_in_bytes_on_the_pcie_link():
    cases = nccl_table_cases(L40S_NCCL)
    assert set(cases) == {"L40S:pcie"}  # every group of 2-8 GPUs inside the 8-GPU host
    eight = [c for c in cases["L40S:pcie"] if c.collective == "all_reduce" and c.num_workers == 8]
    # half rows run 256 to 2^28 elements, int8 ones 512 to 2^29: read as elements, both
    # span the same bytes, 512 B to 512 MiB; half's last row took 649.471 ms, int8's 721.028
    assert len(eight) == 2
    assert all(c.size_bytes.min() == 512.0 and c.size_bytes.max() == 2.0**29 for c in eight)
    assert sorted(c.measured_s[-1] for c in eight) == pytest.approx([0.649471, 0.721028])
    assert {c.collective for c in cases["L40S:pcie"]} == {
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all"}


def test_a_held_out_group_size_is_predicted_and_the_bandwidth_falls_with_the_group():
    result = fit_nccl_table(path=L40S_NCCL)["L40S:pcie"]
    # read off the table: 17, 5 and 1.4 GB/s of bus bandwidth at 2, 4 and 8 GPUs, which an
    # exponent near 0 (NVSwitch) or a defaults' curve (619 % off) cannot describe
    assert -2.5 < result.values["bandwidth_group_exponent"] < -1.5
    assert result.leave_out["all_reduce"].mape < 0.20
    assert max(result.leave_out[f"all_reduce@{n}"].mape for n in (2, 4, 8)) < 0.25
    # the other collectives were never fitted; their error is reported, not hidden
    assert any("all_to_all" in note for note in result.notes)


def test_the_shipped_pcie_constants_price_the_measured_all_reduce():
    cal = default_calibration()
    gpu = load_gpu("L40S")
    constants = cal.link(gpu="L40S", kind="pcie")
    for case in nccl_table_cases(L40S_NCCL)["L40S:pcie"]:
        if case.collective != "all_reduce":
            continue
        predicted = predict_case(case, bandwidth=gpu.intra_node.bandwidth_bytes_per_s,
                                 constants=constants)
        assert np.mean(np.abs(predicted / case.measured_s - 1)) < 0.25, case.num_workers
    # 64 Ki half elements over 4 GPUs: 57.7 us measured (the built-in defaults: 254 us)
    cost = collective_cost(kind="all_reduce", message_bytes=131072.0, group_size=4,
                           bandwidth=gpu.intra_node.bandwidth_bytes_per_s, constants=constants)
    assert float(cost.latency_s) == pytest.approx(57.7e-6, rel=0.3)


def test_pcie_cards_without_a_measured_host_take_the_measured_one():
    cal = default_calibration()
    fitted = cal.link(gpu="L40S", kind="pcie")
    assert fitted.bandwidth_group_exponent < -1.0  # the host's, not the built-in defaults
    for gpu in ("T4", "A10", "H100-PCIe", "L4", "RTX-4090"):
        assert cal.link(gpu=gpu, kind="pcie").bandwidth_group_exponent == pytest.approx(
            fitted.bandwidth_group_exponent, rel=1e-5), gpu


def test_discover_finds_the_nccl_table():
    assert L40S_NCCL in discover(DATA).nccl_tables
