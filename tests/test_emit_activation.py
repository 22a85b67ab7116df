"""The presets' rotary bases and MLP activations (`Model.rope_theta`, `rope_local_theta`,
`activation`), and what each launch writes for them: Megatron-LM's --rotary-base and its activation
flags (d98e8a64 megatron/training/arguments.py: --swiglu is a gated SiLU, --squared-relu, --quick-geglu;
no flag gates a GELU), Megatron-DeepSpeed's (@4efb479d: --swiglu, --squared-relu, --openai-gelu), and
torchtitan's models, which are all SwiGLU but GPT-OSS."""

from __future__ import annotations

import json

import pytest

from shardwise import presets
from shardwise.emit import EmitError, emit
from shardwise.errors import SpecError
from shardwise.specs import Model, Plan, Scenario

# Every preset whose base was added from a primary source (models.yaml names it beside the value):
# dropping one fails here.
BASES = {
    **dict.fromkeys(("gemma2-2b", "gemma2-9b", "gemma2-27b"), 10000),
    **dict.fromkeys(("gemma3-1b", "gemma3-4b", "gemma3-12b", "gemma3-27b"), 1000000),
    "yi-34b": 5000000,
    "tinyllama-1.1b": 10000,
    "mistral-nemo-12b": 1000000,
    "deepseek-v2": 10000,
    "deepseek-v2-lite": 10000,
    **dict.fromkeys(("olmo2-7b", "olmo2-13b", "olmo-core-1b", "olmo-core-llama3-8b"), 500000),
    "llama2-34b-fms": 1000000,
    **dict.fromkeys(("nemotron-8b", "nemotron-22b", "nemotron4-15b", "nemotron4-340b"), 10000),
    "glm-130b": 10000,
    "grok-1": 10000,
    **dict.fromkeys(("falcon-7b", "falcon-40b", "falcon-180b"), 10000),
    "gpt-neox-20b": 10000,
    # config.json states none: its configuration class's default (models.yaml names it)
    **dict.fromkeys(("aquila2-7b", "internlm-7b"), 10000),
    **dict.fromkeys(("kimi-k2", "moonlight-16b"), 50000),
}
GEMMA = ("gemma2-2b", "gemma2-9b", "gemma2-27b", "gemma3-1b", "gemma3-4b", "gemma3-12b", "gemma3-27b")
# (activation, gated) of the presets whose MLP is not the family's SwiGLU / GELU
ACTIVATIONS = {
    **dict.fromkeys(GEMMA, ("gelu_tanh", True)),
    "grok-1": ("gelu_tanh", True),
    "glm-130b": ("gelu", True),
    **dict.fromkeys(("nemotron-8b", "nemotron-22b", "nemotron4-15b", "nemotron4-340b"), ("squared_relu", False)),
    **dict.fromkeys(("nemotron-h-8b", "nemotron-h-56b", "nemotron-3-nano-30b-a3b"), ("squared_relu", False)),
    "opt-175b": ("relu", False),
    **dict.fromkeys(("gpt-oss-20b", "gpt-oss-120b"), ("quick_gelu", True)),
}


def _launch(model, target="megatron", **plan):
    m = presets.model(model) if isinstance(model, str) else model
    fields = dict(tp=1, pp=1, dp=8, global_batch=64) | plan
    return emit(Scenario(m, presets.system("dgx-h100"), Plan(**fields)), target)


def _words(launch) -> list[str]:
    return [w for group in launch.args for w in group]


def _after(launch, flag: str) -> str:
    words = _words(launch)
    return words[words.index(flag) + 1]


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_preset_carries_its_rotary_base_and_megatron_writes_it(name):
    m = presets.model(name)
    assert m.rope_theta == BASES[name]
    launch = _launch(m)
    assert _after(launch, "--rotary-base") == str(BASES[name])
    assert not [t for t in launch.todo if t.startswith("rotary base")]


def test_megatron_deepspeed_writes_the_new_bases_too():
    launch = _launch("yi-34b", "deepspeed")
    assert _after(launch, "--rotary-position-embeddings-theta") == "5000000"


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_the_preset_names_its_activation(name):
    m = presets.model(name)
    assert (m.activation, m.gated_mlp) == ACTIVATIONS[name]


def test_the_family_defaults_are_swiglu_and_gelu():
    assert presets.model("llama3-8b").activation == "silu"
    assert presets.model("gpt3-175b").activation == "gelu"


@pytest.mark.parametrize("name", [*GEMMA, "grok-1", "glm-130b"])
def test_a_geglu_is_never_emitted_as_swiglu(name):
    """Gemma's, Grok-1's and GLM-130B's MLP gates a GELU: --swiglu would train a SiLU. Megatron-LM
    has no flag for it: the launch asks for it."""
    _asks_for_geglu(_launch(name))


