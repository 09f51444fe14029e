"""docs/regime-folds.md quotes each fold's energy / ITL MAPE as the shipped calibration
records it (refresh the doc's figures after a recalibration)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LABELS = {"gpu-count": "gpu-count: ", "dense -> MoE": "family: fit dense, predict MoE",
          "MoE -> dense": "family: fit MoE, predict dense", "task": "task: ",
          "precision": "precision: ", "hybrid": "family: fit transformers",
          "gpu-generation": "gpu-generation: "}
ROW = re.compile(r"^\| (?P<label>[^(|]+?)(?:, [^(|]*)? \((?P<energy>\d+\.\d) / (?P<itl>\d+\.\d) %")


def _quoted() -> list[tuple[str, str, float, float]]:
    gpu, out = "", []
    for line in (ROOT / "docs" / "regime-folds.md").read_text().splitlines():
        if line.startswith("## "):
            gpu = {"B200": "B200", "H100": "H100-SXM"}.get(line[3:7].strip(":"), "")
        match = ROW.match(line)
        if match and gpu:
            out.append((gpu, match["label"], float(match["energy"]), float(match["itl"])))
    return out


def test_the_doc_quotes_the_shipped_fold_figures():
    fits = yaml.safe_load((ROOT / "energylens" / "data" / "calibration.yaml").read_text())["fits"]
    quoted = _quoted()
    assert len(quoted) == 11  # 7 B200 folds, 4 H100 folds over the target
    for gpu, label, energy, itl in quoted:
        folds = fits[f"regimes/mlenergy/{gpu}"]
        key = next(k for k in folds if k.startswith(LABELS[label]))
        errors = folds[key]["errors"]
        assert (energy, itl) == (round(100 * errors["energy_per_token_joules"]["mape"], 1),
                                 round(100 * errors["median_itl_ms"]["mape"], 1)), (gpu, key)
