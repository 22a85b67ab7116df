"""SGLang's pipeline micro-batches prefill or decode, never both, in one fixed order on every stage
(`engines.engine_presets`, "Prefill apart"; `engines.pipeline.prefill_apart_round_s`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inflight_reference import simulate_reference
from shardwise import presets
from shardwise.engines.engine_presets import ENGINES
from shardwise.engines.inflight import Replica, Traffic, estimate_inflight, simulate
from shardwise.engines.iteration import iteration_times, stage_costs
from shardwise.engines.pipeline import prefill_apart_round_s
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

WL = ServingWorkload(512, 128, engine="sglang")


def test_a_round_with_a_prefill_lasts_at_least_its_pass_through_every_stage():
    """8 decode micro-batches of 1 ms a stage and one prefill of 4 ms a stage on 8 stages: the
    stages' work is 12 ms, but the prefill's pass takes 32 ms and the light micro-batches behind it
    go at its pace; the 1/8 round of decodes left adds its own 8 ms pass share."""
    p, k, m_d = 8, 1, 8
    rounds = max(1.0, (m_d + k) / p)
    t = prefill_apart_round_s(m_d * 1e-3 + k * 4e-3, p * 4e-3, p * 1e-3, k, rounds)
    assert t == pytest.approx(32e-3 + 0.125 * 8e-3)
    # three prefills in the 11/8 rounds: every round holds one
    assert prefill_apart_round_s(m_d * 1e-3 + 3 * 4e-3, p * 4e-3, p * 1e-3, 3, 11 / 8) == pytest.approx(11 / 8 * 32e-3)
    # stages that have more work than one pass: the work sets the pace
    assert prefill_apart_round_s(50e-3, 32e-3, 8e-3, 1, rounds) == pytest.approx(50e-3)
    # a one-token prefill (0.5 ms a stage) beside one decoding sequence (1 ms a stage): that
    # sequence's own pass, 8 ms, not the prefill's 4 ms
    assert prefill_apart_round_s(1.5e-3, p * 0.5e-3, p * 1e-3, 1, 1.0) == pytest.approx(8e-3)


def _scenario(pp: int) -> Scenario:
    model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x").with_(gpus_per_node=pp)
    return serving_scenario(Scenario(model, cluster, plan_for_serving(1, pp)), WL)


def _merged(monkeypatch) -> None:
    monkeypatch.setitem(ENGINES, "sglang", replace(ENGINES["sglang"], prefill_apart=False))


def test_decode_only_rounds_are_priced_as_before_and_rounds_with_prompts_cost_more(monkeypatch):
    """Decode-only rounds, and prompts alone on one GPU, are priced as before; over 8 stages a round
    with prompt tokens and decoding sequences costs more than the same tokens mixed into every
    micro-batch."""
    d, q = np.asarray([[0.0], [64.0], [512.0]]), np.asarray([[0.0, 512.0, 2048.0, 6000.0]])
    apart = {pp: iteration_times(_scenario(pp), WL, d, q, 576, 2048).total_s for pp in (1, 8)}
    _merged(monkeypatch)
    merged = {pp: iteration_times(_scenario(pp), WL, d, q, 576, 2048).total_s for pp in (1, 8)}
    for pp in (1, 8):
        np.testing.assert_array_equal(apart[pp][:, 0], merged[pp][:, 0])
    # (one GPU: the sum of two passes, below; not always above one mixed pass, whose token count
    # may cross a GEMM wave that the two parts do not)
    assert np.all(apart[8][1:, 1:] > merged[8][1:, 1:])
    np.testing.assert_allclose(apart[1][0, 1:3], merged[1][0, 1:3], rtol=1e-12)
    # prompts alone over 8 stages: one micro-batch per prompt either way, nothing stalls
    assert apart[8][0, 1] == pytest.approx(merged[8][0, 1], rel=1e-12)


def test_one_gpu_runs_a_prefill_step_and_a_decode_step(monkeypatch):
    """pp = 1: SGLang's prefill batch, then its decode batch: c(0, q) + c(d, 0)."""
    scn = _scenario(1)
    both = float(iteration_times(scn, WL, np.asarray(64.0), np.asarray(1024.0), 576, 2048).total_s)
    _merged(monkeypatch)
    prefill = float(iteration_times(scn, WL, np.asarray(0.0), np.asarray(1024.0), 576, 2048).total_s)
    decode = float(iteration_times(scn, WL, np.asarray(64.0), np.asarray(0.0), 576, 2048).total_s)
    assert both == pytest.approx(prefill + decode, rel=1e-12)


def test_a_prefill_micro_batch_crosses_every_stage_before_the_round_ends(monkeypatch):
    """64 decoding sequences and four 512-token prompts on 8 stages: four prefill micro-batches of
    one prompt each; the round lasts at least one of them through all 8 stages, and longer than
    the same tokens mixed into the decode micro-batches by the same engine."""
    scn = _scenario(8)
    t = float(iteration_times(scn, WL, np.asarray(64.0), np.asarray(2048.0), 576, 2048).total_s)
    prompt = stage_costs(scn, WL, np.asarray(0.0), np.asarray(512.0), 576)
    assert t >= 8 * float(np.min(prompt.per_stage))
    _merged(monkeypatch)
    assert t > float(iteration_times(scn, WL, np.asarray(64.0), np.asarray(2048.0), 576, 2048).total_s)


