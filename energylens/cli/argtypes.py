"""Argument types shared by the CLI's commands."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number above zero, as argparse ``type``: else a one-line usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value
