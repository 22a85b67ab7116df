"""Parameter counts against published figures and Narayanan et al. 2021 Eq. 2."""

import pytest

from shardwise import presets
from shardwise.physics.params import stage_params_per_gpu, total_params


def test_gpt3_175b_has_174_6_billion_parameters(gpt3):
    assert total_params(gpt3) / 1e9 == pytest.approx(174.6, abs=0.05)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("gpt-1.7b", 1.65),
        ("gpt-7.5b", 7.5),
        ("gpt-39b", 39.1),
        ("gpt-145b", 145.6),
        ("gpt-1t", 1008.0),
        ("llama2-7b", 6.74),
        ("llama2-70b", 68.98),
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.55),
        ("llama3-405b", 405.85),
    ],
)
def test_presets_match_published_parameter_counts(name, billions):
    # Narayanan et al. 2021 Table 1 rounds GPT-1.7B (Eq. 2 gives 1.65B); Llama figures from the model cards.
    assert total_params(presets.model(name)) / 1e9 == pytest.approx(billions, rel=0.01)


def test_narayanan_eq2_for_gpt_models():
    # P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), plus the final LayerNorm's 2h.
    for name in ("gpt-1.7b", "gpt-18b", "gpt-530b"):
        m = presets.model(name)
        l, h, V, s = m.layers, m.hidden, m.vocab, m.seq_len
        eq2 = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
        assert total_params(m) == pytest.approx(eq2 + 2 * h)


def test_stages_hold_every_parameter_once_except_the_tied_output_copy(gpt3):
    first, middle, last = stage_params_per_gpu(gpt3, 1, 8)
    per_stage_sum = first + 6 * middle + last
    # The last stage keeps a copy of the (tied) word embedding for the output layer.
    assert per_stage_sum == pytest.approx(total_params(gpt3) + gpt3.vocab * gpt3.hidden)


def test_tensor_parallelism_splits_matrices_but_not_norms(gpt3):
    f1, _, _ = stage_params_per_gpu(gpt3, 1, 1)
    f8, _, _ = stage_params_per_gpu(gpt3, 8, 1)
    assert f1 / 8 < f8 < f1 / 7.9


def test_a_head_dim_set_apart_from_hidden():
    """Qwen3-32B (HF config Qwen/Qwen3-32B: hidden 5120, 64 heads of 128, 8 KV heads, MLP 25600,
    vocabulary 151936, untied): heads x head_dim = 8192 is not hidden; 32.8B parameters."""
    from shardwise.specs import Model

    m = Model(
        "qwen3-32b", layers=64, hidden=5120, heads=64, kv_heads=8, head_dim=128, ffn_hidden=25600,
        vocab=151936, seq_len=8192, gated_mlp=True, tied_embeddings=False, learned_positions=False,
        bias=False, rmsnorm=True, dropout=False,
    )  # fmt: skip
    assert m.q_dim == 8192 and m.head_dim == 128
    attention = 5120 * (8192 + 2 * 8 * 128) + 8192 * 5120
    mlp = 3 * 5120 * 25600
    per_layer = attention + mlp + 2 * 5120
    assert total_params(m) == 64 * per_layer + 2 * 151936 * 5120 + 5120
    assert total_params(m) / 1e9 == pytest.approx(32.76, abs=0.01)
    assert Model("d", layers=2, hidden=64, heads=8, vocab=10, seq_len=8).head_dim == 8  # hidden / heads


def test_mixture_of_experts_parameters_by_hand():
    """DeepSeek-V3 (671B, 37B activated: the DeepSeek-V3 report) from its config, counted by hand:
    MLA attention, 3 dense layers, 58 MoE layers of 256 routed experts (8 per token) and 1 shared."""
    from shardwise.physics.params import activated_params

    m = presets.model("deepseek-v3")
    h, a, e = 7168, 128, 3 * 7168 * 2048  # one expert: gate, up, down
    attention = (h * 1536 + 1536 + 1536 * a * 192) + (h * 576 + 512 + 512 * a * 256) + a * 128 * h
    router = h * 256
    per_layer = attention + 2 * h
    embeddings = 2 * 129280 * h + h
    total = 61 * per_layer + 3 * 3 * h * 18432 + 58 * (256 * e + e + router) + embeddings
    active = 61 * per_layer + 3 * 3 * h * 18432 + 58 * (8 * e + e + router) + embeddings
    assert total_params(m) == total and activated_params(m) == active
    assert total / 1e9 == pytest.approx(671.0, abs=0.1) and active / 1e9 == pytest.approx(37.5, abs=0.1)
    # Qwen3 MoE and GPT-OSS as their model cards state (GPT-OSS's active count leaves out the
    # 0.58B input embedding table, which is counted here)
    assert total_params(presets.model("qwen3-30b-a3b")) / 1e9 == pytest.approx(30.5, abs=0.05)
    assert activated_params(presets.model("qwen3-30b-a3b")) / 1e9 == pytest.approx(3.3, abs=0.06)
    assert total_params(presets.model("qwen3-235b-a22b")) / 1e9 == pytest.approx(235.1, abs=0.1)
    oss = presets.model("gpt-oss-120b")
    assert total_params(oss) / 1e9 == pytest.approx(116.8, abs=0.1)
    assert (activated_params(oss) - 201088 * 2880) / 1e9 == pytest.approx(5.13, abs=0.01)
    assert total_params(presets.model("mixtral-8x7b")) / 1e9 == pytest.approx(46.7, abs=0.05)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"experts": 8, "experts_per_token": 9}, "experts_per_token 9 is not allowed"),
        ({"experts": 8}, "experts_per_token 0 is not allowed"),
        ({"shared_experts": 1}, "need experts > 0"),
        ({"experts": 8, "experts_per_token": 2, "dense_layers": 4}, "leaves no MoE layer"),
        ({"experts": -1}, "experts"),
    ],
)
def test_bad_mixtures_of_experts(fields, message):
    from shardwise.errors import SpecError
    from shardwise.specs import Model

    with pytest.raises(SpecError, match=message):
        Model("m", layers=4, hidden=64, heads=8, vocab=100, seq_len=16, **fields)
