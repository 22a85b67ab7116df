"""The physics added for fidelity on unseen runs: shape-aware GEMMs, per-micro-batch costs, the
distributed optimizer's exposed all-gather, TP overlap per GEMM, blocking pipeline sends, uneven
stages and framework presets. Each test states the effect with a hand check or a published trend."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.tp_overlap import overlapped_exposed_s
from shardwise.engines.training import estimate_training_step
from shardwise.physics.gemm import TILE_FILL_S, gemm_time_s
from shardwise.specs import Plan, Scenario
from shardwise.specs.stages import stage_layer_list, stage_split

A100 = presets.gpu("a100-sxm4-80gb")
PEAK, ETA = A100.peak_flops_per_s_16bit, A100.matmul_efficiency


def gemm(m: int, n: int, k: int, out_bytes: float = 2.0, gpu=A100) -> float:
    return float(gemm_time_s(m, n, k, 1, 2.0 * (m * k + k * n), out_bytes, gpu, PEAK, ETA))


def test_a_large_gemm_runs_near_the_tile_efficiency():
    m = n = k = 8192
    ideal = 2.0 * m * n * k / (PEAK * ETA)
    assert ideal < gemm(m, n, k) < 1.05 * ideal


def test_wave_quantization_one_tile_too_many_costs_a_wave():
    """108 SMs: 108 tiles of 128x128 are one wave, 109 need two (NVIDIA Matrix Multiplication
    Background guide, wave quantization); split-K recovers part of it."""
    k = 8192
    one_wave = gemm(128 * 108, 128, k)
    two_waves = gemm(128 * 109, 128, k)
    assert two_waves > 1.3 * one_wave
    # per useful FLOP the 109-tile GEMM is clearly worse
    assert two_waves / 109 > 1.3 * one_wave / 108


def test_short_k_pays_the_tile_fill_and_the_epilogue():
    flops_rate = [2.0 * 4096 * 4096 * k / gemm(4096, 4096, k) for k in (128, 1024, 8192)]
    assert flops_rate[0] < 0.7 * flops_rate[2] and flops_rate[1] < flops_rate[2]
    assert TILE_FILL_S > 0


def test_fp32_accumulation_makes_the_weight_gradient_dearer():
    """Megatron accumulates dW into the fp32 main_grad: 8 bytes per weight in the epilogue."""
    assert gemm(6144, 2304, 8192, out_bytes=8.0) > gemm(6144, 2304, 8192, out_bytes=2.0)


def test_a_gpu_without_an_sm_count_falls_back_to_the_roofline():
    flat = A100.with_(sm_count=0)
    m = n = k = 4096
    assert gemm(m, n, k, gpu=flat) == pytest.approx(2.0 * m * n * k / (PEAK * ETA))


def _figure_16_rates(batch: int) -> dict[int, float]:
    """TFLOP/s per GPU of Narayanan et al. 2021 Fig. 16's 91B at (t, p) = (8, 8) on 64 A100 for
    micro-batches 1, 2, 4 and 8 (the figure's four): the model of the paper's own script (NVIDIA/Megatron-LM
    examples/sc21/run_figure_16.sh, de7dc40f: 32 layers, hidden 15360, 128 heads, local DDP,
    every layer recomputed, fp16)."""
    model = presets.model("gpt3-175b", layers=32, hidden=15360, heads=128)
    cluster = presets.system("dgx-a100", nodes=8)
    fw = presets.framework("megatron-lm-2021")
    fw.pop("zero_stage")
    assert fw["flash_attention"] is False  # the 2021 preset: the score matrix materialised
    rate = {}
    for mb in (1, 2, 4, 8):
        plan = Plan(tp=8, pp=8, dp=1, global_batch=batch, micro_batch=mb, recompute="full", precision="fp16", **fw)
        rate[mb] = float(estimate_training_step(Scenario(model, cluster, plan)).hardware_tflops_per_gpu)
    return rate


def test_figure_16_micro_batch_2_beats_1_and_ties_the_best_at_batch_512():
    """Narayanan et al. 2021 Fig. 16: the 91B model is fastest per GPU at micro-batch 2, not 1
    (larger GEMMs and fewer per-micro-batch costs against a larger bubble). The model puts 2
    ahead of 1 and within 0.5% of its best (micro-batch 4 by 0.1%: the strict xfail below)."""
    rate = _figure_16_rates(512)
    assert rate[2] > rate[1]
    assert rate[2] > rate[8]
    assert rate[2] >= 0.995 * max(rate.values())


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue #33: at batch 512 the model puts micro-batch 4 0.1% ahead of 2; the figure has 2 "
    "best (docs/model.md, Fig. 16 re-read)",
)
def test_figure_16_micro_batch_2_is_the_best_at_batch_512():
    rate = _figure_16_rates(512)
    assert max(rate, key=rate.__getitem__) == 2


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue #33: at batch 128 (64 micro-batches of 2 against 128 of 1 on 8 stages) the model "
    "puts micro-batch 1 0.5% ahead; the figure has 2 best (docs/model.md, micro-batch effect)",
)
def test_figure_16_micro_batch_2_beats_1_at_batch_128():
    rate = _figure_16_rates(128)
    assert rate[2] > rate[1]


def test_the_distributed_optimizer_all_gather_is_exposed_after_the_step():
    """The issue's reproduction: GPT-1.7B on 4 DGX A100, batch 32, ZeRO-1. The parameters are
    gathered after the optimizer (they do not exist before it), so unless overlapped with the next
    forward they cost their full time; the last gradient bucket is exposed in any case."""
    model, cluster = presets.model("gpt-1.7b"), presets.system("dgx-a100", nodes=4)
    base = Plan(dp=32, global_batch=32, zero_stage=1)
    plain = estimate_training_step(Scenario(model, cluster, base))
    overlapped = estimate_training_step(Scenario(model, cluster, base.with_(overlap_param_gather=True)))
    assert float(plain.breakdown.dp_comm_s) > 0.010  # ~18 ms: a 1.7e9-parameter bf16 all-gather over IB
    assert float(overlapped.breakdown.dp_comm_s) < float(plain.breakdown.dp_comm_s)
    assert float(overlapped.breakdown.dp_comm_s) > 0.0  # the first bucket and the last are never hidden


def test_each_collective_hides_only_behind_its_own_gemm():
    # a 3 ms collective next to a 1 ms GEMM exposes 2 ms, whatever other GEMMs there are
    assert overlapped_exposed_s(3e-3, 1e-3, 0, 108) == pytest.approx(2e-3)
    # a hidden one still slows its GEMM by the SMs it takes (16 of 108)
    assert overlapped_exposed_s(1e-3, 5e-3, 16, 108) == pytest.approx(1e-3 * 16 / 108)
    # a pipelined overlap in 4 chunks cannot hide its last chunk
    assert overlapped_exposed_s(1e-3, 5e-3, 0, 108, 4) == pytest.approx(0.25e-3)
    # no window: all of it
    assert overlapped_exposed_s(1e-3, 0.0, 16, 108) == pytest.approx(1e-3)


def test_userbuffer_overlap_hides_forward_collectives_that_async_tp_does_not():
    model, cluster = presets.model("gpt-22b"), presets.system("dgx-a100")
    base = Plan(tp=8, global_batch=4, micro_batch=4, sequence_parallel=True)
    plain = estimate_training_step(Scenario(model, cluster, base))
    ub = estimate_training_step(Scenario(model, cluster, base.with_(tp_comm_overlap=True)))
    assert float(ub.breakdown.tp_comm_s) < 0.7 * float(plain.breakdown.tp_comm_s)
    # without sequence parallelism there is nothing for userbuffers to overlap
    no_sp = base.with_(sequence_parallel=False)
    a = estimate_training_step(Scenario(model, cluster, no_sp))
    b = estimate_training_step(Scenario(model, cluster, no_sp.with_(tp_comm_overlap=True)))
    assert float(a.step_time_s) == pytest.approx(float(b.step_time_s))


def test_blocking_sends_and_syncs_grow_the_pipeline():
    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=8)
    plan = Plan(tp=8, pp=8, dp=1, global_batch=64, overlap_p2p=False)
    blocking = estimate_training_step(Scenario(model, cluster, plan))
    free = estimate_training_step(Scenario(model, cluster, plan.with_(overlap_p2p=True, pipeline_sync=False)))
    assert float(blocking.step_time_s) > float(free.step_time_s)
    assert float(blocking.breakdown.pp_p2p_s) > 0


@pytest.mark.parametrize("overlap", [False, True])
def test_the_simulator_and_the_closed_form_agree_on_megatron_core_plans(overlap):
    """A 2-node A100 plan, Megatron-Core defaults (1F1B blocking sends, or interleaved with p2p
    overlap): the operation-by-operation simulation and the closed form within 2%."""
    model, cluster = presets.model("gpt-18b"), presets.system("dgx-a100", nodes=2)
    fw = presets.framework("megatron-core")
    fw.pop("zero_stage")
    v = 2 if overlap else 1
    plan = Plan(tp=4, pp=4, dp=1, global_batch=32, vpp=v, schedule="interleaved" if overlap else "1f1b", **fw)
    scn = Scenario(model, cluster, plan)
    sim = simulate_training_step(scn).estimate.step_time_s
    assert sim == pytest.approx(float(estimate_training_step(scn).step_time_s), rel=0.02)


@pytest.mark.parametrize("stack", ["megatron-core", "torchtitan"])
def test_the_simulator_and_the_closed_form_agree_on_interleaved_data_parallel_plans(stack):
    """GPT-3 175B at tp 4, pp 8, v 12, dp 16 (ZeRO-1): the first stage's chunk 0 (one layer and
    the embeddings) sets the data-parallel exposure; under Megatron-Core's dispatch its share waits
    whole (`DpComm.exposed_s`), on other stacks 1/v of it behind one chunk-pass. The simulator
    (`dp_step.chunked_left_s`) and the closed form agree on it within 2%, the step within 3%."""
    fw = presets.framework(stack)
    fw.pop("zero_stage", None)
    fw = {k: v for k, v in fw.items() if k in Plan.__dataclass_fields__}
    plan = Plan(tp=4, pp=8, dp=16, vpp=12, schedule="interleaved", global_batch=256, sequence_parallel=True, **fw)
    scn = Scenario(presets.model("gpt3-175b"), presets.system("dgx-h100", nodes=64), plan.with_(zero_stage=1))
    closed, sim = estimate_training_step(scn), simulate_training_step(scn, records=False).estimate
    assert float(closed.breakdown.dp_comm_s) > 0.03
    assert float(sim.breakdown.dp_comm_s) == pytest.approx(float(closed.breakdown.dp_comm_s), rel=0.02)
    assert float(sim.step_time_s) == pytest.approx(float(closed.step_time_s), rel=0.03)


def test_any_layer_count_on_any_number_of_stages():
    split = stage_split(126, 8)  # Llama 3.1 405B at pp = 8, as NVIDIA serves it
    assert stage_layer_list(split, 8) == [15, 16, 16, 16, 16, 16, 16, 15]
    assert stage_layer_list(stage_split(70, 12), 12) == [5] + [6] * 10 + [5]  # BLOOM-176B at pp = 12
    assert stage_layer_list(stage_split(126, 8, 10, 0), 8) == [10, 17, 17, 17, 17, 16, 16, 16]
    model = presets.model("llama3-405b")
    scn = Scenario(model, presets.system("dgx-h100", nodes=8), Plan(tp=8, pp=8, dp=1, global_batch=64))
    closed = float(estimate_training_step(scn).step_time_s)
    assert simulate_training_step(scn).estimate.step_time_s == pytest.approx(closed, rel=0.03)


def test_an_uneven_split_is_paced_by_its_fullest_stage():
    model = presets.model("gpt-96l-4096h", layers=30)
    cluster = presets.system("dgx-a100")
    even = Plan(pp=2, dp=4, global_batch=64, stage_layers=(15, 15))
    skewed = even.with_(stage_layers=(5, 25))
    t_even, t_skew = (float(estimate_training_step(Scenario(model, cluster, p)).step_time_s) for p in (even, skewed))
    assert t_skew > 1.4 * t_even
    sim = simulate_training_step(Scenario(model, cluster, skewed))
    assert sim.estimate.step_time_s == pytest.approx(t_skew, rel=0.03)


def test_framework_presets_set_the_execution_flags():
    for name in presets.names("frameworks"):
        fw = presets.framework(name)
        assert fw["framework"] == name
        fw.pop("zero_stage")
        Plan(global_batch=8, **fw)  # every preset makes a valid plan
    assert presets.framework("megatron-lm-2021")["grad_accumulation_fusion"] is False
    assert presets.framework("fsdp")["zero_stage"] == 3


def test_the_cli_takes_framework_and_uneven_stages(cli):
    base = [
        "predict",
        "--model",
        "llama3-405b",
        "--system",
        "dgx-h100",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "8",
        "--global-batch",
        "64",
        "--json",
    ]
    import json

    code, out, err = cli(base)
    assert code == 0, err
    code, out2, err = cli([*base, "--first-stage-layers", "14", "--last-stage-layers", "14"])
    assert code == 0, err
    code, out3, err = cli([*base, "--framework", "megatron-lm-2021"])
    assert code == 0, err
    default, uneven, old = (json.loads(o) for o in (out, out2, out3))
    assert uneven["scenario"]["plan"]["first_stage_layers"] == 14
    assert uneven["scenario"]["plan"]["last_stage_layers"] == 14
    # 126 layers: 15 + 6 x 16 + 15 by default; 14 + 98 over 6 + 14 puts 17 on some stages, which pace it
    assert stage_layer_list(stage_split(126, 8, 14, 14), 8)[0] == 14
    assert max(stage_layer_list(stage_split(126, 8, 14, 14), 8)) == 17
    assert uneven["step_time_s"] > default["step_time_s"]
    assert old["scenario"]["plan"]["framework"] == "megatron-lm-2021"
    assert old["scenario"]["plan"]["grad_accumulation_fusion"] is False  # as the preset says
    assert old["step_time_s"] > default["step_time_s"]  # 2021 Megatron overlaps less
    code, _, err = cli([*base, "--stage-layers", "16,16"])
    assert code == 2 and "one per stage" in err
    code, _, err = cli([*base, "--framework", "nope"])
    assert code == 2 and "framework" in err


def test_gemm_time_is_monotone_in_each_dimension():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m, n, k = (int(x) for x in rng.integers(1, 20000, 3))
        base = gemm(m, n, k)
        for grown in ((m + 1, n, k), (m, n + 1, k), (m, n, k + 1), (2 * m, n, k)):
            assert gemm(*grown) >= base * (1 - 1e-12), (m, n, k, grown)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("table", [False, True])
@pytest.mark.parametrize("gpu_arrays", [False, True])
def test_gemms_priced_together_cost_what_each_costs_alone(precision, table, gpu_arrays):
    """`gemms_s` stacks a layer's small GEMMs into one call of the tile model (or of a measured
    table): the same numbers, to the bit, as pricing each one alone, for scalars, arrays of
    different shapes, thin (split-K) and shapeless (roofline) GEMMs, and a GPU whose efficiencies
    are arrays (as a calibration's are)."""
    from shardwise.physics.compute import gemm_s, gemms_s, linear_times, linears_times
    from shardwise.physics.flops import Gemm
    from shardwise.physics.flops import gemm as make_gemm
    from shardwise.specs import GemmTable

    gpu = presets.gpu("h100-sxm5-80gb")
    if table:
        shapes = {"m": (64.0, 1024.0, 8192.0), "n": (4096.0,) * 3, "k": (4096.0,) * 3}
        gpu = gpu.with_(gemm_table=GemmTable(**shapes, relative_rate=(0.8, 0.95, 0.5)))
    if gpu_arrays:
        gpu = gpu.with_(matmul_efficiency=np.array([0.5, 0.6, 0.7]), memory_efficiency=np.array([0.8, 0.85, 0.9]))
    rng = np.random.default_rng(3)
    gs = [
        make_gemm(rng.integers(1, 9000, (5, 1)).astype(float), 4096.0, 1024.0, 2.0),
        make_gemm(8.0, rng.integers(1, 20000, (1, 3)).astype(float), 8192.0, 2.0, batch=4.0),
        make_gemm(1.0, 128.0, 4096.0, 2.0, weight_bytes=0.5),  # a decode GEMM: split-K
        Gemm(1e12, 1e9),  # no shape: the roofline
        make_gemm(4096.0, 4096.0, 4096.0, 2.0),
    ]
    together = gemms_s(gs, gpu, precision)
    for g, t in zip(gs, together, strict=True):
        np.testing.assert_array_equal(t, gemm_s(g, gpu, precision))
    fused = np.array([True, False, True])
    for accumulate in (True, False, fused):
        for g, t in zip(gs, linears_times(gs, gpu, precision, accumulate), strict=True):
            alone = linear_times(g, gpu, precision, accumulate)
            for field in ("forward_s", "input_grad_s", "weight_grad_s"):
                np.testing.assert_array_equal(getattr(t, field), getattr(alone, field))


def test_context_parallelism_splits_the_tokens_and_passes_keys_and_values():
    """Llama 3.1 70B at 8192 tokens: cp=2 halves each rank's tokens (and activations); the ring
    hides behind attention on NVLink but not over a slow network."""
    model = presets.model("llama3-70b")
    cluster = presets.system("dgx-h100", nodes=4)
    base = Plan(tp=4, pp=4, dp=2, global_batch=64, sequence_parallel=True)
    with_cp = Plan(tp=4, pp=4, dp=1, cp=2, global_batch=64, sequence_parallel=True)
    a = estimate_training_step(Scenario(model, cluster, base))
    b = estimate_training_step(Scenario(model, cluster, with_cp))
    assert float(b.memory.activations_bytes) < 0.6 * float(a.memory.activations_bytes)
    assert float(b.model_flops_per_step) == pytest.approx(float(a.model_flops_per_step))
    # a CP group across servers on a slow link exposes the ring
    slow = cluster.with_(inter_node_link=cluster.inter_node_link.with_(bandwidth_bytes_per_s=1e9))
    wide = Plan(tp=8, pp=1, dp=1, cp=4, global_batch=64, sequence_parallel=True)
    fast_t = estimate_training_step(Scenario(model, cluster, wide))
    slow_t = estimate_training_step(Scenario(model, slow, wide))
    assert float(slow_t.breakdown.tp_comm_s) > float(fast_t.breakdown.tp_comm_s)
    with pytest.raises(Exception, match="2\\*cp"):
        Scenario(model.with_(seq_len=8190), cluster, with_cp)


def test_context_parallel_communication_types_by_hand():
    """Megatron-Core's --cp-comm-type on Llama 3 70B at 64K tokens, tp=2, cp=4 in one DGX H100:
    the ring sends cp - 1 KV chunks of 2 b s/cp k d / t elements per layer (hidden behind the chunk
    attention on NVLink); all_gather gathers the cp chunks (and reduce-scatters their gradients),
    exposed; Ulysses all-to-alls send the local queries, keys and values (h + 2k heads) and the
    output (h heads), each 1/cp of the sequence, forward and backward."""
    from shardwise.engines.context_parallel import cp_kv_chunk_bytes, cp_step_s
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    model = presets.model("llama3-70b", seq_len=65536)
    cluster = presets.system("dgx-h100")
    fabric = Fabric.of(cluster)

    def scn(kind: str) -> Scenario:
        plan = Plan(tp=2, cp=4, global_batch=8, sequence_parallel=True, cp_comm=kind)
        return Scenario(model, cluster, plan)

    chunk = 2 * 2 * 1 * 65536 / 4 * 8 / 2 * 128  # bytes: K and V, bf16, b = 1, s/cp tokens, k/t heads, d
    assert float(cp_kv_chunk_bytes(scn("p2p"))) == chunk
    place = placement(scn("p2p").plan, 8)
    ring = cp_step_s(scn("p2p"), fabric, place)
    assert float(ring.ring_step_s) == pytest.approx(float(fabric.p2p(chunk, False))) and ring.forward_s == 0.0
    group = fabric.group(4, 4)
    gathered = cp_step_s(scn("all_gather"), fabric, place)
    assert float(gathered.forward_s) == pytest.approx(float(group.all_gather(4 * chunk)))
    per_head = 2 * 65536 / 4 * 128 / 2  # bytes of one head's slice on one TP rank
    ulysses = cp_step_s(scn("a2a"), fabric, place)
    expected = group.all_to_all(per_head * (64 + 2 * 8)) + group.all_to_all(per_head * 64)
    assert float(ulysses.forward_s) == pytest.approx(float(expected)) == pytest.approx(float(ulysses.backward_s))
    steps = {k: estimate_training_step(scn(k)) for k in ("p2p", "all_gather", "a2a")}
    assert float(steps["p2p"].breakdown.tp_comm_s) < float(steps["all_gather"].breakdown.tp_comm_s)
    assert float(steps["p2p"].model_flops_per_step) == float(steps["a2a"].model_flops_per_step)
    with pytest.raises(Exception, match="--cp-comm a2a needs the heads and KV heads"):
        Scenario(model, presets.system("dgx-h100", nodes=4), Plan(tp=8, cp=4, global_batch=8, cp_comm="a2a"))
    with pytest.raises(Exception, match="cp_comm 'ring' is not allowed"):
        Plan(cp_comm="ring")


def test_the_fitted_gpu_efficiencies_are_what_the_fit_gives():
    """presets/gpus.yaml holds the values tools/fit_efficiency.py fits on the dev split: at the
    shipped scales, the median error of each fitted GPU's rows is zero within a grid step."""
    import numpy as np

    from shardwise.analyses import loso

    rows = [p for p in loso.priced_rows() if p.sets_scale and p.compute_share >= loso.COMPUTE_SHARE]
    for gpu in ("h100-sxm5-80gb", "a100-sxm4-80gb"):
        mine = [p for p in rows if p.gpu == gpu]
        median = np.median([p.row.predicted_step_s / p.row.measured_step_s - 1 for p in mine])
        assert abs(median) < 0.01, (gpu, median)


def test_the_simulator_agrees_with_the_closed_form_for_zero3_and_explicit_splits():
    """ZeRO-3's windows (the forward passes' gathers behind the forward, the rest behind the
    backward: `DpComm.zero3_phases`) are the same in both engines; an explicit split is run stage
    by stage by the simulator."""
    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=16)
    fsdp = presets.framework("fsdp")
    fsdp.pop("zero_stage")
    plan = Plan(tp=8, pp=8, dp=2, global_batch=128, zero_stage=3, **fsdp)
    scn = Scenario(model, cluster, plan)
    assert simulate_training_step(scn).estimate.step_time_s == pytest.approx(
        float(estimate_training_step(scn).step_time_s), rel=0.03
    )
    skewed = Scenario(
        presets.model("llama3-405b"),
        presets.system("dgx-h100", nodes=8),
        Plan(tp=8, pp=8, dp=1, global_batch=64, stage_layers=(6, 6, 6, 30, 12, 12, 6, 48)),
    )
    sim = simulate_training_step(skewed)
    assert list(sim.stage_times.forward_s.argsort())[-1] == 7  # the 48-layer stage is the slowest
    assert sim.estimate.step_time_s == pytest.approx(float(estimate_training_step(skewed).step_time_s), rel=0.03)
    # the simulated breakdown names the blocking sends and still adds up
    b = sim.estimate.breakdown
    assert float(b.pp_p2p_s) > 0 and float(b.total_s) == pytest.approx(sim.estimate.step_time_s)


