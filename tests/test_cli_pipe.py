"""Output piped into a reader that went away (``energylens ... | head``): exit 0 and no
traceback, for the tables rich prints as for plain JSON (rich's own console exits 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [
    ["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--what-if"],
    ["predict", "--model", "llama-3.1-8b", "--gpu", "H100", "--json"],
    ["models"],
    ["gpus"],
])
def test_a_closed_pipe_ends_the_command_quietly(args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # as head does once it has its lines
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, "-m", "energylens.cli", *args], env=env,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
                              check=False)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
