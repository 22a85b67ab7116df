"""What FSDP2's gradient path pays per micro-batch (docs/model.md #fsdp-residuals, issue #32 item 3):
nothing beyond its copy-in where the stack reduces every micro-batch's gradient (torchtitan,
torchtune, OLMo-core: the sharded add runs on the reduce-scatter stream), the unsharded add (10 bytes
a weight at an fp32 reduce dtype, 6 at bf16) where gradient sync is off until the last micro-batch:
under pipeline parallelism (torch.distributed.pipelining) and in NeMo AutoModel (`physics.microbatch`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.search_space import stack_execution
from shardwise.engines.costs import layer_cost
from shardwise.engines.fsdp2_copies import sharding_copies
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import memory_s
from shardwise.physics.microbatch import (
    BF16_MAIN_GRAD_ADD_BYTES,
    FSDP1_FLAT_GRAD_CAT_BYTES,
    FSDP2_DEFERRED_ADD_BYTES,
    FSDP2_REDUCED_ADD_BYTES,
    MAIN_GRAD_ADD_BYTES,
    accumulate_bytes,
    fsdp2_deferred_sync,
    plan_accumulate_bytes,
)
from shardwise.physics.params import layer_params_split
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario

REDUCED_EVERY_MICRO_BATCH = ("fsdp2", "torchtitan", "torchtitan-compile")


def _scenario(framework: str, pp: int = 1, **over: object) -> Scenario:
    """Llama 3 8B at 8,192 tokens on 16 H100s, ZeRO-3 over dp 16 / pp (two micro-batches a step)."""
    model = presets.model("llama3-8b", seq_len=8192)
    fw = stack_execution(framework, {}, "bf16")  # the preset's fields, its bf16 accumulate, no ZeRO stage
    fw.update(over)
    dp = 16 // pp
    plan = Plan(dp=dp, pp=pp, global_batch=2 * dp, micro_batch=1, zero_stage=3, **fw)
    return Scenario(model, presets.system("dgx-h100", nodes=2), plan)


def _backward_s(scn: Scenario) -> float:
    comm = tp_comm(scn, Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)["tp"])
    return float(layer_cost(scn, comm)[0].compute_backward_s)


def test_the_deferred_adds_bytes_as_fsdp2s_code_moves_them():
    """fp32 reduce dtype: unsharded_accumulated_grad (fp32) += grad (bf16), read 4 + 2, write 4;
    bf16: autograd's param.grad += grad, read 2 + 2, write 2."""
    assert FSDP2_DEFERRED_ADD_BYTES == 4 + 2 + 4 and FSDP2_REDUCED_ADD_BYTES == 0
    assert accumulate_bytes(FSDP2_REDUCED_ADD_BYTES, False, True) == FSDP2_DEFERRED_ADD_BYTES
    assert accumulate_bytes(FSDP2_REDUCED_ADD_BYTES, True, True) == BF16_MAIN_GRAD_ADD_BYTES == 2 + 2 + 2
    assert accumulate_bytes(FSDP2_REDUCED_ADD_BYTES, False, False) == 0.0
    assert accumulate_bytes(FSDP2_REDUCED_ADD_BYTES, True, False) == 0.0


def test_only_per_parameter_sharding_under_pipelining_takes_the_deferred_add():
    """Megatron's 10 and FSDP1's 4 stay theirs at any pp; a stack's own larger count is kept."""
    every = "every-micro-batch"
    assert accumulate_bytes(MAIN_GRAD_ADD_BYTES, False, fsdp2_deferred_sync(False, 8, every)) == MAIN_GRAD_ADD_BYTES
    flat = fsdp2_deferred_sync(False, 8, every)
    assert accumulate_bytes(FSDP1_FLAT_GRAD_CAT_BYTES, False, flat) == FSDP1_FLAT_GRAD_CAT_BYTES
    assert accumulate_bytes(18.0, False, fsdp2_deferred_sync(True, 2, every)) == 18.0
    pp = np.array([1, 2, 1, 4])
    per_param = np.array([True, True, False, False])
    got = accumulate_bytes(np.array([0.0, 0.0, 4.0, 10.0]), False, fsdp2_deferred_sync(per_param, pp, every))
    assert got.tolist() == [0.0, 10.0, 4.0, 10.0]


