"""What an iteration under pipeline parallelism is made of (#37): the pipeline's sends apart from
what a round of micro-batches waits beyond the stages' GPU work (`IterationTimes.pp_wait_s`: host
steps, the heaviest micro-batch's pass, decodes stalled behind prefills run apart)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.iteration import iteration_times
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def _iteration(engine: str, pp: int, decode: float, prompt_tokens: float):
    model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x")
    wl = ServingWorkload(512, 128, 1, "bf16", "bf16", engine=engine)
    scn = serving_scenario(Scenario(model, cluster.with_(gpus_per_node=pp), plan_for_serving(1, pp)), wl)
    return iteration_times(scn, wl, np.asarray(decode), np.asarray(prompt_tokens), 576.0)


@pytest.mark.parametrize("engine", ["tensorrt-llm", "vllm", "sglang"])
def test_the_parts_add_up_and_the_wait_is_not_counted_as_sends(engine):
    """PP 8 with a prompt beside the decodes: the four parts add up to the iteration; the sends are
    the activations' (well under a millisecond a round on PCIe for a few dozen tokens), the rest of
    the time beyond the GPU's work is the wait, which exceeds them."""
    it = _iteration(engine, 8, 64.0, 512.0)
    parts = float(it.compute_s + it.tp_comm_s + it.pp_p2p_s + it.pp_wait_s)
    assert parts == pytest.approx(float(it.total_s))
    assert float(it.pp_wait_s) > 0 and float(it.pp_p2p_s) >= 0
    assert float(it.pp_wait_s) > float(it.pp_p2p_s)


def test_without_stages_there_is_no_wait():
    it = _iteration("vllm", 1, 64.0, 512.0)
    assert float(it.pp_wait_s) == 0.0 and float(it.pp_p2p_s) == 0.0
    assert float(it.compute_s + it.tp_comm_s) == pytest.approx(float(it.total_s))


def test_the_static_estimate_keeps_the_host_step_apart_from_the_sends():
    """A static batch under PP: the first micro-batch's host step is the prefill's wait, not a send;
    every part of a decode step adds up to its time per token."""
    model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x")
    wl = ServingWorkload(512, 128, 32, "bf16", "bf16", engine="vllm")
    est = estimate_serving(Scenario(model, cluster, plan_for_serving(1, 8)), wl)
    assert float(est.prefill_s["pp_wait"]) > 0
    assert sum(float(v) for v in est.decode_s.values()) == pytest.approx(float(est.tpot_s))
    assert set(est.decode_s) == {"compute", "tp_comm", "pp_p2p", "pp_wait"}


def test_serve_names_the_wait_and_says_what_it_is(cli):
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "rtx4090-8x", "--plan", "pp=8",
                          "--max-throughput", "--framework", "vllm", "--requests", "200"])  # fmt: skip
    assert code == 0, err
    text = " ".join(out.split())
    assert "pp wait" in text and "pp p2p" not in text
    assert "pp wait: a round of micro-batches waiting beyond the stages' GPU work" in text
    assert "a sustained rate" in text and "not sent in one burst" in text
