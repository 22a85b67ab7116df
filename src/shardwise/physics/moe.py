"""Work of the routed experts of one mixture-of-experts layer on one GPU, and what their token
dispatch moves (Megatron-Core's MoE layer with the all-to-all token dispatcher,
megatron/core/transformer/moe/: router.py, token_dispatcher.py, experts.py).

Notation as in `specs.model`, plus E routed experts, k experts per token, f_e the expert FFN
width, ep expert-parallel ranks, etp expert-tensor-parallel ranks, T the tokens this rank routes
(a micro-batch's b s / cp tokens, split by t under sequence parallelism, which Megatron requires
for a mixture of experts with TP), c = T k the token copies it routes, and rho the load
imbalance (the busiest rank's tokens over the mean).

    router        T x h  by  h x E
    dispatch      all-to-all over the EP group: c copies of h elements leave this rank, (ep-1)/ep
                  of them to other ranks (one copy per chosen expert; the "flex" dispatchers send
                  one per node and per rank instead: `physics.moe_dispatch.dispatch_bytes`), after
                  the per-expert counts' all-gather and the host's read of the split sizes, and
                  beside the probabilities' own all-to-all (`physics.moe_dispatch`:
                  `dispatch_metadata_bytes`, SYNC_HOST_OPS)
    etp > 1       all-gather of the received tokens over the ETP group before the experts,
                  reduce-scatter after (each ETP rank holds f_e / etp columns of every expert)
    experts       E / ep grouped GEMMs of m = rho c etp ep / E tokens each (fewer, fuller ones
                  when few tokens choose only some of the experts: `experts_forward`):
                  up m x h by h x g f_e / etp (g = 2 gated), down m x f_e / etp by f_e / etp x h
    combine       the reverse all-to-all of the expert outputs

With a balanced router each rank does the FLOPs of T k full expert MLPs, whatever ep and etp;
what ep changes is the shape (fewer, fuller experts per rank) and the all-to-all. Memory-bound
kernels (bytes read + written): the permutation of the tokens into expert order and back
(read T h, write c h; the reverse), the sort of the received chunks by local expert and back
(read and write c h each, when a rank holds more than one expert), the activation on the
expert outputs, and the router's fp32 softmax / top-k over T x E scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.physics.flops import Gemm, gemm
from shardwise.specs import Model
from shardwise.specs._checks import Number

# Kernels of one MoE layer's routed part besides its GEMMs: router scores, top-k, auxiliary
# loss, permute, chunk sort, activation, chunk unsort, unpermute (the steps of Megatron-Core's
# `MoELayer.forward` with the all-to-all dispatcher and fused permutation). A project count.
MOE_KERNELS = 8
# Of those, what CUDA graphs of the router (`Plan.cuda_graph_scope` moe_router: router scores, top-k,
# auxiliary loss, and the router GEMM besides) and of the dispatcher's preprocessing (moe_preprocess:
# the permutation) capture.
MOE_ROUTER_KERNELS = 3
MOE_PREPROCESS_KERNELS = 1
# The router's scores are kept in fp32 (Megatron-Core `moe_router_dtype`, fp32 in the NeMo
# recipes): softmax / sigmoid writes them, top-k reads them and writes the chosen probabilities;
# about three fp32 passes over T x E. A project estimate.
ROUTER_FP32_PASSES = 3.0
ROUTER_BYTES = 4.0
# GPT-OSS's clamped gated activation (`Model.glu_clamp`): Megatron-Core's
# `weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py, from 0.16 to 0.18)
# clamps the up-projection's output outside its fused kernel -- `input.chunk(2, -1)`, a clamp of
# each half and `torch.cat` of the two, eager kernels on every routed copy. Passes over the
# up-projection's output (g f elements a copy), a read or a write each: forward, the two clamps read
# and write a half each (2) and the cat reads and writes the whole (2); backward, each clamp's
# gradient reads the gradient and the input and writes the gradient (3 over a half each, 1.5) and
# the chunk's gradient is a cat of the two halves (2). The cat's output is what the fused
# activation saves for its backward, beside the output the clamps' backward keeps
# (`physics.memory_activations.routed_expert_activation_bytes`).
CLAMP_FORWARD_PASSES = 4.0
CLAMP_BACKWARD_PASSES = 3.5
CLAMP_FORWARD_KERNELS = 3
CLAMP_BACKWARD_KERNELS = 3
# The routed experts' output bias (`Model.bias` in a mixture of experts: GPT-OSS): Transformer
# Engine adds the up-projection's bias in its GEMM (skip_bias_add False) and its gradient in the
# weight-gradient GEMM, but Megatron-Core returns the down-projection's (skip_bias_add True) and
# adds it weighted by the router's probability, eagerly, one local expert at a time
# (megatron/core/transformer/moe/experts.py, TEGroupedMLP `_apply_bias`: torch.split, then
# `t + b * p` per expert, then torch.cat). Passes over the copies' hidden outputs (h elements a
# copy), a read or a write each, in 16 bits (the router's probabilities are the input's dtype in
# the GPT-OSS recipes): forward, b * p written (1), the sum reading two and writing one (3), the cat
# (2); backward, the gradients of b and of p each read the incoming gradient, write its product and
# read that back in a sum (3 each), and the split's gradient is a cat (2). Kernels: 2 per local
# expert and the cat forward; 4 per local expert and the cat backward.
BIAS_FORWARD_PASSES = 6.0
BIAS_BACKWARD_PASSES = 8.0
# Token dropping (`Plan.moe_capacity_factor`; Megatron-Core `apply_router_token_dropping`,
# megatron/core/transformer/moe/moe_utils.py, core_v0.14.0 to main): after the top-k the router picks
# each expert's `capacity` best tokens (`torch.topk(probs, k=capacity, dim=0)`), builds their mask
# (`zeros_like(...).scatter(...)` then `.bool()`) and multiplies the probabilities by it. Passes over
# the fp32 T x E probabilities, a read or a write each: topk reads 1, zeros_like writes 1, the bool
# cast reads 1 and writes a quarter, the multiply reads 1.25 and writes 1 (5.5); 5 kernels forward, and
# backward the multiply's gradient alone (the mask is not differentiated).
DROP_FP32_PASSES = 5.5
DROP_KERNELS = 5
DROP_BACKWARD_KERNELS = 1


@dataclass(frozen=True)
class ExpertsForward:
    """The routed experts' forward work on one rank (all fields broadcast together)."""

    router: Gemm
    up: Gemm  # grouped: `batch` local experts of m tokens each
    down: Gemm
    elementwise_bytes: Number
    elementwise_kernels: Number
    etp_gather_bytes: Number  # the all-gathered tokens of the ETP group (0 without etp > 1)
    imbalance: Number = 1.0
    etp_reduce_bytes: Number = 0.0  # the outputs all-reduced over the ETP group (unsharded tokens)
    activation_bytes: Number = 0.0  # the experts' activation among elementwise_bytes (`Plan.recompute_modules` moe_act)
    # eager kernels a model's variant adds (GPT-OSS's clamp and output bias, CLAMP_*, BIAS_*), priced
    # apart from the BACKWARD_MEMORY_RATIO rule: their backward's own bytes and kernels
    eager_bytes: Number = 0.0
    eager_kernels: Number = 0
    eager_backward_bytes: Number = 0.0
    eager_backward_kernels: Number = 0
    clamp_bytes: Number = 0.0  # the clamp's forward among eager_bytes (moe_act recomputation reruns it)
    drop_kernels: Number = 0  # the router's token dropping (DROP_KERNELS; with the router's own in its CUDA graph)
    # the element-wise bytes moved after the host has read the split sizes
    # (`physics.moe_grouped.post_sync_kernels`): the chunk sort and unsort, the activation and the
    # unpermutation, not the router's scores nor the permutation into expert order
    post_sync_bytes: Number = 0.0

    @property
    def gemms(self) -> tuple[Gemm, Gemm]:
        return (self.up, self.down)

    @property
    def model_flops(self) -> Number:
        """FLOPs of a balanced router (the model's), router included."""
        return self.router.flops + (self.up.flops + self.down.flops) / self.imbalance


