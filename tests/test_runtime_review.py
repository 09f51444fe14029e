"""A review of the runtime profiles: precision gates by GPU generation, SGLang's own running
cap, fact kinds that match their sources, the docs table against the profiles, and
SGLang's launch command (chunked-prefill size, EAGLE drafts)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from energylens.deployment import Deployment
from energylens.errors import ConfigError, EnergyLensError
from energylens.hardware import list_gpus, load_gpu
from energylens.measurements.user_csv import load_user_csv, row_case
from energylens.model.zoo import get_model
from energylens.runtime import get_runtime, runtime_names
from energylens.runtime.launch import launch_command
from energylens.runtime.profile import SERVER_MAX_SEQUENCES, load_facts
from energylens.runtime.sglang import REQUEST_POOL_MAX
from energylens.runtime.vllm import OFFLINE_SMALL_TOKENS, SERVE_LARGE, SERVE_SMALL
from energylens.workloads import Workload

REPO = Path(__file__).resolve().parents[1]
LLAMA = get_model("llama-3.1-8b")
A100, L40S, H100, B200 = (load_gpu(n) for n in ("a100-80gb-sxm", "l40s", "h100", "b200"))
WORKLOAD = Workload(kind="serving", batch=16, input_tokens=512, output_tokens=64)


def _refusal(runtime: str, gpu_name: str, **fields: object) -> str | None:
    """The one-line reason ``runtime`` refuses the deployment on the GPU, or None."""
    deployment = Deployment(runtime=runtime, **fields)  # type: ignore[arg-type]
    try:
        get_runtime(runtime).check_on(deployment=deployment, model=LLAMA,
                                      gpu=load_gpu(gpu_name))
    except ConfigError as error:
        assert "\n" not in str(error)
        return str(error)
    return None


# --- 1. precision gates by GPU generation ------------------------------------------------

@pytest.mark.parametrize(("runtime", "fields", "refused_on", "runs_on"), [
    ("trtllm", {"weight_dtype": "fp8"}, "a100-80gb-sxm", "l40s"),  # FP8 from Ada (8.9)
    ("trtllm", {"kv_dtype": "fp8"}, "a100-80gb-sxm", "h100"),
    ("trtllm", {"weight_dtype": "nvfp4"}, "h100", "b200"),  # FP4 on Blackwell only
    ("sglang", {"weight_dtype": "nvfp4"}, "h100", "b200"),  # modelopt_fp4: SM100
])
def test_a_precision_below_the_engines_generation_is_refused_in_one_line(
        runtime: str, fields: dict[str, str], refused_on: str, runs_on: str) -> None:
    reason = _refusal(runtime, refused_on, **fields)
    assert reason is not None and "compute capability" in reason
    precision = fields.get("weight_dtype") or fields["kv_dtype"]
    assert precision in reason and load_gpu(refused_on).name in reason
    assert _refusal(runtime, runs_on, **fields) is None


@pytest.mark.parametrize("fields", [{"weight_dtype": "fp8"}, {"weight_dtype": "nvfp4"},
                                    {"kv_dtype": "fp8"}])
def test_vllm_runs_fp8_and_nvfp4_on_ampere(fields: dict[str, str]) -> None:
    """Marlin weight-only kernels (vLLM 0.11's fp8.py and modelopt.py): not refused."""
    assert _refusal("vllm", "a100-80gb-sxm", **fields) is None


def test_sglang_fp8_weights_run_on_ampere() -> None:
    assert _refusal("sglang", "a100-80gb-sxm", weight_dtype="fp8") is None


def test_kv_auto_is_gated_as_the_precision_it_stores() -> None:
    """TensorRT-LLM's auto follows the checkpoint: a checkpoint declaring an FP8 cache gets
    one, which an A100 cannot hold; with the 16-bit cache asked for it runs."""
    declared = dataclasses.replace(LLAMA, kv_dtype="fp8")
    trtllm = get_runtime("trtllm")
    with pytest.raises(ConfigError, match="no fp8 KV cache on A100-80GB-SXM.*kv_dtype auto"):
        trtllm.check_on(deployment=Deployment(runtime="trtllm"), model=declared, gpu=A100)
    trtllm.check_on(deployment=Deployment(runtime="trtllm", kv_dtype="bf16"), model=declared,
                    gpu=A100)


@pytest.mark.parametrize("name", runtime_names())
def test_every_gate_refuses_exactly_below_its_capability(name: str) -> None:
    """On every NVIDIA GPU and every precision the engine runs: refused iff the GPU's
    compute capability is below the fact's; a GPU without one (not NVIDIA) passes; no
    GPU is given: the vendor check alone (``check``)."""
    profile = get_runtime(name)
    gates = (("weight_dtype", profile.weight_dtypes, profile.weight_min_compute_capability),
             ("kv_dtype", profile.kv_dtypes, profile.kv_min_compute_capability))
    for field, dtypes, need in gates:
        assert set(need) <= dtypes and all(value > 0 for value in need.values())
        for dtype in sorted(dtypes):
            deployment = Deployment(runtime=name, **{field: dtype})  # type: ignore[arg-type]
            profile.check_on(deployment=deployment, model=LLAMA, gpu=None)
            for gpu in list_gpus():
                def run(gpu=gpu, deployment=deployment) -> None:  # type: ignore[no-untyped-def]
                    profile.check_precision_on(deployment=deployment, model=LLAMA, gpu=gpu)
                cc = gpu.compute_capability
                if cc is not None and dtype in need and cc < need[dtype]:
                    with pytest.raises(ConfigError):
                        run()
                else:
                    run()


def test_a_gate_on_a_precision_the_engine_does_not_run_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from energylens.runtime import profile as module

    read = module.safe_load

    def bad(text: str) -> object:
        data = read(text)
        data["weight_min_compute_capability"]["value"] = {"q8_0": 8.0}  # llama.cpp has q8_0
        data["kv_min_compute_capability"]["value"] = {"fp8": 8.9}  # but no fp8 KV
        return data

    monkeypatch.setattr(module, "safe_load", bad)
    load_facts.cache_clear()
    try:
        with pytest.raises(EnergyLensError, match="kv_min_compute_capability names.*fp8"):
            load_facts("llama.cpp")
    finally:
        monkeypatch.undo()
        load_facts.cache_clear()


def test_no_measured_aiconfigurator_row_is_refused_by_a_gate() -> None:
    """Every (runtime, GPU, weight, KV) AIConfigurator measured runs (the rows
    ``validate measurements`` predicts) passes the gates."""
    rows = load_user_csv(REPO / "data/measurements/aiconfigurator/silicon_sample_agg.csv").rows
    seen: set[tuple[str, str, str | None, str | None]] = set()
    for row in rows:
        case = row_case(row)
        d = case.deployment
        key = (d.runtime, case.gpu, d.weight_dtype or case.model.weight_dtype, d.kv_dtype)
        if key in seen:
            continue
        seen.add(key)
        get_runtime(d.runtime).check_precision_on(deployment=d, model=case.model,
                                                  gpu=load_gpu(case.gpu))
    assert len(seen) > 10 and {k[0] for k in seen} == {"sglang", "trtllm", "vllm"}


# --- 2. SGLang's running cap -------------------------------------------------------------

@pytest.mark.parametrize(("kv_tokens", "context", "expected"), [
    (500_000, 8_192, 4096),  # 500,000 / 8,192 x 512 = 31,250 -> the pool's 4,096
    (300_000, 131_072, 2048),  # 1,171 -> the pool's 2,048 (half the KV: 150,000)
    (600_000, 100_000, 3072),  # 3,072 within 2,048-4,096
    (3_000, 1_024, 1500),  # half the KV pool's 3,000 tokens
])
def test_sglang_default_cap_is_half_the_kv_pool_or_its_request_pool(
        kv_tokens: int, context: int, expected: int) -> None:
    sglang = get_runtime("sglang")
    assert sglang.running_cap_on(gpu=H100, kv_tokens=kv_tokens,
                                 context_tokens=context) == expected


def test_sglang_cap_under_eagle_attention_dp_and_pipeline() -> None:
    """EAGLE: 48 for the server, 48 // 4 = 12 per DP rank; two pipeline stages: each
    micro-batch admits half (500,000 tokens at 8,192: 4,096 // 2)."""
    sglang = get_runtime("sglang")
    cap = sglang.running_cap_on
    assert cap(gpu=H100, kv_tokens=500_000, context_tokens=8192, speculative=True) == 48
    assert cap(gpu=H100, kv_tokens=500_000, context_tokens=8192, speculative=True,
               attention_dp=4) == 12
    assert cap(gpu=H100, kv_tokens=500_000, context_tokens=8192, pp=2) == 2048
    assert cap(gpu=H100, kv_tokens=1, context_tokens=8192) == 1  # never none


def test_sglang_server_limits_are_its_chunk_and_its_largest_cap() -> None:
    sglang = get_runtime("sglang")
    assert sglang.server_limits_on(gpu=H100) == (8192, REQUEST_POOL_MAX)
    assert sglang.server_limits_on(gpu=B200) == (16384, 4096)


def test_other_engines_cap_is_their_servers() -> None:
    """vLLM: vllm serve's 1,024 / 256 whatever the pool; the rest the assumed default."""
    vllm = get_runtime("vllm")
    for gpu, cap in ((H100, SERVE_LARGE[1]), (A100, SERVE_SMALL[1])):
        assert vllm.running_cap_on(gpu=gpu, kv_tokens=10, context_tokens=8192, pp=2) == cap
    assert get_runtime("trtllm").running_cap_on(
        gpu=H100, kv_tokens=10**6, context_tokens=1) == SERVER_MAX_SEQUENCES


# --- 3-5. kinds that match their sources, texts that stand on their own ------------------

#: Words with which a source says its fact was not read from a document or code.
UNREAD = re.compile(r"not re-read|not checked against|recalled: assumed|assumed like|"
                    r"recalled from the engine code|recalled from python/", re.IGNORECASE)


@pytest.mark.parametrize("name", runtime_names())
def test_a_documented_or_measured_fact_does_not_say_it_was_not_read(name: str) -> None:
    for fact, prov in get_runtime(name).provenance.items():
        if prov.kind in ("datasheet", "measured"):
            assert not UNREAD.search(prov.source), f"{name}.{fact}: {prov.kind}"


def test_default_fusions_were_measured_nowhere() -> None:
    assert all(get_runtime(name).provenance["default_fusions"].kind != "measured"
               for name in runtime_names())


@pytest.mark.parametrize("name", runtime_names())
def test_a_reserve_stands_on_its_own(name: str) -> None:
    """No reserve borrows vLLM's (3.5 GB, fitted): each says what it is and why."""
    source = get_runtime(name).provenance["reserve_bytes"].source
    if name != "vllm":
        assert "vllm" not in source.lower()


def test_vllm_graph_sizes_end_at_its_capture_cap() -> None:
    """[min(2 x max_num_seqs, 512)]: vllm serve's max_num_seqs 1,024 or 256 -> 512."""
    vllm = get_runtime("vllm")
    assert max(vllm.cuda_graph_batch_sizes) == min(2 * SERVE_LARGE[1], 512) \
        == min(2 * SERVE_SMALL[1], 512)
    assert "256 by default on H100" not in vllm.provenance["cuda_graph_batch_sizes"].source


def test_habana_static_batches_do_not_mix_prompts_with_decodes() -> None:
    """Its text-generation example prefills a whole padded batch, then decodes it."""
    habana = get_runtime("deepspeed-habana")
    assert habana.prefill_scheduling == "prefill-first"
    assert "no chunked prefill" in habana.provenance["prefill_chunk_tokens"].source


# --- 6. the docs table -------------------------------------------------------------------

def _table() -> dict[str, dict[str, str]]:
    lines = (REPO / "docs/runtimes.md").read_text("utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| runtime | version"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(header, cells, strict=True))
    return rows


def test_the_docs_table_marks_assumed_only_what_the_profiles_assume() -> None:
    table = _table()
    assert set(table) == set(runtime_names())
    for name, row in table.items():
        profile = get_runtime(name)
        for column, fact in (("tokens / pass", "prefill_chunk_tokens"),
                             ("CUDA graphs", "cuda_graph_batch_sizes"),
                             ("weights", "weight_dtypes")):
            if "(assumed)" in row[column]:
                assert profile.provenance[fact].kind == "assumed", (name, column)


def test_the_docs_table_gives_vllm_and_sglang_as_their_profiles() -> None:
    table = _table()
    vllm, sglang = table["vllm"], table["sglang"]
    for tokens in (get_runtime("vllm").prefill_chunk_tokens, OFFLINE_SMALL_TOKENS,
                   SERVE_LARGE[0], SERVE_SMALL[0]):
        assert f"{tokens:,}" in vllm["tokens / pass"]
    assert str(max(get_runtime("vllm").cuda_graph_batch_sizes)) in vllm["CUDA graphs"]
    assert str(max(get_runtime("sglang").cuda_graph_batch_sizes)) in sglang["CUDA graphs"]
    for tokens in (2048, 4096, 8192, 16384):
        assert f"{tokens:,}" in sglang["tokens / pass"]


# --- 7. SGLang's launch command ----------------------------------------------------------

def test_sglang_writes_a_deployments_chunked_prefill_size() -> None:
    chunked = launch_command(model=LLAMA, workload=WORKLOAD, gpu=H100,
                             deployment=Deployment(runtime="sglang", prefill_chunk_tokens=4096))
    argv = list(chunked.argv)
    assert argv[argv.index("--chunked-prefill-size") + 1] == "4096"
    assert any("--mem-fraction-static" in note and "4096" in note for note in chunked.notes)
    plain = launch_command(model=LLAMA, workload=WORKLOAD, gpu=H100,
                           deployment=Deployment(runtime="sglang"))
    assert "--chunked-prefill-size" not in plain.argv


def test_sglang_refuses_eagle_for_a_model_without_a_draft_module() -> None:
    with pytest.raises(ConfigError, match="--speculative-draft-model-path") as info:
        launch_command(model=LLAMA, workload=WORKLOAD,
                       deployment=Deployment(runtime="sglang", speculative_tokens=2))
    assert "\n" not in str(info.value)
    # DeepSeek-R1's MTP module is its own draft: the EAGLE flags, no draft path
    command = launch_command(model=get_model("deepseek-r1"), workload=WORKLOAD,
                             deployment=Deployment(tp=8, runtime="sglang", speculative_tokens=2))
    assert "--speculative-algorithm" in command.argv
    assert "--speculative-draft-model-path" not in command.argv


def test_sglang_names_the_checkpoint_as_the_draft_where_it_does_not_default_it() -> None:
    """Qwen3-Next's MTP module: SGLang 0.5.3 loads it as the draft only when the draft path
    names the checkpoint; DeepSeek's it defaults; a Llama has no module to name."""
    from energylens.runtime.launch import LaunchSpec

    sglang = get_runtime("sglang")

    def argv(model_id: str) -> list[str]:
        spec = LaunchSpec(model_id=model_id, checkpoint_dtype="bf16", weight_dtype="bf16",
                          deployment=Deployment(runtime="sglang", speculative_tokens=3),
                          max_num_seqs=None, max_model_len=2048)
        return list(sglang.launch(spec=spec).argv)

    qwen = argv("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert qwen[qwen.index("--speculative-draft-model-path") + 1] \
        == "Qwen/Qwen3-Next-80B-A3B-Instruct"
    assert qwen[qwen.index("--speculative-num-draft-tokens") + 1] == "4"
    assert "--speculative-draft-model-path" not in argv("deepseek-ai/DeepSeek-V3")
    with pytest.raises(ConfigError, match="EAGLE head"):
        argv("meta-llama/Llama-3.1-8B-Instruct")
