"""What a mixture-of-experts layer's token dispatcher moves and waits for: the all-to-all's bytes in
and out of a node (with DeepEP / HybridEP's deduplication), the all-gather dispatcher's, the
metadata sent beside the tokens, and the host's read of the split sizes (`engines.moe` prices them)."""

from __future__ import annotations

import numpy as np

from shardwise.specs import Model
from shardwise.specs._checks import Number

# Per token and routed expert, the router's outputs the all-gather dispatcher gathers besides the
# tokens: the probabilities (fp32, `moe_router_dtype` of the NeMo recipes) and the routing map
# (bool), both T x E (megatron/core/transformer/moe/token_dispatcher.py, MoEAllGatherTokenDispatcher).
ROUTING_BYTES_PER_EXPERT = 4.0 + 1.0
# vLLM's all-gather dispatch (its default all2all backend, allgather_reducescatter: vllm/distributed/
# device_communicators/all2all.py AgRsAll2AllManager.dispatch, vLLM 0.34) gathers each token's top-k
# weights (fp32) and expert ids (int32, fused_moe/router/base_router.py) beside it, not a T x E map.
TOPK_BYTES_PER_CHOICE = 4.0 + 4.0
# SGLang's data-parallel attention without an all-to-all backend (`--moe-a2a-backend none`, its
# default; sglang 0.5.6.post2, layers/communicator.py `_gather_hidden_states_and_residual` and
# `_scatter_hidden_states`, layers/dp_attention.py `dp_gather_partial`, `dp_reduce_scatter_tensor`):
# every rank gathers the normalised hidden states of the whole TP group (all tp x dp GPUs of the
# replica, the experts' group) in the model's dtype, `model_config.dtype`, 16 bits whatever the
# weights, and routes them itself (the gate runs on the gathered tokens): no routing travels. How
# it gathers depends on the batch (`DpPaddingMode.get_dp_padding_mode`): a batch with prompt tokens
# on any rank (an extend) is padded to the sum of the ranks' tokens and "gathered" by an all-reduce
# of that buffer (each rank writes its rows into zeros), its outputs all-reduced and each rank's
# rows copied out (`dp_scatter`); a decode batch (CUDA graphs, ranks within 2x of each other) is
# padded to the longest rank and all-gathered (`all_gather_into_tensor`), its outputs
# reduce-scattered (DeepSeek's layers allow it).
DP_GATHER_BYTES_PER_ELEMENT = 2.0


def allgather_dispatch_bytes(
    model: Model,
    tokens: Number,
    group: Number,
    bytes_per_element: float,
    top_k_only: bool = False,
    no_routing: bool = False,
) -> tuple[Number, Number]:
    """(bytes of the gathered tokens, of the gathered routing) on one rank of the all-gather
    dispatcher (Megatron-Core's `allgather`, its default; README: "TP-only setups, small EP, large
    Top-K"): every rank of the ep x etp group all-gathers the group's tokens, T h each, once -- not a
    copy per chosen expert -- with their T x E probabilities and routing map, keeps the copies routed
    to its experts, and the outputs are reduce-scattered back (the tokens' bytes again). Against the
    all-to-all's T k h (ep - 1)/ep sent, the gather receives T h (G - 1): cheaper where k > G.
    `top_k_only`: the routing as vLLM's allgather_reducescatter gathers it, k weights and ids a
    token (TOPK_BYTES_PER_CHOICE); `no_routing`: none, every rank routing the gathered tokens itself
    (SGLang, DP_GATHER_BYTES_PER_ELEMENT)."""
    g = np.asarray(group, dtype=float)
    hidden = g * tokens * model.hidden * bytes_per_element
    per_token = model.experts * ROUTING_BYTES_PER_EXPERT
    if top_k_only:
        per_token = model.experts_per_token * TOPK_BYTES_PER_CHOICE
    if no_routing:
        per_token = 0.0
    routing = g * tokens * per_token
    return hidden, routing


def gathered_buffers_bytes(model: Model, tokens: Number, group: Number) -> Number:
    """Bytes one rank of a gathering dispatcher holds at once for `tokens` tokens a rank: the gathered
    input and the experts' output before the reduce-scatter (the combine buffer), G x T x h each in
    16 bits (DP_GATHER_BYTES_PER_ELEMENT): 2 x 1.88 GB for DeepSeek-V3 (h 7168) at 8,192 tokens and
    G 16. vLLM's worker profiles its activation peak with a dummy batch of its whole token budget on
    every data-parallel rank before it sizes the KV cache (v1/worker/gpu/model_runner.py
    `profile_run`, `_dummy_run(max_num_tokens)`), so they come out of the cache there."""
    g = np.asarray(group, dtype=float)
    return 2.0 * g * tokens * model.hidden * DP_GATHER_BYTES_PER_ELEMENT


