"""Sliding-window attention (Mistral 7B v0.1, Gemma 2/3, GPT-OSS): a windowed layer's attention
work, its fused kernel's time, the KV reads of a decoded token, and Hugging Face configs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise import presets
from shardwise.errors import SpecError
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward, window_share
from shardwise.physics.layer_parts import causal_share
from shardwise.specs import Model


def _model(**kw) -> Model:
    base = dict(layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, vocab=201088, seq_len=4096)
    return Model("m", **{**base, **kw})


def test_a_window_layer_computes_s_w_scores_by_hand():
    """s = 4096, w = 128: query p sees min(p, 128) keys, 128 * 129 / 2 + (4096 - 128) * 128 in all."""
    s, w = 4096, 128
    by_hand = sum(min(p, w) for p in range(1, s + 1))
    assert window_share(s, s, w) * s * s == pytest.approx(by_hand)
    # a decoded token sees the last w keys; a chunk of 10 new tokens 10 * w
    assert window_share(1, 5000, w) * 5000 == pytest.approx(w)
    assert window_share(10, 5000, w) * 10 * 5000 == pytest.approx(10 * w)


def test_a_window_as_long_as_the_sequence_is_causal_attention():
    for s_q, s_kv in ((4096, 4096), (1, 300), (64, 1000)):
        assert window_share(s_q, s_kv, s_kv) == pytest.approx(causal_share(s_q, s_kv, 1))


def test_gpt_oss_windows_every_other_layer_and_its_mean_layer_does_that_work():
    m = presets.model("gpt-oss-120b")
    assert (m.sliding_window, m.full_attention_every, m.sliding_share) == (128, 2, 0.5)
    full = layer_forward(_model(), 1, 1, False, 2.0)
    mixed = layer_forward(m, 1, 1, False, 2.0)
    core = full.flash.flops  # scores + context of the whole 4096 x 4096 rectangle
    want = 0.5 * full.causal_fraction * core + 0.5 * window_share(4096, 4096, 128) * core
    assert mixed.mean_causal_fraction * mixed.flash.flops == pytest.approx(want)
    # Gemma 3: five of six layers windowed; Mistral 7B v0.1: all
    assert presets.model("gemma3-1b").sliding_share == pytest.approx(22 / 26)
    assert presets.model("mistral-7b").sliding_share == 1.0


def test_windowed_layers_attend_faster_and_decode_reads_only_the_window():
    gpu = presets.gpu("h100-sxm5-80gb")
    full, win = _model(), _model(sliding_window=128)
    t_full = layer_times(layer_forward(full, 1, 1, False, 2.0), gpu, "bf16", True)
    t_win = layer_times(layer_forward(win, 1, 1, False, 2.0), gpu, "bf16", True)
    assert 0 < t_win.attention_s < 0.3 * t_full.attention_s
    assert 0 < t_win.attention_bwd_s < 0.4 * t_full.attention_bwd_s
    # decoding one token against a 32k context: the windowed layer reads 128 positions' K and V
    dec_full = layer_forward(full, 8, 1, False, 2.0, q_len=1, kv_len=32768)
    dec_win = layer_forward(win, 8, 1, False, 2.0, q_len=1, kv_len=32768)
    kv = 8 * 2 * 2 * 8 * 64  # batch x (K, V) x bytes x KV heads x head dim, per position
    assert dec_full.flash.bytes - dec_win.window_flash.bytes == pytest.approx(kv * (32768 - 128))


def test_arrays_of_layers_and_bad_fields():
    m = _model(layers=np.array([24, 36]), sliding_window=128, full_attention_every=2)
    assert np.allclose(m.sliding_share, 0.5)
    with pytest.raises(SpecError, match="full_attention_every needs a sliding_window"):
        _model(full_attention_every=2)
    with pytest.raises(SpecError, match="sliding_window"):
        _model(sliding_window=-1)


def _config(tmp_path, **fields):
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
           "max_position_embeddings": 131072, "num_local_experts": 32, "num_experts_per_tok": 4, **fields}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_hf_configs_name_their_windowed_layers(tmp_path):
    """openai/gpt-oss-20b: sliding_window 128, layer_types alternating from a sliding layer 0;
    Gemma 3: sliding_window_pattern 6; Mistral 7B v0.1: every layer; Qwen2: use_sliding_window false."""
    types = ["sliding_attention", "full_attention"] * 12
    m = presets.model(_config(tmp_path, sliding_window=128, layer_types=types))
    assert (m.sliding_window, m.full_attention_every) == (128, 2)
    m = presets.model(_config(tmp_path, model_type="gemma3_text", sliding_window=512, sliding_window_pattern=6))
    assert (m.sliding_window, m.full_attention_every) == (512, 6)
    m = presets.model(_config(tmp_path, model_type="gemma2", sliding_window=4096))
    assert (m.sliding_window, m.full_attention_every) == (4096, 2)
    m = presets.model(_config(tmp_path, model_type="mistral", sliding_window=4096))
    assert (m.sliding_window, m.full_attention_every) == (4096, 0)
    m = presets.model(_config(tmp_path, sliding_window=4096, use_sliding_window=False))
    assert m.sliding_window == 0
    odd = ["full_attention", "sliding_attention", "sliding_attention"] * 8
    with pytest.raises(SpecError, match="layer_types"):
        presets.model(_config(tmp_path, sliding_window=128, layer_types=odd))


def test_serving_keeps_only_the_window_of_a_windowed_layer_in_the_kv_cache():
    """GPT-OSS-120B at 8192 tokens of context: the 18 full layers keep 8192 tokens, the 18 windowed
    ones 128, so a sequence needs (8192 + 128) / (2 x 8192) of the cache it needed unwindowed."""
    from shardwise.engines.serving import memory_per_gpu
    from shardwise.physics.flops import kv_cache_tokens
    from shardwise.specs import Plan, Scenario
    from shardwise.specs.serving import ServingWorkload

    m = presets.model("gpt-oss-120b")
    assert kv_cache_tokens(m, 8192) == pytest.approx((8192 + 128) / 2)
    assert kv_cache_tokens(m, 100) == pytest.approx(100)
    cluster, wl = presets.system("dgx-h100"), ServingWorkload(batch=1, input_len=7168, output_len=1024)
    plan = Plan(tp=8, global_batch=1)
    _, windowed = memory_per_gpu(Scenario(m, cluster, plan), wl)
    _, whole = memory_per_gpu(Scenario(m.with_(sliding_window=0, full_attention_every=0), cluster, plan), wl)
    assert float(windowed) / float(whole) == pytest.approx((8192 + 128) / (2 * 8192))
