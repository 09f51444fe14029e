"""Every fitted constant that ends at a bound of its range is explained, and no explanation
outlives its constant (a constant at a bound is a bug to explain: docs/accuracy.md)."""

from __future__ import annotations

from pathlib import Path

import yaml

from energylens.calibration.run import unidentified_constants, unidentified_reasons

SHIPPED = Path(__file__).resolve().parents[1] / "energylens" / "data" / "calibration.yaml"


def test_each_constant_at_a_bound_of_the_shipped_fits_is_explained_and_none_besides():
    fits = yaml.safe_load(SHIPPED.read_text())["fits"]
    at_bound = set(unidentified_constants(fits))
    explained = unidentified_reasons()
    assert at_bound - set(explained) == set(), "explain these in data/accuracy/unidentified.yaml"
    assert set(explained) - at_bound == set(), "no longer at a bound: remove their entries"
    for name, entry in explained.items():
        assert {"bound", "why", "see"} <= set(entry), name
        assert len(entry["why"]) > 80, name  # a reason, not a placeholder
