"""Search spaces: schema errors, grids, pinning, and the Optuna/pymoo round trips."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
import yaml
from pymoo.core.variable import Binary, Choice, Integer, Real

from search.config import load_study
from search.outcome import Outcome, frozen_trial
from search.space import Space, SpaceError, load_space

ALL_TYPES = {
    "knobs": {
        "gpu": {"type": "categorical", "values": ["H100", "H200", "A100-80GB"], "baseline": "H100"},
        "tp": {"type": "ordinal", "values": [1, 2, 4, 8], "baseline": 1},
        "batch": {"type": "int", "low": 1, "high": 256, "log": True},
        "overlap_sms": {"type": "int", "low": 0, "high": 32, "step": 4},
        "freq_mhz": {"type": "float", "low": 800, "high": 1980, "step": 20, "baseline": 1980},
        "split": {"type": "float", "low": 0.1, "high": 0.9},
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "fuse": {"type": "bool"},
    },
    "fixed": {"dtype": "bf16"},
}


@pytest.fixture()
def space() -> Space:
    return Space.from_mapping(ALL_TYPES, source="test")


def test_pymoo_variable_types(space: Space) -> None:
    kinds = {name: type(v) for name, v in space.pymoo_variables().items()}
    assert kinds == {
        "gpu": Choice,
        "tp": Integer,
        "batch": Real,
        "overlap_sms": Integer,
        "freq_mhz": Integer,
        "split": Real,
        "lr": Real,
        "fuse": Binary,
    }


def test_every_knob_value_round_trips_through_pymoo(space: Space) -> None:
    for knob in space.knobs:
        count = knob.grid_count()
        middle = (knob.low + knob.high) / 2 if not count else None
        values = [knob.grid_value(i) for i in range(count)] if count else (knob.low, knob.high, middle)
        for value in values:
            back = knob.decode(knob.encode(value))
            assert type(back) is type(value), knob
            # exp(log(x)) may differ from x in the last bit; everything else is exact.
            assert back == (pytest.approx(value, rel=1e-12) if knob.name == "lr" else value)


def test_pymoo_samples_decode_to_legal_values_that_optuna_stores(space: Space) -> None:
    rng = np.random.default_rng(0)
    variables = space.pymoo_variables()
    for _ in range(200):
        x = {name: var.sample(random_state=rng) for name, var in variables.items()}
        params = space.decode(x)
        assert all(space.knob(n).contains(v) for n, v in params.items()), params
        # Optuna validates every param against the shared distributions when storing.
        trial = frozen_trial(space, params, Outcome([0.0], {}, {}))
        assert trial.params == params
        assert space.decode(space.encode(trial.params)) == pytest.approx(params)


def test_optuna_suggestions_are_legal_and_use_the_shared_distributions(space: Space) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: float(len(space.suggest(t))), n_trials=100)
    for trial in study.trials:
        assert trial.distributions == space.distributions()
        assert all(space.knob(n).contains(v) for n, v in trial.params.items()), trial.params
    sampled = {n: {t.params[n] for t in study.trials} for n in ("gpu", "tp", "fuse")}
    assert sampled == {"gpu": {"H100", "H200", "A100-80GB"}, "tp": {1, 2, 4, 8}, "fuse": {False, True}}


def test_baselines_default_to_first_low_or_false(space: Space) -> None:
    baselines = {k.name: k.baseline for k in space.knobs}
    assert baselines == {
        "gpu": "H100",
        "tp": 1,
        "batch": 1,
        "overlap_sms": 0,
        "freq_mhz": 1980,
        "split": 0.1,
        "lr": 1e-4,
        "fuse": False,
    }


def test_grid_enumerates_every_combination() -> None:
    space = Space.from_mapping(
        {
            "knobs": {
                "a": {"type": "ordinal", "values": [1, 2, 4]},
                "b": {"type": "int", "low": 0, "high": 8, "step": 4},
                "c": {"type": "float", "low": 0.5, "high": 1.0, "step": 0.25},
                "d": {"type": "bool"},
            }
        },
        source="test",
    )
    points = list(space.grid())
    assert space.grid_size == len(points) == 3 * 3 * 3 * 2
    assert len({tuple(p.values()) for p in points}) == len(points)
    assert {p["c"] for p in points} == {0.5, 0.75, 1.0}


def test_continuous_space_has_no_grid(space: Space) -> None:
    assert not space.enumerable
    with pytest.raises(SpaceError, match="knobs.split"):
        space.grid_size  # noqa: B018


def test_pin_moves_a_knob_to_fixed(space: Space) -> None:
    pinned = space.pin("tp", 1)
    assert "tp" not in pinned.names and pinned.fixed == {"dtype": "bf16", "tp": 1}
    assert pinned.with_fixed({"x": 0}) == {"dtype": "bf16", "tp": 1, "x": 0}
    with pytest.raises(ValueError, match="legal"):
        space.pin("tp", 3)


@pytest.mark.parametrize(
    ("knobs", "where"),
    [
        ({"tp": {"type": "ordinal", "values": [1, 2, "four"]}}, "knobs.tp.values[2]"),
        ({"tp": {"type": "ordinal", "values": [1, 2, 2]}}, "knobs.tp.values[2]"),
        ({"tp": {"type": "ordinal", "values": [1, 2], "baseline": 4}}, "knobs.tp.baseline"),
        ({"b": {"type": "int", "low": 1, "high": 10, "step": 4}}, "knobs.b.high"),
        ({"b": {"type": "int", "low": 1, "high": 65, "step": 2, "log": True}}, "knobs.b.step"),
        ({"f": {"type": "float", "low": 1.0, "high": 0.5}}, "knobs.f.high"),
        ({"f": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, "knobs.f.low"),
        ({"f": {"type": "float", "low": 0, "high": 1, "step": 0.3}}, "knobs.f.step"),
        ({"x": {"type": "complex"}}, "knobs.x.type"),
        ({"x": {"type": "bool", "valuse": [1]}}, "knobs.x.valuse"),
    ],
)
def test_schema_errors_name_file_and_key_path(tmp_path, knobs, where) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"knobs": knobs}))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith((f"{path}: {where}: expected", f"{path}: {where}: unknown key"))


def test_yaml_syntax_error_is_one_line(tmp_path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("knobs:\n  tp: {type: ordinal, values: [1, 2\n")
    with pytest.raises(SpaceError, match=r"invalid YAML at line \d+") as info:
        load_space(path)
    assert "\n" not in str(info.value)


def test_float_text_and_integer_bounds_are_numbers(tmp_path) -> None:
    # PyYAML reads 1e-3 as a string; the schema accepts it as a number.
    path = tmp_path / "study.yaml"
    path.write_text(
        "space: {knobs: {lr: {type: float, low: 1e-3, high: 1, log: true}}}\nobjectives: [minimize loss]\n"
    )
    knob = load_study(path).space.knob("lr")
    assert (knob.low, knob.high) == (1e-3, 1.0) and math.isclose(knob.baseline, 1e-3)