def training_kernels(ef: ExpertsForward, backward_ratio: float, recompute_forward: Number = False) -> Number:
    """Kernels the host issues for one MoE layer's routed part in a training step: the router's
    GEMM, the MOE_KERNELS element-wise ones, and the grouped GEMMs one local expert at a time --
    Transformer Engine's GroupedLinear (Megatron-Core's TEGroupedMLP) runs `nvte_multi_tensor_gemm`,
    which launches one cuBLAS GEMM per expert over its compute streams (transformer_engine/common/
    gemm/cublaslt_gemm.cu, `multi_stream_cublas_gemm`; the CUTLASS grouped kernel only on Hopper,
    16-bit, with NVTE_USE_CUTLASS_GROUPED_GEMM). The backward issues `backward_ratio` times the
    forward's (an input- and a weight-gradient GEMM per expert); full recomputation the forward's
    once more; the router's token dropping (DROP_*) its own. Serving engines run fused MoE kernels (one
    launch for all experts): not this count."""
    forward = ef.elementwise_kernels + ef.router.batch + ef.up.batch + ef.down.batch
    redo = 1.0 + np.asarray(recompute_forward, dtype=float)
    passes = (redo + backward_ratio) * forward
    drop = ef.drop_kernels * redo + DROP_BACKWARD_KERNELS * (np.asarray(ef.drop_kernels) > 0)
    return passes + ef.eager_kernels * redo + ef.eager_backward_kernels + drop


