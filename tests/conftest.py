"""Test-suite settings: property-based tests draw the same examples on every run (a CI
run must not pass or fail by the luck of its seed). Set HYPOTHESIS_PROFILE=explore to
draw fresh random examples when hunting for counterexamples."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
