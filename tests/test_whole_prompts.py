"""Under pipeline parallelism TensorRT-LLM and vLLM put each prompt's chunk whole in one micro-batch,
and every stage takes the micro-batches in one order: a round lasts at least its heaviest
micro-batch's pass (`EnginePreset.whole_prompts`, `engines.iteration`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines import engine_presets
from shardwise.engines.engine_presets import ENGINES
from shardwise.engines.iteration import iteration_times
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

BUDGET = 8192.0


def _times(engine: str, pp: int, d: float, q: float, whole: bool, monkeypatch, input_len: int = 512) -> float:
    monkeypatch.setitem(engine_presets.ENGINES, engine, replace(ENGINES[engine], whole_prompts=whole))
    cluster = presets.system("dgx-h100").with_(gpus_per_node=pp)
    wl = ServingWorkload(input_len, 128, engine=engine)
    scn = serving_scenario(Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(1, pp)), wl)
    t = iteration_times(scn, wl, np.asarray(d), np.asarray(q), 576.0, BUDGET)
    return float(t.total_s)


def test_the_engines_that_mix_prompts_and_decodes_keep_a_prompt_in_one_micro_batch():
    assert ENGINES["tensorrt-llm"].whole_prompts and ENGINES["vllm"].whole_prompts
    # SGLang's micro-batches prefill or decode (its own rule); llama.cpp splits a batch in ubatches
    assert not ENGINES["sglang"].whole_prompts and not ENGINES["llama.cpp"].whole_prompts


@pytest.mark.parametrize("engine", ["tensorrt-llm", "vllm"])
def test_one_prompt_in_a_round_of_decodes_holds_the_round_to_its_pass(engine, monkeypatch):
    """256 decoding sequences over 8 stages and one 2048-token prompt: split evenly, each micro-batch
    carries 256 prompt tokens; whole, one carries all 2048 and the seven behind it wait for it. (With
    a 512-token prompt on Llama 3 8B, vLLM's host time per round, longer than that pass, hides it.)"""
    even = _times(engine, 8, 256, 2048, False, monkeypatch, 2048)
    whole = _times(engine, 8, 256, 2048, True, monkeypatch, 2048)
    heavy_alone = _times(engine, 8, 32, 2048, False, monkeypatch, 2048)  # its pass: 32 decodes and the prompt
    assert whole > 1.1 * even
    assert whole >= heavy_alone * (1 - 1e-9)


@pytest.mark.parametrize("engine", ["tensorrt-llm", "vllm"])
def test_full_budgets_in_every_micro_batch_change_nothing(engine, monkeypatch):
    """A wave: 8 micro-batches each with a full budget of prompts (equal requests sent together)."""
    q = 8 * BUDGET
    assert _times(engine, 8, 256, q, True, monkeypatch) == pytest.approx(
        _times(engine, 8, 256, q, False, monkeypatch), rel=1e-12
    )


def test_decodes_alone_and_one_stage_change_nothing(monkeypatch):
    for pp, d, q in ((8, 256, 0), (1, 256, 512), (1, 64, 4096)):
        assert _times("vllm", pp, d, q, True, monkeypatch) == pytest.approx(
            _times("vllm", pp, d, q, False, monkeypatch), rel=1e-12
        )
