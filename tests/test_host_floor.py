"""One stage's step lasts at least its host work (`engines.pipeline.overlapped_host_floor_s`): the
engines' overlap schedulers hide the host behind the GPU, never below it (#37)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from script_module import load_script
from shardwise import presets
from shardwise.engines import engine_presets
from shardwise.engines.engine_presets import ENGINES
from shardwise.engines.iteration import iteration_times
from shardwise.engines.pipeline import overlapped_host_floor_s, pipeline_host_s
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def _scenario(tp: int, system: str = "dgx-b200") -> Scenario:
    cluster = presets.system(system).with_(gpus_per_node=tp)
    return Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(tp, 1))


def test_the_floor_is_the_larger_of_the_gpu_step_and_the_host_step():
    trt = ENGINES["tensorrt-llm"]
    host = pipeline_host_s(trt, 1000)
    assert overlapped_host_floor_s(1.0, trt, 1000) == 1.0  # the GPU slower: the host hides
    assert overlapped_host_floor_s(1e-3, trt, 1000) == pytest.approx(host)  # the host slower: it sets the pace
    assert overlapped_host_floor_s(1e-3, ENGINES["fastertransformer"], 1000) == 1e-3  # a C++ loop: no host term


@pytest.mark.parametrize("decode", [16.0, 3000.0])
def test_an_iteration_at_pp1_lasts_max_of_gpu_and_host_and_the_wait_is_the_difference(monkeypatch, decode):
    """Llama 3 8B at TP 8 on B200: 16 decodes are GPU-bound; 3,000 wait for the host."""
    wl = ServingWorkload(128, 128, weight_precision="fp8", kv_precision="fp8")
    scn = serving_scenario(_scenario(8), wl)
    d, q = np.array([decode]), np.array([0.0])
    with_host = iteration_times(scn, wl, d, q, 192.0)
    host = pipeline_host_s(ENGINES["tensorrt-llm"], decode)
    monkeypatch.setitem(
        engine_presets.ENGINES,
        "tensorrt-llm",
        replace(ENGINES["tensorrt-llm"], stage_host_s=0.0, stage_host_per_request_s=0.0),
    )
    gpu = iteration_times(scn, wl, d, q, 192.0)
    assert float(with_host.total_s[0]) == pytest.approx(max(float(gpu.total_s[0]), host))
    assert float(with_host.pp_wait_s[0]) == pytest.approx(max(0.0, host - float(gpu.total_s[0])))
    assert float(gpu.pp_wait_s[0]) == 0.0
    parts = with_host.compute_s + with_host.tp_comm_s + with_host.pp_p2p_s + with_host.pp_wait_s
    assert float(parts[0]) == pytest.approx(float(with_host.total_s[0]))
    assert (host > float(gpu.total_s[0])) == (decode > 1000)


def test_a_wide_tp_group_divides_the_gpu_work_but_not_the_host_work(monkeypatch):
    """A static decode step of 3,000 sequences of 2,048 + 2,048 tokens on H100: TP 8 is
    host-bound, TP 1 is not, so the floor lowers TP8 / TP1 throughput (every TP rank's process
    steps the whole batch) and leaves TP 1 as it was."""
    wl = ServingWorkload(2048, 2048, 3000, "fp8", "fp8")

    def both() -> tuple:
        return tuple(estimate_serving(_scenario(t, "dgx-h100"), wl) for t in (1, 8))

    tp1, tp8 = both()
    host = pipeline_host_s(ENGINES["tensorrt-llm"], 3000)
    assert float(tp8.tpot_s) == pytest.approx(host)
    assert float(tp1.tpot_s) > host
    assert float(tp8.decode_s["pp_wait"]) > 0.0 and float(tp1.decode_s["pp_wait"]) == 0.0
    monkeypatch.setitem(
        engine_presets.ENGINES,
        "tensorrt-llm",
        replace(ENGINES["tensorrt-llm"], stage_host_s=0.0, stage_host_per_request_s=0.0),
    )
    free1, free8 = both()
    assert float(tp1.throughput_tokens_per_s) == pytest.approx(float(free1.throughput_tokens_per_s))
    ratio, free = (
        float(b.throughput_tokens_per_s) / float(a.throughput_tokens_per_s) for a, b in ((tp1, tp8), (free1, free8))
    )
    assert ratio < 0.9 * free


def test_serve_names_the_host_wait_of_a_one_stage_plan(cli):
    code, out, _ = cli(
        ["serve", "--model", "llama3-8b", "--system", "dgx-b200", "--plan", "tp=8", "--max-throughput",
         "--weight-precision", "fp8", "--kv-precision", "fp8", "--input-len", "128", "--output-len", "128"]
    )  # fmt: skip
    assert code == 0
    text = " ".join(out.split())
    assert "host wait" in text and "pp wait" not in text


def _grid():
    return load_script("tools/serving_tp_grid.py", "serving_tp_grid")


def test_the_tp_grid_prices_each_tp_size_that_fits_and_refuses_an_unknown_system(capsys):
    """tools/serving_tp_grid.py: Llama 3 70B in FP8 does not fit one L40S (48 GB), fits 2 to 8; the
    whole-run rate of a burst is below the steady state's (ramp and tail)."""
    grid = _grid()
    steady = grid.replica_rates("llama3-70b", "l40s-8x", "fp8", 128, 2048, False)
    assert sorted(steady) == ["tp=2", "tp=4", "tp=8"] and all(v > 0 for v in steady.values())
    burst = grid.replica_rates("llama3-70b", "l40s-8x", "fp8", 128, 2048, False, burst=300)
    assert sorted(burst) == ["tp=2", "tp=4", "tp=8"] and burst["tp=8"] < steady["tp=8"]
    assert grid.main(["--gpus", "dgx-h9000"]) == 2
    assert "is not one of" in capsys.readouterr().err


