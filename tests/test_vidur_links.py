"""Vidur's link layouts measured at one group size take the two-protocol form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from energylens.calibration.fit_links import (
    ALL_REDUCE_PARAMS,
    TABLE_FIXED,
    TABLE_PARAMS,
    CollectiveCase,
    fit_link,
    fit_links,
    predict_case,
    vidur_form,
    vidur_link_cases,
)
from energylens.cost.comm import collective_cost
from energylens.cost.constants import LinkConstants
from energylens.hardware import load_gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements" / "vidur" / "network"
A100_DGX = sorted((DATA / "a100_dgx").glob("*.csv"))
H100_PAIRS = sorted((DATA / "h100_pairwise_nvlink").glob("*.csv"))


def test_one_group_size_takes_the_two_protocol_form_and_three_the_soft_join():
    cases = vidur_link_cases(files=A100_DGX)
    assert vidur_form(cases["A100-80GB-SXM:infiniband"]) == (TABLE_PARAMS, TABLE_FIXED)
    assert vidur_form(cases["A100-80GB-SXM:nvswitch"]) == (ALL_REDUCE_PARAMS, {})


def test_infiniband_across_two_dgx_is_identified_and_fits_as_well_as_the_soft_join():
    cases = vidur_link_cases(files=A100_DGX)["A100-80GB-SXM:infiniband"]
    fitted = fit_links(files=A100_DGX, leave_out=False)["A100-80GB-SXM:infiniband"]
    # the soft join ran its sharpness to 8 and its latency down to its 1 us floor on these
    # 16-GPU rows: nothing pins the latency, and where the solver's last step leaves it
    # depends on the floating point of the machine (1.007 us with scipy 1.17 on one,
    # 1.011 us on an AMD EPYC with the same releases), so it is checked to lie in the
    # bottom 1 % of its log range (1-200 us), not at one digit
    soft = fit_link(key="A100-80GB-SXM:infiniband", cases=cases, leave_out=False)
    assert "latency_sharpness" in soft.at_bound
    latency = next(p for p in ALL_REDUCE_PARAMS if p.name == "latency_s")
    share = np.log(soft.values["latency_s"] / latency.low) / np.log(latency.high / latency.low)
    assert share <= 0.01
    assert fitted.at_bound == []
    assert fitted.values["latency_sharpness"] == 1.0  # fixed by the form, and written
    assert fitted.values["half_bandwidth_bytes"] == 0.0
    assert fitted.in_sample["all_reduce"].mape <= soft.in_sample["all_reduce"].mape + 0.005


def test_pcie_between_nvlink_pairs_is_priced_within_ten_percent():
    key = "H100-SXM:nvlink-pairwise/pcie-between-pairs"
    fitted = fit_links(files=H100_PAIRS, leave_out=False)[key]
    # the soft join priced these 4-GPU all-reduces at 48 % MAPE, its sharpness at 8
    assert fitted.in_sample["all_reduce"].mape < 0.10
    assert fitted.at_bound == []


def test_the_two_protocol_form_recovers_the_constants_it_was_made_with():
    """Times made by the form itself (two alpha-beta lines, the faster taken) give back
    the latencies and bandwidth shares they were made with."""
    gpu = load_gpu("A100-80GB-SXM")
    bandwidth = gpu.intra_node.bandwidth_bytes_per_s
    truth = {"latency_s": 12e-6, "bus_bandwidth_fraction": 0.25, "bulk_latency_s": 60e-6,
             "bulk_bandwidth_fraction": 0.8}
    sizes = 2.0 ** np.arange(10, 29)
    made = np.asarray(collective_cost(kind="all_reduce", message_bytes=sizes, group_size=4,
                                      bandwidth=bandwidth,
                                      constants=LinkConstants(**TABLE_FIXED, **truth)).latency_s)
    case = CollectiveCase(source="made", collective="all_reduce", num_workers=4,
                          devices_per_node=4, size_bytes=sizes, measured_s=made)
    fitted = fit_link(key="A100-80GB-SXM:nvswitch", cases=[case], form=TABLE_PARAMS,
                      base=LinkConstants(**TABLE_FIXED), leave_out=False)
    for name, value in truth.items():
        assert fitted.values[name] == pytest.approx(value, rel=0.02), name
    again = predict_case(case, bandwidth=bandwidth,
                         constants=LinkConstants(**TABLE_FIXED, **fitted.values))
    assert np.allclose(again, made, rtol=1e-3)


def test_the_shipped_infiniband_link_says_what_its_form_fixes_and_what_it_fitted():
    shipped = Path(__file__).resolve().parents[1] / "energylens" / "data" / "calibration.yaml"
    link = yaml.safe_load(shipped.read_text())["links"]["A100-80GB-SXM:infiniband"]
    fit = "vidur-network/A100-80GB-SXM:infiniband"
    for fixed in TABLE_FIXED:
        assert link[fixed]["kind"] == "assumed" and fit in link[fixed]["note"]
    for fitted in ("latency_s", "bus_bandwidth_fraction", "bulk_latency_s"):
        assert link[fitted]["kind"] == "fitted" and link[fitted]["fit"] == fit


@pytest.mark.parametrize(("gpu", "host", "cards"), [("H100-NVL", "h100_pairwise_nvlink", 4),
                                                    ("A40", "a100_pairwise_nvlink", 4),
                                                    ("H100-NVL", "h100_pairwise_nvlink", 2)])
def test_bridged_cards_run_as_the_measured_pairs_over_pcie_host(gpu, host, cards):
    """Bridged cards all-reduce as Vidur's hosts of that layout measured it: four over NVLink
    pairs joined over PCIe of the same generation (Gen5 for H100, Gen4 for A100 and A40), not
    as an 8-card PCIe host's cards (the L40S box, 4-5x slower over four); two over the pair's
    bridge, H100 NVL's 300 GB/s as the host's PCIe cards' (read against H100 SXM's 450 GB/s
    the pair fit priced two H100 NVL 1.46x slower than measured)."""
    from energylens.calibration.coverage import require_constants
    from energylens.calibration.file import default_calibration
    from energylens.cost.comm import link_for_group

    rows = pd.read_csv(DATA / host / "all_reduce.csv")
    rows = rows[(rows["num_workers"] == cards) & (rows["size"] == 2**26)]
    measured_s = float(rows["time_stats.all_reduce.median"].median()) * 1e-3
    card = load_gpu(gpu)
    calibration = require_constants(calibration=default_calibration(), gpu=card)
    kind, bandwidth = link_for_group(gpu=card, group_size=cards)
    priced = collective_cost(kind="all_reduce", message_bytes=2.0**26, group_size=cards,
                             bandwidth=bandwidth,
                             constants=calibration.link(gpu=card.name, kind=kind))
    assert float(priced.latency_s) == pytest.approx(measured_s, rel=0.15)


def test_a_single_line_is_written_as_one_line_whichever_protocol_the_fit_used():
    """Times of one alpha-beta line leave the other line of the two-protocol form free (any
    line above it fits alike): it is written as the line the data chose (bulk dropped, or
    the low-latency line pinned to the bulk one), so refits agree to the last digit instead
    of wandering along the flat direction (A100's 2-per-node InfiniBand did)."""
    gpu = load_gpu("A100-80GB-SXM")
    bandwidth = gpu.intra_node.bandwidth_bytes_per_s
    sizes = 2.0 ** np.arange(10, 29)
    one_line = LinkConstants(**TABLE_FIXED, latency_s=70e-6, bus_bandwidth_fraction=0.3)
    made = np.asarray(collective_cost(kind="all_reduce", message_bytes=sizes, group_size=4,
                                      bandwidth=bandwidth, constants=one_line).latency_s)
    case = CollectiveCase(source="made", collective="all_reduce", num_workers=4,
                          devices_per_node=4, size_bytes=sizes, measured_s=made)
    fitted = fit_link(key="A100-80GB-SXM:nvswitch", cases=[case], form=TABLE_PARAMS,
                      base=LinkConstants(**TABLE_FIXED), leave_out=False).values
    assert fitted["bulk_bandwidth_fraction"] == 0.0 or (
        fitted["latency_s"] == fitted["bulk_latency_s"]
        and fitted["bus_bandwidth_fraction"] == fitted["bulk_bandwidth_fraction"])
    again = predict_case(case, bandwidth=bandwidth,
                         constants=LinkConstants(**TABLE_FIXED, **fitted))
    assert np.allclose(again, made, rtol=1e-3)
