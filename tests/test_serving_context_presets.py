"""Every model preset that names a Hugging Face checkpoint states the context that checkpoint serves
(`max_position_embeddings`), so serve and `--emit` do not take the pre-training seq_len for it (review 50 #2)."""

import json
from pathlib import Path

import pytest
import yaml

from shardwise import presets

MODELS_YAML = Path(presets.__file__).parent / "models.yaml"
HF = Path(__file__).parent / "data" / "hf"


def _entries() -> dict:
    return yaml.safe_load(MODELS_YAML.read_text())


def test_every_preset_with_an_hf_id_states_its_serving_context():
    missing = [
        k
        for k, v in _entries().items()
        if isinstance(v, dict) and v.get("hf_id") and not v.get("max_position_embeddings")
    ]
    assert missing == []


@pytest.mark.parametrize("path", sorted(HF.glob("*.json")), ids=lambda p: p.stem)
def test_the_stated_context_is_the_configs(path):
    # tests/data/hf/NAME.json is preset NAME's config.json; the key vLLM's max-length rule reads
    # first (max_position_embeddings, else MPT's max_seq_len), else FalconConfig's 2048 and vLLM's 2048.
    config = json.loads(path.read_text())
    config = config.get("text_config", config)
    stated = config.get("max_position_embeddings") or config.get("max_seq_len") or 2048
    assert presets.model(path.stem).max_position_embeddings == stated


def test_qwen3_serves_40960_and_llama4_scout_its_ten_million():
    assert presets.model("qwen3-235b-a22b").serving_context == 40960
    assert presets.model("qwen3-8b").serving_context == 32768  # the Base checkpoint
    assert presets.model("llama4-scout").serving_context == 10485760
    assert presets.model("mistral-nemo-12b").serving_context == 128000
