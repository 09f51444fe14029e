"""Ranking optimizations by constrained ablation and importance."""

from __future__ import annotations

import optuna
import pandas as pd

from search.config import load_study
from search.rank import rank_optimizations
from search.runner import run_study
from search.storage import open_storage
from search.toy import ToyDeployment, write_toy_study

SPACE = {
    "knobs": {
        "gpu": {"type": "categorical", "values": ["small", "medium", "large"]},
        "gpus": {"type": "ordinal", "values": [1, 2, 4]},
        "tp": {"type": "ordinal", "values": [1, 2, 4]},
        "batch": {"type": "int", "low": 4, "high": 32, "step": 14},
        "freq": {"type": "float", "low": 0.6, "high": 1.0, "step": 0.2, "baseline": 1.0},
        "fuse": {"type": "bool"},
        "colour": {"type": "categorical", "values": ["red", "green", "blue"]},  # ignored
    },
}


def test_ignored_knob_ranks_last_and_lost_feasibility_first(tmp_path) -> None:
    config = load_study(
        write_toy_study(
            tmp_path, space=SPACE, engine="grid", constraints=["latency_s <= 0.05", "tokens_per_s >= 300"]
        )
    )
    study = run_study(config=config, problem=ToyDeployment())
    ranking = rank_optimizations(
        config=config, problem=ToyDeployment(), budget_per_ablation=None, study=study
    )

    assert list(ranking["rank"]) == list(range(1, 8))
    assert set(ranking["knob"]) == set(SPACE["knobs"])
    last = ranking.iloc[-1]
    assert last["knob"] == "colour" and last["loss_pct"] == 0.0 and last["importance"] < 0.01
    # The small GPU cannot meet the throughput SLO with this model: feasibility is lost.
    first = ranking.iloc[0]
    assert first["knob"] == "gpu" and first["feasibility_lost"]
    others = ranking[~ranking["feasibility_lost"] & (ranking["knob"] != "colour")]
    assert (others["loss_pct"] > 0).all()  # freq=1.0, fuse off, batch=4... all cost energy
    assert (others["best_pinned"] > others["best"]).all()  # minimised: pinned is worse

    assert pd.read_csv(config.results / "ranking.csv")["knob"].tolist() == list(ranking["knob"])
    assert (config.results / "ranking.png").stat().st_size > 0
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(config.storage))}
    assert names == {"toy"} | {f"toy/ablate/{k}" for k in SPACE["knobs"]}
    pinned = optuna.load_study(study_name="toy/ablate/freq", storage=open_storage(config.storage))
    assert "freq" not in pinned.trials[0].params
