"""LLM-Inference-Bench's layout comparison (``Fig_5_b/TP_EP_PP_results.csv``): each row runs
the layout its ``Parallelism Type`` names, and the model orders the layouts of one batch as
the bench measured them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from energylens.measurements.inference_bench import LAYOUTS, UnmodelledRow, bench_setup
from energylens.validation.accuracy import bench_layout
from energylens.validation.predictors import validate

FILE = (Path(__file__).resolve().parents[1] / "data" / "measurements" / "llm-inference-bench"
        / "Fig_5_b" / "TP_EP_PP_results.csv")
ROW = {"Framework": "TensorRT-LLM", "Hardware": "Nvidia A100 GPU", "Num of Hardware": 4,
       "Input Output Length": 128, "Batch Size": 1}


def _layout(label: str | None) -> tuple[int, int, int, int, int]:
    row = dict(ROW) if label is None else {**ROW, "Parallelism Type": label}
    d = bench_setup(row).deployment
    return d.tp, d.pp, d.ep, d.expert_tp, d.gpus_per_replica


def test_every_label_of_the_file_is_read_as_the_layout_it_names() -> None:
    with FILE.open() as f:
        labels = {r["Parallelism Type"] for r in csv.DictReader(f)}
    assert labels == set(LAYOUTS)
    # (tp, pp, ep, ways each expert is split, GPUs of a replica) on four GPUs
    assert _layout(None) == _layout("Tensor Parallelism") == _layout("TP") == (4, 1, 1, 4, 4)
    assert _layout("Pipeline Parallelism") == _layout("PP") == (1, 4, 1, 1, 4)
    assert _layout("EP") == (4, 1, 4, 1, 4)  # attention over all four, whole experts
    assert _layout("Hybrid TP = 2 and EP = 2") == (4, 1, 2, 2, 4)
    assert _layout("Hybrid TP = 2 and PP = 2") == \
        _layout("Hybird Tensor (2) and Pipeline (2) Parallelism") == (2, 2, 1, 2, 4)


def test_an_unknown_layout_is_refused_with_the_labels_that_are_read() -> None:
    with pytest.raises(UnmodelledRow, match="parallelism type 'Sequence Parallelism' is not read"):
        bench_setup({**ROW, "Parallelism Type": "Sequence Parallelism"})


def test_the_model_orders_the_layouts_of_a_batch_as_measured() -> None:
    """Mixtral-8x7B at batch 1 on four A100s: TP4 < TP4 EP2 < TP4 EP4 < PP4 at every
    length, measured; Llama-3-8B at 64 x 1,024 tokens: TP4 < TP2 PP2 < PP4. Pricing EP as
    TP, or a pipeline as its stages side by side, would reorder them."""
    rows = validate(format="llm-inference-bench", path=FILE, calibration=None).rows
    groups: dict[tuple[str, int, int], dict[str, tuple[float, float]]] = {}
    for r in rows:
        assert r.error is None, r.error
        key = (str(r.input["Model"]), int(r.input["Input Output Length"]), int(r.input["Batch Size"]))
        if int(r.input["Num of Hardware"]) == 4:
            groups.setdefault(key, {})[bench_layout(r)] = (r.measured["latency_s"],
                                                           r.predicted["latency_s"])
    checked = 0
    for (model, _, _), layouts in groups.items():
        if len(layouts) < 2 or ("Mixtral" not in model and "Llama-3-8B" not in model):
            continue
        measured = sorted(layouts, key=lambda k: layouts[k][0])
        predicted = sorted(layouts, key=lambda k: layouts[k][1])
        assert predicted == measured
        checked += 1
    assert checked == 5
    mixtral = groups[("mistralai/Mixtral-8x7B-v0.1", 128, 1)]
    assert sorted(mixtral, key=lambda k: mixtral[k][0]) == ["TP4", "TP4 EP2", "TP4 EP4", "PP4"]


def test_the_converter_writes_each_layout_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    """Converted rows carry the layout the label names (EP: tp 4, ep 4, moe_tp 1); a label
    not read, or a layout of another GPU count than the row's, is refused in one line,
    never written as tensor parallelism."""
    from energylens.errors import MeasurementError
    from energylens.measurements.convert import Options, converters

    rows = converters()["llm-inference-bench"](FILE, Options()).rows
    ep = [r for r in rows if "Mixtral" in r["model"] and r["ep"] == 4]
    assert len(ep) == 4 and all((r["tp"], r["moe_tp"], r["pp"]) == (4, 1, None) for r in ep)
    assert sum(r["pp"] == 4 and r["tp"] == 1 for r in rows) == 16  # PP4 rows of the file
    bad = tmp_path / "bad.csv"
    with FILE.open() as f:
        header = f.readline()
    bad.write_text(header + "Nvidia A100 GPU,4,TensorRT-LLM,mistralai/Mixtral-8x7B-v0.1,128,1,"
                   "Sequence Parallelism,1.0,200.0\n")
    with pytest.raises(MeasurementError, match="'Sequence Parallelism' is not read"):
        converters()["llm-inference-bench"](bad, Options())
    bad.write_text(header + "Nvidia A100 GPU,2,TensorRT-LLM,mistralai/Mixtral-8x7B-v0.1,128,1,"
                   "Hybrid TP = 2 and EP = 2,1.0,200.0\n")  # a split of four on two GPUs
    with pytest.raises(MeasurementError, match="names a layout of 4 GPUs; the row ran on 2"):
        converters()["llm-inference-bench"](bad, Options())
    with pytest.raises(UnmodelledRow, match="names a layout of 4 GPUs"):
        bench_setup({**ROW, "Num of Hardware": 2, "Parallelism Type": "Hybrid TP = 2 and EP = 2"})
