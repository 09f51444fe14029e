"""The pruned expected maximum of the MoE rank loads equals the whole-cube formula."""

from __future__ import annotations

import numpy as np
import pytest

from energylens.cost.moe import _DRAWS, _SEED, Routing, _expected_max_normal, _rank_shares


def _whole_cube(mean: np.ndarray, std: np.ndarray) -> float:
    """mean over (draws, placements) of max(0, max_r mean + std z), every rank evaluated."""
    z = np.random.default_rng(_SEED).standard_normal((_DRAWS, *mean.shape))
    values = z * std + mean  # (draws, placements, ranks)
    return float(np.maximum(values.max(axis=-1), 0.0).mean())


@pytest.mark.parametrize("skew", [0.0, 0.8, 1.5, 3.0])
@pytest.mark.parametrize("tokens", [1.0, 7.3, 64.0, 4096.0])
def test_rank_loads_match_whole_cube(skew: float, tokens: float) -> None:
    routing = Routing(kind="zipf", skew=skew)
    _, shares = _rank_shares(routing, 128, 8)
    slots = tokens * 8
    mean = slots * shares
    std = np.sqrt(np.maximum(slots * shares * (1.0 - shares), 0.0))
    assert _expected_max_normal(mean, std) == _whole_cube(mean, std)


def test_random_means_with_negative_values_match() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        mean = rng.normal(size=(16, 4)) * rng.choice([0.1, 1.0, 30.0], size=(16, 4))
        std = np.abs(rng.normal(size=(16, 4))) * rng.choice([0.0, 1.0], size=(16, 4))
        assert _expected_max_normal(mean, std) == _whole_cube(mean, std)
