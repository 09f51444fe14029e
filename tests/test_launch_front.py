"""``pareto.csv``'s launch column and scripts (energylens.runtime.launch.write_front_launch)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from energylens.errors import ConfigError
from energylens.runtime.launch import LAUNCH_COLUMN, LaunchCommand, write_front_launch


def commands(row: dict[str, Any]) -> dict[str, LaunchCommand]:
    """A server per point with a ``tp``; a point without one cannot launch."""
    if pd.isna(row["tp"]):
        raise ConfigError("no tp")
    return {"": LaunchCommand(argv=("serve", "--tp", str(int(row["tp"]))))}


def test_the_launch_column_keeps_the_other_cells_as_written(tmp_path: Path) -> None:
    front = pd.DataFrame({
        "number": [3, 5, 9],
        "tp": pd.array([8, None, 2], dtype="Int64"),  # blank where the point does not read it
        "gpu": ["H100", "H200", ""],
        "energy_j": [0.5, 1.25, 2.0],
    })
    front.to_csv(tmp_path / "pareto.csv", index=False)
    before = (tmp_path / "pareto.csv").read_text().splitlines()

    assert write_front_launch(results=tmp_path, commands_of=commands) == 2

    after = (tmp_path / "pareto.csv").read_text().splitlines()
    assert after[0] == before[0] + f",{LAUNCH_COLUMN}"
    assert after[1:] == [before[1] + ",serve --tp 8", before[2] + ",", before[3] + ",serve --tp 2"]
    assert before[1:] == ["3,8,H100,0.5", "5,,H200,1.25", "9,2,,2.0"]  # tp stays 8, not 8.0
    assert sorted(p.name for p in (tmp_path / "launch").iterdir()) == ["trial-3.sh", "trial-9.sh"]
    assert os.access(tmp_path / "launch" / "trial-3.sh", os.X_OK)
    assert not list(tmp_path.glob(".*tmp*"))  # written through temporary files, none left