def test_context_parallelism_needs_fused_attention_and_first_last_need_a_pipeline():
    from shardwise.errors import SpecError

    model, cluster = presets.model("llama3-70b"), presets.system("dgx-h100")
    with pytest.raises(SpecError, match="fused"):
        Scenario(model, cluster, Plan(tp=4, cp=2, global_batch=8, flash_attention=False))
    with pytest.raises(SpecError, match="pp > 1"):
        Plan(global_batch=8, first_stage_layers=10)
    with pytest.raises(SpecError, match="tp\\*pp\\*dp\\*cp"):
        Scenario(model, cluster, Plan(tp=4, cp=4, global_batch=8))


def test_serving_memory_is_set_by_the_stage_that_fills_first():
    from shardwise.engines.serving import memory_per_gpu
    from shardwise.specs.serving import ServingWorkload

    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100")
    wl = ServingWorkload(512, 128, 1, "int4")
    even = memory_per_gpu(Scenario(model, cluster, Plan(pp=4, dp=2, global_batch=2)), wl)
    skew = memory_per_gpu(Scenario(model, cluster, Plan(pp=4, dp=2, global_batch=2, stage_layers=(2, 14, 8, 8))), wl)
    assert float(skew[1]) == pytest.approx(float(even[1]) * 14 / 8)  # the 14-layer stage's KV cache binds


