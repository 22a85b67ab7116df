"""Token dropping (`Plan.moe_capacity_factor`, `Plan.moe_pad_to_capacity`): Megatron-Core caps each
expert at ceil(T k / E x factor) copies of every routing rank's tokens and, padded, runs exactly that
many with static splits (no count gather, no host read of them); which public runs' recipes did it
(`analyses.public_moe.token_drop`)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses import public_moe
from shardwise.analyses import public_validation as pv
from shardwise.engines.moe import experts_parts
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.moe import (
    DROP_BACKWARD_KERNELS,
    DROP_KERNELS,
    capacity_copies,
    capacity_load,
    experts_forward,
    training_kernels,
)
from shardwise.physics.moe_grouped import capacity_aligned
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario


def _plan(**kw) -> Plan:
    return Plan(dp=8, ep=8, etp=1, global_batch=64, micro_batch=1, precision="fp8", host_kernel_s=10e-6, **kw)


def _scenario(**kw) -> Scenario:
    return Scenario(presets.model("qwen3-30b-a3b"), presets.system("dgx-b200"), _plan(**kw))


def _routed(scn: Scenario):
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node, experts=True)
    return experts_parts(scn, fabric, place, training=True)


def test_capacity_is_megatrons_ceiling_per_routing_rank():
    """Qwen3-30B-A3B (E = 128, k = 8), 4,096 tokens a rank at factor 1: 256 copies of each of the 8
    routing ranks, 2,048 an expert; at 1.3, ceil(332.8) = 333 of each."""
    model = presets.model("qwen3-30b-a3b")
    assert capacity_copies(4096, model, 1.0, 8) == 2048
    assert capacity_copies(4096, model, 1.3, 8) == 333 * 8


def test_padding_runs_every_expert_at_capacity_and_removes_the_spread():
    """Dropless, the busiest of 8 ranks carries the binomial spread above the mean; padded at factor 1
    every rank runs exactly the mean (16 experts of 2,048), at 1.5 half as many again (padding is
    work); dropping without padding caps the spread at the factor."""
    model = presets.model("qwen3-30b-a3b")
    dropless = experts_forward(model, 4096, 8, 1, 2.0)
    assert float(dropless.imbalance) > 1.005
    padded = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=1.0, pad_to_capacity=True)
    assert float(padded.imbalance) == pytest.approx(1.0)
    assert (float(padded.up.m), float(padded.up.batch)) == (2048.0, 16.0)
    wide = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=1.5, pad_to_capacity=True)
    assert float(wide.up.m) == 3072.0 and float(wide.imbalance) == pytest.approx(1.5)
    capped = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=1.0)
    assert float(capped.imbalance) == pytest.approx(1.0)
    loose = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=2.0)
    assert float(loose.imbalance) == pytest.approx(float(dropless.imbalance))
    assert float(capacity_load(1.2, 1.0, True)) == 1.0 and float(capacity_load(1.2, 1.1, False)) == 1.1
    assert float(capacity_load(1.2, 0.0, False)) == 1.2


def test_the_routers_dropping_is_counted_once_forward_and_once_backward():
    model = presets.model("qwen3-30b-a3b")
    dropless = experts_forward(model, 4096, 8, 1, 2.0)
    dropping = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=1.0, pad_to_capacity=True)
    extra = float(training_kernels(dropping, 2.0)) - float(training_kernels(dropless, 2.0))
    assert extra == DROP_KERNELS + DROP_BACKWARD_KERNELS
    assert float(dropping.elementwise_bytes) > float(dropless.elementwise_bytes)


def test_padded_splits_skip_the_read_the_count_gather_and_aligned_quantization_padding():
    """Micro-batch 1 on 8 B200 in FP8 (host-bound): padded to capacity the forward loses the host's
    read of the split sizes and the post-read section's own wait, the dispatch its count gather, and
    TE's padding copies (2,048 copies an expert, a multiple of 16); the layer is faster."""
    dropless, _, _ = _routed(_scenario())
    padded, _, _ = _routed(_scenario(moe_capacity_factor=1.0, moe_pad_to_capacity=True))
    assert float(padded.compute_forward_s) < float(dropless.compute_forward_s)
    assert float(padded.ep_forward_s) < float(dropless.ep_forward_s)
    assert float(padded.ep_backward_s) == pytest.approx(float(dropless.ep_backward_s))
    model = presets.model("qwen3-30b-a3b")
    ef = experts_forward(model, 4096, 8, 1, 2.0, capacity_factor=1.0, pad_to_capacity=True)
    assert bool(capacity_aligned(ef, "fp8")) and bool(capacity_aligned(ef, "mxfp8"))
    odd = experts_forward(model, 4096 + 16, 8, 1, 2.0, capacity_factor=1.0, pad_to_capacity=True)
    assert not bool(capacity_aligned(odd, "mxfp8"))  # 257 x 8 copies an expert


