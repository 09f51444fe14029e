"""predict_many equals predict row by row (issue 14 item 1): every metric to 1e-9 relative,
the same feasibility and reason, and a refused row's reason is the refusal's text."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from energylens.cost.moe import Routing
from energylens.deployment import FUSIONS, Deployment, Workload
from energylens.errors import EnergyLensError
from energylens.hardware import list_gpus, load_gpu
from energylens.model.zoo import list_models
from energylens.predict import predict, predict_many
from energylens.workloads.result import COLUMNS, PHASE_FIELDS, PHASES

MODELS = [m.name for m in list_models()]
MOE = [m.name for m in list_models() if m.moe is not None]
GPUS = [g.name for g in list_gpus()]
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def rows(draw: Any, *, moe: bool) -> dict[str, Any]:
    gpu = draw(st.sampled_from(GPUS))
    tp, ep, pp = (draw(st.sampled_from([1, 1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4, 8]))
                  if moe else 1, draw(st.sampled_from([1, 1, 2, 4])))
    clock = draw(st.sampled_from([None, None, 0.5, 0.73, 1.0, 1.2]))  # 1.2: above boost
    return {
        "gpu": gpu, "tp": tp, "ep": ep, "pp": pp,
        "num_gpus": draw(st.sampled_from([None, tp * ep * pp, 2 * tp * ep * pp, 3])),
        "dp": draw(st.sampled_from([None, None, 1, 2])),
        "batch": draw(st.sampled_from([1.0, 3.0, 16.0, 64.0, 300.0, 1.37, 0.25])),
        "freq_mhz": None if clock is None else clock * load_gpu(gpu).boost_clock_mhz,
        "overlap_sms": draw(st.sampled_from([0, 0, 8, 32, 1000])),  # 1000: more than any GPU
        "weight_dtype": draw(st.sampled_from([None, "bf16", "fp8", "int4"])),
        "kv_dtype": draw(st.sampled_from([None, None, "fp8"])),
        "fusion": draw(st.sampled_from([None, frozenset(), frozenset(FUSIONS),
                                        frozenset({"qkv", "gate_up"})])),
        "routing": draw(st.sampled_from([Routing(), Routing(kind="zipf", skew=1.2)]))
        if moe else Routing(),
    }


@st.composite
def cases(draw: Any) -> tuple[str, Workload, pd.DataFrame]:
    moe = draw(st.booleans())
    model = draw(st.sampled_from(MOE if moe else MODELS))
    workload = Workload(kind=draw(st.sampled_from(["batch", "serving"])), batch=1.0,
                        input_tokens=draw(st.sampled_from([1.0, 128.0, 1024.0])),
                        output_tokens=draw(st.sampled_from([1.0, 64.0, 512.0])))
    table = pd.DataFrame(draw(st.lists(rows(moe=moe), min_size=1, max_size=6)))
    return model, workload, table


def scalar(*, model: str, workload: Workload, row: dict[str, Any]) -> dict[str, Any]:
    """What predict says about one row, as predict_many's columns."""
    fields = {k: (None if isinstance(v, float) and math.isnan(v) else v)
              for k, v in row.items() if k not in ("gpu", "batch")}
    for name in ("num_gpus", "dp"):
        if fields.get(name) is not None:
            fields[name] = int(fields[name])
    try:
        result = predict(model=model, gpu=row["gpu"], deployment=Deployment(**fields),
                         workload=Workload(kind=workload.kind, batch=row["batch"],
                                           input_tokens=workload.input_tokens,
                                           output_tokens=workload.output_tokens))
    except EnergyLensError as exc:
        return {"feasible": False, "infeasible_reason": str(exc).splitlines()[0]}
    out = {name: getattr(result, name) for name in COLUMNS if hasattr(result, name)}
    out.update({f"{phase}_{f}": getattr(getattr(result, phase), f)
                for phase in PHASES for f in PHASE_FIELDS})
    return out


def assert_rows_equal(*, model: str, workload: Workload, table: pd.DataFrame) -> None:
    many = predict_many(model=model, workload=workload, table=table)
    assert list(many.index) == list(table.index) and list(many.columns) == list(COLUMNS)
    for label, row in table.iterrows():
        expected = scalar(model=model, workload=workload, row=row.to_dict())
        got = many.loc[label]
        assert bool(got["feasible"]) == expected["feasible"], (label, expected)
        assert got["infeasible_reason"] == expected["infeasible_reason"], label
        if len(expected) == 2:  # refused: no metrics
            assert all(np.isnan(got[c]) for c in COLUMNS if c not in expected), label
            continue
        for name in COLUMNS:
            if name in ("feasible", "infeasible_reason"):
                continue
            assert got[name] == pytest.approx(expected[name], rel=1e-9, abs=0.0), (label, name)


