"""Request mixes: lengths drawn per request (ShareGPT-like, a CSV), bursty arrivals, and the
in-flight simulator with per-request lengths; fixed lengths unchanged to the bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inflight_reference import simulate_reference
from shardwise import presets
from shardwise.engines.inflight import Replica, Traffic, estimate_inflight, kv_blocks, simulate
from shardwise.engines.request_mix import arrival_times, sample_lengths, summarize
from shardwise.engines.serving import plan_for_serving
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.request_mix import (
    SHAREGPT,
    SHAREGPT_MEAN_INPUT_TOKENS,
    SHAREGPT_MEAN_OUTPUT_TOKENS,
    RequestMix,
)
from shardwise.specs.serving import ServingWorkload

WL = ServingWorkload(512, 128, 1)


def scenario(tp: int = 2, memory_bytes: float | None = None) -> Scenario:
    cluster = presets.system("a100-pcie-8x").with_(nodes=1, gpus_per_node=tp)
    if memory_bytes is not None:
        cluster = cluster.with_(gpu=cluster.gpu.with_(memory_bytes=memory_bytes))
    return Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(tp, 1, 1))


def cost(d: float, q: float) -> float:
    """A made-up iteration cost (seconds): the simulator alone, no physics."""
    return 2e-3 + 1e-5 * d + 2e-7 * q + (1e-4 if q else 0.0)


def test_sharegpt_draws_repeat_with_a_seed_and_keep_the_benchmarks_filter():
    a = sample_lengths(SHAREGPT, 5000, seed=7)
    b = sample_lengths(SHAREGPT, 5000, seed=7)
    c = sample_lengths(SHAREGPT, 5000, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    i, o = a
    assert i.min() >= 4 and o.min() >= 4 and i.max() <= 1024 and (i + o).max() <= 2048
    assert len(np.unique(i)) > 300 and len(np.unique(o)) > 300  # a spread, not one length


def test_sharegpt_means_are_the_published_benchmark_means():
    """mu was solved so that the filtered means are the benchmarks' 224 and 198 tokens."""
    i, o = sample_lengths(SHAREGPT, 400_000, seed=1)
    assert i.mean() == pytest.approx(SHAREGPT_MEAN_INPUT_TOKENS, rel=0.01)
    assert o.mean() == pytest.approx(SHAREGPT_MEAN_OUTPUT_TOKENS, rel=0.01)
    assert np.median(i) < i.mean() and np.median(o) < o.mean()  # long right tails


def test_draws_are_truncated_to_the_models_context():
    i, o = sample_lengths(SHAREGPT, 3000, seed=0, max_context=300)
    assert (i + o).max() <= 300 and i.min() >= 4
    with pytest.raises(SpecError, match="holds no request"):
        sample_lengths(SHAREGPT, 10, max_context=6)


def test_a_histogram_is_drawn_in_proportion_to_its_counts():
    mix = RequestMix("h", "test", input_lens=np.array([100, 4000]), output_lens=np.array([50, 1000]),
                     weights=np.array([3.0, 1.0]))  # fmt: skip
    i, o = sample_lengths(mix, 40_000, seed=2)
    assert set(np.unique(i)) == {100, 4000} and np.all((i == 100) == (o == 50))
    assert np.mean(i == 100) == pytest.approx(0.75, abs=0.01)
    s = summarize(i, o)
    assert s.mean_input_len == pytest.approx(i.mean())
    # decode reads long contexts longer: the decode-weighted context is above the mean context
    assert s.decode_context > float(np.mean(i + o / 2))


@pytest.mark.parametrize(
    "bad",
    [
        {"input_lens": np.array([0, 3]), "output_lens": np.array([1, 2])},
        {"input_lens": np.array([5]), "output_lens": np.array([1, 2])},
        {"input_lens": np.array([5]), "output_lens": np.array([5]), "weights": np.array([0.0])},
    ],
)
def test_a_bad_table_is_refused(bad):
    with pytest.raises(SpecError, match="request mix"):
        RequestMix("t", "test", **bad)


