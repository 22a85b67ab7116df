"""`analyses.serving_decode_split`: the TensorRT-LLM rows' error split into prefill and decode, and
candidate decode-step terms ranked (#37, the long-output bias)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardwise.analyses.serving_decode_split import (
    CANDIDATES,
    RowShare,
    cuda_graph_batch_sizes,
    decode_candidates,
    padded_batch,
    prefill_decode_split,
    repriced_errors,
    row_shares,
)


@pytest.fixture(scope="module")
def shares():
    return row_shares()


def _synthetic(prefill: float, decode: float, attention_extra: float = 0.0) -> list[RowShare]:
    """Rows whose measured time is the priced one with prefill (1 + prefill) and decode steps
    (1 + decode) times as long, the attention of each step (1 + attention_extra) times."""
    out = []
    for i, (p, attention, gemm) in enumerate(
        [(0.02, 8.0, 27.0), (0.4, 12.0, 35.0), (0.9, 16.0, 27.0), (0.2, 20.0, 10.0)]
    ):
        tpot = (attention + gemm) * 1e-3
        step = decode + attention_extra * attention * 1e-3 / tpot
        error = p * (1.0 + prefill) + (1.0 - p) * (1.0 + step) - 1.0  # measured time over priced, less 1
        out.append(
            RowShare(f"TRTLLM-M-G-TP1-{i}", "M-G-TP1", "M", 100 + i, attention * 1e-3, gemm * 1e-3, 0.0, tpot, p, error)
        )
    return out


def test_split_recovers_a_known_prefill_and_decode_error():
    # e = p y + (1 - p) x exactly when the measured time is the priced one so rescaled
    (g,) = prefill_decode_split(_synthetic(prefill=-0.02, decode=0.03))
    assert g.prefill == pytest.approx(-0.02, abs=1e-9)
    assert g.decode == pytest.approx(0.03, abs=1e-9)
    assert g.rows == 4


def test_repricing_with_the_missing_term_leaves_no_error():
    shares = _synthetic(prefill=0.0, decode=0.0, attention_extra=0.25)
    added = np.array([0.25 * s.attention_s for s in shares])
    assert np.abs(repriced_errors(shares, added, 0.0)).max() < 1e-12
    assert np.abs(repriced_errors(shares, 0.0 * added, 0.0)).max() > 0.02


def test_the_attention_candidate_finds_an_attention_error():
    cands = {c.name: c for c in decode_candidates(_synthetic(prefill=0.0, decode=0.0, attention_extra=0.25))}
    assert cands["attention slower"].value == pytest.approx(0.25, rel=1e-3)
    assert cands["attention slower"].mape < 1e-6 < cands["GEMMs slower"].mape
    assert math.isnan(cands["none"].value)


def test_every_trtllm_row_is_split_and_its_parts_make_its_step(shares):
    assert len(shares) == 80
    for s in shares:
        assert s.attention_s + s.gemm_s + s.allreduce_s == pytest.approx(s.tpot_s, rel=0.01)
        assert 0.0 < s.prefill_share < 1.0
    groups = prefill_decode_split(shares)
    assert len(groups) == 8 and all(g.rows == 10 for g in groups)


def test_every_candidate_is_ranked_on_the_rows(shares):
    cands = decode_candidates(shares)
    assert [c.name for c in cands] == ["none", *CANDIDATES]
    none = cands[0]
    assert none.mape == pytest.approx(np.mean([abs(s.error) for s in shares]))
    assert set(none.mape_by_model) == {"Llama-3.1-8B", "Llama-3.3-70B", "Llama-3.1-405B"}


def test_cuda_graph_batch_sizes_follow_trtllm_llm_args():
    # [1, 2, 4] + multiples of 8 to 128 + powers of 2 from 256 below floor(log2 max) + max_batch_size
    steps = [1, 2, 4, *range(8, 129, 8)]
    assert cuda_graph_batch_sizes(224) == [*steps, 224]
    assert cuda_graph_batch_sizes(1280) == [*steps, 256, 512, 1280]
    assert cuda_graph_batch_sizes(4096) == [*steps, 256, 512, 1024, 2048, 4096]
    assert cuda_graph_batch_sizes(64) == [1, 2, 4, *range(8, 65, 8)]
    assert padded_batch(187, 224) == 224 and padded_batch(99, 128) == 104 and padded_batch(128, 224) == 128


def test_padding_is_priced_only_where_the_batch_is_padded(shares):
    for s in shares:
        assert s.padded_batch >= s.batch
        if s.padded_batch == s.batch:
            assert s.padding_s == 0.0
        else:
            assert s.padding_s >= 0.0
