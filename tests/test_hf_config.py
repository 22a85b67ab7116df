"""`--model path/to/config.json`: Hugging Face configs read into the same Model as the presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardwise import presets
from shardwise.errors import SpecError

DATA = Path(__file__).parent / "data"
SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
FLAGS = ("gated_mlp", "tied_embeddings", "learned_positions", "bias", "rmsnorm", "dropout")


def test_a_llama_config_is_the_llama_preset():
    """meta-llama/Meta-Llama-3-8B's config.json (as published) gives the llama3-8b preset."""
    got, want = presets.model(str(DATA / "llama3-8b-config.json")), presets.model("llama3-8b")
    fields = (*SHAPE, *FLAGS, "architecture")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(want, f) for f in fields}


def test_a_gpt2_config_reads_gpt_style_names():
    m = presets.model(str(DATA / "gpt2-config.json"))
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.seq_len) == (12, 768, 12, 3072, 50257, 1024)
    assert m.learned_positions and m.tied_embeddings and not m.gated_mlp and m.dropout


def test_a_mixture_of_experts_is_read_counted_trained_and_served(cli):
    """mistralai/Mixtral-8x7B-v0.1's config.json: 8 experts, 2 per token; 46.7B parameters, 12.9B
    per token (Mistral AI). Training steps are priced with expert parallelism, serving with the
    experts split by TP."""
    from shardwise.physics.params import activated_params, total_params

    m = presets.model(str(DATA / "mixtral-config.json"))
    assert (m.experts, m.experts_per_token, m.expert_ffn_hidden) == (8, 2, 14336)
    assert total_params(m) / 1e9 == pytest.approx(46.70, abs=0.01)
    assert activated_params(m) / 1e9 == pytest.approx(12.88, abs=0.01)
    config = str(DATA / "mixtral-config.json")
    code, out, err = cli(["predict", "--model", config, "--system", "dgx-h100", "--global-batch", "8", "--ep", "8"])
    assert code == 0, err
    assert "EP all-to-all" in out
    code, out, err = cli(["serve", "--model", config, "--system", "dgx-h100", "--plan", "tp=8"])
    assert code == 0, err


def test_overrides_and_bad_files(tmp_path, cli):
    m = presets.model(str(DATA / "llama3-8b-config.json"), seq_len=4096)
    assert m.seq_len == 4096
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        presets.model(str(bad))
    bad.write_text('{"hidden_size": 64}')
    with pytest.raises(SpecError, match="no layers, heads, vocab found"):
        presets.model(str(bad))
    bad.write_text('{"num_hidden_layers": 4.5, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 32000}')
    with pytest.raises(SpecError, match=r"num_hidden_layers: 4\.5 is not allowed; it must be a whole number"):
        presets.model(str(bad))  # not quietly 4 layers
    code, out, err = cli(
        [
            "predict",
            "--model",
            str(DATA / "llama3-8b-config.json"),
            "--system",
            "dgx-h100",
            "--global-batch",
            "8",
            "--json",
        ]
    )
    assert code == 0 and '"layers": 32' in out.replace(".0", ""), err
    code, _, err = cli(
        ["predict", "--model", str(tmp_path / "none.json"), "--system", "dgx-h100", "--global-batch", "8"]
    )
    assert code == 2 and "cannot read" in err


