"""Measurement loaders on the copied files, and their errors on broken files."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from energylens.measurements.formats import (
    FORMATS,
    MeasurementError,
    MeasurementRow,
    load_measurements,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
VIDUR_H100_PHI2 = DATA / "vidur/compute/h100/microsoft/phi-2/mlp.csv"
VIDUR_A100_LLAMA3 = DATA / "vidur/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
H100_ALL_REDUCE = DATA / "vidur/network/h100_dgx/all_reduce.csv"
MATMUL = DATA / "llmcompass/matmul_A100.csv"
MLENERGY_TASK = DATA / "mlenergy/tasks/gpqa.json"
MLENERGY_MODEL = DATA / "mlenergy/models/Qwen__Qwen3-8B__gpqa.json"

SPLITWISE_CSV = """model,hardware,tensor_parallel,prompt_size,batch_size,token_size,prompt_time,token_time
bloom-176b,a100-80gb,8,128,1,1,38.9,22.5
bloom-176b,a100-80gb,8,512,4,1,120.5,24.0
llama2-70b,h100-80gb,4,2048,8,1,310.25,18.75
"""


def _data_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def _csv_dicts(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _raises(path: Path, *fragments: str, **kwargs) -> MeasurementError:
    """Load ``path`` expecting a one-line error that names the file and every fragment."""
    with pytest.raises(MeasurementError) as info:
        load_measurements(path=path, **kwargs)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


# --- real files ------------------------------------------------------------------------


def test_copies_are_present_and_small() -> None:
    files = [p for p in DATA.rglob("*") if p.is_file()]
    # Vidur 8.3 MB, AIConfigurator's kernel tables 5.6 MB (calibration inputs), the rest < 4 MB
    assert sum(p.stat().st_size for p in files) < 20e6
    assert (DATA / "SOURCES.md").is_file()
    assert not (DATA / "transcribed").exists()


def test_mlenergy_task_file() -> None:
    doc = json.loads(MLENERGY_TASK.read_text())
    result = load_measurements(format="mlenergy", path=MLENERGY_TASK)
    assert result.format == "mlenergy" and result.file == str(MLENERGY_TASK)
    assert len(result.rows) == len(doc["configurations"]) == 132
    first, raw = result.rows[0], doc["configurations"][0]
    assert isinstance(first, MeasurementRow)
    assert first.input["model_id"] == raw["model_id"]
    assert first.input["task"] == "gpqa" and first.context["task"] == "gpqa"
    assert first.input["tensor_parallel"] == raw["tensor_parallel"]
    assert first.measured == {
        k: raw[k]
        for k in (
            "energy_per_token_joules",
            "median_itl_ms",
            "avg_power_watts",
            "output_throughput_tokens_per_sec",
        )
    }


def test_mlenergy_model_file_flattens_parallelization() -> None:
    doc = json.loads(MLENERGY_MODEL.read_text())
    result = load_measurements(format="mlenergy", path=MLENERGY_MODEL)
    assert len(result.rows) == len(doc["configurations"])
    for row, raw in zip(result.rows, doc["configurations"], strict=True):
        assert row.input["model_id"] == doc["model_id"] == "Qwen/Qwen3-8B"
        assert row.input["weight_precision"] == doc["weight_precision"]
        assert row.input["task"] == doc["task"]
        for key in ("tensor_parallel", "expert_parallel", "data_parallel"):
            assert row.input[key] == raw["parallelization"][key]
        assert row.measured["median_itl_ms"] == raw["median_itl_ms"]
        assert row.context["source"] == "model"


def test_mlenergy_every_copied_file_loads() -> None:
    for path in sorted((DATA / "mlenergy").rglob("*.json")):
        doc = json.loads(path.read_text())
        assert len(load_measurements(format="mlenergy", path=path).rows) == len(doc["configurations"])


def test_vidur_mlp_real_file() -> None:
    result = load_measurements(format="vidur-mlp", path=VIDUR_A100_LLAMA3)
    raw = _csv_dicts(VIDUR_A100_LLAMA3)
    assert len(result.rows) == _data_lines(VIDUR_A100_LLAMA3) - 1 == len(raw)
    row = result.rows[5]
    assert row.measured["attn_pre_proj"] == float(raw[5]["time_stats.attn_pre_proj.median"])
    assert row.measured["mlp_down_proj"] == float(raw[5]["time_stats.mlp_down_proj.median"])
    assert set(row.measured) == {
        "emb",
        "input_layernorm",
        "attn_pre_proj",
        "attn_rope",
        "attn_post_proj",
        "post_attention_layernorm",
        "mlp_up_proj",
        "mlp_act",
        "mlp_down_proj",
        "add",
    }
    assert row.input["num_tokens"] == int(raw[5]["num_tokens"])
    assert row.input["vocab_size"] == 128256 and row.input["use_gated_mlp"] is True
    assert row.context["gpu"] == "A100"
    assert row.context["model"] == "meta-llama/Meta-Llama-3-8B"


def test_vidur_mlp_gpu_inferred_and_overridden() -> None:
    phi2 = load_measurements(format="vidur-mlp", path=VIDUR_H100_PHI2)
    assert phi2.rows[0].context["gpu"] == "H100"
    assert phi2.rows[0].input["use_gated_mlp"] is False
    assert len(phi2.rows) == _data_lines(VIDUR_H100_PHI2) - 1
    other = load_measurements(format="vidur-mlp", path=VIDUR_H100_PHI2, gpu="H200")
    assert other.rows[0].context["gpu"] == "H200"


def test_vidur_mlp_median_only_file(tmp_path: Path) -> None:
    text = (
        "n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tokens,"
        "num_tensor_parallel_workers,time_stats.attn_pre_proj.median,"
        "time_stats.mlp_up_proj.median\n"
        "32,8,4096,14336,True,128,2,0.05,0.125\n"
        "32,8,4096,14336,True,256,2,0.09,0.25\n"
    )
    path = _write(tmp_path / "mlp.csv", text)
    result = load_measurements(format="vidur-mlp", path=path, gpu="H100")
    assert len(result.rows) == 2
    assert result.rows[1].measured == {"attn_pre_proj": 0.09, "mlp_up_proj": 0.25}
    assert result.rows[1].input["num_tensor_parallel_workers"] == 2
    assert "vocab_size" not in result.rows[0].input
    assert result.rows[0].context["gpu"] == "H100"
    _raises(path, "cannot infer the GPU", "gpu=", format="vidur-mlp")


@pytest.mark.parametrize(
    ("sku", "name", "gpu", "link"),
    [
        ("h100_dgx", "all_reduce.csv", "H100", "nvswitch"),
        ("a100_dgx", "all_reduce.csv", "A100", "nvswitch"),
        ("a100_pairwise_nvlink", "all_reduce.csv", "A100", "nvlink-pairwise"),
        ("a40_pairwise_nvlink", "send_recv.csv", "A40", "nvlink-pairwise"),
        ("h100_pairwise_nvlink", "send_recv.csv", "H100", "nvlink-pairwise"),
    ],
)
def test_vidur_network_real_files(sku: str, name: str, gpu: str, link: str) -> None:
    path = DATA / "vidur/network" / sku / name
    collective = name.removesuffix(".csv")
    result = load_measurements(format="vidur-network", path=path)
    raw = _csv_dicts(path)
    assert len(result.rows) == _data_lines(path) - 1 == len(raw)
    row = result.rows[-1]
    assert row.input == {
        "collective": collective,
        "num_workers": int(raw[-1]["num_workers"]),
        "devices_per_node": int(raw[-1]["devices_per_node"]),
        "size": int(raw[-1]["size"]),
    }
    assert row.measured == {collective: float(raw[-1][f"time_stats.{collective}.median"])}
    assert (row.context["sku"], row.context["gpu"], row.context["link"]) == (sku, gpu, link)


def test_vidur_network_flags_upstream_duplicate_and_gpu_override() -> None:
    dup = DATA / "vidur/network/h100_pairwise_nvlink/send_recv.csv"
    ctx = load_measurements(format="vidur-network", path=dup).rows[0].context
    assert ctx["duplicate_of"] == "a100_pairwise_nvlink/send_recv.csv"
    result = load_measurements(format="vidur-network", path=H100_ALL_REDUCE, gpu="H200")
    assert result.rows[0].context["gpu"] == "H200"
    assert result.rows[0].context["link"] == "nvswitch"


def test_llmcompass_matmul_real_file() -> None:
    result = load_measurements(format="llmcompass-matmul", path=MATMUL)
    assert len(result.rows) == _data_lines(MATMUL) == 20
    first = result.rows[0]
    assert first.input == {"M": 64, "N": 12288, "K": 12288}
    assert first.measured["time_s"] == pytest.approx(0.1900e-3, rel=1e-12)
    assert first.context["gpu"] == "A100" and first.context["tflops"] == pytest.approx(101.7124)


def test_splitwise_fixture(tmp_path: Path) -> None:
    path = _write(tmp_path / "perf_model.csv", SPLITWISE_CSV)
    result = load_measurements(format="splitwise", path=path)
    assert len(result.rows) == 3
    row = result.rows[2]
    assert row.input == {
        "model": "llama2-70b",
        "hardware": "h100-80gb",
        "prompt_size": 2048,
        "batch_size": 8,
        "token_size": 1,
        "tensor_parallel": 4,
    }
    assert row.measured == {"prompt_time": 310.25, "token_time": 18.75}
    assert row.context["gpu"] == "h100-80gb"


# --- errors ----------------------------------------------------------------------------


def _drop_column(src: Path, dst: Path, column: str) -> Path:
    rows = _csv_dicts(src)[:5]
    header = [c for c in rows[0] if c != column]
    dst.parent.mkdir(parents=True, exist_ok=True)
    with dst.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return dst


def _replace_cell(src: Path, dst: Path, column: str, row: int, value: str) -> Path:
    """Copy the first rows of ``src`` with data row ``row`` (from 1) of ``column`` set."""
    rows = _csv_dicts(src)[:5]
    rows[row - 1][column] = value
    dst.parent.mkdir(parents=True, exist_ok=True)
    with dst.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return dst


@pytest.mark.parametrize("format", FORMATS)
def test_empty_file(tmp_path: Path, format: str) -> None:
    path = _write(tmp_path / "network" / "h100_dgx" / "matmul_A100.csv", "")
    _raises(path, "empty file", format=format, gpu="H100")
    _write(path, "  \n\n")
    _raises(path, "empty file", format=format, gpu="H100")


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    _raises(tmp_path / "nope.csv", "no such file", format="splitwise")
    _raises(MATMUL, "unknown format 'vidur'", "vidur-mlp", format="vidur")


def test_header_only(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", SPLITWISE_CSV.splitlines()[0] + "\n")
    _raises(path, "no data rows", format="splitwise")


def test_vidur_network_missing_median_column(tmp_path: Path) -> None:
    dst = tmp_path / "network" / "h100_dgx" / "all_reduce.csv"
    _drop_column(H100_ALL_REDUCE, dst, "time_stats.all_reduce.median")
    _raises(dst, "missing column 'time_stats.all_reduce.median'", format="vidur-network")


def test_vidur_network_missing_key_column(tmp_path: Path) -> None:
    dst = _drop_column(H100_ALL_REDUCE, tmp_path / "network/h100_dgx/all_reduce.csv", "size")
    _raises(dst, "missing column 'size'", format="vidur-network")


def test_vidur_network_size_must_be_positive(tmp_path: Path) -> None:
    dst = tmp_path / "network" / "h100_dgx" / "all_reduce.csv"
    _replace_cell(H100_ALL_REDUCE, dst, "size", 2, "0")
    _raises(dst, "column 'size' must be positive", "row 2", format="vidur-network")


def test_vidur_network_unknown_sku_needs_gpu(tmp_path: Path) -> None:
    dst = _drop_column(H100_ALL_REDUCE, tmp_path / "all_reduce.csv", "rank")
    _raises(dst, "cannot infer the GPU", format="vidur-network")
    result = load_measurements(format="vidur-network", path=dst, gpu="H100")
    assert len(result.rows) == 5 and result.rows[0].context["link"] is None


def test_vidur_mlp_missing_geometry_column(tmp_path: Path) -> None:
    dst = _drop_column(VIDUR_H100_PHI2, tmp_path / "mlp.csv", "num_tokens")
    _raises(dst, "missing column 'num_tokens'", format="vidur-mlp", gpu="H100")


def test_vidur_mlp_without_any_median(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mlp.csv",
        "n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tokens,"
        "num_tensor_parallel_workers,time_stats.add.mean\n32,8,4096,14336,True,128,1,0.1\n",
    )
    _raises(path, "missing column 'time_stats.<op>.median'", format="vidur-mlp", gpu="H100")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("abc", "non-numeric value 'abc' in row 3"),
        ("", "has no value in row 3"),
        ("nan", "non-finite value 'nan' in row 3"),
        ("-0.5", "must be positive"),
        ("12000", "expected milliseconds"),  # microseconds written into a ms column
    ],
)
def test_vidur_mlp_bad_median(tmp_path: Path, value: str, fragment: str) -> None:
    column = "time_stats.mlp_up_proj.median"
    dst = _replace_cell(VIDUR_H100_PHI2, tmp_path / "mlp.csv", column, 3, value)
    _raises(dst, f"column '{column}'", fragment, format="vidur-mlp", gpu="H100")


def test_vidur_mlp_bad_boolean(tmp_path: Path) -> None:
    dst = _replace_cell(VIDUR_H100_PHI2, tmp_path / "mlp.csv", "use_gated_mlp", 1, "maybe")
    _raises(dst, "column 'use_gated_mlp'", "non-boolean", format="vidur-mlp", gpu="H100")


def test_splitwise_missing_column(tmp_path: Path) -> None:
    text = re.sub(r",token_time$", "", SPLITWISE_CSV, count=1, flags=re.M)
    path = _write(tmp_path / "s.csv", text)
    _raises(path, "missing column 'token_time'", format="splitwise")


def test_splitwise_non_numeric(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", SPLITWISE_CSV.replace("310.25", "abc"))
    _raises(path, "column 'prompt_time' has non-numeric value 'abc' in row 3", format="splitwise")


def test_splitwise_time_must_be_positive(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", SPLITWISE_CSV.replace("22.5", "0"))
    _raises(path, "column 'token_time' must be positive", "row 1", format="splitwise")


def test_splitwise_non_integer_size(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", SPLITWISE_CSV.replace(",512,", ",512.5,"))
    _raises(path, "column 'prompt_size' must be an integer", "row 2", format="splitwise")


def _mlenergy_copy(tmp_path: Path, edit) -> Path:
    doc = json.loads(MLENERGY_TASK.read_text())
    doc["configurations"] = doc["configurations"][:4]
    edit(doc["configurations"])
    return _write(tmp_path / "task.json", json.dumps(doc))


def test_mlenergy_missing_key(tmp_path: Path) -> None:
    path = _mlenergy_copy(tmp_path, lambda cs: cs[2].pop("expert_parallel"))
    _raises(path, "configuration 2", "missing key 'expert_parallel'", format="mlenergy")


def test_mlenergy_missing_parallelization_in_model_file(tmp_path: Path) -> None:
    doc = json.loads(MLENERGY_MODEL.read_text())
    del doc["configurations"][1]["parallelization"]
    path = _write(tmp_path / "model.json", json.dumps(doc))
    _raises(path, "configuration 1: missing key 'tensor_parallel'", format="mlenergy")


def test_mlenergy_non_numeric(tmp_path: Path) -> None:
    path = _mlenergy_copy(tmp_path, lambda cs: cs[0].update(median_itl_ms="fast"))
    _raises(path, "configuration 0", "'median_itl_ms'", "non-numeric", format="mlenergy")


def test_mlenergy_power_in_milliwatts(tmp_path: Path) -> None:
    def to_mw(cs):
        cs[1]["avg_power_watts"] *= 1000

    path = _mlenergy_copy(tmp_path, to_mw)
    _raises(path, "configuration 1", "'avg_power_watts'", "expected watts", format="mlenergy")


def test_mlenergy_power_must_be_positive(tmp_path: Path) -> None:
    path = _mlenergy_copy(tmp_path, lambda cs: cs[3].update(avg_power_watts=0))
    _raises(path, "configuration 3", "'avg_power_watts' must be positive", format="mlenergy")


def test_mlenergy_energy_inconsistent_with_power(tmp_path: Path) -> None:
    def to_kj(cs):
        cs[0]["energy_per_token_joules"] /= 1000

    path = _mlenergy_copy(tmp_path, to_kj)
    _raises(path, "'energy_per_token_joules'", "check units", format="mlenergy")


def test_mlenergy_not_a_configuration_file(tmp_path: Path) -> None:
    _raises(_write(tmp_path / "x.json", "{nope"), "invalid JSON", format="mlenergy")
    _raises(_write(tmp_path / "y.json", "[1, 2]"), "'configurations' list", format="mlenergy")


def _matmul_copy(tmp_path: Path, old: str, new: str) -> Path:
    return _write(tmp_path / "matmul_A100.csv", MATMUL.read_text().replace(old, new, 1))


def test_llmcompass_unknown_unit(tmp_path: Path) -> None:
    path = _matmul_copy(tmp_path, "0.3185ms", "0.3185min")
    _raises(path, "column 'time'", "unknown unit 'min'", "row 3", format="llmcompass-matmul")
    path = _matmul_copy(tmp_path, "101.7124Tflops", "101.7124Tops")
    _raises(path, "column 'TFLOPS'", "unknown unit 'Tops'", format="llmcompass-matmul")


def test_llmcompass_missing_unit_and_non_numeric(tmp_path: Path) -> None:
    path = _matmul_copy(tmp_path, "0.3185ms", "0.3185")
    _raises(path, "column 'time' has no unit", "row 3", format="llmcompass-matmul")
    path = _matmul_copy(tmp_path, "64, ", "sixty-four, ")
    _raises(path, "column 'M' has non-numeric value", "row 1", format="llmcompass-matmul")


def test_llmcompass_wrong_unit_detected_by_throughput(tmp_path: Path) -> None:
    path = _matmul_copy(tmp_path, "0.1900ms", "0.1900us")
    _raises(path, "column 'time'", "'TFLOPS'", "check units", format="llmcompass-matmul")


def test_llmcompass_missing_field(tmp_path: Path) -> None:
    path = _matmul_copy(tmp_path, ", 101.7124Tflops", "")
    _raises(path, "row 1 has 4 fields; expected 5", format="llmcompass-matmul")


def test_llmcompass_gpu_from_name_or_argument(tmp_path: Path) -> None:
    path = _write(tmp_path / "matmul.csv", MATMUL.read_text())
    _raises(path, "cannot infer the GPU", format="llmcompass-matmul")
    result = load_measurements(format="llmcompass-matmul", path=path, gpu="H100")
    assert result.rows[0].context["gpu"] == "H100"
