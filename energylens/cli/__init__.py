"""The ``energylens`` command line."""

from energylens.cli.main import main

__all__ = ["main"]
