"""`Model.architecture`: the model file an engine runs, as Hugging Face config.json's `model_type`
spells it. The serving rules that differ by model file (SGLang's Mixtral / Grok without
data-parallel attention, vLLM's DeepSeek layer) read it, not the model's name: a config.json of a
Mixtral under another name is refused as the preset is; a name is a label."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shardwise import hf_config, presets
from shardwise.engines.dp_dense import (
    NO_DP_ATTENTION_ARCHITECTURES,
    VLLM_DEEPSEEK_ARCHITECTURES,
    VLLM_SEQUENCE_PARALLEL_MOE,
    vllm_layer_sequence_parallel,
)
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.rules import serving_expert_tp
from shardwise.specs.serving import ServingWorkload

DATA = Path(__file__).parent / "data"
SG = ServingWorkload(input_len=1000, output_len=1000, batch=256, weight_precision="fp8", engine="sglang")
VL = replace(SG, engine="vllm")

# The model_type of each preset's Hugging Face config.json (the config its source names;
# transformers' configuration_*.py `model_type`), and the names chosen where a model has no config
# of its own (presets/models.yaml says which): gpt2 for Megatron-style GPTs, glm-130b, grok-1 (the
# Grok-1 ports' configuration_grok1.py). Beside them, the types the serving rules name.
KNOWN = {
    "gpt2": "transformers GPT2Config",
    "llama": "LlamaConfig (Llama 2/3/3.1/3.2/3.3, TinyLlama, Yi)",
    "aquila": "BAAI/Aquila2-7B configuration_aquila.py",
    "nemotron": "NemotronConfig",
    "mistral": "MistralConfig (Mistral 7B, Mistral NeMo)",
    "qwen2": "Qwen2Config (Qwen2.5)",
    "qwen3": "Qwen3Config",
    "qwen3_moe": "Qwen3MoeConfig",
    "glm-130b": "no HF config (SwissArmyTransformer checkpoint): its own name",
    "internlm": "internlm/internlm-7b configuration_internlm.py",
    "olmo2": "Olmo2Config",
    "mixtral": "MixtralConfig",
    "deepseek_v2": "DeepseekV2Config",
    "deepseek_v3": "DeepseekV3Config (DeepSeek-V3, Moonlight)",
    "deepseek_v32": "DeepSeek-V3.2's config (vLLM DeepseekV32ForCausalLM)",
    "kimi_k2": "moonshotai/Kimi-K2-Base config.json (DeepseekV3ForCausalLM)",
    "gpt_oss": "GptOssConfig",
    "grok-1": "hpcai-tech/grok-1 configuration_grok1.py",
    "llama4": "Llama4Config (the wrapper of Llama4TextConfig)",
    "mpt": "MptConfig",
    "bloom": "BloomConfig",
    "opt": "OPTConfig",
    "falcon": "FalconConfig",
    "gpt_neox": "GPTNeoXConfig",
    "gemma2": "Gemma2Config",
    "gemma3": "Gemma3Config (the multimodal wrapper)",
    "gemma3_text": "Gemma3TextConfig (gemma-3-1b)",
    "nemotron_h": "NemotronHConfig",
    "qwen3_vl_moe": "Qwen3VLMoeConfig (the multimodal wrapper)",
    "qwen3_next": "Qwen3NextConfig",
    "llama4_text": "Llama4TextConfig",
    "granitemoe": "GraniteMoeConfig",
    "deepseek": "deepseek-ai/deepseek-moe-16b-base config.json (vLLM DeepseekForCausalLM)",
    "glm_moe_dsa": "GLM-5's config (vLLM 0.34.0 models/deepseek_v32 tests model_type 'glm_moe_dsa')",
    "qwen3_5_moe": "Qwen3.5 MoE's multimodal wrapper (vLLM Qwen3_5MoeForConditionalGeneration)",
    "qwen3_5_moe_text": "Qwen3.5 MoE's text_config (vLLM 0.34.0 models/qwen3_5 tests model_type 'qwen3_5_moe_text')",
}


def one(model, tp: int, dp: int, wl: ServingWorkload) -> Scenario:
    """One rank of `model` (a preset name, a file or a Model) served with attention tp x dp and
    ep = tp x dp on 8 H200s."""
    m = presets.model(model) if isinstance(model, str) else model
    plan = plan_for_serving(tp, 1, dp).with_(ep=tp * dp, etp=serving_expert_tp(tp, tp * dp, 0, dp))
    return serving_scenario(Scenario(m, presets.system("dgx-h200"), plan), wl)


def renamed(config: Path, name: str, tmp_path: Path) -> str:
    """`config` as NAME/config.json (the model takes its folder's name)."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(config, folder / "config.json")
    return str(folder / "config.json")


def test_every_preset_states_a_known_architecture():
    """Every model preset has the field, spelled as a model_type of KNOWN; the rules name only
    known ones (a misspelt set would never match)."""
    for name in presets.names("models"):
        assert presets.model(name).architecture in KNOWN, name
    assert set(KNOWN) >= NO_DP_ATTENTION_ARCHITECTURES | VLLM_DEEPSEEK_ARCHITECTURES | set(VLLM_SEQUENCE_PARALLEL_MOE)


def test_a_renamed_mixtral_config_is_refused_as_the_preset_is(tmp_path):
    """mistralai/Mixtral-8x7B-v0.1's config.json as "my-moe": SGLang's data-parallel attention
    refused in the same line as the mixtral-8x7b preset's, its name aside; TP attention served."""
    path = renamed(DATA / "mixtral-config.json", "my-moe", tmp_path)
    errors = []
    for model in ("mixtral-8x7b", path):
        with pytest.raises(SpecError, match="without data-parallel attention") as info:
            one(model, 2, 4, SG)
        errors.append(str(info.value))
    assert errors[1] == errors[0].replace("'mixtral-8x7b'", "'my-moe'")
    one(path, 8, 1, SG)
    one(path, 2, 4, VL)  # vLLM's Mixtral: served, without the sequence-parallel MoE


def test_the_name_is_a_label_not_an_architecture():
    """A DeepSeek named like a Mixtral is served with data-parallel attention; a Mixtral whose
    architecture is unknown (a YAML file that states none) is priced as the other files are."""
    ds = presets.model("deepseek-v2-lite").with_(name="mixtral-lookalike")
    one(ds, 2, 4, SG)
    one(presets.model("mixtral-8x7b").with_(name="mixtral-8x7b-copy", architecture=None), 2, 4, SG)
    with pytest.raises(SpecError, match="without data-parallel attention"):
        one(presets.model("deepseek-v2-lite").with_(name="my-model", architecture="grok-1"), 2, 4, SG)


def test_a_deepseek_config_under_another_name_gets_deepseeks_vllm_layer(tmp_path, cli):
    """deepseek-ai/DeepSeek-V2-Lite's config.json as "my-lite": vLLM's DeepSeek layer
    (attention reduce-scattered at pp = 1) as for the preset, and the same estimate; the rule
    follows the architecture (latent attention in another file: not), the shape only where it is
    unknown."""
    path = renamed(DATA / "hf" / "deepseek-v2-lite.json", "my-lite", tmp_path)
    got, want = one(path, 2, 4, VL), one("deepseek-v2-lite", 2, 4, VL)
    assert got.model.architecture == "deepseek_v2" and got.model.name == "my-lite"
    assert bool(vllm_layer_sequence_parallel(got.model, got.plan))
    assert bool(vllm_layer_sequence_parallel(want.model, want.plan))
    other = want.model.with_(architecture="qwen3_moe")
    assert not bool(vllm_layer_sequence_parallel(other, want.plan))
    unknown = want.model.with_(architecture=None)
    assert bool(vllm_layer_sequence_parallel(unknown, want.plan))  # multi-head latent attention
    outputs = []
    for model in (path, "deepseek-v2-lite"):
        code, out, err = cli(["serve", "--model", model, "--system", "dgx-h200", "--framework", "vllm",
                              "--plan", "tp=2,ep=8", "--json"])  # fmt: skip
        assert code == 0, err
        outputs.append({k: v for k, v in json.loads(out).items() if k not in ("command", "model")})  # its name differs
    assert outputs[0] == outputs[1]


def test_config_json_architecture_reading(tmp_path):
    """model_type, lower-cased; a multimodal wrapper's own (its text_config's where the wrapper
    states none or the language model is a file the serving rules single out); Falcon's old
    names as falcon; Grok's classes as grok-1 whatever model_type says (Grok-2's config states
    git); none stated, or none a model_type can be: None."""
    base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128}
    cases = [
        ({"model_type": "Qwen3_MoE"}, "qwen3_moe"),
        ({"model_type": "llama4", "text_config": {**base, "model_type": "llama4_text"}}, "llama4"),
        # a wrapper around a file the serving rules single out runs its language model with that file
        ({"model_type": "kimi_k25", "text_config": {**base, "model_type": "kimi_k2"}}, "kimi_k2"),
        ({"model_type": "llava", "text_config": {**base, "model_type": "mixtral"}}, "mixtral"),
        ({"text_config": {**base, "model_type": "qwen3_moe"}}, "qwen3_moe"),  # the wrapper states none
        ({"model_type": "RefinedWebModel"}, "falcon"),
        ({"model_type": "git", "architectures": ["Grok1ForCausalLM"]}, "grok-1"),
        ({"architectures": ["MixtralForCausalLM"]}, None),
        ({"model_type": "my model"}, None),  # no model_type spelling: unknown, the config still priced
        ({}, None),
    ]
    for i, (extra, want) in enumerate(cases):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps({**base, **extra}))
        assert hf_config.read(path).get("architecture") == want, extra
        assert presets.model(str(path)).architecture == want


