"""Every model named in data/measurements resolves to a zoo entry."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from energylens.model.zoo import resolve_model_name

DATA = Path(__file__).parents[1] / "data" / "measurements"

def _names() -> set[str]:
    names = set()
    for path in (DATA / "mlenergy").rglob("*.json"):
        doc = json.loads(path.read_text())
        names.update(c["model_id"] for c in doc.get("configurations", []) if "model_id" in c)
        if "model_id" in doc:
            names.add(doc["model_id"])
    for path in (DATA / "llm-inference-bench").rglob("*.csv"):
        with path.open(newline="") as fh:
            names.update(row["Model"] for row in csv.DictReader(fh) if row.get("Model"))
    for folder in (DATA / "vidur" / "compute").glob("*/*/*"):
        names.add(f"{folder.parent.name}/{folder.name}")
    return names


NAMES = sorted(_names())


def test_the_measurements_name_models() -> None:
    assert len(NAMES) > 30


@pytest.mark.parametrize("name", NAMES)
def test_a_measured_model_resolves(name: str) -> None:
    assert resolve_model_name(name)
