"""nanotron layouts counted by hand from its code (huggingface/nanotron 2411b022, the same paths as
0e0a27ea and v0.4-v0.5) and compared with the memory estimate, row by row; and the pipeline's
send/recv connections NCCL makes on a pair's first transfer (`physics.memory_runtime.pipeline_p2p_bytes`,
NVIDIA/nccl v2.18.1 src/graph/paths.cc ncclTopoComputeP2pChannels, src/transport/p2p.cc p2pRecvSetup).

The hand counts (Llama 3 8B: h 4096, 32 heads, 8 key-value heads of 128, f 14336, V 128256, 32
layers, untied; sequence 4096; bf16 with fp32 accumulation, the `nanotron` preset's mode:
REDUCE_SCATTER, async linears, 1F1B):
- weights 2 B, the FP32GradientAccumulator's gradient buffer 4 B of every local parameter
  (`build_grad_buffers`, "independently of ZeRO sharding"), the fp32 master and AdamW's two moments
  12 B over the ZeRO ranks (`ZeroDistributedOptimizer` hands the accumulator the sliced parameters);
- a layer's saved tensors, per token on one TP rank (bf16, sequence-parallel): the two TritonRMSNorm
  inputs and the two column linears' input shards (4 x 2h), the query's and the rotated key-value
  pair's contiguous copies (2h + 4 kv: `transpose().contiguous()`, `cat` and `permute().contiguous()`,
  the rotary in place), flash-attn's output (2h, also o_proj's input) and log-sum-exp (4 B a head),
  the gate-up output SiLU keeps alive through its view, SiLU's output and the product down_proj
  saves (2 x 2f + 2f + 2f); all but the norm and linear inputs split over TP already, those by
  sequence parallelism;
- on the stage with the output layer: the final norm's input and lm_head's input shard (2 x 2h a
  token) and the loss's 8 B a logit (the fp32 cast and `_ShardedCrossEntropy`'s out-of-place
  max subtraction);
- buffers: `MemoryBuffer`'s "allgather" and "allgather2" (2 full-sequence hidden widths at 2 B) with tp > 1;
- the caching allocator's 10% of the transient memory (the model's own figure, not nanotron's).
"""

from __future__ import annotations

import pytest

from shardwise.engines.training import training_memory
from shardwise.engines.training_memory import runtime_reserve_bytes
from shardwise.physics.memory_runtime import (
    CUDA_CONTEXT_BYTES,
    LIBRARY_WORKSPACE_BYTES,
    NCCL_CHANNELS,
    NCCL_CONNECTION_BYTES,
    NVLS_HEAD_BYTES_NCCL_2_18,
    P2P_CHANNELS_NVLINK_PEER,
    P2P_CHANNELS_OTHER_PEER,
    pipeline_p2p_bytes,
)
from shardwise.requests.training import TrainingRequest
from shardwise.units import MIB

H, HEADS, KV, F, V, L, S = 4096, 32, 8 * 128, 14336, 128256, 32, 4096
# Llama 3 8B's parameters: per layer q, k, v, o, gate, up, down and two norms; embedding, lm_head, final norm
LAYER_SPLIT = H * (H + 2 * KV) + H * H + 3 * H * F  # split over TP
LAYER_WHOLE = 2 * H  # the norms, on every TP rank


def _local_params(tp: int, pp: int, stage: str) -> float:
    layers = L / pp
    body = layers * (LAYER_SPLIT / tp + LAYER_WHOLE)
    if pp == 1:
        return body + 2 * V * H / tp + H
    return body + (V * H / tp if stage == "first" else V * H / tp + H)


def _layer_bytes_per_token(tp: int) -> float:
    """One layer's saved bytes per token of the micro-batch, on one TP rank (module docstring)."""
    return (4 * 2 * H + 2 * H + 4 * KV + 2 * H + 4 * HEADS + 2 * 2 * F + 2 * F + 2 * F) / tp


def _memory(stage: str = "fullest", **plan: object):
    request = TrainingRequest(
        model="llama3-8b", system="dgx-h100", seq_len=S, framework="nanotron", **plan
    ).build()  # fmt: skip
    return training_memory(request.scenario, stage=stage), request.scenario


