"""The runtime's own small all-reduce: its form, and its fit on measured kernel tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from energylens.calibration.fit_custom_allreduce import (
    AllReduceTable,
    fit_custom_allreduce,
    read_table,
)
from energylens.calibration.fitting import FitResult
from energylens.cost.comm import collective_cost, own_allreduce_link
from energylens.cost.constants import LinkConstants, RuntimeConstants
from energylens.hardware import load_gpu

TABLES = Path(__file__).parents[1] / "data/measurements/aiconfigurator/kernels"
OWN = RuntimeConstants(allreduce_latency_s=4e-6, allreduce_latency_per_hop_s=0.5e-6,
                       allreduce_bus_bandwidth_fraction=0.25)


def test_the_form_is_alpha_plus_hops_plus_bytes_over_bandwidth() -> None:
    """8 GPUs on 450 GB/s NVLink, 1 MiB: 4 us + 3 x 0.5 us + 2 * 7/8 MiB / (0.25 x 450 GB/s)."""
    link = own_allreduce_link(constants=OWN, link=LinkConstants())
    cost = collective_cost(kind="all_reduce", message_bytes=2.0**20, group_size=8,
                           bandwidth=450e9, constants=link)
    expected = 4e-6 + 3 * 0.5e-6 + 2 * 7 / 8 * 2**20 / (0.25 * 450e9)
    assert float(cost.latency_s) == pytest.approx(expected, rel=1e-12)


def test_a_fit_on_rows_the_form_generated_recovers_its_constants() -> None:
    gpu = load_gpu("H100")
    counts = np.repeat([2.0, 4.0, 8.0], 12)
    sizes = np.tile(2.0 ** np.arange(7, 31, 2), 3)
    link = own_allreduce_link(constants=OWN, link=LinkConstants())
    times = np.concatenate([
        collective_cost(kind="all_reduce", message_bytes=sizes[counts == n], group_size=int(n),
                        bandwidth=gpu.intra_node.bandwidth_bytes_per_s, constants=link).latency_s
        for n in (2.0, 4.0, 8.0)])
    table = AllReduceTable(path=Path("synthetic"), runtime="vllm", gpu="H100-SXM",
                           num_gpus=counts, message_bytes=sizes, latency_s=times)
    result = fit_custom_allreduce(table=table)
    assert result.values["allreduce_latency_s"] == pytest.approx(4e-6, rel=0.02)
    assert result.values["allreduce_latency_per_hop_s"] == pytest.approx(0.5e-6, rel=0.05)
    assert result.values["allreduce_bus_bandwidth_fraction"] == pytest.approx(0.25, rel=0.02)
    assert result.leave_out["latency"].mape < 0.01


def _fitted(gpu_folder: str, runtime: str) -> tuple[AllReduceTable, FitResult]:
    """The shipped table of ``runtime`` on ``gpu_folder`` up to 8 MiB, and its fit."""
    path = next(TABLES.glob(f"{gpu_folder}/comm/{runtime}/*/custom_allreduce_perf.parquet"))
    table = read_table(path=path, max_bytes=8 * 2**20)
    return table, fit_custom_allreduce(table=table)


def test_the_measured_h100_table_gives_a_few_microseconds_and_holds_out_within_10_percent() -> None:
    """AIConfigurator's vLLM 0.24 table on H100 (CUDA graphs): 4.3-4.7 us at 128 B."""
    table, result = _fitted("h100_sxm", "vllm")
    assert table.gpu == "H100-SXM" and set(table.num_gpus) == {2.0, 4.0, 8.0}
    assert 2e-6 < result.values["allreduce_latency_s"] < 6e-6
    assert not result.at_bound
    assert result.leave_out["latency"].mape < 0.10


