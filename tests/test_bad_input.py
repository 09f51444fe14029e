"""The bad-input catalogue: every case runs through the real command line and must end with
exit code 2, exactly one line on stderr, no traceback, and no file created or changed.

Each case writes what it needs into a fresh folder (a small valid study and its space, then
its one mistake), takes a snapshot of the folder, runs ``energylens ...`` in it, and
compares the folder with the snapshot afterwards. Ctrl-C, which must stop cleanly and leave
a resumable study, has its own test below the catalogue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from energylens.cli import main

SPACE = """\
knobs:
  tp: {type: ordinal, values: [1, 2]}
  batch: {type: ordinal, values: [1, 8]}
fixed: {gpu: H100, num_gpus: 2}
"""
STUDY = """\
name: tiny
space: space.yaml
model: llama-3.1-8b
workload: {kind: batch, input_tokens: 256, output_tokens: 32}
objectives: [minimize energy_per_output_token_j, minimize tpot_s]
constraints: ["tpot_s <= 0.05"]
engine: grid
results: out
"""
MEASUREMENTS = ("model,gpu,num_gpus,batch,input_tokens,output_tokens,tpot_s\n"
                "llama-3.1-8b,H100,1,16,1024,128,0.0093\n")
CALIBRATION = "version: 2\nkernels: {}\nlinks: {}\nruntimes: {}\n"


def write(folder: Path, study: str = STUDY, space: str = SPACE, **files: str) -> list[str]:
    """The valid study with its space (both may be edited) and extra files; ``study run``."""
    (folder / "space.yaml").write_text(space)
    (folder / "study.yaml").write_text(study)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)
    return ["study", "run", "study.yaml"]


def edit(
    old: str, new: str, *, where: str = "study", command: tuple[str, ...] = ()
) -> Callable[[Path], list[str]]:
    """A case: the valid study (or space) with ``old`` replaced by ``new``."""

    def setup(folder: Path) -> list[str]:
        text = {"study": STUDY, "space": SPACE}[where]
        assert old in text, old
        changed = text.replace(old, new)
        argv = write(folder, **{where: changed})
        return [*argv, *command]

    return setup


def run_first(*then: str, study_after: str | None = None) -> Callable[[Path], list[str]]:
    """A case: the valid study is run once (setup), then ``energylens *then`` is the case."""

    def setup(folder: Path) -> list[str]:
        write(folder)
        cwd = Path.cwd()
        os.chdir(folder)
        try:
            assert main(["study", "run", "study.yaml"]) == 0
        finally:
            os.chdir(cwd)
        if study_after is not None:
            (folder / "study.yaml").write_text(study_after)
        return list(then)

    return setup


def files(argv: str, **contents: str | bytes) -> Callable[[Path], list[str]]:
    """A case: the valid study and space, the files given (``a__b`` is written ``a.b``; bytes
    as they are), and the command line ``argv``."""

    def setup(folder: Path) -> list[str]:
        write(folder)
        for name, content in contents.items():
            path = folder / name.replace("__", ".")
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        return argv.split()

    return setup


def config_json(folder: Path, content: bytes) -> list[str]:
    """A case: the study's model is ``config.json`` holding ``content``."""
    argv = write(folder, study=STUDY.replace("llama-3.1-8b", "config.json"))
    (folder / "config.json").write_bytes(content)
    return argv


def folder_as_study(folder: Path) -> list[str]:
    write(folder)
    (folder / "d.yaml").mkdir()
    return ["study", "run", "d.yaml"]


def empty_data_folder(folder: Path) -> list[str]:
    write(folder)
    (folder / "empty").mkdir()
    return ["validate", "--all", "--data", "empty"]


def gpu_knob_with_unknown_value(folder: Path) -> list[str]:
    space = SPACE.replace("  tp:", "  gpu: {type: categorical, values: [H100, Z100]}\n  tp:")
    return write(folder, space=space.replace("gpu: H100, ", ""))


def unwritable_folder(folder: Path) -> Path:
    """A folder nobody may create files in (root ignores permission bits: /sys refuses it)."""
    if os.geteuid() == 0:
        target = Path("/sys/kernel/energylens-test")
        try:
            target.mkdir()
        except OSError:
            return target
        target.rmdir()  # pragma: no cover - /sys let root write: no such folder here
        pytest.skip("no unwritable folder on this machine")
    locked = folder / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    return locked / "out"


