"""This project's engine-free prompt steps as a second witness of the power constants.

ML.ENERGY's steady-state rows are mostly memory-bound decode: they do not tell the energy of
a tensor FLOP from the busy power (on H100 the serving fit alone left the tensor share at
the bottom of its range, 0.02, with the objective flat up to 0.95: rms log error 0.0828
-> 0.0845). Whole forward steps measured under NVML on the same GPU
(``benchmarks/gpu/measure_decode_step.py``: ``data/measurements/energylens-gpu/<gpu>/<run>/
steps_<dtype>.csv``) do: their prompt steps are compute-bound and draw the board limit
(680-710 W of H100's 700 W, clocks held down by the limit). The serving fit of a GPU with
such files adds the log error of each priced prompt step's energy to its residuals
(:class:`StepEnergy`). Only the prompt steps: the engine-free decode steps measure what the
serving rows already identify, under other conditions (no engine: a batch-1 step draws 405
W where the served ones ask for ~470 W, the engine's extra draw the busy power stands for,
``docs/power.md``), so they would pull that compromise instead of adding what the serving
rows lack. The steps' time does not depend on any serving constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from energylens.calibration.fitting import ErrorStats
from energylens.cost.constants import Calibration
from energylens.hardware import load_gpu
from energylens.measurements.energylens_gpu import STEPS_NAME

#: The steps' phase the witness reads (see the module docstring).
PROMPT = "prefill"


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
    """The measured prompt steps of some run folders, priced under a calibration."""

    folders: tuple[Path, ...]

    def _errors(self, calibration: Calibration) -> np.ndarray:
        from energylens.validation.steps import validate_steps  # validation builds on calibration

        return np.array([row.errors["energy"] for folder in self.folders
                         for row in validate_steps(path=folder, calibration=calibration).rows
                         if row.phase == PROMPT])

    def residuals(self, calibration: Calibration) -> np.ndarray:
        """Log error (predicted / measured) of every priced prompt step's energy."""
        return np.log1p(self._errors(calibration))

    def error_stats(self, calibration: Calibration) -> ErrorStats:
        """MAPE and friends of the prompt steps' energy under ``calibration``."""
        errors = self._errors(calibration)
        return ErrorStats.of(1.0 + errors, np.ones_like(errors))

    def files(self) -> list[Path]:
        """The step files read, for the fit's provenance."""
        return [f for folder in self.folders for f in sorted(folder.iterdir())
                if STEPS_NAME.fullmatch(f.name)]