def test_a_head_dim_apart_from_hidden_is_read():
    """Qwen/Qwen3-32B's config.json (fields as published): 64 heads of 128 on a hidden size of
    5120; 32.8B parameters."""
    from shardwise.physics.params import total_params

    m = presets.model(str(DATA / "qwen3-32b-config.json"))
    assert (m.head_dim, m.q_dim, m.hidden) == (128, 8192, 5120)
    assert total_params(m) / 1e9 == pytest.approx(32.76, abs=0.01)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ('"hidden_act": ["silu"]', "hidden_act: \\['silu'\\] is not allowed"),
        ('"hidden_size": "4096"', "hidden_size: '4096' is not allowed"),
        ('"num_hidden_layers": true', "num_hidden_layers: True is not allowed"),
        ('"tie_word_embeddings": "no"', "tie_word_embeddings: 'no' is not allowed"),
        ('"model_type": 3', "model_type: 3 is not allowed"),
        ('"hidden_size": 1024', "key 'hidden_size' appears twice"),
    ],
)
def test_configs_with_duplicate_keys_or_wrong_types_are_refused(tmp_path, edit: str, message: str):
    """Issue 30: duplicate keys (json keeps the last) and a list-valued hidden_act were coerced
    silently; each is now one line naming the key."""
    import json

    from shardwise import hf_config

    cfg = json.loads((DATA / "llama3-8b-config.json").read_text())
    key, value = next(iter(json.loads("{" + edit + "}").items()))
    duplicate = "twice" in message
    text = json.dumps(cfg if duplicate else {**cfg, key: value}, indent=2)
    if duplicate:  # the same key once more, as a hand edit would add it
        text = text[: text.rindex("}")].rstrip() + ",\n  " + edit + "\n}\n"
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        hf_config.read(path)


# Each official config.json of the presets added for the models users name (tests/data/hf/NAME.json:
# the published file's keys, transcribed). Importing it gives the preset NAME, field for field; the
# sequence length where the preset prices a training length the config does not state.
COMPARED = (*SHAPE, *FLAGS, "head_dim", "experts", "experts_per_token", "expert_ffn_hidden", "shared_experts")
COMPARED += ("architecture",)  # the config's model_type, as the preset states it
COMPARED_MLA = ("dense_layers", "kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim")
HF = DATA / "hf"


@pytest.mark.parametrize("name", sorted(p.stem for p in HF.glob("*.json")))
def test_each_new_models_config_json_is_its_preset(name):
    got, want = presets.model(str(HF / f"{name}.json")), presets.model(name)
    fields = [f for f in COMPARED + COMPARED_MLA if not (f == "seq_len" and name == "mixtral-8x22b")]
    assert {f: getattr(got, f) for f in fields} == {f: getattr(want, f) for f in fields}


def test_mpt_alibi_and_no_bias_are_read_from_its_own_names():
    """mosaicml/mpt-7b: d_model / n_heads / n_layers / expansion_ratio / max_seq_len; its
    learned_pos_emb true is overridden by attn_config.alibi (configuration_mpt.py), no_bias true."""
    m = presets.model(str(HF / "mpt-7b.json"))
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.seq_len) == (32, 4096, 32, 16384, 2048)
    assert not m.learned_positions and not m.bias and not m.gated_mlp and m.tied_embeddings and not m.dropout


def test_mpt_defaults_grouped_query_and_glu(tmp_path):
    """An MPT config without alibi or no_bias has learned positions and biases (MPTConfig
    defaults); grouped-query attention takes attn_config.kv_n_heads; ffn_type mptglu is gated."""
    import json

    cfg = {"model_type": "mpt", "d_model": 2048, "n_heads": 16, "n_layers": 24, "vocab_size": 50368,
           "max_seq_len": 2048, "expansion_ratio": 2.5}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = presets.model(str(path))
    assert m.learned_positions and m.bias and m.ffn_hidden == 5120 and m.kv_heads == 16 and not m.gated_mlp
    cfg |= {
        "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 4},
        "ffn_config": {"ffn_type": "mptglu"},
    }
    path.write_text(json.dumps(cfg))
    m = presets.model(str(path))
    assert m.kv_heads == 4 and m.gated_mlp
    path.write_text(json.dumps(cfg | {"expansion_ratio": "4"}))
    with pytest.raises(SpecError, match="expansion_ratio: '4' is not allowed"):
        presets.model(str(path))


def test_falcon_multi_query_gives_one_kv_head_unless_the_new_decoder():
    """transformers FalconAttention: multi_query (falcon-7b) -> 1 KV head; new_decoder_architecture
    (falcon-180B also says multi_query) -> num_kv_heads."""
    assert presets.model(str(HF / "falcon-7b.json")).kv_heads == 1
    assert presets.model(str(HF / "falcon-180b.json")).kv_heads == 8