def test_the_tp_grid_sets_each_median_beside_an_earlier_runs(tmp_path, capsys):
    """`--against`: the medians of an earlier `--csv` over the same cases; an unreadable file is one
    line and exit 2, before anything is priced."""
    grid = _grid()
    assert grid.main(["--gpus", "l40s-8x", "--against", str(tmp_path / "none.csv")]) == 2
    assert "--against: cannot read" in capsys.readouterr().err
    earlier = tmp_path / "before.csv"
    fields = "system,model,isl,osl,pair,small_tok_s,big_tok_s,ratio"
    earlier.write_text(f"{fields}\nl40s-8x,llama3-8b,128,128,TP2/TP1,1,3,3.0\nl40s-8x,llama3-70b,1,1,TP4/TP2,1,9,9.0\n")
    assert grid.main(["--gpus", "l40s-8x", "--models", "llama3-8b", "--against", str(earlier)]) == 0
    out = capsys.readouterr().out
    assert "was 3.00 (1)" in out  # the 8B case; the 70B row is not among this run's cases
    assert "was 9.00" not in out


def test_the_grid_with_pipelines_prices_pp_against_one_gpu_and_against_tp(capsys):
    """`--pp`: pipeline plans of 2, 4 and 8 stages beside the TP sizes; PP(k)/PP(1) against one GPU's
    replica (tp=1) and PP(k)/TP(k) against TP on as many GPUs. Llama 3 8B on L40S at 2,048/128
    (prefill-bound, one GPU's KV cache holds hundreds of sequences): every added stage serves more."""
    grid = _grid()
    rates = grid.replica_rates("llama3-8b", "l40s-8x", "fp8", 2048, 128, False, pp=True)
    assert {"tp=1", "pp=2", "pp=4", "pp=8"} <= set(rates)
    assert rates["tp=1"] < rates["pp=2"] < rates["pp=4"] < rates["pp=8"] < 8 * rates["tp=1"]
    assert ("PP8/TP8", "pp=8", "tp=8") in grid.ratio_pairs(True) and len(grid.ratio_pairs(False)) == 3
    assert grid.main(["--gpus", "l40s-8x", "--models", "llama3-8b", "--pp"]) == 0
    out = capsys.readouterr().out
    assert "PP8/PP1" in out and "PP4/TP4" in out
