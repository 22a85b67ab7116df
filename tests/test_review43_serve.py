"""Review 43's serving findings: at a request rate, tok/s is the offered load (rate x the mean output
the report names) for every plan unless its queue grows, which the report then says (#5)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from shardwise.engines.inflight import Traffic, estimate_inflight, simulate
from shardwise.engines.inflight_sim import delivered_share

MIX = "input_len,output_len\n128,128\n512,1024\n2048,512\n1024,1700\n"
SERVE_70B = ["serve", "--model", "llama3.1-70b", "--system", "dgx-h100", "--framework", "vllm"]


def cost(d: float, q: float) -> float:
    """A made-up iteration cost (seconds): 2 ms, and a little per sequence and prompt token."""
    return 2e-3 + 1e-5 * d + 2e-7 * q


@pytest.mark.parametrize("seed", [0, 2])
def test_plans_at_one_rate_deliver_the_offered_tokens(cli, tmp_path, seed):
    # before: tp=8 3,297 and tp=4 3,310 tok/s against 3,361 offered (seed 0), both 3,590-3,604
    # against 3,372 (seed 2): the window's own draws and the work in flight at its ends
    table = tmp_path / "mix.csv"
    table.write_text(MIX)
    args = [*SERVE_70B, "--plan", "tp=8", "--plan", "tp=4", "--lengths", str(table), "--request-rate", "4"]
    code, out, err = cli([*args, "--seed", str(seed), "--json"])
    assert code == 0, err
    data = json.loads(out)
    offered = 4 * data["workload"]["mean_output_len"]
    for plan in data["plans"]:
        assert plan["offered_tokens_per_s"] == pytest.approx(offered)
        assert plan["throughput_tokens_per_s"] == pytest.approx(offered, rel=0.01)
        assert plan["short_of_offered"] is False


def test_the_delivered_share_reads_a_growing_queue():
    # one iteration of d sequences takes 2 ms + 10 us d: 64 slots of 100 new tokens each make
    # 64 / 2.64 ms = 24,000 tok/s at most, 240 requests/s
    n, out = 600, 100
    inputs, outputs = np.full(n, 50), np.full(n, out)
    for rate, low, high in ((100.0, 0.99, 1.0), (480.0, 0.3, 0.7)):
        traffic = Traffic(rate_per_s=rate, requests=n, seed=1)
        sim = simulate(cost, inputs, outputs, 64, traffic, max_sequences=64, kv_total_blocks=10**6)
        assert low <= sim.delivered_share <= high, (rate, sim.delivered_share)
    # a queue whose waiting tokens grow at half the offered rate delivers half
    arrival = np.arange(n, dtype=float)
    admitted = 2.0 * arrival
    assert delivered_share(arrival, admitted, out, 100.0, 500.0) == pytest.approx(0.5, abs=0.01)
    assert delivered_share(arrival, arrival + 3.0, out, 100.0, 500.0) == pytest.approx(1.0)


def test_a_plan_short_of_the_offered_tokens_is_flagged(cli, monkeypatch):
    from shardwise.engines import inflight

    real = inflight.estimate_from

    def short(*args, **kwargs):  # a plan whose queue grew: 5% short, below what it sustains
        est = real(*args, **kwargs)
        return replace(est, throughput_tokens_per_s=0.95 * est.offered_tokens_per_s)

    monkeypatch.setattr(inflight, "estimate_from", short)
    args = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=2", "--requests", "200"]
    code, out, err = cli([*args, "--request-rate", "5"])
    assert code == 0, err
    assert "of the" in out and "tok/s offered" in out and "its queue grew" in " ".join(out.split())
    code, out, err = cli([*args, "--request-rate", "5", "--json"])
    assert json.loads(out)["plans"][0]["short_of_offered"] is True


def test_a_closed_loop_is_not_measured_against_an_offer():
    from test_request_mix import WL, scenario

    est = estimate_inflight(scenario(), WL, users=8, requests=200)
    assert np.isnan(est.offered_tokens_per_s) and not est.short_of_offered
