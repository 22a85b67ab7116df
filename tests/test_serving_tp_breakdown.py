"""`analyses.serving_tp_breakdown`: the TensorRT-LLM TP(k)/TP(k/2) pairs taken apart (#37)."""

from __future__ import annotations

import pytest

from shardwise.analyses.serving_scaling import tp_pairs
from shardwise.analyses.serving_tp_breakdown import (
    errors_by_length,
    kv_capacity_check,
    side,
    trtllm_pair_breakdowns,
)
from shardwise.analyses.serving_validation import inference_rows, predict


@pytest.fixture(scope="module")
def pairs():
    return trtllm_pair_breakdowns()


def test_every_trtllm_tp_pair_is_broken_down_with_the_ratio_validate_prints(pairs):
    ratios = {r.key: r.predicted for r in tp_pairs() if "TRTLLM" in r.key}
    assert len(pairs) == len(ratios) == 10
    for key, big, small in pairs:
        assert big.tp == 2 * small.tp
        assert big.predicted_tokens_per_s / small.predicted_tokens_per_s == pytest.approx(ratios[key], rel=1e-9)


def test_each_side_is_priced_as_validate_inference_prices_its_row(pairs):
    rows = {r["id"]: r for r in inference_rows()}
    for _, big, small in pairs[:3]:
        for b in (big, small):
            assert b.predicted_tokens_per_s == pytest.approx(predict(rows[b.row])[2], rel=1e-9)


def test_decode_step_parts_add_up_to_the_step(pairs):
    for _, big, small in pairs:
        for b in (big, small):
            parts = b.decode_attention_s + b.decode_gemm_s + b.decode_allreduce_s
            assert parts == pytest.approx(b.tpot_s, rel=0.01)
            assert b.decode_attention_s > 0 and b.decode_gemm_s > 0
            assert (b.decode_allreduce_s > 0) == (b.tp > 1)


def test_kv_cache_is_sized_from_the_memory_terms_shown(pairs):
    for _, big, small in pairs:
        for b in (big, small):
            assert kv_capacity_check(b) == pytest.approx(0.0, abs=1e3)
            # the batch is what the KV cache holds at input + output tokens a sequence, or the engine's cap
            holds = b.kv_cache_bytes // (b.kv_bytes_per_token * (b.input_len + b.output_len))
            assert b.batch == min(holds, b.max_batch_size)


def test_llama3_70b_fp8_kv_bytes_per_token_halve_from_tp1_to_tp2(pairs):
    # 80 layers x 2 (K, V) x 8 KV heads x 128 x 1 byte = 163,840 B at TP 1, half of the heads per GPU at TP 2
    for _, big, small in pairs:
        assert small.kv_bytes_per_token == pytest.approx(163_840)
        assert big.kv_bytes_per_token == pytest.approx(81_920)


def test_every_pair_side_is_kv_capacity_bound(pairs):
    # the finding docs/serving.md states: no side reaches trtllm-bench's max_batch_size
    assert {b.limit for _, big, small in pairs for b in (big, small)} == {"kv cache"}


def test_errors_by_length_cover_the_performance_overview_lengths():
    table = errors_by_length()
    assert len(table) == 10 and (1000, 2000) in table
    assert all(len(rows) == 8 for rows in table.values())


def test_non_trtllm_rows_are_refused():
    ft = next(r for r in inference_rows() if r["framework"].startswith("FasterTransformer"))
    with pytest.raises(ValueError, match="only TensorRT-LLM"):
        side(ft)
