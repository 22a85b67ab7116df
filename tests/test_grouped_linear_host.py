"""Transformer Engine's GroupedLinear host work per local expert (`physics.moe_grouped.grouped_linear_host_ops`):
counted from TE's source, priced at `Plan.host_kernel_s` beside the GEMM launches, and absent under a
full-iteration CUDA graph (the recipes that ran the fused grouped MLP)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses import public_moe
from shardwise.analyses import public_validation as pv
from shardwise.engines.moe import experts_parts
from shardwise.physics.collectives import Fabric
from shardwise.physics.moe_grouped import GROUPED_LINEARS, grouped_linear_host_ops
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario


def test_host_work_grows_with_the_local_experts_and_the_quantization():
    f16, b16 = grouped_linear_host_ops(np.array([1.0, 16.0]), "bf16")
    assert np.allclose(f16 * 1, f16[0] * np.array([1.0, 16.0])) and np.allclose(b16, b16[0] * np.array([1.0, 16.0]))
    # 16-bit, per expert and GroupedLinear: forward 3 + 1 + 1 light ops, backward 3 + 3 + 4 + 1 (0.3 each)
    # and the weight's AccumulateGrad with Megatron-Core's DDP hook (1 ATen op, 5 light: GROUPED_WEIGHT_HOOK)
    assert f16[0] == pytest.approx(GROUPED_LINEARS * 5 * 0.3)
    assert b16[0] == pytest.approx(GROUPED_LINEARS * (11 * 0.3 + 1.0 + 5 * 0.3))
    delayed = sum(grouped_linear_host_ops(8.0, "fp8", "te"))
    current = sum(grouped_linear_host_ops(8.0, "fp8", "te_current"))
    mx = sum(grouped_linear_host_ops(8.0, "mxfp8"))
    # FP8 allocates each split (two torch.empty, TE#1499); current scaling adds 3 kernels per split
    assert delayed > sum(grouped_linear_host_ops(8.0, "bf16"))
    assert current == pytest.approx(delayed + GROUPED_LINEARS * 8 * 2 * 3)
    assert mx > sum(grouped_linear_host_ops(8.0, "bf16"))


def _kernels(scope: str = "", precision: str = "bf16", ep: int = 8) -> float:
    model, cluster = presets.model("qwen3-30b-a3b"), presets.system("dgx-b200")
    plan = Plan(dp=8, ep=ep, etp=1, global_batch=64, precision=precision, host_kernel_s=10e-6, cuda_graph_scope=scope)
    scn = Scenario(model, cluster, plan)
    place = placement(plan, cluster.gpus_per_node, experts=True)
    _, kernels, _ = experts_parts(scn, Fabric.of(cluster), place, training=True)
    return float(np.asarray(kernels))


def test_the_routed_layer_issues_groupedlinears_host_work_unless_fully_graphed():
    model = presets.model("qwen3-30b-a3b")
    for ep in (4, 8):
        eager = _kernels(ep=ep)
        own = sum(grouped_linear_host_ops(model.experts / ep, "bf16"))
        partial = _kernels("moe_router", ep=ep)
        assert eager - partial < own  # partial graphs leave GroupedLinear eager
    assert _kernels("full_iteration") == 0.0
    assert _kernels(precision="mxfp8") > _kernels()


def test_the_fused_grouped_mlp_recipes_run_fully_graphed():
    row = {"model": "qwen3-30b-a3b", "system": "gb300-nvl72", "precision": "mxfp8", "framework_version": "26.06"}
    bridge = {**row, "source": public_moe.BRIDGE_SUMMARIES}
    assert public_moe.cuda_graph_scope(bridge) == "full_iteration"
    assert public_moe.cuda_graph_scope({**bridge, "framework_version": "26.04.01"}) is None
    assert public_moe.cuda_graph_scope({**row, "source": "elsewhere"}) is None
    assert len(public_moe.FUSED_GROUPED_MLP) == 17


def test_a_published_fused_run_is_priced_fully_graphed_and_its_eager_predecessor_not():
    rows = {r["id"]: public_moe.resolved(r) for r in pv.raw_rows() if r["moe"] == "yes"}
    # Qwen3-30B-A3B on 8 GB300, MXFP8: 26.06 (fused grouped MLP) and 26.04.01 (GroupedLinear)
    assert pv.request_for(rows["PUB-0047"]).cuda_graph_scope == "full_iteration"
    assert not pv.request_for(rows["PUB-0097"]).cuda_graph_scope