# The all-to-all dispatcher's metadata (megatron/core/transformer/moe/token_dispatcher.py,
# MoEAlltoAllTokenDispatcher, Megatron-LM d98e8a6): `preprocess` all-gathers every rank's token count
# per expert over the ep x etp group (`gather_from_sequence_parallel_region(num_local_tokens_per_expert,
# group=tp_ep_group)`, E int64 values a rank) to size the all-to-all, and `token_dispatch` sends the
# router's probabilities by an all-to-all of their own beside the tokens' (`global_probs =
# all_to_all(...)`, one fp32 value a copy under the recipes' `moe_router_dtype` fp32), whose gradient
# travels back in the backward pass. Few bytes: their cost is the collectives' latency.
COUNT_BYTES = 8.0
PROB_BYTES = 4.0
# Every token dispatcher of a dropless layer reads the tokens' split sizes on the host before the
# tokens move, once per MoE layer and forward pass: the all-to-all dispatcher copies them to the host
# and waits for the copy (`_maybe_dtoh_and_synchronize`, sync point "before_ep_alltoall"), the flex
# dispatcher (HybridEP without a static token budget) reads the permuted size back ("CPU sync"), the
# all-gather dispatcher calls `.cpu()` on its counts. The GPU runs dry at that point and waits for the
# host to wake and issue the all-to-all: priced as SYNC_HOST_OPS host operations (`Plan.host_kernel_s`
# each). A project estimate (the wake-up and the collective's launch); a full-iteration CUDA graph has
# no host in the loop and runs the recipes' sync-free path (a static budget): none there.
SYNC_HOST_OPS = 2.0


def dispatch_metadata_bytes(
    model: Model, tokens: Number, ep: Number, per_node: Number
) -> tuple[Number, Number, Number]:
    """(bytes of the gathered per-expert counts on one rank, probability bytes it sends to EP peers in
    its node, out of it) for the all-to-all dispatcher (COUNT_BYTES, PROB_BYTES): the counts of the
    ep ranks, E each, and one probability per token copy, (g - 1)/ep of them in the node and
    (ep - g)/ep out of it as the tokens travel."""
    p = np.asarray(ep, dtype=float)
    g = np.minimum(np.asarray(per_node, dtype=float), p)
    copies = tokens * model.experts_per_token * PROB_BYTES
    return p * model.experts * COUNT_BYTES, copies * (g - 1) / p, copies * (p - g) / p


def _none_chosen(k: int, experts: int, held: Number) -> Number:
    """P(none of k distinct experts, drawn uniformly from `experts`, is among `held` of them)."""
    out = np.ones_like(np.asarray(held, dtype=float))
    for i in range(k):
        out = out * np.maximum(experts - held - i, 0.0) / (experts - i)
    return out


def dispatch_bytes(
    model: Model,
    tokens: Number,
    ep: Number,
    per_node: Number,
    bytes_per_element: float,
    imbalance: Number = 1.0,
    dedup: bool = False,
) -> tuple[Number, Number]:
    """(bytes to EP peers in the node, bytes out of the node) one rank sends in one dispatch, for
    an EP group of `ep` ranks, `per_node` of them in each node, with a uniform router.

    Without `dedup` (Megatron-Core's all-to-all dispatcher) every chosen expert gets its own copy
    of the token: T k h e, (g-1)/ep of it in the node and (ep-g)/ep out of it. With `dedup` (the
    "flex" dispatcher: DeepEP, HybridEP) a token goes once to each node that holds one of its
    experts and, inside a node, once to each rank that does: with E/ep experts per rank and the k
    chosen uniformly, a given rank (node) is hit with probability 1 - C(E - E/ep, k) / C(E, k)
    (1 - C(E - E g/ep, k) / C(E, k)). The node's links then also carry the copies that arrive from
    other nodes to the ranks that need them."""
    h, n_exp, k = model.hidden, model.experts, model.experts_per_token
    unit = imbalance * tokens * h * bytes_per_element
    p = np.asarray(ep, dtype=float)
    g = np.minimum(np.asarray(per_node, dtype=float), p)
    nodes = p / g
    if not dedup:
        return unit * k * (g - 1) / p, unit * k * (p - g) / p
    rank_hit = 1.0 - _none_chosen(k, n_exp, n_exp / p)
    node_hit = 1.0 - _none_chosen(k, n_exp, n_exp * g / p)
    remote_nodes = (nodes - 1) * node_hit
    local_fanout = g * rank_hit / np.maximum(node_hit, 1e-12)  # ranks hit in a node that is hit
    return unit * ((g - 1) * rank_hit + remote_nodes * local_fanout), unit * remote_nodes