def test_the_shipped_calibration_takes_vllm_all_reduce_from_the_kernel_table() -> None:
    import yaml

    doc = yaml.safe_load((Path(__file__).parents[1] / "energylens/data/calibration.yaml")
                         .read_text("utf-8"))
    for gpu in ("H100-SXM", "B200", "A100-80GB-SXM", "H200-SXM"):
        entry = doc["runtimes"]["vllm"][gpu]["allreduce_latency_s"]
        assert entry["kind"] == "fitted" and entry["fit"] == f"custom-allreduce/vllm/{gpu}"


def test_message_sizes_are_elements_of_the_tables_dtype() -> None:
    """AIConfigurator's ``message_size`` counts bf16 elements: 2 bytes each, and the 8 MiB
    limit keeps messages up to 4 Mi elements."""
    import pandas as pd

    path = next(TABLES.glob("h100_sxm/comm/vllm/*/custom_allreduce_perf.parquet"))
    table = read_table(path=path, max_bytes=8 * 2**20)
    frame = pd.read_parquet(path)
    graph = frame[(frame["backend"] == "vllm_graph") & (frame["message_size"] <= 4 * 2**20)]
    assert sorted(table.message_bytes) == sorted(2.0 * graph["message_size"])
    assert table.message_bytes.max() == 8 * 2**20


def test_tensorrt_llm_tables_without_a_backend_column_are_read() -> None:
    """TensorRT-LLM's tables name the kernel in ``implementation``; its small all-reduce
    on H100 takes 2.7-3.2 us at 128 elements (the table), below vLLM's 4.3-4.7 us."""
    table, result = _fitted("h100_sxm", "trtllm")
    assert table.runtime == "trtllm" and set(table.num_gpus) == {2.0, 4.0, 8.0}
    assert 1e-6 < result.values["allreduce_latency_s"] < 4e-6
    assert not result.at_bound


def test_the_shipped_calibration_fits_trtllm_and_lends_sglang_vllms_all_reduce() -> None:
    """TensorRT-LLM's own kernel is fitted where AIConfigurator measured it; SGLang has no
    table and takes vLLM's on the same GPU, marked assumed."""
    import yaml

    doc = yaml.safe_load((Path(__file__).parents[1] / "energylens/data/calibration.yaml")
                         .read_text("utf-8"))
    for gpu in ("H100-SXM", "H200-SXM", "B200", "GB200"):
        entry = doc["runtimes"]["trtllm"][gpu]["allreduce_latency_s"]
        assert entry["kind"] == "fitted" and entry["fit"] == f"custom-allreduce/trtllm/{gpu}"
    for gpu in ("H100-SXM", "B200"):
        lent = doc["runtimes"]["sglang"][gpu]
        for name in ("allreduce_latency_s", "allreduce_latency_per_hop_s",
                     "allreduce_bus_bandwidth_fraction"):
            assert lent[name]["kind"] == "assumed"
            assert lent[name]["value"] == doc["runtimes"]["vllm"][gpu][name]["value"]


def test_the_arrival_time_is_paid_once_per_all_reduce_of_a_multi_gpu_step() -> None:
    """``collective_sync_s`` adds to each all-reduce of a real step (two per Llama layer:
    after attention and after the MLP, and the vocab-parallel embedding's once a step) and
    to nothing on one GPU."""
    from energylens.calibration.file import default_calibration
    from energylens.deployment import Deployment, Workload
    from energylens.predict import predict

    base = default_calibration()
    workload = Workload(kind="batch", batch=8, input_tokens=128, output_tokens=128)

    def decode_s(tp: int, sync_s: float) -> float:
        cal = base.with_runtime(runtime="vllm", gpu="H100-SXM", collective_sync_s=sync_s)
        return predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=tp),
                       workload=workload, calibration=cal).decode.latency_s

    assert decode_s(1, 1e-5) == decode_s(1, 0.0)
    steps, layers = 127, 32  # decode steps after the prompt's first token
    assert decode_s(2, 1e-5) - decode_s(2, 0.0) == pytest.approx(1e-5 * (2 * layers + 1) * steps)
