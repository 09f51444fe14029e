"""A routing skew past MAX_SKEW is one line, and every skew up to it gives a finite
expert popularity without a numpy warning (``--moe-skew 1e308`` overflowed the powers)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from energylens.cli.main import main
from energylens.cost.moe import MAX_SKEW, Routing, expert_popularity
from energylens.errors import ConfigError
from energylens.model.zoo import list_models

MOST_EXPERTS = max(m.moe.num_experts for m in list_models() if m.moe is not None)


@pytest.mark.parametrize(("kind", "skew"), [
    *((kind, skew) for kind in ("zipf", "dirichlet")
      for skew in (MAX_SKEW * 1.000001, 1e308, float("inf"))), ("zipf", -0.5)])
def test_a_skew_outside_the_range_is_one_line(kind: str, skew: float) -> None:
    with pytest.raises(ConfigError, match="routing skew must be a number from 0 to 100") as info:
        Routing(kind=kind, skew=skew)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("skew", [0.01, 1.2, 30.0, MAX_SKEW])
@pytest.mark.parametrize("kind", ["zipf", "dirichlet"])
def test_every_skew_up_to_the_bound_is_a_finite_popularity(kind: str, skew: float) -> None:
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        popularity = expert_popularity(routing=Routing(kind=kind, skew=skew),  # type: ignore[arg-type]
                                       num_experts=MOST_EXPERTS)
    assert np.isfinite(popularity).all() and popularity.sum() == pytest.approx(1.0)
    assert (np.diff(popularity) <= 0).all()  # sorted, most popular first


def test_zipf_at_the_bound_routes_everything_to_one_expert() -> None:
    """Expert k receives k^-100 of expert 1's tokens: 2^-100 = 8e-31 for the second."""
    popularity = expert_popularity(routing=Routing(kind="zipf", skew=MAX_SKEW),
                                   num_experts=MOST_EXPERTS)
    assert popularity[0] == pytest.approx(1.0, abs=1e-29)
    assert popularity[1] / popularity[0] == pytest.approx(2.0**-100, rel=1e-12)


def test_the_cli_refuses_a_huge_skew_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = main(["predict", "--model", "qwen3-30b-a3b", "--gpu", "H100", "--ep", "2",
                     "--moe-skew", "1e308"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "routing skew must be" in err
