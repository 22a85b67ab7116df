"""The analytic training-step engine: closed forms, consistency, vectorization."""

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step, pipeline_makespan_s
from shardwise.physics.params import total_params
from shardwise.specs import Plan, Scenario


def test_equal_stages_follow_m_plus_p_minus_1():
    c, p, m = 0.1, 8, 32
    assert pipeline_makespan_s(c, c, c, p, m) == pytest.approx((m + p - 1) * c)


def test_interleaving_divides_the_bubble_by_v():
    c, p, m, v = 0.1, 8, 32, 4
    assert pipeline_makespan_s(c, c, c, p, m, v) == pytest.approx((m + (p - 1) / v) * c)


def test_one_stage_has_no_bubble():
    assert pipeline_makespan_s(0.3, 0.0, 0.3, 1, 5) == pytest.approx(1.5)


def test_a_slow_stage_sets_the_pace():
    # first stage twice as slow: m * 2c + the other stages once
    c, p, m = 0.1, 4, 10
    assert pipeline_makespan_s(2 * c, c, c, p, m) == pytest.approx(m * 2 * c + 3 * c)


def test_bubble_matches_the_closed_form_share(gpt3_scenario):
    est = estimate_training_step(gpt3_scenario)
    p, m = 8, 64
    # (p - 1)/m of the steady-state work, up to the unequal first/last stages
    steady = est.breakdown.compute_s + est.breakdown.tp_comm_s + est.breakdown.pp_p2p_s
    assert est.breakdown.pp_bubble_s / steady == pytest.approx((p - 1) / m, rel=0.1)


def test_rates_are_consistent(gpt3_scenario):
    est = estimate_training_step(gpt3_scenario)
    plan, model = gpt3_scenario.plan, gpt3_scenario.model
    assert est.tokens_per_s == pytest.approx(plan.global_batch * model.seq_len / est.step_time_s)
    assert est.mfu == pytest.approx(est.model_tflops_per_gpu * 1e12 / 312e12)
    assert est.hfu > est.mfu  # full recomputation adds FLOPs


def test_a_grid_in_one_call_equals_a_loop(gpt3, dgx_a100_8):
    tps = np.array([1, 2, 4, 8])
    pps = np.array([8, 8, 4, 2])
    dps = 64 // (tps * pps)
    grid = estimate_training_step(
        Scenario(gpt3, dgx_a100_8, Plan(tp=tps, pp=pps, dp=dps, global_batch=64, recompute="full"))
    )
    for i, (tp, pp, dp) in enumerate(zip(tps, pps, dps, strict=True)):
        one = estimate_training_step(
            Scenario(gpt3, dgx_a100_8, Plan(tp=int(tp), pp=int(pp), dp=int(dp), global_batch=64, recompute="full"))
        )
        assert grid.step_time_s[i] == pytest.approx(one.step_time_s)
        assert grid.memory.total_bytes[i] == pytest.approx(one.memory.total_bytes)


def test_categorical_fields_vectorize(gpt3, dgx_a100_8):
    rc = np.array([0, 1, 2])  # none, selective, full (standard attention: selective has work to redo)
    base = Plan(tp=8, pp=8, global_batch=64, flash_attention=False)
    grid = estimate_training_step(Scenario(gpt3, dgx_a100_8, base.with_(recompute=rc)))
    for i, mode in enumerate(["none", "selective", "full"]):
        one = estimate_training_step(Scenario(gpt3, dgx_a100_8, base.with_(recompute=mode)))
        assert grid.step_time_s[i] == pytest.approx(one.step_time_s)
    assert grid.step_time_s[0] < grid.step_time_s[1] < grid.step_time_s[2]
    assert grid.memory.activations_bytes[0] > grid.memory.activations_bytes[1] > grid.memory.activations_bytes[2]