def test_megatron_deepspeed_asks_for_a_geglu_too():
    """(Gemma and Grok-1 set their head dimension apart, which Megatron-DeepSpeed does not take.)"""
    _asks_for_geglu(_launch("glm-130b", "deepspeed"))
    base = dict(name="m", layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048)
    geglu = Model(**base, gated_mlp=True, activation="gelu_tanh")
    _asks_for_geglu(_launch(geglu, "deepspeed"))


def _asks_for_geglu(launch) -> None:
    assert "--swiglu" not in _words(launch)
    assert "--quick-geglu" not in _words(launch)
    asks = [t for t in launch.todo if t.startswith("the MLP's activation, a gated MLP (GLU) on ")]
    assert len(asks) == 1 and "GELU" in asks[0] and "has no flag for it" in asks[0]


def test_gemma3s_windowed_layers_base_is_asked_for():
    """Gemma 3: 1000000 on the global layers (--rotary-base, every layer), 10000 on the windowed ones,
    which no Megatron-LM flag sets."""
    m = presets.model("gemma3-27b")
    assert (m.rope_theta, m.rope_local_theta) == (1000000, 10000)
    launch = _launch(m)
    assert _after(launch, "--rotary-base") == "1000000"
    assert [t for t in launch.todo if t.startswith("the windowed layers' rotary base, 10000")]
    assert not [t for t in _launch("gemma2-9b").todo if "windowed layers' rotary base" in t]


@pytest.mark.parametrize(
    ("name", "megatron", "deepspeed"),
    [
        ("llama3-8b", ["--swiglu"], ["--swiglu"]),
        ("nemotron4-15b", ["--squared-relu"], ["--squared-relu"]),
        ("gpt3-175b", [], []),  # GELU: both tools' default, no flag
    ],
)
def test_each_activation_gets_its_own_flag(name, megatron, deepspeed):
    flags = ("--swiglu", "--squared-relu", "--quick-geglu", "--openai-gelu")
    for target, want in (("megatron", megatron), ("deepspeed", deepspeed)):
        launch = _launch(name, target)
        assert [w for w in _words(launch) if w in flags] == want, target
        assert not [t for t in launch.todo if t.startswith("the MLP's activation")], target


def test_relu_and_tanh_gelu_have_no_megatron_flag():
    base = dict(name="m", layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048)
    relu = _launch(Model(**base, activation="relu"))
    assert [t for t in relu.todo if t.startswith("the MLP's activation, an MLP on ReLU")]
    tanh = Model(**base, activation="gelu_tanh")
    assert [t for t in _launch(tanh).todo if t.startswith("the MLP's activation, an MLP on tanh-approximated GELU")]
    assert "--openai-gelu" in _words(_launch(tanh, "deepspeed"))  # Megatron-DeepSpeed's tanh-GELU


def test_gpt_oss_keeps_its_own_activation_flags():
    launch = _launch("gpt-oss-20b", ep=8)
    assert "--quick-geglu" in _words(launch) and "--swiglu" not in _words(launch)
    assert not [t for t in launch.todo if t.startswith("the MLP's activation")]


def test_torchtitan_takes_only_a_model_of_its_own_mlp():
    from dataclasses import replace

    assert _launch("llama3-8b", "torchtitan").target == "torchtitan"
    gelu = replace(presets.model("llama3-8b"), activation="gelu")  # Llama 3's shape, a GeGLU
    with pytest.raises(EmitError, match="another shape or MLP \\(gated gelu\\)"):
        _launch(gelu, "torchtitan")


def test_an_unknown_activation_is_one_clear_line():
    with pytest.raises(SpecError, match="activation 'geglu' is not allowed; choose one of silu, gelu, gelu_tanh"):
        Model(name="m", layers=2, hidden=64, heads=4, vocab=100, seq_len=16, activation="geglu")


@pytest.mark.parametrize(
    ("changes", "activation", "local"),
    [
        (
            {
                "model_type": "gemma3_text",
                "hidden_activation": "gelu_pytorch_tanh",
                "rope_local_base_freq": 10000.0,
                "rope_theta": 1000000.0,
                "hidden_act": None,
            },
            "gelu_tanh",
            10000.0,
        ),
        ({"model_type": "gemma2", "hidden_act": None}, "gelu_tanh", 0.0),  # Gemma's default
        ({"model_type": "nemotron", "hidden_act": "relu2"}, "squared_relu", 0.0),
        ({"hidden_act": "silu"}, "silu", 0.0),
        (
            {
                "model_type": "gemma3_text",
                "hidden_act": None,
                "rope_theta": None,
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                },
            },
            "gelu_tanh",
            10000.0,
        ),
    ],
)
def test_config_json_gives_the_activation_and_the_windowed_base(tmp_path, changes, activation, local):
    cfg = {
        "model_type": "llama",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_theta": 10000.0,
    } | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    m = presets.model(str(path))
    assert (m.activation, m.rope_local_theta) == (activation, local)
    if "rope_parameters" in changes:
        assert m.rope_theta == 1000000.0