def graphed_training_kernels(
    ef: ExpertsForward, backward_ratio: float, recompute_forward: Number, scope: tuple[str, ...]
) -> Number:
    """`training_kernels` under CUDA graphs (`physics.stack.CUDA_GRAPH_SCOPES`): full_iteration
    issues none; moe_router replays the router's GEMM and MOE_ROUTER_KERNELS, moe_preprocess
    MOE_PREPROCESS_KERNELS, as one graph launch forward and one backward each; the grouped GEMMs
    and the rest stay eager (token-dropless layers cannot be captured whole)."""
    from shardwise.physics.stack import GRAPH_LAUNCHES_PER_BLOCK

    kernels = training_kernels(ef, backward_ratio, recompute_forward)
    if "full_iteration" in scope:
        return 0.0 * kernels
    passes = 1.0 + backward_ratio + np.asarray(recompute_forward, dtype=float)
    captured, blocks = 0.0, 0
    if "moe_router" in scope:
        captured, blocks = captured + ef.router.batch + MOE_ROUTER_KERNELS + ef.drop_kernels, blocks + 1
    if "moe_preprocess" in scope:
        captured, blocks = captured + MOE_PREPROCESS_KERNELS, blocks + 1
    return kernels - passes * captured + GRAPH_LAUNCHES_PER_BLOCK * blocks


def capacity_copies(tokens: Number, model: Model, capacity_factor: Number, sources: Number) -> Number:
    """The most token copies one expert takes in training with token dropping (`Plan.moe_capacity_factor`):
    Megatron-Core caps each expert at `get_capacity` = ceil(T k / E x factor) copies of each routing
    rank's T tokens (moe_utils.py `apply_router_token_dropping`, the router keeping the highest
    probabilities), and the all-to-all dispatcher's drop-and-pad path sizes every local expert's input
    at that times the tp x ep ranks routing to it (token_dispatcher.py `preprocess`:
    `capacity * tp_size * ep_size`), `sources` here (ep x etp in training)."""
    k, n_exp = model.experts_per_token, model.experts
    return np.ceil(np.asarray(tokens, dtype=float) * k / n_exp * np.asarray(capacity_factor, dtype=float)) * sources


