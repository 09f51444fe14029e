"""Layering rules (README: layout and dependency direction), lint and types."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_search_never_imports_energylens():
    offenders = []
    for path in (ROOT / "search").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "energylens"]
    assert offenders == []


def test_ruff_is_clean():
    """ruff comes with the test extra (pyproject), so this runs wherever the suite does."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_mypy_is_clean():
    """mypy and the stubs come with the test extra (pyproject), as ruff does."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "energylens", "search"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