def test_splitting_prefill_from_decode_lowers_sglang_pipeline_throughput(monkeypatch):
    """Llama 3 8B on RTX 4090s at full load: PP=8 under SGLang serves much less once its prefill
    micro-batches hold the round; one GPU within a few percent (a 16 GB decode step's weight read
    beside a 2,048-token prefill step, against the GEMM waves of one mixed batch)."""

    def rate(pp: int) -> float:
        model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x").with_(gpus_per_node=pp)
        est = estimate_inflight(Scenario(model, cluster, plan_for_serving(1, pp)), WL, requests=300)
        return float(est.throughput_tokens_per_s)

    apart = rate(8), rate(1)
    _merged(monkeypatch)
    merged = rate(8), rate(1)
    assert apart[1] == pytest.approx(merged[1], rel=0.05)
    assert apart[0] < 0.8 * merged[0]


def test_only_sglang_prefills_apart():
    assert [name for name, preset in ENGINES.items() if preset.prefill_apart] == ["sglang"]


@pytest.mark.parametrize("pp", [2, 8])
def test_prompt_tokens_never_make_an_iteration_shorter(pp):
    """Adding prompt tokens to a round of decodes never shortens it: every decode micro-batch still
    waits for its tokens, one pass through the stages, however small the prefill beside it (a
    one-token chunk beside one decoding sequence on 8 stages; 1,500 sequences on 2 stages, where
    one prefill slot makes the round 1.5 loop rounds)."""
    d, q = np.asarray([[1.0], [8.0], [64.0], [512.0], [1500.0]]), np.asarray([[0.0, 1.0, 16.0, 64.0, 512.0]])
    t = iteration_times(_scenario(pp), WL, d, q, 576, 2048).total_s
    assert np.all(t[:, 1:] >= t[:, :1])


@pytest.mark.parametrize("reference", [False, True])
def test_prompts_have_the_whole_budget_where_they_are_prefilled_apart(reference):
    """SGLang's prefill batch is its own (mixed chunks off: `PrefillAdder` counts no decode
    tokens), so its prompts take the whole chunked-prefill budget however many sequences decode;
    where prompt chunks ride with the decodes (vLLM, TensorRT-LLM) the decodes take their share.
    Both loops (one length over queues, and over arrays)."""

    def run(shared: bool) -> list[tuple[float, float]]:
        asked: list[tuple[float, float]] = []

        def cost_s(d: float, q: float) -> float:
            asked.append((d, q))
            return 0.004 + 2e-5 * d + 1e-6 * q

        traffic = Traffic(users=64, requests=400)
        (simulate_reference if reference else simulate)(cost_s, 512, 32, 64, traffic, 1024, decodes_share_budget=shared)
        return asked[1:]  # the first is the closed loop's estimate of a request's life, not an iteration

    apart, mixed = run(False), run(True)
    assert max(q for d, q in apart if d > 0) == 1024
    assert max(d + q for d, q in mixed if q > 0) <= 1024
    model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x").with_(gpus_per_node=1)
    replicas = {e: Replica(Scenario(model, cluster, plan_for_serving(1, 1)), replace(WL, engine=e)) for e in ENGINES}
    assert [e for e, r in replicas.items() if not r.decodes_share_budget] == ["sglang"]


def test_on_one_gpu_the_first_token_comes_at_the_end_of_the_prefill_step():
    """On one GPU SGLang's iteration is a prefill step, then a decode step: a prompt's first token
    is sampled at the end of the first, c(d, 0) before the iteration's end. The iterations, the
    throughput and the ends of requests are the same; TTFT is earlier by the decode step wherever
    sequences were decoding beside the prompt (both loops, to the bit)."""

    def cost_s(d: float, q: float) -> float:
        return 0.004 + 2e-5 * d + 1e-6 * q

    def decode_step_s(d: float, q: float) -> float:
        return cost_s(d, 0.0) if d > 0 else 0.0

    traffic = Traffic(users=32, requests=300)
    runs = {}
    for reference in (False, True):
        for after in (None, decode_step_s):
            args = (cost_s, 512, 16, 32, traffic, 2048)
            runs[reference, after] = (simulate_reference if reference else simulate)(*args, after_first_s=after)
    end, early = runs[False, None], runs[False, decode_step_s]
    np.testing.assert_array_equal(early.e2e_s, end.e2e_s)
    assert np.all(early.ttft_s <= end.ttft_s) and np.mean(early.ttft_s) < np.mean(end.ttft_s)
    assert np.max(end.ttft_s - early.ttft_s) <= decode_step_s(32, 0) + 1e-12
    for field in early.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(early, field), getattr(runs[True, decode_step_s], field), err_msg=field)
    model, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x")

    def replica(engine: str, pp: int) -> Replica:
        scn = Scenario(model, cluster.with_(gpus_per_node=pp), plan_for_serving(1, pp))
        return Replica(scn, replace(WL, engine=engine))

    first = {(e, pp): replica(e, pp) for e in ("sglang", "vllm", "tensorrt-llm") for pp in (1, 8)}
    assert [k for k, r in first.items() if r.prefill_step_first] == [("sglang", 1)]