@pytest.mark.parametrize(
    "value, message",
    [
        ("MixtralForCausalLM", "architecture 'MixtralForCausalLM' is not allowed; give the model_type"),
        ("deep seek", "architecture 'deep seek' is not allowed"),
        ("", "architecture '' is not allowed"),
        (7, "architecture: 7 must be the model_type of its Hugging Face config.json, as text"),
    ],
)
def test_a_bad_architecture_is_one_line_and_exit_2(tmp_path, cli, value, message):
    """A model file's architecture that is no model_type: one line naming the field and what is
    allowed, exit status 2; null is unknown (allowed)."""
    path = tmp_path / "m.yaml"
    shape = "name: m\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 128\nseq_len: 128\n"
    path.write_text(f"{shape}architecture: {json.dumps(value)}\n")
    code, _, err = cli(["predict", "--model", str(path), "--system", "dgx-h100", "--global-batch", "8"])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(SpecError, match="architecture"):
        presets.model("llama3-8b").with_(architecture=value)
    path.write_text(f"{shape}architecture: null\n")
    assert presets.model(str(path)).architecture is None


def test_the_architecture_is_printed_with_the_model(cli):
    """`presets show` prints it, `presets models --json` and the JSON of a prediction carry it."""
    code, out, _ = cli(["presets", "show", "deepseek-v3"])
    assert code == 0 and "  architecture: deepseek_v3\n" in out
    code, out, _ = cli(["presets", "models", "--json"])
    assert code == 0 and all(row["architecture"] in KNOWN for row in json.loads(out)["models"])
    code, out, _ = cli(["presets", "show", "kimi-k2", "--json"])
    assert code == 0 and json.loads(out)["models"]["architecture"] == "kimi_k2"
    code, out, _ = cli(["predict", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--global-batch", "8",
                        "--ep", "8", "--json"])  # fmt: skip
    assert code == 0
    found = json.loads(out)
    model = found["scenario"]["model"] if "scenario" in found else found["model"]
    assert model["architecture"] == "mixtral"
    assert np.isfinite(model["params"])