def test_tensor_parallelism_across_nodes_pays_for_the_network(gpt3):
    cluster = presets.system("dgx-a100", nodes=2)
    inside = estimate_training_step(Scenario(gpt3, cluster, Plan(tp=8, pp=2, global_batch=16)))
    across = estimate_training_step(Scenario(gpt3, cluster, Plan(tp=16, pp=1, global_batch=16)))
    # NCCL's rings use all 8 NICs of a node, so large messages still see min(NVLink, 8 NICs);
    # latency, the smaller per-rank messages and the inter-node steps make up the rest.
    assert across.breakdown.tp_comm_s > 2 * inside.breakdown.tp_comm_s


def test_pcie_makes_tensor_parallel_communication_dominate():
    model = presets.model("gpt-96l-4096h")
    nvlink = presets.system("dgx-a100")
    pcie = presets.system("a100-pcie-8x")
    plan = Plan(tp=8, global_batch=8)
    fast = estimate_training_step(Scenario(model, nvlink, plan))
    slow = estimate_training_step(Scenario(model, pcie, plan))
    assert slow.breakdown.tp_comm_s > 8 * fast.breakdown.tp_comm_s
    assert slow.breakdown.tp_comm_s > slow.breakdown.compute_s


def test_overlapped_gradient_reduction_hides_behind_the_backward_pass():
    model, cluster = presets.model("gpt-1.7b"), presets.system("dgx-a100", nodes=4)
    plan = Plan(dp=32, global_batch=512, micro_batch=4)
    hidden = estimate_training_step(Scenario(model, cluster, plan))
    exposed = estimate_training_step(Scenario(model, cluster, plan.with_(overlap_grad_reduce=False)))
    assert hidden.breakdown.dp_comm_s < exposed.breakdown.dp_comm_s
    assert exposed.breakdown.dp_comm_s > 0.01


def test_zero_stages_trade_memory_for_communication():
    model, cluster = presets.model("llama2-13b"), presets.system("dgx-a100", nodes=2)
    base = Plan(dp=16, global_batch=64, micro_batch=1, recompute="full", overlap_param_gather=True)
    z = [estimate_training_step(Scenario(model, cluster, base.with_(zero_stage=k))) for k in range(4)]
    mem = [float(e.memory.total_bytes) for e in z]
    assert mem[0] > mem[1] > mem[2] > mem[3]
    assert mem[3] < mem[0] / 4
    # ZeRO-1 shards the optimizer step (faster than ZeRO-0); ZeRO-3 adds per-micro-batch gathers.
    assert z[1].breakdown.optimizer_s == pytest.approx(z[0].breakdown.optimizer_s / 16, rel=0.01)
    assert z[3].step_time_s >= z[1].step_time_s


def test_a_model_too_big_for_one_gpu_does_not_fit():
    model = presets.model("gpt3-175b")
    one_gpu = presets.system("dgx-a100").with_(gpus_per_node=1)
    est = estimate_training_step(Scenario(model, one_gpu, Plan(global_batch=1, recompute="full")))
    assert not est.fits_in_memory
    # mixed-precision Adam without ZeRO: bf16 weights (2) + fp32 gradients (4) + fp32 master
    # weights and two moments (12) = 18 bytes per parameter (Rajbhandari et al. 2020 count 16 with fp16 grads)
    n = total_params(model)
    mem = est.memory
    assert float(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes) == pytest.approx(18 * n)
    assert float(mem.total_bytes) > 18 * n > 80e9


def test_selective_recompute_with_flash_attention_reruns_the_attention_forward():
    """Megatron-Core checkpoints the core attention whatever its kernel: with a fused kernel there
    are no scores to save (same memory), but the backward reruns the attention forward first (more
    time, less than full recomputation's whole forward)."""
    model, cluster = presets.model("llama3-70b"), presets.system("dgx-h100", nodes=8)
    plan = Plan(tp=8, pp=4, dp=2, global_batch=64)
    none = estimate_training_step(Scenario(model, cluster, plan))
    selective = estimate_training_step(Scenario(model, cluster, plan.with_(recompute="selective")))
    full = estimate_training_step(Scenario(model, cluster, plan.with_(recompute="full")))
    assert selective.memory.total_bytes == pytest.approx(none.memory.total_bytes)
    assert none.step_time_s < selective.step_time_s < full.step_time_s


