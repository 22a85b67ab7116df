"""Megatron-Core's CUDA graphs (`Plan.cuda_graph_scope`): they remove the host's time per kernel
of what they capture, nothing else; Megatron-Core's scope rules are refused in one line."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.emit import emit
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics.moe import (
    MOE_PREPROCESS_KERNELS,
    MOE_ROUTER_KERNELS,
    experts_forward,
    graphed_training_kernels,
    training_kernels,
)
from shardwise.physics.moe_dispatch import SYNC_HOST_OPS
from shardwise.physics.stack import GRAPH_LAUNCHES_PER_BLOCK, graphed_layer_kernels, layer_kernels
from shardwise.specs import Plan, Scenario


def _step(scope: tuple[str, ...], host_kernel_s: float, model: str = "qwen3-30b-a3b", micro_batch: int = 1) -> float:
    moe = presets.model(model).is_moe
    plan = Plan(dp=8, ep=8 if moe else 1, etp=1 if moe else 0, global_batch=64, precision="mxfp8",
                micro_batch=micro_batch, host_kernel_s=host_kernel_s, cuda_graph_scope=scope)  # fmt: skip
    return float(estimate_training_step(Scenario(presets.model(model), presets.system("dgx-b200"), plan)).step_time_s)


def test_graphs_speed_up_only_a_host_bound_step():
    """At 10 µs per launch and micro-batches of 8 the GPU outruns the host, even in the forward after
    the host's read of the split sizes (`physics.moe_grouped.post_sync_kernels`: the experts' GEMMs of 16,000
    tokens each and the dispatch outlast their host work): graphs change nothing but the dispatchers'
    reads, which a full-iteration graph does not make (`physics.moe_dispatch.SYNC_HOST_OPS`: 48 MoE layers x 1
    micro-batch). With micro-batches of 1 (16 local
    experts of few tokens each, GroupedLinear's host work per expert: `physics.moe_grouped.grouped_linear_host_ops`)
    and at 40 µs (a slow host) the eager step waits for it; full_iteration removes every wait, router
    graphs part of it."""
    syncs_s = 48 * 1 * SYNC_HOST_OPS * 10e-6
    assert _step((), 10e-6, micro_batch=8) - _step(("full_iteration",), 10e-6, micro_batch=8) == pytest.approx(
        syncs_s, rel=1e-6
    )
    graphed = _step(("moe_router", "moe_preprocess"), 10e-6, micro_batch=8)
    assert graphed == pytest.approx(_step((), 10e-6, micro_batch=8), rel=1e-12)
    for host_kernel_s in (10e-6, 40e-6):
        scopes = ((), ("moe_router", "moe_preprocess"), ("full_iteration",))
        eager, router, full = (_step(s, host_kernel_s) for s in scopes)
        assert full < router < eager
        assert full == pytest.approx(_step((), 0.0), rel=1e-12)


def test_a_captured_block_costs_two_launches_instead_of_its_kernels():
    kernels = layer_kernels(False, 6)
    assert graphed_layer_kernels(kernels, 6, ("attn", "mlp")) == GRAPH_LAUNCHES_PER_BLOCK * 2
    assert graphed_layer_kernels(kernels, 6, ("mlp",), moe_layer=True) == kernels  # dense layers only
    assert 0 < graphed_layer_kernels(kernels, 6, ("attn",)) < kernels
    ef = experts_forward(presets.model("qwen3-30b-a3b"), 4096, 8, 1, 2)
    eager = training_kernels(ef, 2.0)
    graphed = graphed_training_kernels(ef, 2.0, False, ("moe_router", "moe_preprocess"))
    captured = 3.0 * (ef.router.batch + MOE_ROUTER_KERNELS + MOE_PREPROCESS_KERNELS)
    assert eager - graphed == pytest.approx(captured - 2 * GRAPH_LAUNCHES_PER_BLOCK)


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ("moe", "whole MoE layers are graphed only when tokens are dropped"),
        ("moe_preprocess", "needs moe_router too"),
        ("full_iteration,attn", "give it alone"),
        ("attn,attn", "names a scope twice"),
    ],
)
def test_megatron_cores_scope_rules_are_one_clear_error(scope, message):
    with pytest.raises(SpecError, match=message):
        Plan(cuda_graph_scope=scope)


def test_emit_megatron_picks_the_graph_implementation():
    scn = Scenario(presets.model("llama3-8b"), presets.system("dgx-h100"), Plan(dp=8, global_batch=32))
    for scope, impl in ((("full_iteration",), "local"), (("attn", "mlp"), "transformer_engine")):
        graphed = Scenario(scn.model, scn.cluster, dataclasses.replace(scn.plan, cuda_graph_scope=scope))
        flags = [" ".join(g) for g in emit(graphed, "megatron").args]
        assert f"--cuda-graph-impl {impl} --cuda-graph-scope {' '.join(scope)}" in flags
    assert not any("cuda-graph" in " ".join(g) for g in emit(scn, "megatron").args)


def test_graphs_are_refused_with_a_stacks_own_host_count(cli):
    """nanotron's host count (`layer_host_ops`) has no graphed blocks: Megatron-Core's scopes are
    refused there in one line (they were priced as shares of Megatron's kernel count)."""
    from shardwise.specs import Plan

    with pytest.raises(SpecError, match="attn is Megatron-Core's CUDA graphs; not with layer_host_ops"):
        Plan(cuda_graph_scope="attn", layer_host_ops=206)
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--dp", "8", "--global-batch", "64"]
    code, _, err = cli([*args, "--framework", "nanotron", "--cuda-graph-scope", "attn"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "layer_host_ops" in err
