"""data/measurements/SOURCES.md says what the code and the data say: the chat prompt and
vLLM's reserve the code uses, that LLM-Inference-Bench is fitted on, and how many of the
rows the AIConfigurator converter rewrites from N x N GPUs have a twin recording N."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from energylens.measurements.convert import aiconfigurator as aic
from energylens.measurements.mlenergy import TASK_INPUT_TOKENS

REPO = Path(__file__).resolve().parents[1]
SOURCES = (REPO / "data/measurements/SOURCES.md").read_text()
SILICON = REPO.parent / "shared/data/aiconfigurator/silicon_sample.csv"


def _row(folder: str) -> str:
    return next(line for line in SOURCES.splitlines() if line.startswith(f"| `{folder}"))


def test_the_chat_prompt_and_vllms_reserve_are_the_codes() -> None:
    row = _row("mlenergy/")
    prompt = re.search(r"`lm-arena-chat` (\d+) tokens", row)
    reserve = re.search(r"vLLM's memory reserve identified by the same runs: ([\d.]+) GB", row)
    assert prompt is not None and reserve is not None
    assert float(prompt.group(1)) == TASK_INPUT_TOKENS["lm-arena-chat"]  # 473 (was 478)
    vllm = yaml.safe_load((REPO / "energylens/data/runtimes/vllm.yaml").read_text())
    assert float(reserve.group(1)) * 1e9 == float(vllm["reserve_bytes"]["value"])  # 4 GB (was 3.5)


def test_llm_inference_bench_is_documented_as_fitted_where_the_calibration_fits_it() -> None:
    calibration = (REPO / "energylens/data/calibration.yaml").read_text()
    assert "fit: llm-inference-bench/vllm/H100-SXM" in calibration
    row = _row("llm-inference-bench/")
    assert "fit_bench" in row and "validation only, never fitted (`energylens validate" not in row


def _stated(size: str | None) -> int | None:
    return None if size is None or size.strip() in ("", "0") else int(float(size))


@pytest.mark.skipif(not SILICON.exists(), reason="needs ../shared/data beside the repository")
def test_the_n_by_n_rewrites_have_the_twins_sources_md_counts() -> None:
    """A rewritten row's twin records the N-GPU layout: same engine, GPU, model (R1 and V3
    as one), clients and lengths, TTFT and TPOT within 0.2 %. 103 of 249 (TP), 23 of 37
    (TensorRT-LLM attention DP), 30 of 97 (vLLM): not every row, as SOURCES.md once said."""
    with SILICON.open() as f:
        rows = [r for r in csv.DictReader(f)
                if r["mode"] == "agg" and aic._CONCURRENCY.search(r["silicon_data_source"])]

    def layout(r: dict[str, str]) -> tuple[int, int | None, int | None, int | None]:
        return (int(float(r["tp_size"])), *(_stated(r[k]) for k in
                                            ("attention_dp_size", "moe_tp_size", "moe_ep_size")))

    def launch(r: dict[str, str]):  # type: ignore[no-untyped-def]
        tp, adp, moe_tp, ep = layout(r)
        return aic._unsquared(tp=tp, adp=adp, moe_tp=moe_tp, ep=ep)

    def where(r: dict[str, str]) -> tuple[str, ...]:
        model = "deepseek-v3" if r["model_path"] in ("deepseek-ai/DeepSeek-R1",
                                                     "deepseek-ai/DeepSeek-V3") else r["model_path"]
        clients = aic._CONCURRENCY.search(r["silicon_data_source"])
        assert clients is not None
        return (r["backend"], r["system"], model, clients.group(1), r["isl"], r["osl"])

    def gpus(t: tuple[int, int | None, int | None, int | None]) -> tuple[int, int, int]:
        return (t[0], t[1] or 1, t[3] or 1)

    recorded = defaultdict(list)
    for r in rows:
        if launch(r) is None:
            recorded[where(r)].append(r)
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        n_gpus = launch(r)
        if n_gpus is None:
            continue
        kind = "tp" if (layout(r)[1] or 1) == 1 else r["backend"]
        twin = any(gpus(layout(o)) == gpus(n_gpus)
                   and all(abs(float(o[m]) / float(r[m]) - 1) <= 2e-3
                           for m in ("silicon_ttft_ms", "silicon_tpot_ms"))
                   for o in recorded[where(r)])
        found[kind][0] += twin
        found[kind][1] += 1
    assert dict(found) == {"tp": [103, 249], "trtllm": [23, 37], "vllm": [30, 97]}
    row = _row("aiconfigurator/silicon_sample_agg.csv")
    for have, of in found.values():
        assert f"{have} of the {of}" in row