def test_interleaved_chunks_reduce_their_gradients_as_each_finishes():
    """Megatron-Core reduces each model chunk's gradients when that chunk's last backward pass
    ends: with v chunks the rest hide behind the last round's (v-1) p chunk-backward passes, and
    chunk 0's 1/v waits whole after the loop (align_grad_reduce: schedules.py launches its
    start_grad_sync after the last backward); its parameters' all-gather waits whole before the
    first forward (align_param_gather). Without interleaving (v = 1), or per micro-batch
    (ZeRO-2), nothing changes."""
    from shardwise.engines.dp_comm import DpComm

    comm = DpComm(1.0, 0.2, 0.01, 0.0, 0.0, 0.0, per_chunk=True)
    assert comm.exposed_s(True, 0.0)[0] == pytest.approx(0.8)  # one window of 0.2 s
    # v = 4, p = 8: chunk 0's 0.25 s after the loop; the whole behind 0.05 (1 + 3 x 8) s
    assert comm.exposed_s(True, 0.0, 4, 8)[0] == pytest.approx(0.25)
    # chunk 0 holding 40% of the bytes (the first stage's embedding): 0.4 s
    assert comm.exposed_s(True, 0.0, 4, 8, 0.4)[0] == pytest.approx(0.4)
    assert comm.exposed_s(True, 0.0, 1, 1, 0.4)[0] == pytest.approx(0.8)  # v = 1: the share is unused
    assert comm.exposed_s(False, 0.0, 4, 8)[0] == pytest.approx(1.0)  # no overlap: all of it
    per_micro_batch = DpComm(1.0, 0.2, 0.01, 0.0, 0.0, 0.0, per_chunk=False)
    assert per_micro_batch.exposed_s(True, 0.0, 4, 8)[0] == pytest.approx(0.8)
    gather = DpComm(0.0, 0.0, 0.0, 1.0, 0.2, 0.01, per_chunk=True)
    assert gather.exposed_s(True, 0.0, 4, 8)[1] == pytest.approx(0.25)
    # a bucket larger than chunk 0's share as priced stays the floor; NCCL's SMs add their share
    big = DpComm(1.0, 0.2, 0.3, 0.0, 0.0, 0.0, per_chunk=True, contention=0.1)
    assert big.exposed_s(True, 0.0, 4, 8)[0] == pytest.approx(0.3 + 0.1 * 0.7)
    # the gather's chunk 0 holds the same share `head` (align_param_gather)
    assert gather.exposed_s(True, 0.0, 4, 8, 0.4)[1] == pytest.approx(0.4)
    # a stack whose data parallelism is not Megatron-Core's DDP (`aligned` false): chunk 0's 1/v
    # hides behind its one chunk-backward pass (0.05 s), whatever its share; the bucket the floor
    assert comm.exposed_s(True, 0.0, 4, 8, 0.4, False)[0] == pytest.approx(0.25 - 0.05)
    assert gather.exposed_s(True, 0.0, 4, 8, 0.4, False)[1] == pytest.approx(0.25 - 0.05)
    assert comm.exposed_s(True, 0.1, 4, 8, 0.4, False)[0] == pytest.approx(0.25 - 0.15)  # and the drain
    assert comm.exposed_s(True, 0.0, 1, 1, 0.4, False)[0] == pytest.approx(0.8)  # v = 1: as before
    assert big.exposed_s(True, 0.0, 4, 8, 0.4, False)[0] == pytest.approx(0.3 + 0.1 * 0.7)
    # an array of plans: each its own rule
    both = comm.exposed_s(True, 0.0, 4, 8, 0.4, np.array([True, False]))[0]
    assert both == pytest.approx([0.4, 0.2])