def test_poisson_arrivals_are_the_exponential_draws_and_burstiness_spreads_them():
    rng = np.random.default_rng(5)
    assert np.array_equal(arrival_times(10.0, 1000, seed=5), np.cumsum(rng.exponential(0.1, 1000)))
    for b in (0.25, 1.0, 4.0):
        gaps = np.diff(arrival_times(10.0, 200_000, seed=1, burstiness=b))
        assert gaps.mean() == pytest.approx(0.1, rel=0.02)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(b), rel=0.03)


@pytest.mark.parametrize(
    ("traffic", "expected"),
    [
        (Traffic(users=7, requests=120),
         ("0x1.eb074a771ca00p-3", "0x1.ce9f6a93f2931p-3", "0x1.2195421c04441p+3", "0x1.a163c5ce087c4p+11", 720)),
        (Traffic(rate_per_s=40.0, requests=150, seed=3),
         ("0x1.b19d9ee70a815p-2", "0x1.1af124a06b9dcp-2", "0x1.6662d19abb7c4p+3", "0x1.58e3e8dd9ae30p+10", 2014)),
        (Traffic(users=64, requests=200, rounds=2),
         ("0x1.2a4cc78e9f6a3p+2", "0x1.e0551891d7c18p-2", "0x1.6f470cdc87546p+4", "0x1.26432036406cep+14", 195)),
    ],
)  # fmt: skip
def test_fixed_lengths_simulate_as_before_to_the_bit(traffic, expected):
    """Sums of TTFT, TPOT, latency, the throughput and the iterations of the simulator as it was
    before request mixes (commit c73156d), on a made-up cost: fixed lengths did not move."""
    s = simulate(cost, 300, 40, 50, traffic, max_batched_tokens=1024)
    got = (*(float(x).hex() for x in (s.ttft_s.sum(), s.tpot_s.sum(), s.e2e_s.sum(), s.throughput_tokens_per_s)),
           s.iterations)  # fmt: skip
    assert got == expected


@pytest.mark.parametrize("traffic", [Traffic(users=7, requests=120), Traffic(rate_per_s=40.0, requests=150, seed=3),
                                     Traffic(users=64, requests=200, rounds=2)])  # fmt: skip
def test_per_request_lengths_all_equal_are_the_fixed_path(traffic):
    """Arrays of one length, with the KV cache in blocks holding exactly 50 of them, give the
    scalar path's numbers bit for bit: the block accounting admits as the slots did."""
    n = traffic.count
    fixed = simulate(cost, 300, 40, 50, traffic, max_batched_tokens=1024)
    blocks = int(kv_blocks(np.array([300]), np.array([40]))[0])
    arrays = simulate(cost, np.full(n, 300), np.full(n, 40), 2048, traffic, 1024, 2048, kv_total_blocks=50 * blocks)
    for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        assert np.array_equal(getattr(fixed, name), getattr(arrays, name)), name
    assert (fixed.throughput_tokens_per_s, fixed.iterations) == (arrays.throughput_tokens_per_s, arrays.iterations)


