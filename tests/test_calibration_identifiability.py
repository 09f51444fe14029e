"""A constant that ends at a bound of its range is not identified: calibrate says so."""

from __future__ import annotations

from energylens.calibration.run import unidentified_constants


def test_constants_at_a_bound_of_full_fits_are_listed_and_fold_fits_are_not() -> None:
    fits = {
        "mlenergy/H100-SXM": {"at_bound": ["busy_power_w", "static_power_w"]},
        "vidur-mlp/H100-SXM": {"in_sample": {}},
        "custom-allreduce/vllm/B200": {"at_bound": ["allreduce_latency_per_hop_s"]},
        "regimes/mlenergy/H100-SXM": {"task": {"at_bound": ["busy_power_w"]}},
    }
    assert unidentified_constants(fits) == [
        "custom-allreduce/vllm/B200/allreduce_latency_per_hop_s",
        "mlenergy/H100-SXM/busy_power_w", "mlenergy/H100-SXM/static_power_w"]


def test_the_shipped_calibration_lists_what_it_could_not_identify() -> None:
    """Every fit of the shipped file that ended at a bound is named in docs/accuracy.md."""
    from pathlib import Path

    import yaml

    root = Path(__file__).parents[1]
    fits = yaml.safe_load((root / "energylens/data/calibration.yaml").read_text("utf-8"))["fits"]
    accuracy = (root / "docs/accuracy.md").read_text("utf-8")
    for name in unidentified_constants(fits):
        assert name in accuracy, name