@pytest.mark.parametrize("name", REDUCED_EVERY_MICRO_BATCH)
def test_stacks_reducing_every_micro_batch_state_no_add(name):
    assert presets.framework_accumulate_bytes(name, "bf16") == FSDP2_REDUCED_ADD_BYTES
    assert presets.framework(name)["per_param_sharding"] is True


def test_nemo_automodel_states_its_deferred_sync_and_pays_fsdp2s_add():
    """get_sync_ctx: set_requires_gradient_sync(is_optim_step) (defer_fsdp_grad_sync): the preset
    states last-micro-batch and no add of its own; FSDP2's deferred add, 10 bytes, follows at pp 1.
    Turned off (defer_fsdp_grad_sync false), nothing is added, as under torchtitan."""
    assert presets.framework("nemo-automodel")["fsdp2_grad_sync"] == "last-micro-batch"
    assert presets.framework_accumulate_bytes("nemo-automodel", "bf16") == FSDP2_REDUCED_ADD_BYTES
    assert plan_accumulate_bytes(_scenario("nemo-automodel").plan) == FSDP2_DEFERRED_ADD_BYTES
    synced = _scenario("nemo-automodel", fsdp2_grad_sync="every-micro-batch").plan
    assert plan_accumulate_bytes(synced) == FSDP2_REDUCED_ADD_BYTES
    assert plan_accumulate_bytes(_scenario("nemo-automodel", pp=2, fsdp2_grad_sync="every-micro-batch").plan) == 10


@pytest.mark.parametrize("name", REDUCED_EVERY_MICRO_BATCH)
def test_stacks_reducing_every_micro_batch_say_so(name):
    assert presets.framework(name)["fsdp2_grad_sync"] == "every-micro-batch"


def test_torchtitan_pays_no_add_without_pipelining_and_the_deferred_one_with_it():
    """Absent at pp 1: the layer's backward is what it is with the add forced to 0, less than with
    Megatron's 10 by 10 bytes over the layer's weights; present at pp 2: forcing 10 changes nothing."""
    own = _scenario("torchtitan")
    forced = _scenario("torchtitan", unfused_accumulate_bytes=MAIN_GRAD_ADD_BYTES)
    m = own.model
    kv = m.kv_heads * m.head_dim
    weights = (
        m.hidden * (m.hidden + 2 * kv),
        m.hidden * m.hidden,
        m.hidden * 2 * m.ffn_hidden,
        m.ffn_hidden * m.hidden,
    )
    assert sum(weights) == pytest.approx(layer_params_split(m)[0])  # QKV, output, gated MLP up, down
    extra = sum(memory_s(MAIN_GRAD_ADD_BYTES * w, own.cluster.gpu) for w in weights)
    assert _backward_s(forced) - _backward_s(own) == pytest.approx(extra, rel=1e-6)
    assert _backward_s(_scenario("torchtitan", pp=2)) == pytest.approx(
        _backward_s(_scenario("torchtitan", pp=2, unfused_accumulate_bytes=MAIN_GRAD_ADD_BYTES))
    )


def test_the_copy_in_is_still_paid_where_the_add_is_not():
    """The reduce-scatter's copy-in (`per_param_sharding_bytes`) stays: no double count, no gap."""
    copies = sharding_copies(_scenario("torchtitan"))
    assert copies is not None and float(copies[0].compute_backward_s) > 0


