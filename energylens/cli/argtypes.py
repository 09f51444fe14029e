"""Argument types shared by the CLI's commands."""

from __future__ import annotations

import argparse

from energylens.runtime.registry import FRONT_ENDS, runtime_name


def positive_int(text: str) -> int:
    """A whole number above zero, as argparse ``type``: else a one-line usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of zero or more, as argparse ``type``: else a one-line usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def runtime_arg(text: str) -> str:
    """A runtime's registry name from any of its spellings, as argparse ``type`` (argparse
    then checks it is registered); a server that runs another engine (NIM, Dynamo) is a
    one-line usage error that names what to give instead."""
    key = runtime_name(text)
    if key in FRONT_ENDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not an engine of its own: {FRONT_ENDS[key]}")
    return key
