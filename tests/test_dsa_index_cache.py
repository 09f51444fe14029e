"""DeepSeek Sparse Attention's index keys are FP8 with a block scale whatever the KV dtype."""

from __future__ import annotations

import pytest

from energylens.cost.memory import kv_bytes_per_token
from energylens.cost.work import tensor_bytes
from energylens.model.families import build_graph
from energylens.model.zoo import get_model


@pytest.mark.parametrize(("kv_dtype", "latent_bytes"), [("bf16", 2), ("fp8", 1)])
def test_glm5_caches_its_latent_in_the_kv_dtype_and_its_index_keys_in_fp8(
        kv_dtype: str, latent_bytes: int) -> None:
    """GLM-5, per token per layer: MLA's 576-wide latent in the KV dtype, and the 128-wide
    index key as 128 FP8 bytes + one fp32 scale (132 B; it was 256 B under a bf16 cache)."""
    for group in build_graph(get_model("zhipuai/GLM-5")).groups:
        got = kv_bytes_per_token(group=group, degrees={"tp": 1, "ep": 1, "etp": 1},
                                 kv_dtype=kv_dtype)
        assert got == 576 * latent_bytes + 128 + 4


def test_the_index_score_reads_fp8_keys() -> None:
    """The score kernel reads the cached index keys of 4,096 tokens at 132 B each."""
    group = build_graph(get_model("zhipuai/GLM-5")).groups[-1]
    score = next(op for op in group.layer.ops if op.name == "idx_score")
    keys = next(t for t in score.inputs if t.name == "IC")
    sizes = {**group.sizes, "b": 1, "m": 1, "p": 4096}
    assert tensor_bytes(tensor=keys, sizes=sizes, weight_dtype="bf16", window=None,
                        kv_dtype="bf16") == pytest.approx(4096 * 132)