def capacity_load(imbalance: Number, capacity_factor: Number, pad_to_capacity: Number) -> Number:
    """The busiest rank's token copies over the mean where a measured `imbalance` meets token dropping:
    padded to capacity, the factor itself (every expert runs its capacity, the router's spread gone);
    dropping without padding, the imbalance capped at the factor; dropless, the imbalance."""
    cf = np.asarray(capacity_factor, dtype=float)
    padded = (cf > 0) & np.asarray(pad_to_capacity, dtype=bool)
    return np.where(padded, cf, np.minimum(imbalance, np.where(cf > 0, cf, np.inf)))


def routes_own_tokens(sequence_parallel: Number, tp: Number) -> Number:
    """Whether each rank routes tokens of its own: sequence parallelism splits the TP group's, and
    without TP there is nothing to split; TP without it replicates them over the TP GPUs (serving)."""
    return np.asarray(sequence_parallel, dtype=bool) | (np.asarray(tp) <= 1)


def dropping_factor(capacity_factor: Number, sequence_parallel: Number, tp: Number, training: bool = True) -> Number:
    """The capacity factor where tokens are dropped (`Plan.moe_capacity_factor`), 0 (dropless)
    elsewhere: in training only (Megatron-Core's router; serving engines run dropless), and only
    where each rank routes tokens of its own (`routes_own_tokens`). The time (`engines.moe`) and the
    memory (`engines.training_memory`) both read it here."""
    if not training:
        return 0.0
    return np.where(routes_own_tokens(sequence_parallel, tp), capacity_factor, 0.0)


def routed_tokens(model: Model, batch: Number, seq_len: Number, tp: Number, sequence_parallel: Number) -> Number:
    """T: the tokens one rank routes per micro-batch (b s, split by t under sequence parallelism)."""
    split = np.where(np.asarray(sequence_parallel, dtype=bool), np.asarray(tp, dtype=float), 1.0)
    return batch * seq_len / split


