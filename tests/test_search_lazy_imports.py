"""Loading the study command's modules must not import what only other paths need: pymoo's algorithms
(and the scipy it brings) only when the pymoo engine runs, pyarrow.parquet only when an
exhaustive grid is written or reported (docs/benchmarks.md, quickstart study memory)."""

import subprocess
import sys

CODE = (
    "import sys; import search.commands, energylens.cli.study, search.engines; "
    "search.engines.get_engine('pymoo'); "
    "print(sorted(m for m in ('pymoo.algorithms', 'scipy', 'pyarrow.parquet') if m in sys.modules))"
)


def test_study_command_modules_do_not_import_pymoo_or_parquet() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