@given(case=cases())
@SETTINGS
def test_predict_many_equals_predict_row_by_row(case: tuple[str, Workload, pd.DataFrame]) -> None:
    model, workload, table = case
    assert_rows_equal(model=model, workload=workload, table=table)


def test_a_grid_with_every_knob_varying_inside_one_group() -> None:
    """One group (same GPU, degrees, dtypes, fusions) with batch, clock, overlap SMs,
    num_gpus and dp varying: the arrays path, row by row."""
    boost = load_gpu("H100").boost_clock_mhz
    index = pd.MultiIndex.from_product(
        [[1.0, 7.0, 64.0, 256.0], [None, 0.6 * boost, 0.85 * boost], [0, 16], [None, 8, 16]],
        names=["batch", "freq_mhz", "overlap_sms", "num_gpus"])
    table = index.to_frame(index=False).assign(gpu="H100", tp=4, ep=2,
                                               routing=Routing(kind="zipf", skew=0.8))
    table.index = table.index * 3 + 5  # any index comes back
    for kind in ("batch", "serving"):
        assert_rows_equal(model="qwen3-30b-a3b", table=table,
                          workload=Workload(kind=kind, input_tokens=512, output_tokens=64))


def test_refusals_come_back_as_rows() -> None:
    table = pd.DataFrame({"gpu": ["H100", "H100", "no-such-gpu", "H100"],
                          "tp": [3, 1, 1, 1], "batch": [1.0, -2.0, 1.0, 1.0],
                          "overlap_sms": [0, 0, 0, 500]})
    many = predict_many(model="llama-3.1-8b", workload=Workload(), table=table)
    assert not many["feasible"].any()
    assert "does not divide" in many.loc[0, "infeasible_reason"]
    assert many.loc[1, "infeasible_reason"] == "batch must be a finite number > 0, got -2.0"
    assert "no-such-gpu" in many.loc[2, "infeasible_reason"]
    assert "leaves no SM for compute" in many.loc[3, "infeasible_reason"]
    assert many.drop(columns=["feasible", "infeasible_reason"]).isna().all().all()


def test_a_table_without_gpu_is_refused() -> None:
    with pytest.raises(EnergyLensError, match="gpu"):
        predict_many(model="llama-3.1-8b", workload=Workload(), table=pd.DataFrame({"tp": [1]}))


def test_a_kind_without_columns_is_predicted_row_by_row() -> None:
    """The load kind simulates requests: predict_many asks predict for each row."""
    workload = Workload(kind="load", batch=8, input_tokens=256, output_tokens=64,
                        request_rate=2.0, num_requests=40)
    table = pd.DataFrame({"gpu": ["H100", "H100"], "tp": [2, 3], "batch": [8.0, 8.0]})
    many = predict_many(model="llama-3.1-8b", workload=workload, table=table)
    one = predict(model="llama-3.1-8b", gpu="H100", deployment=Deployment(tp=2),
                  workload=workload)
    assert many.loc[0, "tpot_s"] == one.tpot_s and many.loc[0, "feasible"] == one.feasible
    assert many.loc[0, "decode_energy_j"] == one.decode.energy_j
    assert "does not divide" in many.loc[1, "infeasible_reason"]


def test_a_refusal_found_while_pricing_is_a_row_too() -> None:
    wrong = Routing(kind="histogram", histogram=(1.0, 2.0, 3.0))  # the model has 128 experts
    table = pd.DataFrame({"gpu": ["H100", "H100"], "ep": [2, 2], "batch": [4.0, 8.0],
                          "routing": [wrong, Routing()]})
    many = predict_many(model="qwen3-30b-a3b", workload=Workload(), table=table)
    with pytest.raises(EnergyLensError) as refused:
        predict(model="qwen3-30b-a3b", gpu="H100", deployment=Deployment(ep=2, routing=wrong),
                workload=Workload(batch=4))
    assert many.loc[0, "infeasible_reason"] == str(refused.value)
    assert bool(many.loc[1, "feasible"])


