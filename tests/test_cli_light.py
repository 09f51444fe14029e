"""`energylens predict` from a fresh process loads none of the heavy libraries the other
commands use (issue 14 item 2): the CLI imports every subcommand module to build its
parser, so each must keep those imports inside its handlers."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("optuna", "pymoo", "scipy", "matplotlib", "rich", "pandas", "sqlalchemy")
SCRIPT = """
import json, sys
from energylens.cli.main import main
main(["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--json"])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_a_json_prediction_loads_no_heavy_library() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          check=True)
    prediction, loaded = proc.stdout.strip().splitlines()
    assert json.loads(prediction)["feasible"] is True
    assert not set(HEAVY) & set(json.loads(loaded))
