"""Fitting the cost model's constants to measurements (``energylens calibrate``).

Light on purpose: the fits (scipy) live in the submodules and load on demand.
"""

from energylens.calibration.file import load_calibration
from energylens.errors import CalibrationDataError

__all__ = ["CalibrationDataError", "load_calibration"]
