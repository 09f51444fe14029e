"""Every model named in data/measurements resolves to a zoo entry, except the ones listed
here with the reason (the list is strict: a name that starts resolving must leave it)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from energylens.errors import UnknownModelError
from energylens.model.zoo import resolve_model_name

DATA = Path(__file__).parents[1] / "data" / "measurements"

#: Names without a zoo entry yet, and why.
NO_SOURCE = "no config of it among the project's sources (model_configs*.yaml, hf_configs)"
KNOWN_UNRESOLVED = {
    "BAAI/Aquila-7B": NO_SOURCE, "Deci/DeciLM-7B": NO_SOURCE,
    "EleutherAI/gpt-j-6b": NO_SOURCE, "Qwen/Qwen1.5-7B": NO_SOURCE,
    "bigscience/bloom-7b1": NO_SOURCE, "facebook/opt-6.7b": NO_SOURCE,
    "internlm/internlm-20b": NO_SOURCE, "microsoft/phi-2": NO_SOURCE,
}


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
    if name in KNOWN_UNRESOLVED:
        with pytest.raises(UnknownModelError):
            resolve_model_name(name)
    else:
        assert resolve_model_name(name)
