"""FSDP2's deferred gradient sync at pp = 1 (`Plan.fsdp2_grad_sync` last-micro-batch, NeMo AutoModel's
loop): with `reduce_grads` off torch's FSDPParamGroup.post_backward reshards, keeps each parameter's
whole gradient in the reduce dtype (`to_accumulated_grad_if_needed`) and returns before
`foreach_reduce` (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py). So the reduce-scatter
runs once a step while the gathers still run every micro-batch (`engines.dp_step.reduce_micro_batches`,
closed form and simulator), and the unsharded gradients stay in memory through the step
(`engines.training_buffers.pp_unsharded_bytes`)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.analyses.search_space import stack_execution
from shardwise.engines.dp_comm import zero_stage_fields
from shardwise.engines.dp_step import comm_micro_batches, reduce_micro_batches
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step, training_memory
from shardwise.engines.training_buffers import pp_unsharded_bytes
from shardwise.physics.memory_stacks import stack_memory
from shardwise.specs import Plan, Scenario

EVERY, LAST = "every-micro-batch", "last-micro-batch"


def _scenario(sync: str, m: int = 2, zero: int = 3, pp: int = 1, framework: str = "torchtitan", **over: object):
    """Llama 3 8B at 8,192 tokens on 16 H100s under FSDP2 over dp 16 / pp, m micro-batches a step."""
    fw = stack_execution(framework, {}, "bf16")
    fw.update(over, fsdp2_grad_sync=sync)
    dp = 16 // pp
    plan = Plan(dp=dp, pp=pp, global_batch=m * dp, micro_batch=1, zero_stage=zero, **fw)
    return Scenario(presets.model("llama3-8b", seq_len=8192), presets.system("dgx-h100", nodes=2), plan)


def test_deferred_sync_reduces_once_a_step_and_gathers_every_micro_batch():
    every, last = _scenario(EVERY, m=4).plan, _scenario(LAST, m=4).plan
    assert (comm_micro_batches(every, 4), reduce_micro_batches(every, 4)) == (4, 4)
    assert (comm_micro_batches(last, 4), reduce_micro_batches(last, 4)) == (4, 1)
    piped = _scenario(EVERY, m=4, pp=2).plan  # pipelining defers it whatever the loop: one of each
    assert (comm_micro_batches(piped, 4), reduce_micro_batches(piped, 4)) == (1, 1)
    prices = {
        "layer_reduce_scatter": 1.0,
        "reduce_scatter": 1.0,
        "unit_reduce_scatter": 0.1,
        "bucket_reduce_scatter": 0.1,
        "layer_all_gather": 2.0,
        "all_gather": 2.0,
        "bucket_weights_all_gather": 0.2,
        "bucket_all_gather": 0.2,
    }
    # ZeRO-3: one reduction, 2 m gathers; the backward gathers keep the m backward passes as window,
    # the reduction the last alone (the m - 1 passes before it: `early_window_s`)
    grad, window, _, gather, _, _, early = zero_stage_fields(3, prices, 10.0, 5.0, 15.0, 4, False, reduce_m=1)
    assert (grad, window, gather, early) == (1.0, 40.0, 16.0, 30.0)
    assert zero_stage_fields(3, prices, 10.0, 5.0, 15.0, 4, False)[6] == 0.0  # every micro-batch: none
    # ZeRO-2: the one reduction hides behind the last micro-batch's backward alone
    grad, window, *_ = zero_stage_fields(2, prices, 10.0, 5.0, 0.0, 4, False, reduce_m=1)
    assert (grad, window) == (1.0, 10.0)
    assert zero_stage_fields(2, prices, 10.0, 5.0, 0.0, 4, False)[:2] == (4.0, 40.0)


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("engine", [estimate_training_step, simulate_training_step])
def test_deferred_sync_saves_m_minus_one_reductions(engine, zero):
    """Data-parallel communication (exposed + hidden), every-micro-batch less last-micro-batch: m - 1
    reductions, so 1 : 3 : 7 at m = 2, 4, 8 in the closed form and in the simulator alike (before:
    0, the reductions priced m times either way)."""

    def dp_total(sync: str, m: int) -> float:
        e = engine(_scenario(sync, m, zero))
        e = getattr(e, "estimate", e)
        return float(e.breakdown.dp_comm_s) + float(e.hidden_comm_s["dp_comm"])

    saved = [dp_total(EVERY, m) - dp_total(LAST, m) for m in (2, 4, 8)]
    assert saved[0] > 0
    assert [s / saved[0] for s in saved] == pytest.approx([1.0, 3.0, 7.0], rel=1e-6)


def test_deferred_sync_keeps_the_unsharded_gradients_in_memory():
    """torchtitan's stack reduces in fp32: 4 bytes a trained parameter held whole until the last
    micro-batch at pp = 1 under deferral (the weights are resharded: none kept); nothing where the
    sync runs every micro-batch or with one data-parallel rank; under LoRA only the adapters'."""
    stack = stack_memory("torchtitan")
    assert stack.pp_unsharded_grad_bytes == 4.0
    params, trained = 8.0e9, 2.0e7
    assert pp_unsharded_bytes(_scenario(LAST).plan, stack, params, params) == (0.0, 4.0 * params)
    assert pp_unsharded_bytes(_scenario(LAST).plan, stack, params, trained) == (0.0, 4.0 * trained)
    assert pp_unsharded_bytes(_scenario(EVERY).plan, stack, params, params) == (0.0, 0.0)
    alone = Plan(dp=1, global_batch=2, zero_stage=3, per_param_sharding=True, fsdp2_grad_sync=LAST)
    assert pp_unsharded_bytes(alone, stack, params, params) == (0.0, 0.0)
    every, last = training_memory(_scenario(EVERY)), training_memory(_scenario(LAST))
    llama3_8b = 8.03e9  # its published parameter count: the whole model's fp32 gradient, unsharded
    assert float(last.buffers_bytes) - float(every.buffers_bytes) > 0.9 * 4.0 * llama3_8b
    assert float(last.gradients_bytes) == float(every.gradients_bytes)  # the sharded fp32 gradients as before