#: A value other than the default for every Deployment field, with the fields it needs
#: (the baseline) and the workload kind where it changes the prediction.
FIELD_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "num_gpus": ({}, {"num_gpus": 2}, "batch"),
    "tp": ({}, {"tp": 2}, "batch"),
    "pp": ({}, {"pp": 2}, "batch"),
    "ep": ({}, {"ep": 2}, "batch"),
    "dp": ({}, {"dp": 2}, "batch"),
    "weight_dtype": ({}, {"weight_dtype": "fp8"}, "batch"),
    "kv_dtype": ({}, {"kv_dtype": "fp8"}, "batch"),
    "fusion": ({}, {"fusion": frozenset({"qkv"})}, "batch"),
    "overlap_sms": ({"ep": 2}, {"overlap_sms": 8}, "batch"),
    "freq_mhz": ({}, {"freq_mhz": 1200.0}, "batch"),
    "routing": ({"ep": 2}, {"routing": Routing(kind="zipf", skew=1.2)}, "batch"),
    "runtime": ({}, {"runtime": "sglang"}, "batch"),
    "runtime_version": ({}, {"runtime_version": "0.19.0"}, "batch"),
    "attention_dp": ({"runtime": "sglang"}, {"attention_dp": 2}, "batch"),
    "moe_tp": ({"runtime": "sglang", "tp": 2, "ep": 2}, {"moe_tp": 1}, "batch"),
    "max_num_seqs": ({}, {"max_num_seqs": 2}, "load"),
    "prefill_chunk_tokens": ({}, {"prefill_chunk_tokens": 256}, "batch"),
    "speculative_tokens": ({}, {"speculative_tokens": 2}, "batch"),
    "draft_acceptance": ({"speculative_tokens": 2}, {"draft_acceptance": 0.3}, "batch"),
}


def test_every_deployment_field_has_a_case() -> None:
    assert set(FIELD_CASES) == {f.name for f in dataclasses.fields(Deployment)}


@pytest.mark.parametrize("name", sorted(FIELD_CASES))
def test_every_deployment_column_is_read(name: str) -> None:
    """Each Deployment field as a column gives what predict gives with it, and that differs
    from the prediction without it (so a column predict_many ignored would fail here)."""
    baseline, change, kind = FIELD_CASES[name]
    extra = {"request_rate": None, "concurrency": None, "num_requests": 40} if kind == "load" else {}
    workload = Workload(kind=kind, batch=16, input_tokens=512, output_tokens=64, **extra)
    many = predict_many(model="qwen3-30b-a3b", workload=workload,
                        table=pd.DataFrame([{"gpu": "H100", "batch": 16.0, **baseline, **change}]))
    without, with_it = (predict(model="qwen3-30b-a3b", gpu="H100", workload=workload,
                                deployment=Deployment(**baseline, **fields))
                        for fields in ({}, change))
    assert bool(many.loc[0, "feasible"]) and with_it.feasible
    assert (with_it.ttft_s, with_it.tpot_s) != (without.ttft_s, without.tpot_s)
    assert many.loc[0, "ttft_s"] == pytest.approx(with_it.ttft_s, rel=1e-9)
    assert many.loc[0, "tpot_s"] == pytest.approx(with_it.tpot_s, rel=1e-9)
    assert many.loc[0, "decode_energy_j"] == pytest.approx(with_it.decode.energy_j, rel=1e-9)


def test_a_missing_cell_takes_the_default_as_a_missing_column_does() -> None:
    """A row without overlap_sms or batch in a table where others have them (NaN) is
    predicted with Deployment's overlap_sms and the workload's batch."""
    workload = Workload(batch=4, input_tokens=256, output_tokens=32)
    table = pd.DataFrame([{"gpu": "H100-SXM"},
                          {"gpu": "H100-SXM", "batch": 1.0, "overlap_sms": 8}])
    many = predict_many(model="llama-3.1-8b", workload=workload, table=table)
    plain = predict(model="llama-3.1-8b", gpu="H100-SXM", workload=workload)
    overlapped = predict(model="llama-3.1-8b", gpu="H100-SXM", workload=replace(workload, batch=1),
                         deployment=Deployment(overlap_sms=8))
    assert many["feasible"].all()
    assert many.loc[0, "tpot_s"] == pytest.approx(plain.tpot_s, rel=1e-9)
    assert many.loc[1, "tpot_s"] == pytest.approx(overlapped.tpot_s, rel=1e-9)


def test_rows_group_by_every_distinct_combination_of_the_key_codes() -> None:
    """The group of each row is its tuple of key codes, and groups come in the tuples'
    lexicographic order, also where the codes' product overflows 64 bits (six columns of
    up to 2^20 codes: the combinations are renumbered on the way)."""
    from energylens.batch_predict import _groups

    rng = np.random.default_rng(7)
    for radices in ((3, 1, 5, 2), (2**20,) * 6):
        codes = [rng.integers(0, r, size=4_000) for r in radices]
        groups = list(_groups(codes))
        keys = [tuple(int(c[rows[0]]) for c in codes) for rows in groups]
        assert keys == sorted(set(keys))  # each combination once, in order
        for rows, key in zip(groups, keys, strict=True):
            assert all(tuple(int(c[r]) for c in codes) == key for r in rows)
        assert sorted(np.concatenate(groups).tolist()) == list(range(4_000))
