"""Einsum spec: parsing, FLOP/byte accounting, load-time errors naming op and rank."""

from __future__ import annotations

import pytest

from energylens.cost.kernels import compile_layer, fusion_groups
from energylens.cost.work import causal_pairs, op_flops, tensor_bytes
from energylens.model.families import build_graph, family_part, parse_layer
from energylens.model.spec import LayerSpec, SpecError, check_divisible, parse_einsum, validate_layer
from energylens.model.zoo import get_model


def test_contraction_flops_are_twice_the_product_of_all_ranks():
    op = parse_einsum(name="q", text="Q[b,m,h,e] = I[b,m,d] * WQ[h,e,d]")
    sizes = {"b": 2, "m": 3, "h": 4, "e": 5, "d": 7}
    assert op.kind == "contraction"
    assert op.contracted_ranks == ("d",)
    assert op_flops(op=op, sizes=sizes, window=None) == 2 * 2 * 3 * 4 * 5 * 7


def test_bytes_are_operands_plus_output_with_weight_dtype():
    op = parse_einsum(name="q", text="Q[b,m,h,e] = I[b,m,d] * WQ[h,e,d]")
    sizes = {"b": 2, "m": 3, "h": 4, "e": 5, "d": 7}
    weight = tensor_bytes(tensor=op.inputs[1], sizes=sizes, weight_dtype="fp8", window=None)
    activation = tensor_bytes(tensor=op.inputs[0], sizes=sizes, weight_dtype="fp8", window=None)
    assert weight == 4 * 5 * 7 * 1  # fp8: one byte per weight
    assert activation == 2 * 3 * 7 * 2  # bf16 activations


def test_causal_pairs_match_brute_force():
    for m, p, window in [(5, 5, None), (1, 9, None), (4, 10, None), (6, 6, 3), (1, 20, 8), (7, 12, 4)]:
        expected = sum(min(p - m + i, window or 10**9) for i in range(1, m + 1))
        assert float(causal_pairs(m=m, p=p, window=window)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Y[b,m,z] = X[b,m,d] * W[d,f]", "output rank 'z'"),
        ("Y[b,m] = softmax_q(X[b,m])", "reduced rank 'q'"),
        ("Y[b,m] = nonsense", "cannot parse"),
    ],
)
def test_bad_ops_fail_at_load_naming_op_and_rank(text, fragment):
    with pytest.raises(SpecError, match=fragment) as info:
        parse_einsum(name="broken", text=text)
    assert "'broken'" in str(info.value)


def test_unknown_rank_and_size_mismatch_name_the_op():
    a = parse_einsum(name="a", text="Y[b,d] = X[b,d] * W[d,d2]")
    with pytest.raises(SpecError, match="op 'a': unknown rank 'd2'"):
        validate_layer(layer=LayerSpec(name="l", ops=(a,)), sizes={"b": 1, "d": 4})
    b = parse_einsum(name="b", text="Z[b,f] = Y[b,f] * V[f,f2]")
    with pytest.raises(SpecError, match="op 'b': size mismatch for tensor Y"):
        validate_layer(layer=LayerSpec(name="l", ops=(a, b)),
                       sizes={"b": 1, "d": 4, "d2": 4, "f": 2, "f2": 2})


def test_sharded_rank_that_does_not_divide_names_op_and_rank():
    layer = parse_layer(name="mlp", parts=[family_part("mlp_gated")], norm="rmsnorm")
    with pytest.raises(SpecError, match=r"op 'gate'.*rank 'f' of size 10 does not divide.*tp=4"):
        check_divisible(layer=layer, sizes={"f": 10, "d": 8}, degrees={"tp": 4})


def test_tp_derives_one_all_reduce_per_row_parallel_gemm_and_none_at_tp1():
    graph = build_graph(get_model("llama-3.1-8b"))
    group = graph.groups[0]
    tp4 = compile_layer(layer=group.layer, sizes=group.sizes, degrees={"tp": 4, "etp": 4, "ep": 1},
                        fusion=frozenset())
    assert sorted((c.kind, c.after_op) for c in tp4.collectives) == [
        ("all_reduce", "down"), ("all_reduce", "o")]
    tp1 = compile_layer(layer=group.layer, sizes=group.sizes, degrees={"tp": 1, "etp": 1, "ep": 1},
                        fusion=frozenset())
    assert tp1.collectives == ()


def test_ep_derives_all_to_all_dispatch_and_combine():
    graph = build_graph(get_model("qwen3-30b-a3b"))
    group = graph.groups[0]
    compiled = compile_layer(layer=group.layer, sizes=group.sizes,
                             degrees={"tp": 4, "etp": 1, "ep": 4}, fusion=frozenset())
    kinds = sorted((c.kind, c.after_op) for c in compiled.collectives)
    assert ("all_to_all", "dispatch") in kinds
    assert ("all_to_all", "combine") in kinds
    assert ("all_reduce", "o") in kinds
    assert ("all_reduce", "edown") not in kinds  # experts are whole on each rank (etp = 1)


def test_lm_head_logits_are_gathered_under_tp():
    """The vocab-parallel embedding's all-reduce, then the logits' all-gather."""
    graph = build_graph(get_model("llama-3.1-8b"))
    compiled = compile_layer(layer=graph.head, sizes=graph.head_sizes,
                             degrees={"tp": 2, "etp": 2, "ep": 1}, fusion=frozenset())
    assert [(c.kind, c.after_op) for c in compiled.collectives] == [
        ("all_reduce", "embed"), ("all_gather", "lm_head")]


def test_fusion_groups_that_share_ops_merge():
    layer = parse_layer(name="mlp", parts=[family_part("mlp_gated")], norm="rmsnorm")
    assert fusion_groups(layer=layer, enabled=frozenset({"gate_up", "act"})) == [["gate", "up", "act"]]
    assert fusion_groups(layer=layer, enabled=frozenset()) == []


def test_flash_attention_keeps_scores_out_of_hbm():
    graph = build_graph(get_model("llama-3.1-8b"))
    group = graph.groups[0]
    fused = compile_layer(layer=group.layer, sizes=group.sizes, degrees={"tp": 1, "etp": 1, "ep": 1},
                          fusion=frozenset({"attention"}))
    attention = next(k for k in fused.kernels if k.name == "qk+soft+av")
    touched = {t.name for t in (*attention.reads, *attention.writes)}
    assert touched == {"QR", "KC", "VC", "O"}


def test_kv_cache_per_token_gqa_and_mla():
    """GQA caches K and V per KV head; MLA caches one latent of kv_lora + rope dims
    shared by all heads (DeepSeek-V3: 576 x 2 B = 1,152 B per token per layer)."""
    from energylens.cost.memory import kv_bytes_per_token

    llama = build_graph(get_model("llama-3.1-70b")).groups[0]
    one = {"tp": 1, "etp": 1, "ep": 1}
    assert kv_bytes_per_token(group=llama, degrees={"tp": 8, "etp": 8, "ep": 1},
                              kv_dtype="bf16") == 2 * 1 * 128 * 2
    assert kv_bytes_per_token(group=llama, degrees=one, kv_dtype="bf16") == 2 * 8 * 128 * 2
    assert kv_bytes_per_token(group=llama, degrees=one, kv_dtype="fp8") == 2 * 8 * 128 * 1
    for group in build_graph(get_model("deepseek-v3")).groups:
        assert kv_bytes_per_token(group=group, degrees={"tp": 8, "etp": 1, "ep": 8},
                                  kv_dtype="bf16") == (512 + 64) * 2
