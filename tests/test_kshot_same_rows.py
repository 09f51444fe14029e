"""K-shot curves compare each K > 0 with K = 0 on the very rows K scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from energylens.calibration.file import default_calibration
from energylens.measurements.user_csv import load_user_csv
from energylens.validation.kshot import k_shot
from energylens.validation.kshot_report import Dataset, group_errors, render

CSV = ("model,gpu,num_gpus,tp,runtime,workload,batch,input_tokens,output_tokens,tpot_s\n"
       + "".join(f"llama-3.1-8b,H100,1,1,vllm,batch,{b},{n},128,{t}\n"
                 for b, n, t in ((1, 128, 0.0080), (2, 512, 0.0085), (4, 256, 0.0090),
                                 (8, 1024, 0.0100), (16, 512, 0.0110), (32, 2048, 0.0150),
                                 (64, 256, 0.0160), (128, 1024, 0.0260))))


@pytest.fixture(scope="module")
def measurements(tmp_path_factory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("kshot") / "m.csv"
    path.write_text(CSV)
    return load_user_csv(path)


def test_k0_beside_k_is_scored_on_exactly_the_rows_k_scores(measurements):  # type: ignore[no-untyped-def]
    calibration = default_calibration()
    plain = k_shot(measurements, k=0, group_by=["gpu"], seed=0, calibration=calibration)
    tuned = k_shot(measurements, k=3, group_by=["gpu"], seed=1, calibration=calibration)
    assert tuned.overlays  # an overlay moved the held-out rows
    scored = [i for i, o in enumerate(tuned.rows) if not o.fitted_on and o.screened is None]
    assert len(scored) == len(measurements.rows) - 3
    (_, _, _, ape, same), = group_errors(tuned, group_by=["gpu"], metric="tpot_s").values()
    measured = [r.measured["tpot_s"] for r in measurements.rows]
    assert same == pytest.approx([abs(plain.rows[i].predicted["tpot_s"] / measured[i] - 1)
                                  for i in scored])
    assert ape == pytest.approx([abs(tuned.rows[i].predicted["tpot_s"] / measured[i] - 1)
                                 for i in scored])
    (_, _, _, every, at_zero), = group_errors(plain, group_by=["gpu"], metric="tpot_s").values()
    assert every == at_zero and len(every) == len(measurements.rows)  # K = 0: itself


def test_the_table_puts_k0_on_each_ks_rows_beside_it():
    dataset = Dataset("d", "measurements", Path("x.csv"), ("gpu",), "tpot_s", (0, 3), 0.10, 3)
    results = [(dataset, 0, 0, {"gpu=H100-SXM": (4, 4, 0, [0.1, 0.2, 0.3, 0.4],
                                                  [0.1, 0.2, 0.3, 0.4])}),
               (dataset, 3, 0, {"gpu=H100-SXM": (4, 4, 0, [0.05], [0.4])}),
               (dataset, 3, 1, {"gpu=H100-SXM": (4, 4, 0, [0.15], [0.2])})]
    text = render(results, [dataset], seeds=2)
    assert "| K=0 MAPE % | K=0 on K=3's rows % | K=3 MAPE % | target met |" in text
    # K = 0 on every row 25.0; on K = 3's rows (0.4, 0.2) 30.0; K = 3 (0.05, 0.15) 10.0
    assert "| gpu=H100-SXM | 4 | 4 | 0 | 25.0 | 30.0 | 10.0 | yes |" in text


def test_steps_k_shot_prices_its_held_out_rows_without_the_overlay_too():
    from energylens.validation.kshot_report import step_group_errors
    from energylens.validation.steps_kshot import k_shot_steps

    path = (Path(__file__).resolve().parents[1] / "data" / "measurements" / "energylens-gpu"
            / "h100-sxm" / "2026-11-27-b" / "steps_bf16.csv")
    plain = k_shot_steps(path=path, k=0)
    tuned = k_shot_steps(path=path, k=3, seed=0)
    assert tuned.overlays and len(tuned.base) == len(tuned.report.rows) == len(plain.report.rows) - 3
    before = {(r.phase, r.batch, r.tokens, r.context): r.errors["time"] for r in plain.report.rows}
    for held, base in zip(tuned.report.rows, tuned.base, strict=True):
        key = (held.phase, held.batch, held.tokens, held.context)
        assert key == (base.phase, base.batch, base.tokens, base.context)
        assert base.errors["time"] == pytest.approx(before[key])
    (_, _, _, ape, same), = step_group_errors(path=path, k=3, seed=0).values()
    assert len(ape) == len(same) == len(tuned.report.rows)
