"""ExLlamaV2's tensor parallelism: all-gathers staged through pinned host memory (physics.host_staged)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.analyses.serving_pcie import PAIRS, throughput
from shardwise.physics.host_staged import exllamav2_tp_layer_bytes, exllamav2_tp_layer_s


def test_llama3_70b_at_tp2_copies_what_the_source_gathers():
    """A 2,048-token chunk of Llama 3 70B at TP 2: H2D of the input twice, the attention output and
    the 28,672-wide intermediate (218 MB), D2H of half of each gathered tensor (109 MB)."""
    model = presets.model("llama3-70b")
    h2d, d2h = exllamav2_tp_layer_bytes(model, 2048, 2)
    assert h2d == pytest.approx((3 * 8192 + 28672) * 2048 * 2)
    assert d2h == pytest.approx(h2d / 2)
    # several times the bytes of two ring all-reduces (each GPU sends n (p-1)/p and receives as much)
    ring = 2 * 2 * (2 - 1) / 2 * 8192 * 2048 * 2
    assert (h2d + d2h) / ring > 4


def test_the_copies_grow_with_tokens_and_vanish_without_tp():
    model, link = presets.model("llama3-70b"), presets.link("pcie4")
    assert float(exllamav2_tp_layer_s(model, 2048, 1, link)) == 0.0
    assert exllamav2_tp_layer_s(model, 4096, 2, link) > 1.9 * exllamav2_tp_layer_s(model, 2048, 2, link)


def test_exllamav2_tp_pays_its_gathers_in_the_pcie_pair(monkeypatch):
    """The ExLlamaV2 pair's TP prompt throughput is below what the same model gives without the
    host-staged copies (Megatron's all-reduces alone), and the layer split is untouched."""
    from shardwise.analyses import serving_pcie

    pair = next(p for p in PAIRS if p.engine == "exllamav2")
    tp, split = throughput(pair, 2, 1), throughput(pair, 1, 2)
    monkeypatch.setattr(serving_pcie, "exllamav2_tp_layer_s", lambda *args: 0.0)
    tp_without, split_without = throughput(pair, 2, 1), throughput(pair, 1, 2)
    assert 0 < tp < 0.8 * tp_without  # the intermediate activation crosses the link, through host memory
    assert split == split_without