def test_token_dropping_is_vectorized_over_plans():
    scn = _scenario(moe_capacity_factor=np.array([0.0, 1.0, 1.0]), moe_pad_to_capacity=np.array([False, False, True]))
    cost, _, _ = _routed(scn)
    one = [float(np.asarray(_routed(_scenario(moe_capacity_factor=f, moe_pad_to_capacity=p))[0].compute_forward_s))
           for f, p in ((0.0, False), (1.0, False), (1.0, True))]  # fmt: skip
    assert np.allclose(np.asarray(cost.compute_forward_s), one)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"moe_pad_to_capacity": True}, "needs moe_capacity_factor > 0"),
        ({"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True, "moe_dispatcher": "flex"}, "alltoall dispatcher"),
        ({"moe_capacity_factor": -1.0}, "moe_capacity_factor"),
    ],
)
def test_megatrons_rules_of_token_dropping_are_kept(fields, message):
    with pytest.raises(SpecError, match=message):
        _plan(**fields)


def test_the_recipes_that_dropped_tokens_are_priced_so():
    """Megatron-Bridge 25.09's Qwen3 runs and DeepSeek-V3 off H100, dgxc-benchmarking's NeMo 2
    DeepSeek-V3 / Grok-1 / Llama 4 Maverick and NeMo's 25.04 / 25.07 summary pages drop and pad at
    factor 1 on the alltoall dispatcher; 25.09's DeepSeek-V3 on H100 and the later Bridge runs are
    dropless."""
    raws = {r["id"]: public_moe.resolved(r) for r in pv.raw_rows()}
    drop = {i for i, r in raws.items() if r["moe"] == "yes" and public_moe.token_drop(r)}
    assert {"PUB-0279", "PUB-0287", "PUB-0300", "PUB-0786", "PUB-0354", "PUB-0837", "PUB-0889"} <= drop
    assert not {"PUB-0296", "PUB-0227"} & drop  # 25.09 DeepSeek-V3 on H100 (DeepEP); 26.02
    assert all(public_moe.dispatcher(raws[i]) == "alltoall" for i in drop)
    assert public_moe.dispatcher(raws["PUB-0296"]) == "flex"


def test_unpadded_token_dropping_cannot_capture_the_preprocess_in_a_cuda_graph():
    # Megatron-Core (arguments.py): with the alltoall dispatcher and a capacity factor, the
    # preprocess copies split sizes to the host, so moe_preprocess is refused in cuda_graph_scope
    import pytest

    from shardwise.errors import SpecError
    from shardwise.specs.plan import Plan

    scope = ("moe_router", "moe_preprocess")
    with pytest.raises(SpecError, match="moe_preprocess"):
        Plan(ep=8, moe_capacity_factor=1.0, cuda_graph_scope=scope)
    assert Plan(ep=8, moe_capacity_factor=1.0, moe_pad_to_capacity=True, cuda_graph_scope=scope).ep == 8
    assert Plan(ep=8, cuda_graph_scope=scope).ep == 8  # dropless: Megatron-Core allows it


def test_memory_drops_tokens_where_the_time_does():
    # review: memory capped the routed activations under TP without sequence parallelism, where the
    # time (each rank routing the TP group's tokens) prices no dropping; both read
    # `physics.moe.dropping_factor`
    import numpy as np

    from shardwise.physics.moe import dropping_factor

    assert float(dropping_factor(1.0, sequence_parallel=False, tp=2)) == 0.0
    assert float(dropping_factor(1.0, sequence_parallel=True, tp=2)) == 1.0
    assert np.all(dropping_factor(1.25, sequence_parallel=False, tp=1) == 1.25)
    assert float(dropping_factor(1.0, sequence_parallel=True, tp=2, training=False)) == 0.0  # serving: dropless
