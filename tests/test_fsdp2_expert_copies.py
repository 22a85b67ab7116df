"""FSDP2's copies of a mixture-of-experts model (`engines.fsdp2_copies`): the per-micro-batch path
(`sharding_copies`, unit by unit: `copied_weights`) and the once-a-step one (`step_copies_s`, a
stage's parameters: `copied_stage_weights`) count the same weights -- the attention, norms, router
and shared experts wherever the data-parallel group has more than one rank, the GPU's routed
experts wherever FSDP2 wraps them: over more than one expert-data-parallel rank, or over one in
torchtitan (`Plan.fsdp2_expert_mesh_of_one`), never in NeMo AutoModel's `ignored_params` case."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.analyses.search_space import stack_execution
from shardwise.engines.fsdp2_copies import copied_stage_weights, copied_weights, sharding_copies, step_copies_s
from shardwise.engines.moe import model_moe_split, stage_expert_params, stage_params
from shardwise.physics.compute import memory_s
from shardwise.physics.params import moe_layer_params_per_gpu
from shardwise.specs import Plan, Scenario


def _scenario(model: str, framework: str, ep: int, **over: object) -> Scenario:
    """`model` on 16 H100s at pp 1, ZeRO-3 over dp 16, two micro-batches a step."""
    fw = stack_execution(framework, {}, "bf16")
    fw.update(over)
    plan = Plan(dp=16, ep=ep, etp=1, global_batch=32, micro_batch=1, zero_stage=3, sequence_parallel=False, **fw)
    return Scenario(presets.model(model, seq_len=4096), presets.system("dgx-h100", nodes=2), plan)


def _per_micro_batch(scn: Scenario) -> float:
    """The weights `sharding_copies` copies over the (one) stage's units: its dense and MoE layers
    and the two ends."""
    units = copied_weights(scn.model, scn.plan)
    n = scn.model.layers
    k = float(model_moe_split(scn.model, scn.split).first) if scn.model.is_moe else 0.0
    return float((n - k) * units.layer + k * (units.moe_block + units.moe_experts) + units.emb + units.head)


def _once_a_step(scn: Scenario) -> float:
    params = stage_params(scn.model, scn.plan, scn.split)[0]
    experts = stage_expert_params(scn.model, scn.plan, scn.split)[0]
    return float(copied_stage_weights(scn.model, scn.plan, params, experts))


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])  # every layer MoE; three dense layers first
@pytest.mark.parametrize(
    "framework, ep, experts_copied",
    [
        ("nemo-automodel", 16, False),  # ep = dp: one rank a mesh, left out of FSDP (ignored_params)
        ("nemo-automodel", 4, True),  # 4 expert-data-parallel ranks: fully_shard over ep_shard
        ("torchtitan", 16, True),  # fully_shard over a one-rank edp mesh, still copied
        ("torchtitan", 1, True),  # no EP: the experts in the block's unit over dp 16
    ],
)
def test_both_paths_count_the_same_weights(model, framework, ep, experts_copied):
    scn = _scenario(model, framework, ep)
    params = float(stage_params(scn.model, scn.plan, scn.split)[0])
    experts = float(stage_expert_params(scn.model, scn.plan, scn.split)[0])
    assert experts > 0
    each, once = _per_micro_batch(scn), _once_a_step(scn)
    assert once - each == pytest.approx(scn.model.hidden)  # the final norm, the stage's alone
    assert once == pytest.approx(params if experts_copied else params - experts, rel=1e-6)


def test_the_experts_unit_is_priced_each_micro_batch_and_once_a_step_alike():
    """NeMo AutoModel at ep 4 (4 expert-data-parallel ranks) against ep 16 (one): each micro-batch the
    MoE layer's copies grow by its routed experts' copy-out and copy-in (one unit more, ep > 1), and
    the deferred copy-in once a step by 2 g bytes of every expert weight on the GPU."""
    copied, alone = _scenario("qwen3-30b-a3b", "nemo-automodel", 4), _scenario("qwen3-30b-a3b", "nemo-automodel", 16)
    m, gpu = copied.model, copied.cluster.gpu
    routed = float(moe_layer_params_per_gpu(m, 1, 4, 1)[1])
    with_unit, without = sharding_copies(copied), sharding_copies(alone)
    assert with_unit is not None and without is not None and with_unit.moe is not None and without.moe is not None
    copy_out = 2 * 2.0 * routed  # ALL_GATHER_COPY_OUT_PASSES x 2 bytes: bf16 weights
    forward = float(with_unit.moe.compute_forward_s) - float(without.moe.compute_forward_s)
    assert forward == pytest.approx(float(memory_s(copy_out, gpu)), rel=1e-9)
    # deferred sync (last-micro-batch): no copy-in each micro-batch, only the copy-out
    backward = float(with_unit.moe.compute_backward_s) - float(without.moe.compute_backward_s)
    assert backward == pytest.approx(float(memory_s(copy_out, gpu, kernels=2)), rel=1e-9)
    g = 4.0  # fp32 reduce
    experts = [float(stage_expert_params(s.model, s.plan, s.split)[0]) for s in (copied, alone)]
    params = [float(stage_params(s.model, s.plan, s.split)[0]) for s in (copied, alone)]
    once = [step_copies_s(s, n, n, x) for s, n, x in zip((copied, alone), params, experts, strict=True)]
    grown = once[0] - once[1]
    dense = params[0] - experts[0]
    assert params[1] - experts[1] == pytest.approx(dense)  # the same non-expert weights on both
    per_byte = float(memory_s(1.0, gpu) - memory_s(0.0, gpu))  # seconds a byte at HBM speed
    assert float(grown) == pytest.approx(2 * g * experts[0] * per_byte, rel=1e-9)


def test_a_dense_model_is_unchanged_by_the_experts_rule():
    """Llama 3 8B: every layer dense, the experts' field and ep play no part."""
    scn = _scenario("llama3-8b", "torchtitan", 1)
    units = copied_weights(scn.model, scn.plan)
    assert units.moe_block == 0.0 and units.moe_experts == 0.0
    copies = sharding_copies(scn)
    assert copies is not None and copies.moe is None
    assert _once_a_step(scn) - _per_micro_batch(scn) == pytest.approx(scn.model.hidden)  # the final norm


def test_the_simulator_prices_the_moe_copies_as_the_closed_form_does():
    from dataclasses import replace

    from shardwise.engines.simulated import simulate_training_step
    from shardwise.engines.training import estimate_training_step

    scn = _scenario("qwen3-30b-a3b", "torchtitan", 4)
    without = replace(scn, plan=replace(scn.plan, per_param_sharding=False))
    closed = [float(estimate_training_step(s).breakdown.compute_s) for s in (scn, without)]
    simulated = [float(simulate_training_step(s).estimate.breakdown.compute_s) for s in (scn, without)]
    assert closed[0] > closed[1] and simulated[0] > simulated[1]
    assert simulated[0] - simulated[1] == pytest.approx(closed[0] - closed[1], rel=1e-6)