def test_only_megatron_cores_ddp_exposes_chunk_zero_whole():
    """Megatron-Core's dispatch (align_grad_reduce, align_param_gather) is stated by the stacks
    that run its DDP and distributed optimizer (`Plan.aligned_chunk_sync`): megatron-core alone.
    torchtitan's interleaved plan keeps chunk 0's 1/v behind one chunk-backward pass, so its
    exposed data-parallel time is below the same plan's with the flag (the review's 44 vs 113.5 ms)."""
    assert presets.framework("megatron-core")["aligned_chunk_sync"] is True
    for other in presets.names("frameworks"):
        if other != "megatron-core":
            assert not presets.framework(other).get("aligned_chunk_sync", False), other
    model, cluster = presets.model("llama3-70b"), presets.system("dgx-h100", nodes=16)
    fw = presets.framework("torchtitan")
    fw.pop("zero_stage", None)
    fw = {k: v for k, v in fw.items() if k in Plan.__dataclass_fields__}
    plan = Plan(tp=4, pp=4, dp=8, vpp=5, schedule="interleaved", global_batch=64, sequence_parallel=True, **fw)
    own, megatron = (
        float(estimate_training_step(Scenario(model, cluster, plan.with_(aligned_chunk_sync=a))).breakdown.dp_comm_s)
        for a in (False, True)
    )
    assert own < 0.6 * megatron
    flat = plan.with_(vpp=1, schedule="1f1b")  # v = 1: the flag changes nothing
    a, b = (estimate_training_step(Scenario(model, cluster, flat.with_(aligned_chunk_sync=x))) for x in (False, True))
    assert float(a.step_time_s) == float(b.step_time_s)


def test_interleaved_chunk_zero_holds_the_first_stages_embedding():
    """GPT-3 175B at tp 4, pp 8, v 12: the first stage's chunk 0 holds one layer and the word
    and position embeddings (Megatron-Core's pre_process chunk), the last stage's output matrix
    sits in its chunk v-1, a middle stage's chunk 0 is 1/v; under LoRA the embeddings are frozen."""
    from shardwise.engines.dp_step import chunk_head_shares
    from shardwise.physics.params import stage_params_per_gpu

    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-h100", nodes=64)
    plan = Plan(tp=4, pp=8, dp=16, vpp=12, schedule="interleaved", global_batch=128, sequence_parallel=True)
    scn = Scenario(model, cluster, plan)
    held = stage_params_per_gpu(model, 4, 8)
    first, middle, last = (float(x) for x in chunk_head_shares(scn, held))
    layer = float(held[1]) / 12  # one layer per chunk
    embedding = model.vocab * model.hidden / 4 + model.seq_len * model.hidden
    assert first == pytest.approx((layer + embedding) / float(held[0]))
    assert middle == pytest.approx(1 / 12)
    assert last == pytest.approx(layer / float(held[2]), rel=1e-3)
    assert last < middle < first
    lora = Scenario(model, cluster, plan.with_(lora_rank=16))
    assert [float(x) for x in chunk_head_shares(lora, held)] == pytest.approx([1 / 12] * 3, rel=1e-3)


def test_interleaving_hides_data_parallel_traffic_the_single_window_left_exposed():
    cluster = presets.system("dgx-h100", nodes=64)
    plans = [
        Plan(
            tp=4,
            pp=8,
            dp=16,
            vpp=v,
            schedule="interleaved" if v > 1 else "1f1b",
            global_batch=128,
            sequence_parallel=True,
        )
        for v in (1, 4)
    ]
    flat, interleaved = (estimate_training_step(Scenario(presets.model("gpt3-175b"), cluster, p)) for p in plans)
    assert float(flat.breakdown.dp_comm_s) > 0.05
    assert float(interleaved.breakdown.dp_comm_s) < 0.5 * float(flat.breakdown.dp_comm_s)


@pytest.mark.parametrize("given", [Plan(tp=8, global_batch=8), "llama3-8b", None])
def test_an_estimate_of_something_not_a_scenario_is_one_clear_error(given):
    """estimate_training_step(plan) (a Plan, a name) names what it takes (was an AttributeError
    from deep inside the memo)."""
    from shardwise.errors import SpecError

    with pytest.raises(SpecError, match=r"estimate_training_step takes a Scenario\(model, cluster, plan\), not a"):
        estimate_training_step(given)