def test_sync_is_deferred_only_for_fsdp2_under_pp_or_where_the_plan_says_so():
    """torch.distributed.pipelining (pp > 1, whatever the stack's loop says) and a stack's loop that
    turns it off (`Plan.fsdp2_grad_sync` last-micro-batch: NeMo AutoModel) defer gradient sync to the
    last micro-batch; FSDP1 and Megatron (no per-parameter sharding) never run FSDP2's path;
    torchtitan at pp 1 keeps sync on. The bytes of a stack's own add play no part."""
    per_param = np.array([True, True, True, False])
    pp = np.array([2, 1, 1, 2])
    sync = np.array(["every-micro-batch", "last-micro-batch", "every-micro-batch", "last-micro-batch"])
    assert fsdp2_deferred_sync(per_param, pp, sync).tolist() == [True, True, False, False]
    assert not fsdp2_deferred_sync(True, 1, "every-micro-batch")
    assert fsdp2_deferred_sync(True, 1, "last-micro-batch")


def test_a_deferred_copy_in_is_paid_once_a_step_from_the_reduce_dtype_accumulator():
    """foreach_reduce copies the gradient in on the micro-batch that reduces: every one where sync
    is on (read the 16-bit gradient, write the reduce dtype: (2 + g) W a micro-batch), only the last
    where it is off (read and write the reduce dtype: 2 g W a step, beside the optimizer step).
    Under pipelining the weights also stay gathered through the step (reshard_after_forward off):
    their copy-out, 2 x 2 bytes a weight each micro-batch at pp 1, runs once a step (review 30)."""
    from shardwise.engines.fsdp2_copies import step_copies_s
    from shardwise.engines.training_layout import optimizer_time_s

    g = 4.0  # fp32 reduce dtype (the presets' default)
    for pp, piped in ((2, True), (1, False)):
        scn = _scenario("torchtitan", pp=pp)
        weights = layer_params_split(scn.model)[0] / scn.plan.tp + layer_params_split(scn.model)[1]
        gpu = scn.cluster.gpu
        copies = sharding_copies(scn)
        assert copies is not None
        copy_out = 0.0 if piped else 2.0 * 2.0 * weights
        copy_in = 0.0 if piped else (2.0 + g) * weights
        # (kept gathered: no kernel launched either)
        each_b, each_f = (
            (0.0, 0.0) if piped else (memory_s(copy_out + copy_in, gpu, kernels=2), memory_s(copy_out, gpu))
        )
        assert float(copies[0].compute_backward_s) == pytest.approx(each_b)
        assert float(copies[0].compute_forward_s) == pytest.approx(each_f)
        once = step_copies_s(scn, 1e9, 3e9)
        assert once == (pytest.approx(memory_s(2 * g * 1e9 + 2 * 2 * 3e9, gpu)) if piped else 0.0)
        plain = replace(scn, plan=replace(scn.plan, per_param_sharding=False))
        assert float(optimizer_time_s(scn, 1e9, 0.0, 3e9)) == pytest.approx(
            float(optimizer_time_s(plain, 1e9, 0.0, 3e9)) + once
        )
    automodel = _scenario("nemo-automodel")  # its own deferred sync at pp 1: copy-in once, copy-out each pass
    assert step_copies_s(automodel, 1e9, 3e9) == pytest.approx(memory_s(2 * g * 1e9, automodel.cluster.gpu))


def test_fsdp2_under_pipelining_runs_its_collectives_once_a_step():
    """Weights kept gathered and gradients unreduced until the last backward (review 31): the
    data-parallel time of torchtitan at pp 2 does not grow with the micro-batches; at pp 1 (every
    micro-batch gathers and reduce-scatters) it does, and the simulator agrees with the closed form."""
    from shardwise.engines.simulated import simulate_training_step
    from shardwise.engines.training import estimate_training_step

    def dp_total(pp: int, micro_batches: int) -> float:
        dp = 16 // pp
        base = _scenario("torchtitan", pp=pp)
        scn = replace(base, plan=replace(base.plan, global_batch=micro_batches * dp))
        est = estimate_training_step(scn)
        sim = simulate_training_step(scn).estimate
        assert float(sim.step_time_s) == pytest.approx(float(est.step_time_s), rel=0.01)
        return float(est.breakdown.dp_comm_s) + float(est.hidden_comm_s["dp_comm"])

    assert dp_total(2, 8) == pytest.approx(dp_total(2, 2), rel=1e-6)
    assert dp_total(1, 8) > 3.0 * dp_total(1, 2)