def test_the_fsdp2_preset_keeps_the_stage_gathered_under_a_pipeline_as_torchtitan():
    """The fsdp2 preset's memory (FSDP1's entry before) held neither the gathered stage nor its
    unsharded gradients under pp > 1, which its time already priced (`fsdp2_kept_gathered`): its
    buffers now match torchtitan's (fp32 gradients, OLMo-core's reduce dtype)."""
    fsdp2 = training_memory(_scenario(EVERY, m=4, pp=2, framework="fsdp2"))
    titan = training_memory(_scenario(EVERY, m=4, pp=2, framework="torchtitan"))
    assert stack_memory("fsdp2").pp_unsharded_grad_bytes == stack_memory("torchtitan").pp_unsharded_grad_bytes == 4.0
    assert float(fsdp2.buffers_bytes) == float(titan.buffers_bytes) > 10e9


def test_a_deferred_reduction_hides_behind_the_last_backward_alone():
    """Under the deferred sync the one reduction starts in the last micro-batch's backward (torch's
    post_backward returns before `foreach_reduce` until then): the earlier passes hide only their own
    gathers. m = 4, one backward 10 s, a reduction of 15 s, backward gathers of 2 s a pass: 7 s exposed
    (2 + 15 - 10), where pooling the four passes (40 s) hid it all."""
    from shardwise.engines.dp_comm import DpComm

    fields = {"grad_s": 15.0, "grad_window_s": 40.0, "grad_bucket_s": 0.0, "gather_s": 16.0}
    fields |= {"gather_window_s": 60.0, "gather_bucket_s": 0.0, "shared_window": True}
    pooled, last = DpComm(**fields), DpComm(**fields, early_window_s=30.0)
    assert pooled.exposed_s(True) == (0.0, 0.0)
    assert last.exposed_s(True) == (pytest.approx(7.0), 0.0)
    # idle early passes lose nothing where their gathers already fill them
    assert (
        DpComm(**(fields | {"gather_s": 80.0, "gather_window_s": 80.0}), early_window_s=30.0).zero3_phases()[1] == 55.0
    )


def _short(sync: str, m: int) -> Scenario:
    """Llama 3 8B at 1,024 tokens on 32 H100s under torchtitan's FSDP2: one backward pass (~0.1 s)
    shorter than the fp32 reduce-scatter across the servers with the pass's own gathers."""
    fw = stack_execution("torchtitan", {}, "bf16")
    fw.update(fsdp2_grad_sync=sync)
    plan = Plan(dp=32, global_batch=m * 32, micro_batch=1, zero_stage=3, **fw)
    return Scenario(presets.model("llama3-8b", seq_len=1024), presets.system("dgx-h100", nodes=4), plan)


def test_more_micro_batches_do_not_hide_a_deferred_reduction_in_both_engines():
    """The exposed data-parallel time of a deferred ZeRO-3 step is at least the one-micro-batch step's
    (the same last backward hides the same reduction; before, m = 2 exposed 26% less than m = 1, the
    first pass hiding part of it), and the closed form and the simulator agree."""
    exposed = {}
    for m in (1, 2, 4):
        closed = estimate_training_step(_short(LAST, m))
        simulated = simulate_training_step(_short(LAST, m)).estimate
        exposed[m] = float(closed.breakdown.dp_comm_s)
        assert float(simulated.breakdown.dp_comm_s) == pytest.approx(exposed[m], rel=1e-6)
        assert float(simulated.step_time_s) == pytest.approx(float(closed.step_time_s), rel=1e-6)
    assert exposed[1] <= exposed[2] <= exposed[4]
