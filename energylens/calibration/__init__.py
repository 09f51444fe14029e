"""Fitting the cost model's constants to measurements (``energylens calibrate``).

Light on purpose: the fits (scipy) live in the submodules and load on demand.
"""

from energylens.calibration.file import load_calibration


class CalibrationDataError(ValueError):
    """No usable measurement files where calibration looked (message names the place)."""


__all__ = ["CalibrationDataError", "load_calibration"]