@pytest.mark.parametrize(
    ("traffic", "blocks", "chunk", "shared", "early"),
    [
        (Traffic(users=40, requests=400), 2000, None, True, False),
        (Traffic(users=300, requests=500), 2000, 256, True, False),
        (Traffic(rate_per_s=30.0, requests=400, seed=4), 2000, 128, False, True),
        (Traffic(rate_per_s=5.0, requests=300, burstiness=0.5, seed=1), 2000, None, False, False),
        (Traffic(users=2, requests=200), 2000, 64, True, True),
        (Traffic(rate_per_s=5.0, requests=300, seed=4), 150, None, True, False),
    ],
)
def test_a_mix_runs_as_the_loop_over_arrays_to_the_bit(traffic, blocks, chunk, shared, early):
    """Per-request lengths with the KV cache in blocks through the loop (`inflight_loops.run_ranks`,
    one rank) give every field of the per-request loop over numpy arrays that mixes ran before
    (`tests/inflight_reference.py`) byte for byte: a cache of a few dozen requests that holds the
    queue back, chunked prompts, prompts with the whole budget, first tokens before the pass ends,
    closed and open loops, a decode run not cut at an arrival the cache cannot hold yet."""
    n = traffic.count
    inputs, outputs = sample_lengths(SHAREGPT, n, seed=5, max_context=2048)
    after = (lambda d, q: cost(d, 0.0) if d else 0.0) if early else None
    args = (cost, inputs, outputs, 2048, traffic, 1024, 256, blocks, chunk)
    ours = simulate(*args, decodes_share_budget=shared, after_first_s=after)
    ref = simulate_reference(*args, decodes_share_budget=shared, after_first_s=after)
    assert ours.iterations > 0
    for field in ours.__dataclass_fields__:
        a, b = np.asarray(getattr(ours, field)), np.asarray(getattr(ref, field))
        assert a.tobytes() == b.tobytes(), field


def test_the_kv_cache_admits_by_each_requests_own_blocks():
    """Short requests fit more at once than long ones in the same blocks; none is cut short."""
    n = 200
    traffic = Traffic(users=100, requests=n, rounds=2)
    short = simulate(cost, np.full(n, 40), np.full(n, 8), 2048, traffic, 1024, 2048, kv_total_blocks=120)
    long = simulate(cost, np.full(n, 1000), np.full(n, 200), 2048, traffic, 1024, 2048, kv_total_blocks=120)
    assert short.mean_running > 10 * long.mean_running
    assert long.mean_running <= 120 // 75 + 1e-9  # 1,200 tokens are 75 blocks: one at a time
    with pytest.raises(ValueError, match="more KV cache"):
        simulate(cost, np.full(n, 5000), np.full(n, 8), 2048, traffic, 1024, 2048, kv_total_blocks=120)


def test_a_mix_spreads_the_percentiles_that_fixed_lengths_pin():
    scn = scenario()
    fixed = estimate_inflight(scn, WL, rate_per_s=20.0, requests=400)
    mixed = estimate_inflight(scn, WL, rate_per_s=20.0, requests=400, mix=SHAREGPT)
    again = estimate_inflight(scn, WL, rate_per_s=20.0, requests=400, mix=SHAREGPT)
    assert mixed.percentiles_s == again.percentiles_s  # seeded
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        p = mixed.percentiles_s[key]
        assert p["p50"] <= p["p90"] <= p["p99"], key
    # end to end: the requests' own output lengths spread it far more than queueing does
    fixed_e2e, mixed_e2e = fixed.percentiles_s["e2e_s"], mixed.percentiles_s["e2e_s"]
    assert mixed_e2e["p99"] / mixed_e2e["p50"] > 3 * fixed_e2e["p99"] / fixed_e2e["p50"]
    assert mixed.lengths == "sharegpt" and mixed.mean_output_len == pytest.approx(198, rel=0.05)
    # at one request in flight fixed lengths give one TTFT; the mix's prompts give many
    one = estimate_inflight(scn, WL, users=1, requests=200, mix=SHAREGPT).percentiles_s["ttft_s"]
    assert one["p99"] > 2 * one["p50"]


def test_a_mix_keeps_the_queue_extrapolation_for_huge_closed_loops(monkeypatch):
    from shardwise.engines import inflight

    scn = scenario(1, 24e9)
    slots = Replica(scn, WL, mix=SHAREGPT).slots
    short = estimate_inflight(scn, WL, users=8 * slots, requests=300, mix=SHAREGPT)
    monkeypatch.setattr(inflight, "QUEUED_SIMULATED", 10)
    full = estimate_inflight(scn, WL, users=8 * slots, requests=300, mix=SHAREGPT)
    monkeypatch.undo()
    for name in ("ttft_s", "e2e_s", "tpot_s", "throughput_tokens_per_s"):
        assert getattr(short, name) == pytest.approx(getattr(full, name), rel=0.05), name
    huge = estimate_inflight(scn, WL, users=10**9, requests=300, mix=SHAREGPT)
    assert np.isfinite(huge.ttft_s) and huge.ttft_s > 1e3 * full.ttft_s


