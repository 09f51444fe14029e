"""Wilkins et al. (2024) energy-per-request regression fitted to EnergyLens's predictions."""

from __future__ import annotations

import json

import pytest

from energylens.cli import main
from energylens.deployment import Deployment
from energylens.validation.regression import RegressionError, fit_energy_regression


@pytest.mark.parametrize(("model", "gpu", "deployment"), [
    ("llama-3.1-8b", "H100", Deployment()),
    ("llama-3.1-70b", "H100", Deployment(tp=4)),
    ("qwen3-30b-a3b", "H100", Deployment(ep=4, num_gpus=4)),
])
def test_wilkins_form_fits_the_predictions(model, gpu, deployment):
    fit = fit_energy_regression(model=model, gpu=gpu, deployment=deployment, batch=16,
                                input_tokens=(128, 256, 512, 1024),
                                output_tokens=(64, 128, 256, 512))
    assert fit.n == 16 and fit.r2 > 0.95
    assert fit.a1 > 0  # output tokens cost energy
    grid = {(g["input_tokens"], g["output_tokens"]): g["energy_per_request_j"] for g in fit.grid}
    assert fit.energy_j(512, 256) == pytest.approx(grid[(512.0, 256.0)], rel=0.15)


def test_too_few_feasible_points_is_an_error():
    with pytest.raises(RegressionError, match="feasible grid points"):
        fit_energy_regression(model="llama-3.1-70b", gpu="A100-40GB", batch=64,
                              input_tokens=(4096,), output_tokens=(4096,))


def test_regress_cli_json(capsys):
    assert main(["regress", "--model", "llama-3.1-8b", "--gpu", "H100", "--batch", "8",
                 "--input-tokens", "128,512,1024", "--output-tokens", "64,256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"a0", "a1", "a2", "r2", "n", "grid"} and out["n"] == 6
    assert main(["regress", "--model", "llama-3.1-8b", "--gpu", "H100"]) == 0
    assert "R^2" in capsys.readouterr().out
