"""Every user-facing error of EnergyLens derives from :class:`EnergyLensError`.

The CLI catches this one class, prints its one-line message and exits with code 2, so
no bad input can end in a traceback. Each class also derives from ``ValueError``: a bad
value is what every one of them reports.
"""

from __future__ import annotations


class EnergyLensError(ValueError):
    """Root of every error a user can cause (one-line message)."""


class ConfigError(EnergyLensError):
    """A deployment or workload that cannot describe a real run."""


class SpecError(EnergyLensError):
    """A malformed model specification; the message names the op and the rank."""


class UnknownModelError(EnergyLensError):
    """A model name that is not in the zoo; the message suggests the closest names."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = ", ".join(suggestions)
        super().__init__(
            f"unknown model {name!r}; closest zoo names: {hint} (`energylens models` or "
            "list_models() lists them all; a config.json path, or a repo id whose "
            "config.json is in the local Hugging Face cache, works too)"
        )


class ModelConfigError(EnergyLensError):
    """A model configuration (zoo entry or ``config.json``) that cannot be read."""


class UnknownGPUError(EnergyLensError):
    """A GPU name that matches no entry of the hardware database."""


class HardwareFileError(EnergyLensError):
    """A GPU file that cannot be read; the message names the file and the key."""


class UncalibratedGPUError(EnergyLensError):
    """A GPU with no calibration constants of its own and no ``borrows:`` to take them from."""


class UnknownRuntimeError(EnergyLensError):
    """A serving runtime (engine) that has no profile."""


class CalibrationFileError(EnergyLensError):
    """A calibration file that cannot be read (names the file and the key)."""


class CalibrationDataError(EnergyLensError):
    """No usable measurement files where calibration looked (names the place)."""


class MeasurementError(EnergyLensError):
    """A measurement file that cannot be read (names the file and the column or key)."""


class ProblemError(EnergyLensError):
    """A study's problem section that cannot be used (names the file and the key)."""


class RegressionError(EnergyLensError):
    """A workload regression that cannot be fitted."""


class OutputPathError(EnergyLensError):
    """A file a command was asked to write where it cannot (names the path)."""