def denied_results(folder: Path) -> list[str]:
    write(folder, study=STUDY.replace("results: out", f"results: {unwritable_folder(folder)}"))
    return ["study", "run", "study.yaml"]


def denied_calibration(folder: Path) -> list[str]:
    write(folder)
    return ["calibrate", "--output", str(unwritable_folder(folder) / "c.yaml")]


def missing_driver(folder: Path) -> list[str]:
    write(folder)
    for module in DRIVERS:
        sys.modules[module] = None  # type: ignore[assignment]  # importing it now fails
    return ["study", "run", "study.yaml", "--storage", "postgresql+psycopg://bob:s3cret@localhost/x"]


ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["space: *i", "objectives: [minimize tpot_s]"]
)

DRIVERS = ("psycopg", "psycopg2")
DEFINITION_CHANGED = STUDY.replace("minimize tpot_s]", "minimize ttft_s]")


def _note(folder: Path) -> list[str]:
    (folder / "out").mkdir()
    (folder / "out" / "notes.txt").write_text("mine")
    return []


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it, and a fragment the error line must contain."""

    id: str
    setup: Callable[[Path], list[str]]
    fragment: str


CATALOGUE = [
    # study files: keys, knobs, values, metrics, types
    Case(
        "unknown top-level key", edit("model:", "modle:"), "modle: unknown key 'modle'; did you mean 'model'?"
    ),
    Case(
        "unknown knob name",
        edit("  tp:", "  tensor_parallel:", where="space"),
        "knobs.tensor_parallel: unknown knob 'tensor_parallel'",
    ),
    Case(
        "unknown GPU in a space",
        edit("gpu: H100", "gpu: H900", where="space"),
        "fixed.gpu: expected a GPU of the database; did you mean",
    ),
    Case(
        "unknown GPU among knob values",
        gpu_knob_with_unknown_value,
        "knobs.gpu.values[1]: expected a GPU of the database",
    ),
    Case(
        "unknown dtype",
        edit("num_gpus: 2}", "num_gpus: 2, dtype: fp4}", where="space"),
        "fixed.dtype: expected a weight dtype",
    ),
    Case(
        "misspelt objective metric",
        edit("minimize energy_per_output_token_j", "minimize energy_per_token_j"),
        "objectives[0]: unknown metric 'energy_per_token_j'; did you mean 'energy_per_output_token_j'?",
    ),
    Case(
        "misspelt SLO metric",
        edit("tpot_s <= 0.05", "tpot <= 0.05"),
        "constraints[0]: unknown metric 'tpot'; did you mean 'tpot_s'?",
    ),
    Case(
        "moe_skew is not a knob",
        edit("  tp:", "  moe_skew: {type: ordinal, values: [0, 1]}\n  tp:", where="space"),
        "unknown knob 'moe_skew'",
    ),
    Case(
        "negative moe_skew",
        edit("output_tokens: 32}", "output_tokens: 32, moe_skew: -1}"),
        "workload.moe_skew: expected a number in [0, 100]",
    ),
    Case(
        "NaN moe_skew",
        edit("output_tokens: 32}", "output_tokens: 32, moe_skew: .nan}"),
        "workload.moe_skew: expected a number in [0, 100]",
    ),
    Case(
        "moe_skew past the routing's bound",
        edit("output_tokens: 32}", "output_tokens: 32, moe_skew: 1000}"),
        "workload.moe_skew: expected a number in [0, 100]",
    ),
    Case(
        "NaN workload value",
        edit("input_tokens: 256", "input_tokens: .nan"),
        "workload.input_tokens: expected a finite number > 0",
    ),
    Case(
        "negative workload value",
        edit("output_tokens: 32", "output_tokens: -32"),
        "workload.output_tokens: expected a finite number > 0",
    ),
    Case(
        "unknown workload key",
        edit("output_tokens: 32}", "output_tokens: 32, colour: red}"),
        "workload.colour: unknown key",
    ),
    Case(
        "unknown workload kind",
        edit("kind: batch", "kind: streaming"),
        "workload.kind: unknown kind 'streaming'",
    ),
    Case(
        "decode clock in a serving study",
        lambda f: write(
            f,
            study=STUDY.replace("kind: batch", "kind: serving"),
            space=SPACE.replace(
                "  tp:", "  decode_clock_fraction: {type: ordinal, values: [0.5, 1.0]}\n  tp:"
            ),
        ),
        "decode_clock_fraction: expected workload kind 'batch'",
    ),
    Case(
        "clock fraction above 1",
        edit(
            "  tp:", "  clock_fraction: {type: float, low: 0.5, high: 1.5, step: 0.5}\n  tp:", where="space"
        ),
        "knobs.clock_fraction.high: expected a fraction",
    ),
    Case(
        "negative overlap SMs",
        edit("  tp:", "  overlap_sms: {type: int, low: -4, high: 8}\n  tp:", where="space"),
        "knobs.overlap_sms.low: expected an integer >= 0",
    ),
    Case(
        "bool knob on an integer parameter",
        edit("tp: {type: ordinal, values: [1, 2]}", "tp: {type: bool}", where="space"),
        "knobs.tp.type: expected an integer >= 1",
    ),
    Case(
        "unknown fusion",
        edit("num_gpus: 2}", "num_gpus: 2, fusion: 'attention,magic'}", where="space"),
        "fixed.fusion: expected 'none' or a comma list",
    ),
    Case(
        "unknown fixed parameter",
        edit("num_gpus: 2}", "num_gpus: 2, colour: red}", where="space"),
        "fixed.colour: unknown parameter 'colour'",
    ),
    Case("objective direction", edit("minimize tpot_s]", "minimise tpot_s]"), "objectives[1]: expected"),
    Case("malformed constraint", edit("tpot_s <= 0.05", "tpot_s < 0.05"), "constraints[0]: expected"),
    Case(
        "unknown engine", edit("engine: grid", "engine: magic"), "engine: expected one of optuna, pymoo, grid"
    ),
    Case(
        "sampler of another engine",
        edit("engine: grid", "engine: pymoo\nsampler: tpe"),
        "sampler: expected one of",
    ),
    Case(
        "continuous knob on the grid engine",
        edit("  tp:", "  clock_fraction: {type: float, low: 0.5, high: 1.0}\n  tp:", where="space"),
        "engine: expected a space without continuous knobs",
    ),
    Case(
        "grid too large without a budget",
        edit(
            "batch: {type: ordinal, values: [1, 8]}",
            "batch: {type: int, low: 1, high: 2000000}",
            where="space",
        ),
        "expected a budget for a grid of 4,000,000 points",
    ),
    # models, traces and calibration files named by the study
    Case("unknown model", edit("llama-3.1-8b", "llama-9"), "model: unknown model 'llama-9'"),
    Case("missing config.json", edit("llama-3.1-8b", "cfg/config.json"), "model:"),
    Case(
        "config.json not JSON",
        lambda f: write(f, study=STUDY.replace("llama-3.1-8b", "config.json"), config__json="{not json"),
        "not valid JSON",
    ),
    Case(
        "config.json of an unknown model type",
        lambda f: write(
            f, study=STUDY.replace("llama-3.1-8b", "config.json"), config__json='{"model_type": "gpt9"}'
        ),
        "model_type 'gpt9'",
    ),
    Case(
        "config.json with a zero layer count",
        lambda f: write(
            f,
            study=STUDY.replace("llama-3.1-8b", "config.json"),
            config__json='{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 0, '
            '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}',
        ),
        "'num_hidden_layers' must be an integer >= 1",
    ),
    Case("empty config.json", lambda f: config_json(f, b""), "config.json: not valid JSON"),
    Case("config.json not UTF-8", lambda f: config_json(f, b'{"model_type": "llama\xff"}'), "not UTF-8"),
    Case("config.json holding a list", lambda f: config_json(f, b"[1, 2]"), "expected a JSON object"),
    Case(
        "config.json with a text hidden size",
        lambda f: config_json(
            f,
            b'{"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2, '
            b'"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}',
        ),
        "'hidden_size' must be an integer >= 1, got 'big'",
    ),
    Case(
        "missing trace",
        edit("input_tokens: 256, output_tokens: 32", "trace: trace.csv"),
        "trace.csv: cannot read trace",
    ),
    Case(
        "trace without the length columns",
        lambda f: write(
            f,
            study=STUDY.replace("input_tokens: 256, output_tokens: 32", "trace: trace.csv"),
            trace__csv="a,b\n1,2\n",
        ),
        "trace.csv",
    ),
    Case(
        "missing calibration file",
        edit("engine: grid", "engine: grid\ncalibration: cal.yaml"),
        "no such calibration file",
    ),
    Case(
        "calibration with an unknown key",
        lambda f: write(f, study=STUDY + "calibration: cal.yaml\n", cal__yaml=CALIBRATION + "kernals: {}\n"),
        "kernals: unknown key; did you mean 'kernels'?",
    ),
    Case(
        "calibration with a NaN value",
        lambda f: write(
            f,
            study=STUDY + "calibration: cal.yaml\n",
            cal__yaml=CALIBRATION.replace(
                "runtimes: {}", "runtimes: {vllm: {H100-SXM: {step_overhead_s: .nan}}}"
            ),
        ),
        "step_overhead_s: expected a finite number, got nan",
    ),
    # files that are not study files
    Case("empty study file", files("study run study.yaml", study__yaml=""), "empty file"),
    Case(
        "study file not UTF-8",
        files("study run study.yaml", study__yaml=b"name: caf\xe9\n"),
        "not UTF-8 text",
    ),
    Case("YAML alias bomb", files("study run study.yaml", study__yaml=ALIAS_BOMB), "expands to more than"),
    Case(
        "YAML syntax error",
        files("study run study.yaml", study__yaml="space: [unclosed\n"),
        "invalid YAML at line",
    ),
    Case(  # PyYAML would keep the second and drop the first silently
        "a key given twice",
        files("study check study.yaml",
              study__yaml="objectives: [minimize energy_j]\nobjectives: [minimize num_gpus]\n"),
        "key 'objectives' given twice (line 2)",
    ),
    Case("study file is a folder", folder_as_study, "cannot read file"),
    Case("missing study file", files("study run nope.yaml"), "nope.yaml: cannot read file"),
    Case(
        "missing space file",
        edit("space: space.yaml", "space: spaces/nope.yaml"),
        "nope.yaml: cannot read file",
    ),
    Case("empty space file", lambda f: write(f, space=""), "space.yaml: empty file"),
    # command-line values
    Case("zero trials", lambda f: [*write(f), "--trials", "0"], "--trials: expected an integer >= 1, got 0"),
    Case(
        "negative trials",
        lambda f: [*write(f), "--trials", "-5"],
        "--trials: expected an integer >= 1, got -5",
    ),
    Case("negative seed", lambda f: [*write(f), "--seed", "-1"], "--seed: expected an integer >= 0"),
    Case("unknown engine option", lambda f: [*write(f), "--engine", "magic"], "invalid choice: 'magic'"),
    Case("bad new study name", lambda f: [*write(f), "--new-study", "a b"], "--new-study: expected letters"),
    Case(
        "rank budget 0",
        run_first("study", "rank", "study.yaml", "--budget", "0"),
        "--budget: expected an integer >= 1",
    ),
    Case(
        "resume without --trials", run_first("study", "resume", "study.yaml"), "--trials: expected the total"
    ),
    # storages
    Case(
        "malformed storage URL",
        lambda f: [*write(f), "--storage", "postgresql+psycopg://bob:s3cret@:x/db"],
        "cannot open the storage",
    ),
    Case(
        "unknown database dialect",
        lambda f: [*write(f), "--storage", "nosuchdb://bob:s3cret@host/db"],
        "cannot open the storage",
    ),
    Case("PostgreSQL driver not installed", missing_driver, "pip install 'energylens[postgres]'"),
    Case(
        "PostgreSQL server not reachable",
        lambda f: [*write(f), "--storage", "postgresql+psycopg://bob:s3cret@127.0.0.1:9/db"],
        "cannot open the storage",
    ),
    Case(
        "password in the URL query",
        lambda f: [*write(f), "--storage", "postgresql+psycopg://bob@127.0.0.1:9/db?password=s3cret"],
        "db?password=***: cannot open the storage",
    ),
    Case("storage is a folder", lambda f: [*write(f), "--storage", "."], "storage: is a folder"),
    # study state, results folders and files that exist
    Case("run twice", run_first("study", "run", "study.yaml"), "already has 4 completed trials"),
    Case(
        "resume an edited study",
        run_first("study", "resume", "study.yaml", "--trials", "9", study_after=DEFINITION_CHANGED),
        'was created from another definition (objectives: ["minimize energy_per_output_token_j", '
        '"minimize tpot_s"] -> ["minimize energy_per_output_token_j", "minimize ttft_s"])',
    ),
    Case(
        "resume a study never run",
        lambda f: [*write(f)[:1], "resume", "study.yaml", "--trials", "9"],
        "no study 'tiny' in",
    ),
    Case("report a study never run", lambda f: [*write(f)[:1], "report", "study.yaml"], "no study 'tiny' in"),
    Case(
        "results of another storage",
        run_first("study", "run", "study.yaml", "--storage", "other.journal"),
        "holds the results of study 'tiny'",
    ),
    Case(
        "results folder no study wrote",
        lambda f: [*write(f), *_note(f)],
        "exists and was not written by a study; use --force",
    ),
    Case(
        "results path is a file",
        lambda f: [*write(f, study=STUDY.replace("results: out", "results: study.yaml"))],
        "is a file, expected a folder",
    ),
    Case("unwritable results folder (permission denied)", denied_results, "cannot write"),
    Case(
        "worker on the grid engine",
        run_first("study", "worker", "study.yaml"),
        "workers need engine 'optuna'",
    ),
    Case("a space file given where a study file goes", files("study check space.yaml"),
         "this is a space file"),
    Case("init over an existing file", files("study init study.yaml"), "study.yaml: exists; use --force"),
    Case("init into a folder", files("study init ."), "is a folder"),
    Case("calibrate over an existing file", files("calibrate --output study.yaml"), "exists; use --force"),
    Case("calibrate into a folder", files("calibrate --output ."), "is a folder"),
    Case("calibrate into an unwritable folder", denied_calibration, "cannot write into"),
    Case("a load plot into a folder (before the run is simulated)",
         files("predict --model llama-3.1-8b --gpu h100 --workload load --request-rate 2 "
               "--plot ."), "--plot is a folder"),
    Case(
        "calibrate with a missing measurement file",
        files("calibrate --output c.yaml --mlenergy nope.json"),
        "nope.json: no such measurement file",
    ),
    # numbers numpy, a division or a process pool would have refused with a traceback
    Case("a load run's negative seed",
         files("predict --model llama-3.1-8b --gpu h100 --workload load --request-rate 2 --seed -1"),
         "argument --seed: expected an integer >= 0, got -1"),
    Case(
        "a study's load workload with a negative seed",
        edit("{kind: batch, input_tokens: 256, output_tokens: 32}",
             "{kind: load, input_tokens: 256, output_tokens: 32, request_rate: 1, seed: -1}"),
        "workload: seed must be an integer >= 0, got -1",
    ),
    Case(
        "a float knob's step of 0",
        edit("batch: {type: ordinal, values: [1, 8]}",
             "clock_fraction: {type: float, low: 0.5, high: 1.0, step: 0}", where="space"),
        "knobs.clock_fraction.step: expected a positive number dividing high - low, got 0",
    ),
    Case("k-shot rows chosen with a negative seed",
         files("validate measurements m.csv --k-shot 1 --group-by gpu --seed -1",
               m__csv=MEASUREMENTS), "argument --seed: expected an integer >= 0, got -1"),
    Case("a negative --max-rows", files("validate measurements m.csv --max-rows -1", m__csv=MEASUREMENTS),
         "argument --max-rows: expected an integer >= 0, got -1"),
    Case("calibrate with no processes", files("calibrate --jobs 0 --output c.yaml"),
         "argument --jobs: expected a positive integer, got 0"),
    # validate --all and the flags only it reads
    Case("validate --all with a FORMAT and FILE",
         files("validate --all measurements m.csv", m__csv=MEASUREMENTS),
         "give it without FORMAT and FILE"),
    Case("validate --all on a missing data folder", files("validate --all --data nowhere"),
         "nowhere: no such data folder"),
    Case("validate --all on a folder without measurements", empty_data_folder,
         "empty: no known measurement file in it"),
    Case("--write-docs without --all",
         files("validate measurements m.csv --write-docs docs", m__csv=MEASUREMENTS),
         "--write-docs: only --all reads it"),
    Case("--gpu on a measurement CSV (each row names its own)",
         files("validate measurements m.csv --gpu h100", m__csv=MEASUREMENTS),
         "--gpu and --topology do not apply to 'validate measurements'"),
]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_dir()
    }


def test_the_catalogue_is_large_and_its_names_unique() -> None:
    ids = [case.id for case in CATALOGUE]
    assert len(ids) == len(set(ids)) >= 40


@pytest.mark.parametrize("case", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(case: Case, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    drivers = {m: sys.modules[m] for m in DRIVERS if m in sys.modules}
    try:
        argv = case.setup(tmp_path)
        capsys.readouterr()
        before = snapshot(tmp_path)
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse errors exit from inside the parser
            code = exc.code
    finally:
        for module in DRIVERS:
            sys.modules.pop(module, None)
        sys.modules.update(drivers)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert case.fragment in lines[0], lines[0]
    assert "s3cret" not in err  # a password in a URL is never printed
    assert snapshot(tmp_path) == before


def test_ctrl_c_stops_cleanly_and_leaves_a_resumable_study(tmp_path) -> None:
    """SIGINT in the middle of an Optuna study: one line, exit 130, the completed trials kept,
    none left RUNNING, and ``study resume`` reaches its total."""
    (tmp_path / "space.yaml").write_text(
        textwrap.dedent("""\
        knobs:
          tp: {type: ordinal, values: [1, 2, 4, 8]}
          batch: {type: int, low: 1, high: 256}
          clock_fraction: {type: float, low: 0.5, high: 1.0}
        fixed: {gpu: H100, num_gpus: 8}
        """)
    )
    study = STUDY.replace("engine: grid", "engine: optuna\nsampler: random\nseed: 0")
    (tmp_path / "study.yaml").write_text(study)
    command = [sys.executable, "-m", "energylens.cli", "study", "run", "study.yaml", "--trials", "100000"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    journal = tmp_path / "out" / "storage.journal"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not journal.exists() or journal.stat().st_size < 200_000):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (
        "interrupted: study 'tiny' keeps its" in lines[0] and "energylens study resume study.yaml" in lines[0]
    )

    import optuna
    from optuna.trial import TrialState

    from search.storage import open_storage

    trials = optuna.load_study(study_name="tiny", storage=open_storage(str(journal))).trials
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    assert done > 0 and not any(t.state == TrialState.RUNNING for t in trials)
    resumed = subprocess.run(
        [sys.executable, "-m", "energylens.cli", "study", "resume", "study.yaml", "--trials", str(done + 5)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    trials = optuna.load_study(study_name="tiny", storage=open_storage(str(journal))).trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) == done + 5


def test_ctrl_c_while_the_parser_is_built_is_one_line(monkeypatch, capsys) -> None:
    """Building the parser imports every command's module (a few tenths of a second): a
    Ctrl-C there ends with the line and code of one anywhere else, not a traceback."""
    from energylens.cli import main as cli_main

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["energylens.cli.main"], "build_parser", interrupted)
    try:
        code = cli_main(["models"])
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped main() as a KeyboardInterrupt")
    assert code == 130
    assert capsys.readouterr().err == "energylens: interrupted\n"


def test_ctrl_c_while_the_command_line_loads_is_one_line() -> None:
    """A Ctrl-C while ``energylens`` imports its modules, before ``main`` runs (the console
    script and ``python -m energylens.cli`` both import the package first)."""
    hook = textwrap.dedent("""\
        import sys
        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "energylens.cli.main":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, Interrupt())
        sys.argv = ["energylens", "models"]
        import runpy
        runpy.run_module("energylens.cli", run_name="__main__")
        """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", hook], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "energylens: interrupted\n"