def test_gemma_is_gated_and_tied_by_default():
    """google/gemma-2-9b: hidden_act gelu_pytorch_tanh on gate_proj/up_proj, no tie_word_embeddings
    key (Gemma2Config defaults it to true)."""
    m = presets.model(str(HF / "gemma2-9b.json"))
    assert m.gated_mlp and m.tied_embeddings and m.head_dim == 256


def test_a_rope_scaled_model_is_priced_at_its_pre_training_context(cli):
    """Llama 3.1's 131072-token window is rope-scaled from 8192 (rope_scaling
    original_max_position_embeddings), DeepSeek-V2-Lite's 163840 from 4096; a note says so."""
    assert presets.model(str(HF / "llama3.1-8b.json")).seq_len == 8192
    assert presets.model(str(HF / "deepseek-v2-lite.json")).seq_len == 4096
    code, _, err = cli(["predict", "--model", str(HF / "llama3.1-8b.json"), "--system", "dgx-h100",
                        "--global-batch", "8"])  # fmt: skip
    assert code == 0 and "before RoPE scaling to 131072" in err


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 768, "d_ff": 3072,
          "num_layers": 12, "num_heads": 12, "vocab_size": 32128}, "an encoder-decoder model"),
        ({"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "num_attention_heads": 12,
          "num_hidden_layers": 12, "vocab_size": 30522}, "an encoder-only"),
        ({"architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096,
          "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 65536, "num_experts": 16,
          "mamba_d_state": 16}, "a hybrid of Mamba and attention layers"),
        ({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560,
          "num_hidden_layers": 64, "vocab_size": 50280, "state_size": 16}, "a Mamba state-space model"),
        # by structure where the model_type says nothing: cross-attention, or SSM sizes with no layer pattern
        ({"model_type": "my_seq2seq", "is_encoder_decoder": True, "hidden_size": 512, "num_attention_heads": 8,
          "num_hidden_layers": 6, "vocab_size": 32000}, "an encoder-decoder model"),
        ({"model_type": "my_ssm", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 6,
          "vocab_size": 32000, "mamba_d_state": 16}, "a state-space \\(Mamba\\) model \\(mamba_d_state\\)"),
        ({"model_type": "my_linear", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 2,
          "vocab_size": 32000, "layer_types": ["linear_attention", "full_attention"]}, "a model with linear_attention"),
    ],
)  # fmt: skip
def test_what_is_not_a_decoder_only_transformer_is_refused_in_one_line(tmp_path, cli, config, kind):
    """Review 33: T5 read as a 12-layer decoder of 0.16B, BERT as a causal model, Jamba as 92.1B
    with its Mamba layers priced as attention, Mamba as "no heads found"; each is now refused by
    what it is, naming what is priced (NemotronHConfig's hybrids stay: tests/test_hybrid_mamba.py)."""
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError, match=f"is {kind}.*not supported; shardwise prices decoder-only transformers"):
        presets.model(str(path))
    code, _, err = cli(["presets", "show", str(path)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_what_a_config_states_and_is_not_priced_is_noted(tmp_path, cli):
    """Gemma 2's soft-capping and Qwen2's q, k, v biases (transformers Qwen2Attention, no
    attention_bias key) were dropped silently; each is a note now. --seq-len silences only the
    sequence-length note."""
    code, _, err = cli(["presets", "show", str(HF / "gemma2-9b.json")])
    assert code == 0 and "soft-capping (attn_logit_softcapping 50.0, final_logit_softcapping 30.0)" in err
    code, _, err = cli(["presets", "show", str(HF / "qwen2.5-72b.json")])
    per_layer = (64 + 2 * 8) * 128  # Qwen2.5-72B: 64 query heads, 8 KV heads of 128
    assert code == 0 and f"biases (qwen2: {per_layer:,} parameters a layer" in err
    import json

    cfg = json.loads((HF / "qwen2.5-72b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "attention_bias": False}))
    code, _, err = cli(["presets", "show", str(path)])
    assert code == 0 and "biases" not in err
    code, _, err = cli(["predict", "--model", str(HF / "qwen2.5-72b.json"), "--system", "dgx-h100", "--nodes", "2",
                        "--tp", "8", "--global-batch", "8", "--seq-len", "4096"])  # fmt: skip
    assert code == 0 and "biases" in err and "--seq-len to change" not in err