SERVE = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=2", "--requests", "200"]


def test_serve_lengths_from_a_csv_and_sharegpt(cli, tmp_path):
    table = tmp_path / "mix.csv"
    table.write_text("input_len,output_len,count\n100,50,3\n2000,400,1\n")
    code, out, err = cli([*SERVE, "--lengths", str(table), "--request-rate", "5", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["workload"]["lengths"] == str(table) and data["workload"]["input_len"] is None
    assert data["workload"]["mean_input_len"] == pytest.approx(0.75 * 100 + 0.25 * 2000, rel=0.05)
    code, out, err = cli([*SERVE, "--lengths", "sharegpt", "--request-rate", "5", "--burstiness", "0.5"])
    assert code == 0, err
    out = " ".join(out.split())
    assert "request lengths sharegpt" in out and "gamma arrivals (burstiness 0.5) at 5 requests/s" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lengths", "foo"], "--lengths: 'foo' is not allowed"),
        (["--lengths", "sharegpt", "--input-len", "100"], "--input-len/--output-len set fixed lengths"),
        (["--lengths", "sharegpt", "--batching", "static"], "needs --batching inflight"),
        (["--lengths", "sharegpt", "--ttft-max", "1s"], "--ttft-max/--tpot-max search fixed lengths"),
        (["--burstiness", "2"], "add --request-rate"),
        (["--burstiness", "0", "--request-rate", "3"], "--burstiness: 0 is not allowed"),
        (["--lengths", "missing.csv"], "--lengths missing.csv: cannot read"),
    ],
)
def test_serve_bad_mix_input_is_one_line(cli, extra, message):
    code, _out, err = cli([*SERVE, *extra])
    assert code == 2 and message in err and "Traceback" not in err


def test_a_bad_csv_row_is_named(cli, tmp_path):
    table = tmp_path / "bad.csv"
    table.write_text("input_len,output_len\n100,50\n100,x\n")
    code, _out, err = cli([*SERVE, "--lengths", str(table)])
    assert code == 2 and "line 3: output_len 'x'" in err
    table.write_text("prompt,output\n100,50\n")
    code, _out, err = cli([*SERVE, "--lengths", str(table)])
    assert code == 2 and "unknown column 'prompt' (the columns: input_len, output_len, and count" in err, err


def test_a_table_with_requests_longer_than_the_context_is_noted(cli, tmp_path):
    """A --lengths CSV is priced as given, as --input-len is: both say when a request is longer
    than the model's sequence length (llama3-8b: 8,192), with the share of such requests."""
    table = tmp_path / "long.csv"
    table.write_text("input_len,output_len,count\n100,64,3\n9000,64,1\n")
    code, out, err = cli([*SERVE, "--lengths", str(table)])
    out = " ".join(out.split())
    assert code == 0, err
    assert "25% of the requests" in out and "the longest 9,064 tokens" in out and "sequence length 8,192" in out
    assert "2 rows of" in out
    table.write_text("input_len,output_len\n100,64\n")
    code, out, err = cli([*SERVE, "--lengths", str(table)])
    out = " ".join(out.split())
    assert code == 0 and "longer than" not in out and "1 row of" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slo-percentile", "99"], "--slo-percentile says which percentile --ttft-max/--tpot-max bound"),
        (["--hf-id", "org/model"], "--hf-id names the checkpoint the --emit server loads"),
        (["--with-frontier"], "--with-frontier adds each plan's frontier to --json"),
    ],
)
def test_a_flag_that_qualifies_a_missing_one_is_refused(cli, extra, message):
    """These flags only change what another flag does: alone they were accepted and ignored."""
    code, out, err = cli([*SERVE, *extra])
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