def test_the_files_the_rules_single_out_are_the_ones_a_wrapper_defers_to():
    """Every architecture engines/dp_dense.py matches is one a multimodal wrapper's config defers to."""
    from shardwise.engines import dp_dense
    from shardwise.specs.model import RULED_LANGUAGE_MODEL_FILES

    ruled = dp_dense.NO_DP_ATTENTION_ARCHITECTURES | dp_dense.VLLM_DEEPSEEK_ARCHITECTURES
    # llama4_text aside: Llama 4's wrapper (llama4) is in the list itself and keeps its name
    ruled |= set(dp_dense.VLLM_SEQUENCE_PARALLEL_MOE) - {"llama4_text"}
    assert ruled == RULED_LANGUAGE_MODEL_FILES


def test_a_named_but_unlisted_architecture_takes_the_unknown_ones_rule():
    """vLLM's sequence-parallel MoE and its reduce-scattered attention: an architecture the lists do
    not name (GLM-5 before its entry, any remote-code file) is decided as an unknown one (None) is:
    by latent attention; a listed file that does not reduce-scatter (qwen3_moe) keeps its own rule."""
    from shardwise.engines.dp_dense import vllm_sequence_parallel_moe

    want = one("deepseek-v2-lite", 2, 4, VL)
    for arch in (None, "some_new_moe", "glm_moe_dsa", "deepseek"):
        m = want.model.with_(architecture=arch)
        assert bool(vllm_sequence_parallel_moe(m, want.plan)), arch
        assert bool(vllm_layer_sequence_parallel(m, want.plan)), arch
    plain = want.model.with_(kv_lora_rank=0)  # no latent attention
    for arch in (None, "some_new_moe", "mixtral"):
        assert not bool(vllm_sequence_parallel_moe(plain.with_(architecture=arch), want.plan)), arch
    assert bool(vllm_sequence_parallel_moe(plain.with_(architecture="qwen3_moe"), want.plan))
    assert not bool(vllm_layer_sequence_parallel(plain.with_(architecture="qwen3_moe"), want.plan))


