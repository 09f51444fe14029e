"""Every GPU runs on constants it has or declares where it borrows them; never on defaults.

A GPU's calibration constants are either its own (fitted by ``energylens calibrate`` on its
measurements) or borrowed from the measured relative its GPU file names
(``borrows: {from: ..., reason: ...}``). A GPU with neither would silently run on the
built-in defaults, which no data backs; both checks here refuse that with one line:

- :func:`require_constants` before a prediction (returns the calibration to predict with:
  constants a calibration file lacks for a GPU that borrows are borrowed on the fly, the
  way ``energylens calibrate`` would record them, so adding such a GPU is one file);
- :func:`require_data_or_borrows` before ``energylens calibrate`` fits anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from energylens.calibration.transfer import borrowed_calibration
from energylens.cost.constants import Calibration
from energylens.errors import UncalibratedGPUError, UnknownGPUError
from energylens.hardware import GPU, GPUDatabase, default_database

_WHAT_TO_DO = ("declare `borrows: {from: <measured GPU>, reason: ...}` in its GPU file, "
               "or calibrate it (`energylens calibrate` on measurements of it)")


def require_constants(*, calibration: Calibration, gpu: GPU,
                      database: GPUDatabase | None = None) -> Calibration:
    """The calibration to predict ``gpu`` with; refuses a GPU that would run on defaults.

    Args:
        calibration: the calibration a prediction was asked to use.
        gpu: the GPU to predict (from ``database``).
        database: the GPU files ``gpu`` comes from (default: the shipped ones).

    Returns:
        ``calibration`` itself when it has constants for ``gpu``, or holds none for any GPU
        (the built-in-defaults tier, chosen on purpose); otherwise a copy with constants for
        ``gpu`` borrowed down its ``borrows:`` chain from the first GPU that has some.

    Raises:
        UncalibratedGPUError: neither ``gpu`` nor any GPU it borrows from (directly or
            through its relatives) has constants in ``calibration``.
    """
    if gpu.name in calibration.kernels or not calibration.kernels:
        return calibration
    db = default_database() if database is None else database
    chain = db.borrow_chain(gpu.name)
    for depth, relative in enumerate(chain[1:], start=1):
        if relative.name in calibration.kernels:
            return borrowed_calibration(calibration=calibration, chain=chain[: depth + 1])
    where = f"{db.file_of(gpu.name)}"
    if len(chain) == 1:
        raise UncalibratedGPUError(
            f"GPU {gpu.name} has no constants in calibration {calibration.source} and "
            f"{where} declares no `borrows:`: {_WHAT_TO_DO}")
    relatives = " -> ".join(g.name for g in chain[1:])
    raise UncalibratedGPUError(
        f"GPU {gpu.name} borrows from {relatives} ({where}), but calibration "
        f"{calibration.source} has constants for none of them: calibrate {chain[-1].name} "
        f"or use a calibration that covers it")


def require_data_or_borrows(*, measured: Iterable[str],
                            database: GPUDatabase | None = None) -> None:
    """Refuse to calibrate while a GPU has no measurements and declares no ``borrows:``.

    Args:
        measured: canonical names of the GPUs the measurement files give kernel
            constants for (per-op profiles, serving rows).
        database: the GPU files to check (default: the shipped ones).

    Raises:
        UncalibratedGPUError: naming the first such GPU, its file and what to do.
    """
    db = default_database() if database is None else database
    have = set(measured)
    for gpu in db.gpus():
        if gpu.borrows_from is None and gpu.name not in have:
            raise UncalibratedGPUError(
                f"GPU {gpu.name} has no measurements to calibrate on and "
                f"{db.file_of(gpu.name)} declares no `borrows:`: {_WHAT_TO_DO}")


def measured_gpus(*, vidur_mlp: Sequence[Path], mlenergy: Sequence[Path],
                  database: GPUDatabase | None = None) -> set[str]:
    """GPUs that per-op profiles (``compute/<gpu>/...``) or ML.ENERGY rows measure."""
    from energylens.measurements.formats import load_measurements

    db = default_database() if database is None else database
    names = {Path(path).parts[-4] for path in vidur_mlp}
    for path in mlenergy:
        names |= {str(row.input["gpu_model"])
                  for row in load_measurements(format="mlenergy", path=path).rows}
    out: set[str] = set()
    for name in names:
        try:
            out.add(db.resolve(name))
        except UnknownGPUError:  # a GPU the database does not hold: nothing to cover
            continue
    return out
