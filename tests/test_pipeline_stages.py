"""Pipeline stages hold whole layers and one vocabulary table each (vLLM's layout)."""

from __future__ import annotations

import pytest

from energylens.calibration.file import default_calibration
from energylens.cost.memory import memory_use, stage_layer_share
from energylens.cost.step import SequenceGroup, pipeline_send, step_cost
from energylens.deployment import Deployment
from energylens.hardware import load_gpu
from energylens.model.families import build_graph
from energylens.model.zoo import get_model
from energylens.predict import step_context
from energylens.runtime import get_runtime

# Llama-3.1-8B in bf16: 32 layers of 218,103,808 GEMM parameters (the two RMSNorm weights
# of 4,096 each, 0.004 %, are not counted), a 128,256 x 4,096 table
LAYER_BYTES = 2 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)
TABLE_BYTES = 2 * 128_256 * 4096


def _weights(pp: int) -> float:
    graph = build_graph(get_model("llama-3.1-8b"))
    use = memory_use(graph=graph, gpu=load_gpu("H100"), runtime=get_runtime("vllm"),
                     degrees={"tp": 1, "ep": 1, "etp": 1}, pp=pp, weight_dtype="bf16",
                     kv_dtype="bf16", sequences=1.0, context_tokens=1.0)
    return float(use.weights_bytes)


@pytest.mark.parametrize(("pp", "layers", "tables"), [(1, 32, 2), (2, 16, 1), (3, 11, 1),
                                                      (4, 8, 1)])
def test_the_most_loaded_stage_holds_whole_layers_and_one_table(pp: int, layers: int,
                                                                tables: int) -> None:
    """By hand: ceil(32 / pp) layers, and the embedding (first stage) or the LM head (last
    stage), not both (both were charged to every stage: pp = 2 priced 9.08 GB, 8.03 held)."""
    assert _weights(pp) == pytest.approx(layers * LAYER_BYTES + tables * TABLE_BYTES, rel=1e-9)


def test_a_running_pipelines_step_waits_for_its_most_loaded_stage() -> None:
    """Three stages of 11, 11 and 10 layers: a running engine's step is 3 x (11/32 of the
    whole model's micro-batch time + one send), not 3 x (1/3 of it + a send)."""
    model, gpu, cal = get_model("llama-3.1-8b"), load_gpu("H100"), default_calibration()
    ctx = step_context(model=model, gpu=gpu, deployment=Deployment(pp=3), calibration=cal)
    whole = step_context(model=model, gpu=gpu, deployment=Deployment(), calibration=cal)
    assert stage_layer_share(graph=ctx.graph, pp=3) == 11 / 32
    seqs = [SequenceGroup(sequences=3.0, new_tokens=1.0, context=500.0)]
    micro = [SequenceGroup(sequences=1.0, new_tokens=1.0, context=500.0)]
    send_s, _ = pipeline_send(ctx=ctx, tokens=1.0)
    one_pass = float(step_cost(ctx=whole, seqs=micro).latency_s)
    running = float(step_cost(ctx=ctx, seqs=seqs, pipelined=True).latency_s)
    assert running == pytest.approx(3 * (one_pass * 11 / 32 + float(send_s)), rel=1e-9)
