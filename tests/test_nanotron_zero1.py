"""nanotron's ZeRO-1 as its trainer runs it (`Plan.zero1_grad_all_reduce`): no DDP wrapper under
fp32 accumulation with ZeRO, so one exposed all-reduce of every local fp32 gradient after the
backward passes (not a reduce-scatter beside them), and the clipping norm, scaling and zeroing over
every local gradient, not the shard (huggingface/nanotron trainer.py init_model, training_step;
optim/gradient_accumulator.py, optim/clip_grads.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.data_parallel import collective_prices, zero_collectives
from shardwise.engines.dp_comm import zero_stage_fields
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_layout import (
    OPTIMIZER_TRAFFIC_BYTES_PER_PARAM,
    UNSHARDED_GRAD_PASS_BYTES,
    optimizer_time_s,
)
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import memory_s
from shardwise.physics.topology import placement
from shardwise.presets import _framework_from_dict
from shardwise.requests.training import TrainingRequest

COMMON = {"model": "llama3.2-1b", "system": "dgx-h100", "nodes": 1, "seq_len": 4096, "framework": "nanotron"}


def _scenario(**over: object):
    return TrainingRequest(**{**COMMON, **over}).build().scenario


def test_the_nanotron_presets_state_it_and_others_do_not():
    assert presets.framework("nanotron")["zero1_grad_all_reduce"] is True
    assert presets.framework("nanotron-defaults")["zero1_grad_all_reduce"] is True
    for other in ("megatron-core", "deepspeed", "torchtitan", "internevo"):
        assert "zero1_grad_all_reduce" not in presets.framework(other)


def test_zero1_prices_the_whole_all_reduce_exposed_where_it_had_a_reduce_scatter_beside_the_backward():
    prices = {"reduce_scatter": 10.0, "bucket_reduce_scatter": 1.0, "all_gather": 5.0, "bucket_all_gather": 0.5}
    prices.update(all_reduce=20.0, bucket_all_reduce=2.0)
    bucketed = zero_stage_fields(1, prices, 100.0, 50.0, 0.0, 4, False)
    assert bucketed[:3] == (10.0, 100.0, 1.0)  # reduce-scatter beside the backward, its last bucket
    whole = zero_stage_fields(1, prices, 100.0, 50.0, 0.0, 4, False, True)
    assert whole[:3] == (20.0, 0.0, 20.0)  # the all-reduce, no window, all of it its own bucket
    assert whole[3:] == bucketed[3:]  # the weights' all-gather after the optimizer is the same
    # an array of plans: each its own branch
    mixed = zero_stage_fields(1, prices, 100.0, 50.0, 0.0, 4, False, np.array([False, True]))
    assert list(mixed[0]) == [10.0, 20.0] and list(mixed[1]) == [100.0, 0.0]
    # ZeRO-0 and ZeRO-2 do not read it
    for k in (0, 2):
        assert zero_stage_fields(k, prices, 100.0, 50.0, 0.0, 4, False, True) == zero_stage_fields(
            k, prices, 100.0, 50.0, 0.0, 4, False
        )
    assert "all_reduce" in zero_collectives(1)


def test_the_step_adds_what_the_all_reduce_costs_over_the_reduce_scatter_and_zero0_is_unchanged():
    scn = _scenario(tp=1, dp=8, micro_batch=2, global_batch=16, zero=1)
    assert bool(scn.plan.zero1_grad_all_reduce) and not bool(scn.plan.overlap_param_gather)
    bucketed = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, zero1_grad_all_reduce=False))
    est, before = estimate_training_step(scn), estimate_training_step(bucketed)
    # the whole fp32 all-reduce of 1.24e9 gradients over 8 GPUs and the all-gather, both exposed:
    # at least the all-reduce's bytes over NVLink's per-GPU rate more than the bucketed reduce-scatter
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node)
    prices = collective_prices(scn, fabric, place, 1.0e9, ("all_reduce", "reduce_scatter", "all_gather"))
    assert float(prices["all_reduce"]) > float(prices["reduce_scatter"])  # NVLS: 1.46x, not ring's 2x
    assert float(est.breakdown.dp_comm_s) > float(before.breakdown.dp_comm_s) + float(prices["reduce_scatter"])
    assert float(est.step_time_s) > float(before.step_time_s)
    zero0 = _scenario(tp=1, dp=8, micro_batch=2, global_batch=16, zero=0)
    plain0 = dataclasses.replace(zero0, plan=dataclasses.replace(zero0.plan, zero1_grad_all_reduce=False))
    assert float(estimate_training_step(zero0).step_time_s) == float(estimate_training_step(plain0).step_time_s)


def test_the_gradient_passes_run_over_every_local_gradient_under_zero1():
    scn = _scenario(tp=1, dp=8, micro_batch=2, global_batch=16, zero=1)
    n = 1.0e9
    shard = n / 8
    gpu = scn.cluster.gpu
    want = memory_s(shard * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM + (n - shard) * UNSHARDED_GRAD_PASS_BYTES, gpu, kernels=4)
    assert float(optimizer_time_s(scn, n)) == pytest.approx(float(want))
    plain = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, zero1_grad_all_reduce=False))
    assert float(optimizer_time_s(plain, n)) == pytest.approx(float(memory_s(shard * 48.0, gpu, kernels=4)))
    # ZeRO-0: everything is local already, the 48 bytes over every parameter either way
    zero0 = _scenario(tp=1, dp=8, micro_batch=2, global_batch=16, zero=0)
    assert float(optimizer_time_s(zero0, n)) == pytest.approx(float(memory_s(n * 48.0, gpu, kernels=4)))


def test_the_simulator_agrees_with_the_closed_form_on_the_exposed_all_reduce():
    from shardwise.engines.simulated import simulate_training_step

    scn = _scenario(tp=2, dp=4, micro_batch=1, global_batch=8, zero=1)
    closed = estimate_training_step(scn)
    simulated = simulate_training_step(scn).estimate
    assert float(simulated.breakdown.dp_comm_s) == pytest.approx(float(closed.breakdown.dp_comm_s), rel=0.02)


def test_a_preset_gives_true_or_false():
    data = {k: v for k, v in presets._lookup("frameworks", "nanotron")[1].items()}
    data["zero1_grad_all_reduce"] = "yes"
    with pytest.raises(SpecError, match="zero1_grad_all_reduce: 'yes' is not allowed; give true or false"):
        _framework_from_dict("bad", data)


def test_no_ddp_bucket_copies_under_zero1():
    from shardwise.engines.training_memory import buffer_terms
    from shardwise.physics.memory_stacks import stack_memory

    stack = stack_memory("nanotron")
    zero1 = _scenario(tp=1, dp=8, micro_batch=1, global_batch=8, zero=1).plan
    zero0 = _scenario(tp=1, dp=8, micro_batch=1, global_batch=8, zero=0).plan
    assert not bool(buffer_terms(zero1, stack)[0])  # no DDP wrapper: trainer.py make_ddp
    assert bool(buffer_terms(zero0, stack)[0])  # DDP with its fp32-accumulation hook
    bucketed = dataclasses.replace(zero1, zero1_grad_all_reduce=False)
    assert bool(buffer_terms(bucketed, stack)[0])
    # 2 B a parameter less: the layout's memory drops by DDP's bucket copies
    scn = _scenario(tp=1, dp=8, micro_batch=1, global_batch=8, zero=1)
    other = dataclasses.replace(scn, plan=bucketed)
    with_buckets, without = (float(estimate_training_step(x).memory.total_bytes) for x in (other, scn))
    saved = with_buckets - without
    assert saved == pytest.approx(stack.ddp_bucket_bytes_per_param * 1.236e9, rel=0.02)  # llama3.2-1b, tied (review 41)
