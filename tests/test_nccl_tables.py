"""Links fitted on AIConfigurator's measured NCCL tables: NVSwitch (A100-B200), PCIe (L40S)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from energylens.calibration.file import default_calibration
from energylens.calibration.fit_links import fit_nccl_table, nccl_table_cases, predict_case
from energylens.calibration.run import discover
from energylens.cost.comm import collective_cost
from energylens.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "measurements"
TABLES = DATA / "aiconfigurator/kernels"
L40S_NCCL = TABLES / "l40s/comm/nccl/2.27.3/nccl_perf.parquet"
SHIPPED = ROOT / "energylens" / "data" / "calibration.yaml"


def test_the_table_is_read_in_bytes_on_the_pcie_link():
    cases = nccl_table_cases(L40S_NCCL)
    assert set(cases) == {"L40S:pcie"}  # every group of 2-8 GPUs inside the 8-GPU host
    (eight,) = [c for c in cases["L40S:pcie"]
                if c.collective == "all_reduce" and c.num_workers == 8]
    # half rows run 256 to 2^28 elements, int8 ones 512 to 2^29: read as elements, both
    # span the same bytes, 512 B to 512 MiB; half's last row took 649.471 ms, int8's 721.028
    assert eight.size_bytes.size == 42
    assert eight.size_bytes.min() == 512.0 and eight.size_bytes.max() == 2.0**29
    last = eight.measured_s[eight.size_bytes == 2.0**29]
    assert sorted(last) == pytest.approx([0.649471, 0.721028])
    assert {c.collective for c in cases["L40S:pcie"]} == {
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all"}


def test_a_held_out_group_size_is_predicted_and_the_bandwidth_falls_with_the_group():
    result = fit_nccl_table(path=L40S_NCCL)["L40S:pcie"]
    # read off the table: 17, 5 and 1.4 GB/s of bus bandwidth at 2, 4 and 8 GPUs, which an
    # exponent near 0 (NVSwitch) or a defaults' curve (619 % off) cannot describe
    assert -2.5 < result.values["bandwidth_group_exponent"] < -1.5
    assert result.leave_out["all_reduce"].mape < 0.20
    assert max(result.leave_out[f"all_reduce@{n}"].mape for n in (2, 4, 8)) < 0.25
    # all-to-all's own fixed time is held out by group size too; all-gather and
    # reduce-scatter are never fitted, and their error is reported, not hidden
    assert result.leave_out["all_to_all"].mape < 0.25
    assert any("all_gather" in note and "reduce_scatter" in note for note in result.notes)


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


def test_the_same_nvlink_measured_on_two_hosts_gives_the_same_constants():
    # H100 and H200 share NVLink 4 and third-generation NVSwitch: two tables, two fits
    h100 = fit_nccl_table(path=TABLES / "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet",
                          leave_out=False)["H100-SXM:nvswitch"].values
    h200 = fit_nccl_table(path=TABLES / "h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet",
                          leave_out=False)["H200-SXM:nvswitch"].values
    for name in ("bus_bandwidth_fraction", "bandwidth_group_exponent", "bulk_bandwidth_fraction"):
        assert h100[name] == pytest.approx(h200[name], rel=0.1), name
    eight = [v["latency_s"] + 3 * v["latency_per_hop_s"] for v in (h100, h200)]
    assert eight[0] == pytest.approx(eight[1], rel=0.25)  # the small-message time at 8 GPUs


def test_a_table_of_two_group_sizes_is_a_check_and_b200s_fit_passes_it():
    gb200 = TABLES / "gb200/comm/nccl/2.29.2/nccl_perf.parquet"
    assert fit_nccl_table(path=gb200) == {}  # 2 and 4 GPUs cannot be held out in turn
    cal = default_calibration()
    constants = cal.link(gpu="GB200", kind="nvswitch")  # borrowed from B200's fit
    bandwidth = load_gpu("GB200").intra_node.bandwidth_bytes_per_s
    for case in nccl_table_cases(gb200)["GB200:nvswitch"]:
        if case.collective == "all_reduce":
            predicted = predict_case(case, bandwidth=bandwidth, constants=constants)
            assert np.mean(np.abs(predicted / case.measured_s - 1)) < 0.15, case.num_workers


def test_the_shipped_nvswitch_links_name_the_tables_and_keep_vidurs_send_recv():
    links = yaml.safe_load(SHIPPED.read_text())["links"]
    for key in ("A100-80GB-SXM:nvswitch", "H100-SXM:nvswitch", "H200-SXM:nvswitch",
                "B200:nvswitch", "L40S:pcie"):
        assert links[key]["bus_bandwidth_fraction"]["fit"] == f"aiconfigurator-nccl/{key}", key
        assert links[key]["latency_sharpness"]["kind"] == "assumed"  # fixed by the form
    assert links["H100-SXM:nvswitch"]["p2p_latency_s"]["fit"] == "vidur-network/H100-SXM:nvswitch"


def test_validate_reads_a_table_and_refuses_another_gpu(capsys):
    from energylens.cli import main

    table = str(TABLES / "b200_sxm/comm/nccl/2.29.2/nccl_perf.parquet")
    assert main(["validate", "aiconfigurator-nccl", table, "--json"]) == 0
    assert '"all_to_all"' in capsys.readouterr().out
    assert main(["validate", "aiconfigurator-nccl", table, "--gpu", "H100"]) == 2
    assert "record their GPUs" in capsys.readouterr().err


def test_a_bad_table_is_one_line_naming_the_file(tmp_path):
    import pandas as pd

    from energylens.errors import MeasurementError
    from energylens.measurements.formats import load_measurements

    frame = pd.read_parquet(L40S_NCCL)
    for name, broken, fragment in (
            ("text.parquet", None, "not a readable Parquet table"),
            ("cols.parquet", frame.drop(columns=["latency"]), "missing columns ['latency']"),
            ("op.parquet", frame.assign(op_name="broadcast"), "unknown op_name or nccl_dtype"),
            ("gpu.parquet", frame.assign(device="NVIDIA Z9000"), "Z9000")):
        path = tmp_path / name
        if broken is None:
            path.write_text("op_name,latency\nall_reduce,1\n")
        else:
            broken.to_parquet(path)
        with pytest.raises(MeasurementError) as info:
            load_measurements(format="aiconfigurator-nccl", path=path)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and "\n" not in message and fragment in message


def test_a_constant_at_a_bound_is_reported_and_the_pcie_form_has_none():
    from energylens.calibration.fit_links import ALL_REDUCE_PARAMS, fit_link

    cases = nccl_table_cases(L40S_NCCL)["L40S:pcie"]
    # the NVSwitch form cannot let the bus bandwidth fall as (n / 2)^-1.9: its group
    # exponent stops at its lower bound, -0.5, and the fit says so
    nvswitch_form = fit_link(key="L40S:pcie", cases=cases, form=ALL_REDUCE_PARAMS, leave_out=False)
    assert "bandwidth_group_exponent" in nvswitch_form.at_bound
    assert fit_nccl_table(path=L40S_NCCL, leave_out=False)["L40S:pcie"].at_bound == []
