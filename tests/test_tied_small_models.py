"""Review 41 #3: the presets whose Hugging Face config sets tie_word_embeddings true are priced
tied, as the stacks run them (nanotron's LlamaForTraining ties the embedding and lm_head weights;
transformers ties them; llama.cpp reads token_embd.weight as the output). Llama 3.2 1B was priced
untied (1.50B parameters against the config's 1.24B)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.physics.params import total_params

# HF config tie_word_embeddings true (meta-llama/Llama-3.2-1B and -3B, Qwen/Qwen3-0.6B, -1.7B, -4B,
# google/gemma-2-*, gemma-3-*)
TIED = ("llama3.2-1b", "llama3.2-3b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "gemma2-2b", "gemma3-1b")


@pytest.mark.parametrize("name", TIED)
def test_hf_tied_presets_are_tied(name):
    assert presets.model(name).tied_embeddings


def test_llama32_1b_has_the_configs_parameter_count():
    # 16 x (4 h^2 q/o + 2 x 512 h k/v + 3 h f + 2 h) + V h + h, h 2048, f 8192, V 128256: 1,235,814,400
    assert float(total_params(presets.model("llama3.2-1b"))) == pytest.approx(1.2358e9, rel=1e-4)
