"""A fused attention kernel's speed against its shape: sequence length, causal masking, forward
and backward, and the per-step chunks of ring attention (context parallelism).

`physics.compute` prices a fused attention kernel at the GPU's GEMM efficiency times a relative
efficiency (`FLASH_RELATIVE_EFFICIENCY`, a GPU's `flash2_efficiency`) read at the plateau of
long, non-causal sequences. This module gives the factor by which a real call is slower than
that plateau (>= 1, a time multiplier).

FlashAttention-2/3 and cuDNN's fused attention run one thread block per tile of B = 128 queries
and loop over the keys in blocks of B (Dao 2023, FlashAttention-2, Sec. 3.1 and 3.2; Shah et al.
2024, FlashAttention-3, Sec. 3). Per query tile a block pays a fixed cost (load Q, rescale and
write O and the log-sum-exp, the pipeline's fill), worth `L0` keys of main-loop work, so a call
whose query tiles each see W keys runs at W / (W + L0) of the plateau. Under a causal mask tile
i sees i + 1 key blocks, W = s / 2 on average, and the diagonal block is computed whole though
half of it is masked (B / 2 keys wasted per tile):

    non-causal   eta(W) = W / (W + L0)
    causal       eta(s) = (s/2) / (s/2 + L0 + B/2) * P_causal

P_causal < 1 is what a causal kernel loses beyond that at the plateau (masking the diagonal
tiles, tiles of unequal length sharing the SMs).

Ring attention (Megatron-Core / Transformer Engine "p2p", PyTorch's experimental
`context_parallel` that torchtitan runs) with the head-tail load balance gives each rank two
chunks of s / (2 cp) tokens; step 0 is one causal call on the rank's own s_l = s / cp tokens,
each of the cp - 1 other steps one non-causal call of s_l queries on the first half of the
received keys or of the second half of the queries on all of them (TE `AttnFuncWithCPAndKVP2P`;
torch/distributed/tensor/experimental/_attention.py `_templated_ring_attention`), half a
rectangle each: the rank that sees s_l / 2 keys per query tile paces the ring. All steps do
equal work (s_l^2 / 2 score elements), so the layer's factor is their mean.

Constants (H100 SXM5, BF16, head dim 128; Shah et al. 2024 Fig. 4 forward and Fig. 5 backward,
batch x length = 16k tokens, 512-16k tokens; the same shapes on A100 in Dao 2023 Fig. 4-6 ramp
alike):
- `FORWARD_TILE_OVERHEAD_TOKENS` L0 = 100 (range 60-200): non-causal forward reaches 0.83, 0.94,
  0.97 of its 16k speed at 512, 1k, 2k keys for FlashAttention-2 (309, 350, 362 of 370 TFLOP/s),
  0.82, 0.94 for cuDNN (497, 574 of ~610), 0.72, 0.87, 0.96 for FlashAttention-3 (467, 565,
  625 of 648): L0 = 104, 64, 56 / 116, 64 / 198, 150, 75 (FlashAttention-3 and -4, "flash3" and
  "flash4", price their own ramps and causal plateaus: `physics.attention_flash34`).
- `BACKWARD_TILE_OVERHEAD_TOKENS` L0 = 220 (range 140-350): the backward recomputes the scores
  and writes dQ, dK, dV per tile; FlashAttention-2 214, 260, 291, 310, 318 of 322 TFLOP/s at
  512-8k (L0 = 258, 244, 218, 158, 100), cuDNN 305, 408, 465, 499 of 516 (354, 270, 222, 139).
- `CAUSAL_PLATEAU` P_causal = 0.92 (range 0.90-0.96): causal forward at 16k over non-causal,
  each divided by its own ramp at 16k: FlashAttention-2 335 vs 370 (0.92), cuDNN 539 vs 595
  (0.92), FlashAttention-3 616 vs 648 (0.96). The causal ramp above with L0 = 100 reproduces
  FlashAttention-2's causal forward at 512-16k (191, 260, 298, 319, 333, 335) within 7%.
- `TILE_TOKENS` B = 128, the query and key tile of these kernels at head dim 128.
The backward's causal plateau is taken as the forward's (the papers plot no causal backward on
H100); the backward-to-forward time ratio at the plateau stays `physics.attention_kernels.FLASH_BACKWARD_RATIO`
(2.9; on H100 FlashAttention-2 2.5 x 370 / 322 = 2.87, cuDNN 2.88, FlashAttention-3 2.89).

A sliding window of w tokens (`Model.sliding_window`; FlashAttention-2's `window_size`, Transformer
Engine's and cuDNN's sliding window, PyTorch FlexAttention's block mask) skips the key blocks wholly
outside the band: a query tile of B rows sees the W = w keys of each row's window on average
(fewer near the start) but computes the blocks that the band of width w + B crosses, so besides
the diagonal's half tile it wastes another half tile at the window's far edge, masked; at the
causal plateau as the full layer's kernel:

    windowed     eta(W) = W / (W + L0 + B/2 + B/2) * P_causal      (w < s; else the causal ramp)

With w = B = 128 a windowed layer runs at about a third of the plateau forward (L0 = 100) and a
quarter backward; no published timing of a windowed kernel was found to check it against.

PyTorch's ring (`context_parallel`, torchtitan) runs its bookkeeping as eager kernels on the
compute stream, per ring step and per element of the rank's attention output (b s_l a d / t, the
keys and values counted at the query heads' width: torchtitan's Llama repeats the KV heads before
SDPA, `repeat_kv`), in the code of torch/distributed/tensor/experimental/_attention.py:
- forward (`_templated_ring_attention`, `_SDPAMerger`): the step's output cast to fp32 (read 2,
  write 4), out - block_out (4 + 4, 4), times sigmoid(lse difference) (4, 4), out minus that
  (4 + 4, 4): 38 bytes; the next step's torch.cat of K and V (2 + 2 each): 8; 46 in all.
- backward (`_templated_ring_attention_backward`): dK and dV of the step added into the fp32
  gradients that travel the ring (2 x (2 + 4 + 4)), their torch.cat into the send buffer
  (2 x (4 + 4)), dQ added in fp32 (2 + 4 + 4), the torch.cat of K and V (8): 54; where only a
  half is updated, `_partial_update` re-concatenates the whole tensor (about 6 more): 60.
- once per layer, forward: step 0's output cast to fp32 (2 + 4), the merged output cast back
  (4 + 2), and `.contiguous()` of the repeated K and V (2 + 2 each): 20 bytes, 6 kernels;
  backward: step 0's own dK, dV, dQ accumulation and dK, dV send buffer (20 + 16 + 10: the ring
  does them at every step, the K, V concatenation at all but the last), the fp32 zeros of dQ,
  dK, dV (3 x 4), `.contiguous()` of K and V (8), the final casts of dQ (4 + 2) and of the
  received dK, dV (2 x (4 + 2)): 84 bytes, 11 kernels.
Megatron-Core's ring (Transformer Engine `AttnFuncWithCPAndKVP2P`, `cp_comm_type` p2p) does the
same merge in 16 bits with TorchScript-fused element-wise kernels beside its attention calls, not
in their epilogues (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py,
`flash_attn_fwd_out_correction` after the forward steps; `dq.add_`, `dk.add_`, `dv.add_` after each
backward step): per output element 4 + 6 (cp - 1) bytes forward and (1 + 2 kv/h)(4 + 6 (cp - 1))
backward, K and V at the KV heads' width. Not charged: priced, it made the published Megatron-Core
runs with cp = 2 worse (docs/model.md, Context parallelism). Only a ring merges steps: under
`cp_comm` all_gather or a2a the attention is one call. PyTorch's ring communicates as
`engines.context_parallel.CpComm` describes: one all-gather of every rank's keys and values per pass, and
the dK, dV of each backward step passed on in fp32 (`TORCH_RING_GRAD_BYTES`), the last exposed.
Its flash calls are FlashAttention-2 on H100 (torchtitan's SDPA backends put flash first), every
step does equal work (the head-tail balance is on by default), and selective checkpointing does
not rerun the ring (docs/model.md, Context parallelism); `tools/ring_bench.py` times it on a GPU.
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.attention_flash34 import FlashProfile
from shardwise.specs._checks import Number

FORWARD_TILE_OVERHEAD_TOKENS = 100.0
BACKWARD_TILE_OVERHEAD_TOKENS = 220.0
CAUSAL_PLATEAU = 0.92
TILE_TOKENS = 128.0
# bytes per output element per ring step of PyTorch's eager ring bookkeeping, and its kernels
TORCH_RING_FORWARD_BYTES = 46.0
TORCH_RING_BACKWARD_BYTES = 60.0
TORCH_RING_FORWARD_KERNELS = 6
TORCH_RING_BACKWARD_KERNELS = 7
# the same, once per layer (module docstring)
TORCH_RING_FORWARD_LAYER_BYTES = 20.0
TORCH_RING_BACKWARD_LAYER_BYTES = 84.0
TORCH_RING_FORWARD_LAYER_KERNELS = 6
TORCH_RING_BACKWARD_LAYER_KERNELS = 11
# bytes per element of the dK, dV the ring passes on after each backward step (fp32 accumulation)
TORCH_RING_GRAD_BYTES = 4.0


def ramp(
    keys_per_tile: Number, overhead_tokens: Number, causal: Number = False, causal_plateau: float = CAUSAL_PLATEAU
) -> Number:
    """The fraction of the plateau a call reaches whose query tiles see `keys_per_tile` keys on
    average (s_kv, or s / 2 under a causal mask), paying `overhead_tokens` per tile and, causal,
    half a tile on the diagonal and the causal plateau (FlashAttention-3/4 their own:
    `physics.attention_flash34`)."""
    w = np.maximum(np.asarray(keys_per_tile, dtype=float), 1.0)
    c = np.asarray(causal, dtype=bool)
    waste = overhead_tokens + np.where(c, TILE_TOKENS / 2, 0.0)
    return w / (w + waste) * np.where(c, causal_plateau, 1.0)


def slowdown(
    s_q: Number, s_kv: Number, cp: Number, overhead_tokens: Number, causal_plateau: float = CAUSAL_PLATEAU
) -> Number:
    """Time of one layer's attention over its time at the non-causal plateau (>= 1), for `s_q`
    queries of a rank attending to `s_kv` keys: one call without context parallelism (causal
    when s_q > 1: training and prefill; a decoded token is one row), the mean of the ring's cp
    steps with it (module docstring)."""
    s_q, s_kv = np.asarray(s_q, dtype=float), np.asarray(s_kv, dtype=float)
    c = np.maximum(np.asarray(cp, dtype=float), 1.0)
    # one call: the keys each query tile sees, the last s_q of s_kv under the causal mask
    causal = s_q > 1
    seen = np.where(causal, s_kv - s_q / 2, s_kv)
    single = 1.0 / ramp(seen, overhead_tokens, causal, causal_plateau)
    # the ring: the causal diagonal step on s_q x s_q, then cp - 1 half-rectangles of s_q / 2 keys
    diagonal = 1.0 / ramp(s_q / 2, overhead_tokens, True, causal_plateau)
    ring = (diagonal + (c - 1) / ramp(s_q / 2, overhead_tokens)) / c
    return np.where(c > 1, ring, single)


def window_slowdown(
    s_q: Number, keys_per_query: Number, cut: Number, overhead_tokens: Number, causal_plateau: float = CAUSAL_PLATEAU
) -> Number:
    """Time of a sliding-window layer's attention over its time at the non-causal plateau (>= 1):
    `s_q` queries (causal when s_q > 1) seeing `keys_per_query` keys on average; `cut`: the window
    ends inside the sequence (its far edge wastes half a tile too; module docstring)."""
    causal = np.asarray(s_q) > 1
    far = np.where(np.asarray(cut, dtype=bool) & causal, TILE_TOKENS / 2, 0.0)
    return 1.0 / ramp(keys_per_query, overhead_tokens + far, causal, causal_plateau)


def forward_slowdown(s_q: Number, s_kv: Number, cp: Number = 1, profile: FlashProfile | None = None) -> Number:
    """`slowdown` of the forward pass (FlashAttention-3/4: its `profile`'s ramp)."""
    if profile is not None:
        return slowdown(s_q, s_kv, cp, profile.forward_overhead_tokens, profile.causal_plateau)
    return slowdown(s_q, s_kv, cp, FORWARD_TILE_OVERHEAD_TOKENS)


def backward_slowdown(s_q: Number, s_kv: Number, cp: Number = 1, profile: FlashProfile | None = None) -> Number:
    """`slowdown` of the backward pass (FlashAttention-3/4: its `profile`'s ramp)."""
    if profile is not None:
        return slowdown(s_q, s_kv, cp, profile.backward_overhead_tokens, profile.causal_plateau)
    return slowdown(s_q, s_kv, cp, BACKWARD_TILE_OVERHEAD_TOKENS)
