"""`--emit megatron` launches the model priced (review 33): the model's own rotary base
(`Model.rope_theta`, read from config.json), its window, and what its model file does beyond the
shapes (QKV biases, QK norm, a sigmoid router, GPT-OSS's activation and sinks), each as Megatron-LM
d98e8a64 spells it; what the Model cannot say is listed in the launch's "you add" lines."""

from __future__ import annotations

import json

import pytest

from shardwise import presets
from shardwise.emit import emit
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario


def _launch(model, target="megatron", nodes=1, **plan):
    m = presets.model(model) if isinstance(model, str) else model
    fields = dict(tp=1, pp=1, dp=8, global_batch=64) | plan
    return emit(Scenario(m, presets.system("dgx-h100", nodes=nodes), Plan(**fields)), target)


def _flags(launch) -> dict[str, list[str]]:
    """Every flag of the launch with the words after it, up to the next flag."""
    out: dict[str, list[str]] = {}
    words = [w for group in launch.args for w in group]
    for k, w in enumerate(words):
        if w.startswith("--"):
            rest = words[k + 1 :]
            out[w] = rest[: next((j for j, x in enumerate(rest) if x.startswith("--")), len(rest))]
    return out


def _config(tmp_path, **changes):
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    } | changes
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return presets.model(str(path))


def test_the_rotary_base_is_the_configs_rope_theta_not_the_names(tmp_path):
    """review33: a Llama 3.1 config.json in a snapshot folder got none (Megatron's 10000), one with
    rope_theta 283461213 got Llama 3's 500000 from its name."""
    long = _config(tmp_path, rope_theta=283461213.0)
    assert long.rope_theta == 283461213.0
    assert _flags(_launch(long))["--rotary-base"] == ["283461213"]
    assert _flags(_launch(long, "deepspeed"))["--rotary-position-embeddings-theta"] == ["283461213"]
    v5 = _config(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})  # transformers 5
    assert _flags(_launch(v5))["--rotary-base"] == ["500000"]
    assert _flags(_launch("llama3-8b"))["--rotary-base"] == ["500000"]  # the preset's own rope_theta


def test_an_unknown_rotary_base_is_asked_for_not_left_at_megatrons_default(tmp_path):
    unknown = _config(tmp_path)
    assert unknown.rope_theta == 0.0
    for target, flag in (("megatron", "--rotary-base"), ("deepspeed", "--rotary-position-embeddings-theta")):
        launch = _launch(unknown, target)
        assert flag not in _flags(launch)
        assert any(flag in t and "rope_theta" in t for t in launch.todo), launch.todo
    fractional = _launch(_config(tmp_path, rope_theta=12345.5))  # --rotary-base is type=int
    assert "--rotary-base" not in _flags(fractional) and any("12345.5" in t for t in fractional.todo)
    learned = _launch("gpt-1.7b")  # learned positions: no rotary base to ask for
    assert not any("rotary" in t for t in learned.todo)


@pytest.mark.parametrize("bad", ["500000", -1, True])
def test_a_bad_rope_theta_is_one_line(tmp_path, bad):
    with pytest.raises(SpecError, match="rope_theta") as err:
        _config(tmp_path, rope_theta=bad)
    assert "\n" not in str(err.value)


def test_gpt_oss_is_launched_with_its_window_activation_clamp_and_sinks():
    """review33: GPT-OSS went out without its window, its attention sinks and its clamped
    activation. Megatron-LM's own examples/gptoss/02_train.sh@d98e8a64 writes the same flags."""
    f = _flags(_launch("gpt-oss-20b", ep=8))
    assert f["--window-size"] == ["127,0"] and f["--window-attn-skip-freq"] == ["2"]
    assert f["--glu-linear-offset"] == ["1.0"] and "--quick-geglu" in f and "--swiglu" not in f
    assert f["--activation-func-clamp-value"] == ["7"]
    assert f["--softmax-type"] == ["learnable"]
    assert f["--position-embedding-type"] == ["yarn"] and f["--rotary-base"] == ["150000"]
    assert "--disable-bias-linear" not in f  # attention and expert biases
    todo = _launch("gpt-oss-20b", ep=8).todo
    assert any("--rotary-scaling-factor" in t for t in todo)  # YaRN's factor: not a Model field


def test_mistral_keeps_its_window_on_every_layer():
    f = _flags(_launch("mistral-7b", tp=2, dp=4, global_batch=32))
    assert f["--window-size"] == ["4095,0"] and "--window-attn-skip-freq" not in f
    assert "--window-size" not in _flags(_launch("llama3-8b"))


def test_qwen_attention_is_its_own():
    """Qwen2.5: biases on q, k, v only (not none); Qwen3: a norm over each query and key head."""
    q25 = _flags(_launch("qwen2.5-7b", tp=4, dp=2, global_batch=16))
    assert "--disable-bias-linear" in q25 and "--add-qkv-bias" in q25 and "--qk-layernorm" not in q25
    q3 = _flags(_launch("qwen3-8b", tp=2, dp=4, global_batch=32))
    assert "--qk-layernorm" in q3 and "--add-qkv-bias" not in q3
    assert "--qk-layernorm" in _flags(_launch("qwen3-30b-a3b", ep=8))
    plain = _flags(_launch("llama3-8b"))
    assert not {"--qk-layernorm", "--add-qkv-bias", "--softmax-type"} & set(plain)


def test_deepseek_v3_routes_with_a_sigmoid_and_an_expert_bias():
    """review33: DeepSeek-V3 went out with Megatron's default softmax router."""
    launch = _launch("deepseek-v3", "megatron", nodes=8, tp=1, pp=8, dp=8, ep=8, global_batch=64)
    f = _flags(launch)
    assert f["--moe-router-score-function"] == ["sigmoid"] and "--moe-router-enable-expert-bias" in f
    assert any("--moe-router-num-groups" in t and "n_group" in t for t in launch.todo)
    assert "--moe-router-score-function" not in _flags(_launch("mixtral-8x7b", ep=8))


def test_a_model_file_shardwise_does_not_know_is_named_in_you_add():
    known = _launch("llama3-8b").todo
    assert not any("model file" in t for t in known)
    other = _launch("nemotron-8b", tp=2, dp=4, global_batch=32).todo
    assert any("nemotron model file" in t for t in other), other