def test_qwen3_next_and_qwen3_5_reduce_scatter_attention_at_pp_1():
    """vLLM 0.34.0 qwen3_next.py / models/qwen3_5 `use_attn_reduce_scatter_for_moe`: at pp = 1, as
    DeepSeek's layer; Qwen3-Next only where every layer is an MoE; not at pp > 1."""
    want = one("deepseek-v2-lite", 2, 4, VL)
    base = want.model.with_(kv_lora_rank=0, dense_layers=0)
    for arch in ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"):
        assert bool(vllm_layer_sequence_parallel(base.with_(architecture=arch), want.plan)), arch
        assert not bool(vllm_layer_sequence_parallel(base.with_(architecture=arch), replace(want.plan, pp=2)))
    assert not bool(vllm_layer_sequence_parallel(base.with_(architecture="qwen3_next", dense_layers=1), want.plan))
    assert bool(vllm_layer_sequence_parallel(base.with_(architecture="qwen3_5_moe", dense_layers=1), want.plan))


def test_the_vllm_model_file_lists_are_read_at_the_presets_version():
    """`VLLM_SEQUENCE_PARALLEL_MOE` and the reduce-scatter lists are vLLM 0.34.0's: a vLLM preset of
    another version asks for the model files to be read again."""
    from shardwise.engines.dp_dense import VLLM_SEQUENCE_PARALLEL_VERSION
    from shardwise.engines.engine_presets import engine

    assert engine("vllm").version.split()[0] == VLLM_SEQUENCE_PARALLEL_VERSION