@pytest.mark.parametrize(
    ("tp", "dp", "mbs", "zero"),
    [(1, 8, 1, 1), (2, 4, 2, 1), (2, 4, 1, 0)],
)
def test_model_state_activations_and_buffers_are_the_hand_count(tp, dp, mbs, zero):
    memory, _ = _memory(nodes=1, tp=tp, dp=dp, micro_batch=mbs, global_batch=dp * mbs * 4, zero=zero)
    p = _local_params(tp, 1, "last")
    assert float(memory.weights_bytes) == pytest.approx(2 * p, rel=1e-6)
    assert float(memory.gradients_bytes) == pytest.approx(4 * p, rel=1e-6)
    assert float(memory.optimizer_bytes) == pytest.approx(12 * p / (dp if zero else 1), rel=1e-3)
    tokens = S * mbs
    layers = L * tokens * _layer_bytes_per_token(tp)
    head = tokens * 2 * 2 * H / tp + 8 * tokens * V / tp
    assert float(memory.activations_bytes) == pytest.approx(layers + head, rel=2e-3)
    # ZeRO-0 wraps torch DDP (bucket copies of the 16-bit gradients, 2 B); ZeRO-1 none; the
    # sequence-parallel gather buffers with tp > 1
    gathers = 2 * tokens * H * 2 if tp > 1 else 0.0
    ddp = 2 * p if zero == 0 else 0.0
    assert float(memory.buffers_bytes) == pytest.approx(gathers + ddp, rel=1e-6)
    assert float(memory.allocator_bytes) == pytest.approx(0.10 * float(memory.activations_bytes), rel=1e-6)


def test_the_reserved_row_is_every_communicator_counted_by_hand():
    """tp 4 x pp 2 on one DGX H100 under nanotron's NCCL 2.18.1 (192 MiB an NVLS head, the tree
    connected beside the ring at init for three ranks or more): tp (4 ranks, 4 heads), pp (2 ranks:
    a ring, no NVLS), the default group and world_pg (8 ranks, 8 heads each), mp_pg over tp x pp (8
    ranks; `local_pg` is the same rank set), the pipeline pair's own communicator (a ring) and its
    send/recv connections (32 NVLink channels), beside the CUDA context and cuBLAS workspaces."""
    memory, scn = _memory(nodes=1, tp=4, pp=2, dp=1, micro_batch=1, global_batch=8, zero=0)
    conn, head = NCCL_CONNECTION_BYTES, NVLS_HEAD_BYTES_NCCL_2_18
    ring_tree = 2 * NCCL_CHANNELS * conn
    expected = (
        CUDA_CONTEXT_BYTES
        + LIBRARY_WORKSPACE_BYTES
        + (ring_tree + 4 * head)  # tp
        + NCCL_CHANNELS * conn  # pp
        + 2 * (ring_tree + 8 * head)  # default, world
        + (ring_tree + 8 * head)  # mp_pg (local_pg: the same ranks)
        + NCCL_CHANNELS * conn  # the pair's communicator
        + 32 * conn  # its send/recv connections
    )
    assert float(memory.reserved_bytes) == pytest.approx(expected)
    assert float(runtime_reserve_bytes(scn)) == pytest.approx(expected)


def test_send_recv_connections_by_hand():
    conn = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + 4 * MIB  # LL + LL128 + Simple receive buffers
    assert conn == NCCL_CONNECTION_BYTES
    assert P2P_CHANNELS_NVLINK_PEER == 32 and P2P_CHANNELS_OTHER_PEER == 2
    # nextPow2(min(24 channels, 2 x 18 NVLinks)) = 32 channels a peer: 294 MiB
    one = pipeline_p2p_bytes(tp=4, cp=1, dp=1, pp=2, vpp=1, gpus_per_node=8, nvlink=True)
    assert float(one) == pytest.approx(32 * conn) and float(one) / MIB == pytest.approx(294.0)
    # no pipeline: nothing
    assert float(pipeline_p2p_bytes(8, 1, 1, 1, 1, 8, True)) == 0.0
    # interleaved with pp > 2: the first stage also receives from the last (two peers); at pp 2 the
    # previous and next stage are one rank
    assert float(pipeline_p2p_bytes(2, 1, 1, 4, 2, 8, True)) == pytest.approx(2 * 32 * conn)
    assert float(pipeline_p2p_bytes(4, 1, 1, 2, 2, 8, True)) == pytest.approx(32 * conn)
    # the pipeline group spans servers (tp 8): a network peer in the communicator, 2 channels a peer
    assert float(pipeline_p2p_bytes(8, 1, 1, 2, 1, 8, True)) == pytest.approx(2 * conn)
    # tp 2 x dp 2 x pp 4 on 16 GPUs: the pp group has two ranks a server. In the pipeline
    # communicator (Megatron's batch_isend_irecv) a remote rank sets 2 channels; nanotron's pair
    # communicator reaches its neighbour in the same server over NVLink: 32
    assert float(pipeline_p2p_bytes(2, 1, 2, 4, 1, 8, True)) == pytest.approx(2 * conn)
    assert float(pipeline_p2p_bytes(2, 1, 2, 4, 1, 8, True, pair_communicators=True)) == pytest.approx(32 * conn)
    # PCIe: 2 channels a peer
    assert float(pipeline_p2p_bytes(4, 1, 1, 2, 1, 8, False)) == pytest.approx(2 * conn)