def test_mxfp8_is_block_scaled_fp8_on_blackwell_only(cli):
    """MXFP8 runs FP8 GEMMs at TE's measured block-scaled speed, quantises with its scales, and is
    refused (one line, exit 2) on a GPU whose tensor cores have no block scaling."""
    from shardwise.physics.compute import MXFP8_CAST_BYTES_PER_ELEMENT
    from shardwise.specs.hardware import MXFP8_GEMM_RELATIVE

    system = presets.system("gb300-nvl72")
    cluster = system.with_(nodes=1, gpus_per_node=8)
    model = presets.model("llama3-8b")
    times = {}
    for precision in ("bf16", "fp8", "mxfp8"):
        plan = Plan(tp=1, pp=1, dp=8, global_batch=64, micro_batch=2, precision=precision)
        times[precision] = estimate_training_step(Scenario(model, cluster, plan))
    assert times["fp8"].step_time_s < times["mxfp8"].step_time_s < times["bf16"].step_time_s
    # the compute slows by at most the GEMM factor plus the scales' extra bytes
    ratio = float(times["mxfp8"].breakdown.compute_s / times["fp8"].breakdown.compute_s)
    assert 1.0 < ratio < 1.0 / MXFP8_GEMM_RELATIVE * MXFP8_CAST_BYTES_PER_ELEMENT / 4.0
    args = ["predict", "--model", "llama3-8b", "--global-batch", "144", "--precision", "mxfp8"]
    code, out, err = cli([*args, "--system", "gb300-nvl72", "--nodes", "1", "--json"])
    assert code == 0, err
    assert "mxfp8" in out
    code, _, err = cli([*args, "--system", "dgx-h100"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "mxfp8 (block-scaled FP8) needs Blackwell tensor cores" in err


def test_fp8_weights_are_cast_once_per_step():
    """FP8 training casts every local weight once per step (both layouts), whatever the number of
    micro-batches: the optimizer step grows by that cast, the per-micro-batch work does not."""
    from shardwise.engines.training_layout import optimizer_time_s
    from shardwise.physics.compute import FP8_CAST_BYTES_PER_ELEMENT

    cluster = presets.system("dgx-h100").with_(nodes=1)
    model = presets.model("llama3-8b")
    n = 8e9
    gpu = cluster.gpu
    plans = {p: Plan(dp=8, global_batch=8, precision=p) for p in ("bf16", "fp8")}
    one = {p: optimizer_time_s(Scenario(model, cluster, plan), n) for p, plan in plans.items()}
    cast = FP8_CAST_BYTES_PER_ELEMENT * n / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    assert float(one["fp8"] - one["bf16"]) == pytest.approx(cast + gpu.kernel_launch_s, rel=1e-9)


def test_rows_published_under_two_layouts_count_once():
    """A number published twice (once beside its table's layout, once under the overview line's)
    is one run; rows whose layout the source contradicts are skipped with the reason."""
    from shardwise.analyses import public_validation as pv

    rows = {r["id"]: r for r in pv.raw_rows()}
    assert pv.skip_reason(rows["PUB-0732"]).startswith("published twice")
    assert pv.skip_reason(rows["PUB-0643"]) == ""  # the table's own layout is kept
    assert pv.skip_reason(rows["PUB-0167"]) == "published layout contradicted by its source"
    # Llama 4 Maverick's first README version gave it 32 layers; the same step times are kept at 48
    for early, later in (("PUB-0802", "PUB-0837"), ("PUB-0809", "PUB-0844")):
        assert pv.skip_reason(rows[early]) == "published layout contradicted by its source"
        assert "contradicted" not in pv.skip_reason(rows[later]) and rows[later]["layers"] == "48"
        assert rows[early]["measured"] == rows[later]["measured"]
    twice = pv._published_twice()
    for dup in twice:
        kept = twice[dup].split()[4].rstrip(",")
        assert rows[kept]["measured"] == rows[dup]["measured"] and "Overview" in rows[dup]["locator"]