def experts_forward(
    model: Model,
    tokens: Number,
    ep: Number,
    etp: Number,
    bytes_per_element: float,
    imbalance: Number = 1.0,
    weight_bytes: Number | None = None,
    sharded: Number = True,
    capacity_factor: Number = 0.0,
    pad_to_capacity: Number = False,
) -> ExpertsForward:
    """The routed experts of one MoE layer for `tokens` routed by this rank (module docstring).

    `sharded`: each rank routes its own tokens (sequence parallelism, training): they reach the
    EP ranks by all-to-all and, with etp > 1, are all-gathered over the ETP ranks before the
    experts and reduce-scattered after. Unsharded (serving, vLLM / SGLang / TensorRT-LLM with TP
    attention): every rank of the ep x etp group already holds all `tokens`, runs its own experts
    on the copies routed to them (1 / ep of the T k on average) and the outputs are all-reduced
    (`etp_reduce_bytes`).

    Few tokens leave experts idle: of a rank's E/ep experts, a fraction 1 - (1 - k/E)^N is chosen
    by the N distinct tokens of the EP group, and only those run and have their weights read
    (decoding). The busiest of ep ranks waits for the others: with a router that is uniform on
    average, a rank's token copies and chosen experts are binomial, and the largest of ep of them
    is about sqrt(2 ln ep) standard deviations above the mean (the expected maximum of ep normal
    draws); `imbalance` (the busiest rank over the mean, measured) applies where it is larger.

    `capacity_factor` > 0 (training, sharded) caps each expert's copies, `pad_to_capacity` pads them
    to the cap: `capacity_copies`."""
    h, n_exp, k, f = model.hidden, model.experts, model.experts_per_token, model.expert_ffn_hidden
    e = bytes_per_element
    w = e if weight_bytes is None else weight_bytes
    gate = 2 if model.gated_mlp else 1
    p = np.asarray(ep, dtype=float)
    z = np.sqrt(2.0 * np.log(p))  # 0 for one rank
    on = np.asarray(sharded, dtype=bool)
    gathered = np.where(on, etp, 1.0)  # tokens each ETP rank computes on, over the ones it routes
    distinct = np.where(on, tokens * gathered * p, tokens)  # tokens the EP group routes
    mean_copies = distinct * k / p  # token copies reaching one rank on average
    busiest = mean_copies + z * np.sqrt(mean_copies * (1.0 - 1.0 / p))
    received = np.maximum(imbalance * mean_copies, busiest)  # token copies reaching the busiest rank
    local = n_exp / p
    chosen = 1.0 - (1.0 - k / n_exp) ** distinct
    spread = z * np.sqrt(local * chosen * (1.0 - chosen))
    active = np.maximum(np.minimum(local * chosen + spread, local), 1.0)
    cap = capacity_copies(tokens, model, capacity_factor, gathered * p)
    dropping = (np.asarray(capacity_factor) > 0) & on
    padded = dropping & np.asarray(pad_to_capacity, dtype=bool)
    received = np.where(padded, cap * local, np.where(dropping, np.minimum(received, cap * local), received))
    active = np.where(padded, local, active)  # every expert runs its capacity, padding included
    m = received / active  # tokens per active expert
    up = gemm(m, gate * f / etp, h, e, batch=active, weight_bytes=w)
    down = gemm(m, h, f / etp, e, batch=active, weight_bytes=w)
    router = gemm(tokens, n_exp, h, e)
    permute = 2 * e * h * (tokens + received / gathered)
    sort = np.where(local > 1, 4 * e * h * received, 0.0)
    activation = (gate + 1) * e * received * f / etp
    scores = (ROUTER_FP32_PASSES + np.where(dropping, DROP_FP32_PASSES, 0.0)) * ROUTER_BYTES * tokens * n_exp
    split = np.asarray(etp) > 1
    # GPT-OSS's eager extras (CLAMP_*, BIAS_*): the clamp over the up-projection's output, the
    # output bias over the copies' hidden outputs, one pair of kernels per local expert with tokens
    up_out = e * received * gate * f / etp
    clamp = CLAMP_FORWARD_PASSES * up_out if model.glu_clamp else 0.0
    biased = model.bias  # the experts' biases (only GPT-OSS among the presets)
    bias_f = BIAS_FORWARD_PASSES * e * received * h / gathered if biased else 0.0
    bias_b = BIAS_BACKWARD_PASSES * e * received * h / gathered if biased else 0.0
    clamp_b = CLAMP_BACKWARD_PASSES * up_out if model.glu_clamp else 0.0
    kernels_f = (CLAMP_FORWARD_KERNELS if model.glu_clamp else 0) + (2 * active + 1 if biased else 0)
    kernels_b = (CLAMP_BACKWARD_KERNELS if model.glu_clamp else 0) + (4 * active + 1 if biased else 0)
    return ExpertsForward(
        router=router,
        up=up,
        down=down,
        elementwise_bytes=permute + sort + activation + scores,
        elementwise_kernels=MOE_KERNELS,
        etp_gather_bytes=np.where(split & on, received * h * e, 0.0),
        imbalance=received / np.maximum(mean_copies, 1e-30),
        etp_reduce_bytes=np.where((p * np.asarray(etp) > 1) & ~on, tokens * h * e, 0.0),
        activation_bytes=activation,
        eager_bytes=clamp + bias_f,
        eager_kernels=kernels_f,
        eager_backward_bytes=clamp_b + bias_b,
        eager_backward_kernels=kernels_b,
        clamp_bytes=clamp,
        drop_kernels=np.where(dropping, DROP_KERNELS, 0),
        post_sync_bytes=e * h * (tokens + received / gathered) + sort + activation,
    )