def test_every_stack_with_a_pipeline_holds_them_and_none_without():
    """The connections are NCCL's, whatever the stack: Megatron-Core's pp 2 in one server grows by
    the 32 channels of its one peer; pp 1 by nothing."""
    from dataclasses import replace

    from shardwise import presets
    from shardwise.specs import Plan, Scenario

    model, system = presets.model("llama3-8b"), presets.system("dgx-h100")
    plan = Plan(tp=4, pp=2, dp=1, global_batch=8, micro_batch=1, framework="megatron-core")
    with_pp = float(runtime_reserve_bytes(Scenario(model, system, plan)))
    pcie = replace(system, intra_node_link=presets.link("pcie5"))
    on_pcie = float(runtime_reserve_bytes(Scenario(model, pcie, plan)))
    # the same communicators on PCIe (no NVLS there): the pipeline's connections differ by 32 - 2 channels
    nvls_tp = 4 * 32 * MIB  # the tp group's NVLS heads, NVLink only (current NCCL: 32 MiB a head)
    assert with_pp - on_pcie == pytest.approx((32 - 2) * NCCL_CONNECTION_BYTES + nvls_tp)


def _nanotron_split(layer_cost: float, head_cost: float, layers: int, pp: int) -> list[int]:
    """nanotron's `build_model` by hand: blocks in order, each to the current rank until the
    cumulative cost passes that rank's share (the block that passes it stays), lm_head the last block."""
    costs = [layer_cost] * layers + [head_cost]
    total, rank, counts, cumulative = sum(costs), 0, [0] * pp, 0.0
    for i, cost in enumerate(costs):
        cumulative += cost
        counts[rank] += i < layers
        if cumulative > total * (rank + 1) / pp:
            rank += 1
    return counts


LLAMA_8B, LLAMA_70B = (4096, 32, 14336, 32), (8192, 64, 28672, 80)  # h, heads, f, layers


@pytest.mark.parametrize(
    ("model", "plan", "shape"),
    [
        (
            "llama3-8b",
            {"nodes": 1, "tp": 4, "pp": 2, "dp": 1, "micro_batch": 4, "global_batch": 32},
            (4096, 32, 14336, 32),
        ),
        (
            "llama3-70b",
            {"nodes": 8, "tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "global_batch": 32},
            (8192, 64, 28672, 80),
        ),
    ],
)
def test_pipeline_stages_hold_nanotrons_split_and_1f1b_in_flight(model, plan, shape):
    """The layers per stage as nanotron's compute costs place them (`get_block_compute_costs`: a
    layer 4 a d h + 3 f h, lm_head V h; 8B at pp 2: 18 and 14, 70B at pp 4: 21, 20, 20, 19), and the
    first stage's activations: pp micro-batches of its layers in flight (1F1B's pp - rank - 1
    warm-up forwards, then one before each backward), plus at most one layer's backward working set."""
    h, heads, f, layers = shape
    request = TrainingRequest(model=model, system="dgx-h100", seq_len=S, framework="nanotron", zero=1, **plan).build()
    split = _nanotron_split(4 * heads * 128 * h + 3 * f * h, V * h, layers, plan["pp"])
    assert list(request.scenario.split.counts) == split
    tp, mbs, pp = plan["tp"], plan["micro_batch"], plan["pp"]
    per_token = (12 * h + 4 * KV + 8 * f + 4 * heads) / tp
    kept = pp * split[0] * S * mbs * per_token
    first = float(training_memory(request.scenario, stage="first").activations_bytes)
    assert kept < first < kept * (1 + 1.5 / split[0])
