"""This project's engine-free step measurements as a second witness of the power constants.

ML.ENERGY's steady-state rows are mostly memory-bound decode: they do not tell the energy of
a tensor FLOP from the busy power (on H100 the serving fit alone left the tensor share at
the bottom of its range, 0.02, with the objective flat up to 0.95: rms log error 0.0828
-> 0.0845). Whole forward steps measured under NVML on the same GPU
(``benchmarks/gpu/measure_decode_step.py``: ``data/measurements/energylens-gpu/<gpu>/<run>/
steps_<dtype>.csv``) do: their prompt steps are compute-bound and draw the board limit
(680-710 W of H100's 700 W, clocks held down by the limit), their decode steps rise from
~400 to ~660 W with the batch. The serving fit of a GPU with such files adds the log error
of each priced step's energy to its residuals (:class:`StepEnergy`), so that both kinds of
run identify the power constants; the steps' time does not depend on any serving constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration.fitting import ErrorStats
from energylens.cost.constants import Calibration
from energylens.hardware import load_gpu
from energylens.measurements.energylens_gpu import STEPS_NAME


def step_folders(root: Path) -> list[Path]:
    """The run folders of ``root/energylens-gpu/<gpu>/`` holding ``steps_<dtype>.csv`` files."""
    return [folder for folder in sorted(Path(root).glob("energylens-gpu/*/*"))
            if folder.is_dir() and any(STEPS_NAME.fullmatch(f.name) for f in folder.iterdir())]


def gpu_steps(folders: list[Path], gpu: str) -> StepEnergy | None:
    """The steps of ``folders`` measured on ``gpu`` (the folder above a run names the
    board), or None where there are none."""
    mine = tuple(f for f in folders if load_gpu(f.parent.name).name == load_gpu(gpu).name)
    return StepEnergy(folders=mine) if mine else None


@dataclass(frozen=True)
class StepEnergy:
    """The measured steps of some run folders, priced under a calibration."""

    folders: tuple[Path, ...]

    def _errors(self, calibration: Calibration) -> np.ndarray:
        from energylens.validation.steps import validate_steps  # validation builds on calibration

        return np.array([row.errors["energy"] for folder in self.folders
                         for row in validate_steps(path=folder, calibration=calibration).rows])

    def residuals(self, calibration: Calibration) -> np.ndarray:
        """Log error (predicted / measured) of every priced step's energy."""
        return np.log1p(self._errors(calibration))

    def error_stats(self, calibration: Calibration) -> ErrorStats:
        """MAPE and friends of the steps' energy under ``calibration``."""
        errors = self._errors(calibration)
        return ErrorStats.of(1.0 + errors, np.ones_like(errors))

    def files(self) -> list[Path]:
        """The step files read, for the fit's provenance."""
        return [f for folder in self.folders for f in sorted(folder.iterdir())
                if STEPS_NAME.fullmatch(f.name)]
