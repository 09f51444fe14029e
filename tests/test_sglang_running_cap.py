"""The load simulator admits as many running requests as the runtime's server does by
default: vLLM's --max-num-seqs (1,024 on an H100), SGLang's max_running_requests derived
from its KV pool and context length (energylens/runtime/sglang.py)."""

from __future__ import annotations

from energylens.deployment import Deployment, Workload
from energylens.predict import checked_context
from energylens.workloads import Placement
from energylens.workloads.load.kind import kv_pool_tokens, rank_limits, simulate_replica

WORK = Workload(kind="load", concurrency=4096, num_requests=4096, input_tokens=256,
                output_tokens=64)


def _limits(runtime: str):
    model, ctx = checked_context(model="llama-3.1-8b", gpu="H100",
                                 deployment=Deployment(runtime=runtime))
    placement = Placement(ctx=ctx, model=model, replicas=1, gpus=1, sequences=1.0)
    return ctx, simulate_replica(placement=placement, workload=WORK).limits


def test_sglangs_cap_is_its_own_and_vllms_its_server_default() -> None:
    """Llama-3.1-8B on one H100 holds ~440k tokens of KV: SGLang's request pool is
    clamp(440k / 320 x 512, 2,048, 4,096) = 4,096, below half the pool, so 4,096 clients
    run at once where vLLM admits 1,024."""
    ctx, sglang = _limits("sglang")
    budget, _ = rank_limits(ctx)
    pool = kv_pool_tokens(ctx, budget=budget)
    assert pool // 2 > 4096 and pool / 320 * 512 > 4096
    assert sglang.max_sequences == 4096
    assert _limits("vllm")[1].max_sequences == 1024
    assert rank_limits(ctx, max_num_seqs=64, kv_tokens=pool, context_tokens=320)[1] == 64
